"""Shakespeare next-character prediction (LEAF), as FedDyn uses it (appendix A.2).

Two sources of the same LEAF-derived text (docs/datasets/shakespeare.md):
- tff (default): TFF's federated Shakespeare, `<data_root>/shakespeare/tff/shakespeare_{train,test}.h5`,
  `examples/<role>/snippets` = the role's speeches. Each role's snippets are turned into samples by
  LEAF's own rule: every speech followed by a newline, newlines -> spaces, runs of 2+ spaces -> one,
  then every window of `seq_len` characters with the next character as label (windows run across
  speech boundaries, as in LEAF). Train windows come from the train file, test from the test file.
- leaf: LEAF's json, `<data_root>/shakespeare/leaf/data/{train,test}/*.json` (or `leaf_sample/`
  when `leaf/` is absent); the x/y strings are used as they are.

FedDyn's selection: the roles with more than `train_per_client` train and `test_per_client` test
samples; `num_clients` of them drawn with `seed`, each cropped to a contiguous run of
`train_per_client` / `test_per_client` samples at a seeded random offset. The pooled crops come
back with one natural client per role; the IID split is the partitioner's job.
"""
from __future__ import annotations

import json
import re
import shutil
import tarfile
import tempfile
import urllib.request
from pathlib import Path

import numpy as np
import torch

from fedrepro.data.common import DatasetTensors, missing_error
from fedrepro.errors import ConfigError, DataError

# LEAF's / FedDyn's 80-character alphabet; the index of a character is its class.
ALL_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
NUM_LETTERS = len(ALL_LETTERS)  # 80
# Characters outside the alphabet become ' ', LEAF's own "unknown character" symbol; they are
# counted in meta["unknown_chars"]. (The TFF files and the LEAF sample contain none.)
UNKNOWN_INDEX = ALL_LETTERS.index(" ")
_LUT = np.full(128, -1, dtype=np.int64)
_LUT[[ord(c) for c in ALL_LETTERS]] = np.arange(NUM_LETTERS)

SOURCES = ("tff", "leaf")
SPLITS = ("train", "test")
TFF_FILES = {"train": "shakespeare_train.h5", "test": "shakespeare_test.h5"}
TFF_URL = "https://storage.googleapis.com/tff-datasets-public/shakespeare.tar.bz2"
TFF_WHERE = (f"tff.simulation.datasets.shakespeare.load_data() caches them: they are the two files in "
             f"{TFF_URL} (unpack it into that folder).")
LEAF_WHERE = ("Make them with LEAF (https://github.com/TalwalkarLab/leaf, data/shakespeare: "
              "e.g. ./preprocess.sh -s niid --sf 1.0 -k 0 -t sample) and copy data/train and data/test.")


# ---------------------------------------------------------------- text -> samples

def encode(text: str) -> np.ndarray:
    """Alphabet indices (int64) of each character of `text`; -1 for characters outside it."""
    cp = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
    return np.where(cp < 128, _LUT[np.minimum(cp, 127)], -1)


def role_text(snippets) -> str:
    """A role's text as LEAF writes and reads it: speeches one per line, newlines -> spaces,
    runs of two or more spaces -> one (LEAF's `raw_text.replace('\\n', ' ')` + `re.sub`)."""
    parts = [s.decode("utf-8", "replace") if isinstance(s, bytes) else str(s) for s in snippets]
    return re.sub("   *", " ", "".join(p + "\n" for p in parts).replace("\n", " "))


def text_windows(codes: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Every window of `codes`: x[i] = codes[i:i+seq_len], y[i] = codes[i+seq_len] (views, no copy)."""
    w = np.lib.stride_tricks.sliding_window_view(codes, seq_len + 1)
    return w[:, :seq_len], w[:, seq_len]


# ---------------------------------------------------------------- files

def shakespeare_dir(data_root: str | Path) -> Path:
    return Path(data_root) / "shakespeare"


def leaf_data_dir(data_root: str | Path) -> Path:
    """`shakespeare/leaf/data`, or `shakespeare/leaf_sample/data` when only the sample is there."""
    base = shakespeare_dir(data_root)
    for name in ("leaf", "leaf_sample"):
        d = base / name / "data"
        if all(any((d / s).glob("*.json")) for s in SPLITS):
            return d
    return base / "leaf" / "data"


def _check_source(source: str) -> None:
    if source not in SOURCES:
        raise ConfigError(f"dataset.source={source!r} is not valid for shakespeare; choose one of: "
                          f"{', '.join(SOURCES)}")


def missing_shakespeare(data_root: Path, source: str = "tff", **_options) -> list[Path]:
    _check_source(source)
    if source == "tff":
        folder = shakespeare_dir(data_root) / "tff"
        return [folder / n for n in TFF_FILES.values() if not (folder / n).is_file()]
    d = leaf_data_dir(data_root)
    return [d / s / "*.json" for s in SPLITS if not any((d / s).glob("*.json"))]


def fetch_tff(folder: Path) -> None:
    """Try to download and unpack TFF's tarball into `folder`; any failure is silent (offline)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            archive = Path(tmp) / "shakespeare.tar.bz2"
            with urllib.request.urlopen(TFF_URL, timeout=10) as r, open(archive, "wb") as out:
                shutil.copyfileobj(r, out)
            with tarfile.open(archive, "r:bz2") as tar:
                for m in tar.getmembers():  # only the two known names: never trust member paths
                    name = Path(m.name).name
                    if m.isfile() and name in TFF_FILES.values() and not (folder / name).exists():
                        with tar.extractfile(m) as src, open(Path(tmp) / name, "wb") as dst:
                            shutil.copyfileobj(src, dst)
                        (Path(tmp) / name).replace(folder / name)
    except Exception:
        pass


def read_tff_split(path: str | Path) -> dict[str, str]:
    """{role: role_text} from one TFF h5 file."""
    import h5py  # lazy: only this source needs it

    path = Path(path)
    damaged = (f"the file is damaged or not TFF's federated Shakespeare. Delete {path.name} and "
               f"fetch it again. {TFF_WHERE}")
    try:
        with h5py.File(path, "r") as f:
            if "examples" not in f:
                raise DataError(f"{path}: no 'examples' group; {damaged}")
            ex = f["examples"]
            return {role: role_text(ex[role]["snippets"][()]) for role in ex}
    except DataError:
        raise
    except (OSError, KeyError, ValueError, TypeError, AttributeError) as e:  # truncated, wrong layout
        raise DataError(f"{path}: cannot read ({e}); {damaged}") from e


def read_leaf_split(folder: str | Path) -> dict[str, tuple[list, list]]:
    """{role: (x strings, y strings)} from every LEAF json in `folder`."""
    folder = Path(folder)
    data: dict[str, tuple[list, list]] = {}
    for path in sorted(folder.glob("*.json")):
        bad = f"the file is damaged or not LEAF's json. Delete {path.name} and make it again. {LEAF_WHERE}"
        try:
            with open(path, encoding="utf-8") as f:
                obj = json.load(f)
        except (OSError, ValueError) as e:  # ValueError covers JSON and UTF-8 decoding errors
            raise DataError(f"{path}: cannot parse ({e}); {bad}") from e
        keys = ("users", "num_samples", "user_data")
        missing = [k for k in keys if k not in obj] if isinstance(obj, dict) else list(keys)
        if not missing and not isinstance(obj["user_data"], dict):
            missing = ["user_data (as a dict)"]
        if missing:
            raise DataError(f"{path}: missing key(s) {', '.join(missing)}; {bad}")
        if len(obj["users"]) != len(obj["num_samples"]):
            raise DataError(f"{path}: {len(obj['users'])} users but {len(obj['num_samples'])} "
                            f"num_samples; {bad}")
        # num_samples is not checked against len(y): LEAF's split drops 79 test windows (to
        # avoid overlap with train) but counts them in the test file's num_samples.
        for user in obj["users"]:
            d = obj["user_data"].get(user)
            if not isinstance(d, dict) or "x" not in d or "y" not in d or len(d["x"]) != len(d["y"]):
                raise DataError(f"{path}: user {user!r} lacks user_data x and y lists of equal "
                                f"length; {bad}")
            if user in data:
                raise DataError(f"{path}: user {user!r} also appears in another json file of "
                                f"{folder}; {bad}")
            data[user] = (d["x"], d["y"])
    return data


def _leaf_crop(path: Path, x: list, y: list, start: int, n: int, seq_len: int):
    xs, ys = x[start:start + n], y[start:start + n]
    if any(len(s) != seq_len for s in xs) or any(len(s) != 1 for s in ys):
        raise DataError(f"{path}: LEAF samples must be x strings of seq_len={seq_len} characters and "
                        f"1-character y; set dataset.seq_len to the files' length (LEAF: 80).")
    return encode("".join(xs)).reshape(n, seq_len), encode("".join(ys))


# ---------------------------------------------------------------- selection

def select_roles(n_train: dict[str, int], n_test: dict[str, int], num_clients: int,
                 train_per_client: int, test_per_client: int, seed: int, where: str):
    """FedDyn's rule: [(role, train offset, test offset)] for `num_clients` seeded roles among
    those with more than train_per_client / test_per_client samples; offsets of seeded crops."""
    roles = sorted(set(n_train) & set(n_test))
    ok = [r for r in roles if n_train[r] > train_per_client and n_test[r] > test_per_client]
    if len(ok) < num_clients:
        raise DataError(f"shakespeare ({where}): only {len(ok)} of {len(roles)} roles have more than "
                        f"{train_per_client} train and {test_per_client} test samples; "
                        f"num_clients={num_clients} asked for. Lower dataset.num_clients, "
                        f"train_per_client or test_per_client.")
    rng = np.random.default_rng(seed)
    picked = [ok[i] for i in np.sort(rng.choice(len(ok), size=num_clients, replace=False))]
    return [(r, int(rng.integers(0, n_train[r] - train_per_client + 1)),
             int(rng.integers(0, n_test[r] - test_per_client + 1))) for r in picked], len(ok)


# ---------------------------------------------------------------- loader

def load_shakespeare(data_root: Path, download: bool, *, source: str = "tff", num_clients: int = 100,
                     train_per_client: int = 2000, test_per_client: int = 400, seq_len: int = 80,
                     seed: int = 0) -> DatasetTensors:
    _check_source(source)
    for key, value in (("num_clients", num_clients), ("train_per_client", train_per_client),
                       ("test_per_client", test_per_client), ("seq_len", seq_len)):
        if int(value) < 1:
            raise ConfigError(f"dataset.{key}={value} must be >= 1")
    base = shakespeare_dir(data_root)
    if source == "tff":
        folder = base / "tff"
        if missing_shakespeare(data_root, "tff") and download:
            fetch_tff(folder)
        missing = missing_shakespeare(data_root, "tff")
        if missing:
            raise missing_error("shakespeare (source=tff)", missing, folder, TFF_WHERE)
        store = {split: read_tff_split(folder / TFF_FILES[split]) for split in SPLITS}
        counts = {split: {r: max(len(t) - seq_len, 0) for r, t in store[split].items()} for split in SPLITS}

        def take(split: str, role: str, start: int, n: int):  # encode only the crop's characters
            return text_windows(encode(store[split][role][start:start + n + seq_len]), seq_len)
        where = f"TFF federated Shakespeare h5 in {folder}"
        how = f"windows of {seq_len} characters + next over each role's joined snippets (LEAF's rule)"
    else:
        d = leaf_data_dir(data_root)
        missing = missing_shakespeare(data_root, "leaf")
        if missing:
            raise DataError(f"shakespeare (source=leaf): missing {', '.join(str(m) for m in missing)} "
                            f"(LEAF's train and test json files; {base / 'leaf_sample'} is read when "
                            f"{base / 'leaf'} is absent). {LEAF_WHERE}")
        store = {split: read_leaf_split(d / split) for split in SPLITS}
        counts = {split: {r: len(y) for r, (_, y) in store[split].items()} for split in SPLITS}

        def take(split: str, role: str, start: int, n: int):
            return _leaf_crop(d / split, *store[split][role], start, n, seq_len)
        where = f"LEAF json in {d}"
        if d.parent.name == "leaf_sample":
            where += " (leaf_sample: no shakespeare/leaf/ folder)"
        how = "LEAF's x/y strings as they are"
    chosen, n_ok = select_roles(counts["train"], counts["test"], num_clients, train_per_client,
                                test_per_client, seed, where)
    arrays = {}
    for split, per, col in (("train", train_per_client, 1), ("test", test_per_client, 2)):
        x = np.empty((num_clients * per, seq_len), dtype=np.int64)
        y = np.empty(num_clients * per, dtype=np.int64)
        for k, pick in enumerate(chosen):
            x[k * per:(k + 1) * per], y[k * per:(k + 1) * per] = take(split, pick[0], pick[col], per)
        arrays[split] = (x, y)
    unknown = sum(int((a == -1).sum()) for pair in arrays.values() for a in pair)  # entries, not chars
    for a in (a for pair in arrays.values() for a in pair):
        a[a == -1] = UNKNOWN_INDEX
    (x_tr, y_tr), (x_te, y_te) = arrays["train"], arrays["test"]
    note = f"; {unknown} characters outside the alphabet read as ' '" if unknown else ""
    return DatasetTensors(
        "shakespeare", torch.from_numpy(x_tr), torch.from_numpy(y_tr), torch.from_numpy(x_te),
        torch.from_numpy(y_te), NUM_LETTERS,
        f"{where}: {num_clients} of the {n_ok} roles with > {train_per_client} train / > "
        f"{test_per_client} test samples (seed {seed}), contiguous crops of {train_per_client} / "
        f"{test_per_client}; {how}{note}",
        natural_clients=[np.arange(k * train_per_client, (k + 1) * train_per_client)
                         for k in range(num_clients)],
        meta={"roles": [r for r, _, _ in chosen], "train_offsets": [o for _, o, _ in chosen],
              "test_offsets": [o for _, _, o in chosen], "qualifying_roles": n_ok, "unknown_chars": unknown})
