"""Shakespeare loader (fedrepro/data/shakespeare.py) on tiny files in TFF's and LEAF's formats,
plus a real-data tier (FEDREPRO_DATA_ROOT)."""
import io
import json
import os
import re
import tarfile
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from fedrepro.data import shakespeare as S
from fedrepro.data.loaders import load_dataset, unavailable
from fedrepro.errors import ConfigError, DataError

DATA = os.environ.get("FEDREPRO_DATA_ROOT")
ALPHABET = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"


def write_tff(root, splits, fixed=False):
    """splits: {split: {role: [snippet str]}} -> root/shakespeare/tff/shakespeare_<split>.h5, laid out
    as TFF's files: examples/<role>/snippets, byte strings (vlen, or fixed-length like the real files)."""
    folder = Path(root) / "shakespeare" / "tff"
    folder.mkdir(parents=True, exist_ok=True)
    for split, roles in splits.items():
        with h5py.File(folder / f"shakespeare_{split}.h5", "w") as f:
            for role, snippets in roles.items():
                data = [s.encode() for s in snippets]
                dtype = f"S{max(map(len, data))}" if fixed else h5py.special_dtype(vlen=bytes)
                f.create_dataset(f"examples/{role}/snippets", data=np.array(data, dtype=dtype))
    return folder


def leaf_rule(snippets, seq_len):
    """LEAF's gen_all_data on a role file holding these speeches one per line (written out here
    as LEAF does it: the file is read whole, newlines -> spaces, 2+ spaces -> one)."""
    text = re.sub(r"   *", " ", "".join(s + "\n" for s in snippets).replace("\n", " "))
    return [text[i:i + seq_len] for i in range(len(text) - seq_len)], \
           [text[i + seq_len] for i in range(len(text) - seq_len)]


def write_leaf(root, splits, folder="leaf", files=1):
    """splits: {split: {role: (xs, ys)}} -> LEAF json (users, num_samples, user_data), the users
    dealt over `files` json files per split."""
    for split, roles in splits.items():
        d = Path(root) / "shakespeare" / folder / "data" / split
        d.mkdir(parents=True, exist_ok=True)
        users = list(roles)
        for k in range(files):
            mine = users[k::files]
            obj = {"users": mine, "num_samples": [len(roles[u][1]) for u in mine],
                   "user_data": {u: {"x": roles[u][0], "y": roles[u][1]} for u in mine}}
            (d / f"all_data_{k}_niid_0_keep_0_{split}_9.json").write_text(json.dumps(obj))
    return Path(root) / "shakespeare" / folder / "data"


def decode(row):
    return "".join(ALPHABET[int(i)] for i in row)


# A cast of roles; text lengths put them above or below the thresholds used below.
WORDS = "Now is the winter of our discontent made glorious summer by this sun of York".split()


def speech(rng, n_words):
    return " ".join(WORDS[i] for i in rng.integers(0, len(WORDS), n_words)) + "."


def cast(seed=0, sizes=None):
    """{split: {role: [snippets]}}; sizes: role -> (train words, test words)."""
    rng = np.random.default_rng(seed)
    sizes = sizes or {"PLAY_A": (60, 30), "PLAY_B": (70, 25), "PLAY_C": (55, 40), "PLAY_D": (80, 28),
                      "PLAY_E": (65, 35), "SHORT_TRAIN": (5, 30), "SHORT_TEST": (60, 2)}
    out = {"train": {}, "test": {}}
    for role, (a, b) in sizes.items():
        for split, n in (("train", a), ("test", b)):
            out[split][role] = [speech(rng, k) for k in np.full(max(n // 10, 1), min(n, 10))]
    return out


SMALL = dict(num_clients=3, train_per_client=150, test_per_client=50, seq_len=20)


# ---------------------------------------------------------------- text -> samples

def test_alphabet_has_80_distinct_characters_and_unknowns_read_as_space():
    assert S.ALL_LETTERS == ALPHABET and S.NUM_LETTERS == 80 and len(set(ALPHABET)) == 80
    assert S.encode("\n a}").tolist() == [0, 1, ALPHABET.index("a"), 79]
    assert S.encode("~é<").tolist() == [-1, -1, -1]  # outside the alphabet (loader: -> ' ')
    assert S.UNKNOWN_INDEX == 1


def test_role_text_follows_leafs_rule_by_hand():
    # newline -> space, two or more spaces -> one, each speech ends with a newline (-> space)
    snips = [b"To be,  or\nnot.", b"Ay\n        Enter Hamlet.", "Ho"]
    assert S.role_text(snips) == "To be, or not. Ay Enter Hamlet. Ho "
    x, y = S.text_windows(S.encode("To be, or"), 4)
    assert [decode(r) for r in x] == ["To b", "o be", " be,", "be, ", "e, o"]
    assert decode(y) == "e, or"


def test_windows_and_labels_match_a_hand_computation(tmp_path):
    snippets = ["Who's there?", "Nay,  answer me:\nstand, and unfold yourself.", "Long live the king!"]
    text = "Who's there? Nay, answer me: stand, and unfold yourself. Long live the king! "
    write_tff(tmp_path, {"train": {"BERNARDO": snippets}, "test": {"BERNARDO": ["Bernardo? He."]}})
    n = len(text) - 10  # 67 windows of 10 characters
    d = S.load_shakespeare(tmp_path, False, num_clients=1, train_per_client=n - 1, test_per_client=2,
                           seq_len=10, seed=3)
    off = d.meta["train_offsets"][0]
    assert off in (0, 1) and tuple(d.x_train.shape) == (n - 1, 10)
    assert str(d.x_train.dtype) == "torch.int64" and str(d.y_train.dtype) == "torch.int64"
    for i in (0, 5, n - 2):
        assert decode(d.x_train[i]) == text[off + i:off + i + 10]
        assert ALPHABET[int(d.y_train[i])] == text[off + i + 10]
    if off == 0:
        assert decode(d.x_train[0]) == "Who's ther" and ALPHABET[int(d.y_train[0])] == "e"
    test_text = "Bernardo? He. "  # 4 windows, crop of 2 at offset 0..2
    o = d.meta["test_offsets"][0]
    assert [decode(r) for r in d.x_test] == [test_text[o:o + 10], test_text[o + 1:o + 11]]
    assert decode(d.y_test) == test_text[o + 10:o + 12]


@pytest.mark.parametrize("fixed", [False, True])
def test_tff_selection_crops_and_natural_clients(tmp_path, fixed):
    splits = cast()
    write_tff(tmp_path, splits, fixed=fixed)
    d = S.load_shakespeare(tmp_path, False, **SMALL)
    texts = {s: {r: S.role_text(v) for r, v in splits[s].items()} for s in splits}
    counts = {s: {r: len(t) - 20 for r, t in texts[s].items()} for s in texts}
    ok = sorted(r for r in texts["train"] if counts["train"][r] > 150 and counts["test"][r] > 50)
    assert "SHORT_TRAIN" not in ok and "SHORT_TEST" not in ok and len(ok) == 5
    assert d.meta["qualifying_roles"] == 5 and set(d.meta["roles"]) <= set(ok)
    assert len(set(d.meta["roles"])) == 3 and d.num_classes == 80 and d.name == "shakespeare"
    assert d.x_train.shape == (450, 20) and d.y_train.shape == (450,)
    assert d.x_test.shape == (150, 20) and d.y_test.shape == (150,)
    assert [c.tolist() for c in d.natural_clients] == [list(range(k * 150, (k + 1) * 150)) for k in range(3)]
    for k, role in enumerate(d.meta["roles"]):
        for split, per, x, y in (("train", 150, d.x_train, d.y_train), ("test", 50, d.x_test, d.y_test)):
            o = d.meta[f"{split}_offsets"][k]
            assert 0 <= o <= counts[split][role] - per
            rows = slice(k * per, (k + 1) * per)
            xs, ys = x[rows], y[rows]
            assert (xs[1:, :-1] == xs[:-1, 1:]).all() and (xs[1:, -1] == ys[:-1]).all()  # contiguous
            t = texts[split][role]
            assert decode(xs[0]) == t[o:o + 20] and decode(xs[-1]) == t[o + per - 1:o + per + 19]
            assert decode(ys) == t[o + 20:o + 20 + per]


def test_selection_is_seeded_and_threshold_strict(tmp_path):
    write_tff(tmp_path, cast())
    a = S.load_shakespeare(tmp_path, False, **SMALL)
    b = S.load_shakespeare(tmp_path, False, **SMALL)
    assert a.meta == b.meta and (a.x_train == b.x_train).all() and (a.y_test == b.y_test).all()
    others = [S.load_shakespeare(tmp_path, False, **{**SMALL, "seed": s}).meta for s in range(1, 6)]
    assert any(m["roles"] != a.meta["roles"] or m["train_offsets"] != a.meta["train_offsets"] for m in others)
    # "more than": a role with exactly train_per_client (or test_per_client) samples is out
    chosen, n_ok = S.select_roles({"A": 10, "B": 11, "C": 11}, {"A": 5, "B": 5, "C": 4}, 1, 10, 4, 0, "here")
    assert n_ok == 1 and chosen[0][0] == "B" and chosen[0][1] in (0, 1) and chosen[0][2] in (0, 1)


def test_too_few_roles_says_how_many_qualify(tmp_path):
    write_tff(tmp_path, cast())
    with pytest.raises(DataError, match=r"only 5 of 7 roles have more than 150 train and 50 test"):
        S.load_shakespeare(tmp_path, False, **{**SMALL, "num_clients": 6})


def test_unknown_characters_become_space_and_are_counted(tmp_path):
    write_tff(tmp_path, {"train": {"R": ["ab~cd efgh"]}, "test": {"R": ["a~b c"]}})
    d = S.load_shakespeare(tmp_path, False, num_clients=1, train_per_client=7, test_per_client=1, seq_len=3)
    # train text "ab~cd efgh " -> 8 windows, crop of 7 at offset 0 or 1; '~' shows up as ' '
    o = d.meta["train_offsets"][0]
    assert decode(d.x_train[0]) == "ab cd efgh "[o:o + 3]
    assert d.meta["unknown_chars"] > 0 and "outside the alphabet" in d.source


# ---------------------------------------------------------------- LEAF

def test_leaf_and_tff_forms_of_the_same_text_give_the_same_samples(tmp_path):
    splits = cast(seed=1)
    write_tff(tmp_path / "t", splits)
    leaf = {s: {r: leaf_rule(v, 20) for r, v in splits[s].items()} for s in splits}
    write_leaf(tmp_path / "l", leaf, files=2)
    t = S.load_shakespeare(tmp_path / "t", False, source="tff", **SMALL)
    lf = S.load_shakespeare(tmp_path / "l", False, source="leaf", **SMALL)
    assert t.meta == lf.meta
    for a in ("x_train", "y_train", "x_test", "y_test"):
        assert (getattr(t, a) == getattr(lf, a)).all()
    assert "LEAF json" in lf.source and "leaf_sample" not in lf.source


def test_leaf_samples_are_the_json_strings(tmp_path):
    roles = {f"R{k}": ([f"{k}" * 4 + f"{i:04d}" for i in range(30)],
                       [chr(97 + i % 26) for i in range(30)]) for k in range(3)}
    write_leaf(tmp_path, {"train": roles, "test": roles}, folder="leaf_sample")
    d = S.load_shakespeare(tmp_path, False, source="leaf", num_clients=2, train_per_client=10,
                           test_per_client=5, seq_len=8)
    assert "leaf_sample" in d.source
    for k, role in enumerate(d.meta["roles"]):
        o = d.meta["train_offsets"][k]
        xs, ys = roles[role]
        assert [decode(r) for r in d.x_train[k * 10:(k + 1) * 10]] == xs[o:o + 10]
        assert decode(d.y_train[k * 10:(k + 1) * 10]) == "".join(ys[o:o + 10])
    with pytest.raises(DataError, match="seq_len=80"):
        S.load_shakespeare(tmp_path, False, source="leaf", num_clients=2, train_per_client=10,
                           test_per_client=5)


def test_leaf_folder_preferred_over_leaf_sample(tmp_path):
    roles = {"R": (["abcd"] * 5, ["e"] * 5)}
    write_leaf(tmp_path, {"train": roles, "test": roles}, folder="leaf_sample")
    write_leaf(tmp_path, {"train": roles, "test": roles}, folder="leaf")
    d = S.load_shakespeare(tmp_path, False, source="leaf", num_clients=1, train_per_client=2,
                           test_per_client=2, seq_len=4)
    assert "leaf_sample" not in d.source and str(tmp_path / "shakespeare" / "leaf") in d.source


# ---------------------------------------------------------------- missing and damaged files

def test_missing_files(tmp_path):
    assert S.missing_shakespeare(tmp_path) == [tmp_path / "shakespeare" / "tff" / n
                                              for n in ("shakespeare_train.h5", "shakespeare_test.h5")]
    assert len(S.missing_shakespeare(tmp_path, source="leaf", num_clients=3)) == 2
    write_tff(tmp_path, {"train": cast()["train"]})
    assert S.missing_shakespeare(tmp_path) == [tmp_path / "shakespeare" / "tff" / "shakespeare_test.h5"]
    with pytest.raises(DataError) as e:
        S.load_shakespeare(tmp_path, False)
    msg = str(e.value)
    assert "missing shakespeare_test.h5." in msg
    assert str(tmp_path / "shakespeare" / "tff") in msg and "storage.googleapis.com" in msg
    assert "tff.simulation.datasets.shakespeare.load_data" in msg
    with pytest.raises(DataError, match=r"leaf/data/train/\*\.json.*TalwalkarLab/leaf"):
        S.load_shakespeare(tmp_path, False, source="leaf")


def test_unknown_source(tmp_path):
    for call in (lambda: S.load_shakespeare(tmp_path, False, source="gutenberg"),
                 lambda: S.missing_shakespeare(tmp_path, source="gutenberg")):
        with pytest.raises(ConfigError, match="tff, leaf"):
            call()


def test_truncated_h5_and_wrong_layout_name_the_file(tmp_path):
    folder = write_tff(tmp_path, cast())
    path = folder / "shakespeare_test.h5"
    raw = path.read_bytes()
    path.write_bytes(raw[:len(raw) // 2])
    with pytest.raises(DataError, match=r"shakespeare_test\.h5.*damaged"):
        S.load_shakespeare(tmp_path, False, **SMALL)
    with h5py.File(path, "w") as f:
        f.create_dataset("snippets", data=np.array([b"x"]))
    with pytest.raises(DataError, match=r"shakespeare_test\.h5: no 'examples' group"):
        S.load_shakespeare(tmp_path, False, **SMALL)


def test_damaged_json_names_the_file(tmp_path):
    roles = {"R": (["abcd"] * 5, ["e"] * 5)}
    d = write_leaf(tmp_path, {"train": roles, "test": roles})
    path = next((d / "test").glob("*.json"))
    obj = json.loads(path.read_text())
    del obj["user_data"]
    path.write_text(json.dumps(obj))
    with pytest.raises(DataError, match=rf"{re.escape(path.name)}: missing key\(s\) user_data"):
        S.load_shakespeare(tmp_path, False, source="leaf")
    path.write_text(json.dumps({"users": ["R"], "num_samples": [5], "user_data": {"R": {"x": ["abcd"]}}}))
    with pytest.raises(DataError, match=rf"{re.escape(path.name)}: user 'R' lacks"):
        S.load_shakespeare(tmp_path, False, source="leaf")
    path.write_text('{"users": ["R"], "num_sam')
    with pytest.raises(DataError, match=rf"{re.escape(path.name)}: cannot parse"):
        S.load_shakespeare(tmp_path, False, source="leaf")


# ---------------------------------------------------------------- download

def test_download_unpacks_tffs_tarball_and_failure_falls_through(tmp_path, monkeypatch):
    src = write_tff(tmp_path / "src", cast())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:bz2") as tar:
        for name in ("shakespeare_train.h5", "shakespeare_test.h5"):
            tar.add(src / name, arcname=name)
        evil = tarfile.TarInfo("../evil.txt")
        evil.size = 3
        tar.addfile(evil, io.BytesIO(b"bad"))
    calls = []

    def fake(url, timeout):
        calls.append((url, timeout))
        return io.BytesIO(buf.getvalue())
    monkeypatch.setattr(S.urllib.request, "urlopen", fake)
    root = tmp_path / "root"
    d = S.load_shakespeare(root, True, **SMALL)
    assert calls == [(S.TFF_URL, 10)] and d.x_train.shape == (450, 20)
    assert not (root / "shakespeare" / "evil.txt").exists() and S.missing_shakespeare(root) == []

    def offline(url, timeout):
        raise OSError("no network")
    monkeypatch.setattr(S.urllib.request, "urlopen", offline)
    with pytest.raises(DataError, match="missing shakespeare_train.h5"):
        S.load_shakespeare(tmp_path / "empty", True)


def test_registry_loads_it(tmp_path):
    assert "shakespeare_train.h5" in unavailable("shakespeare", tmp_path)
    write_tff(tmp_path, cast())
    assert unavailable("shakespeare", tmp_path, {"source": "tff", **SMALL}) is None
    d = load_dataset("shakespeare", tmp_path, download=False, options={"source": "tff", **SMALL})
    assert d.x_train.shape == (450, 20) and len(d.natural_clients) == 3


# ---------------------------------------------------------------- real data

@pytest.mark.skipif(not DATA, reason="real-data tier: set FEDREPRO_DATA_ROOT")
def test_real_tff_feddyn_selection():
    t0 = time.perf_counter()
    d = S.load_shakespeare(Path(DATA), False)
    seconds = time.perf_counter() - t0
    print(f"\nshakespeare tff: 100 roles x 2000/400 loaded in {seconds:.2f} s; "
          f"{d.meta['qualifying_roles']} roles qualify; {d.source}")
    assert d.x_train.shape == (200_000, 80) and d.x_test.shape == (40_000, 80)
    assert d.y_train.shape == (200_000,) and d.y_test.shape == (40_000,)
    for a in (d.x_train, d.y_train, d.x_test, d.y_test):
        assert 0 <= int(a.min()) and int(a.max()) <= 79
    assert [len(c) for c in d.natural_clients] == [2000] * 100
    assert len(set(d.meta["roles"])) == 100 and d.meta["qualifying_roles"] == 160
    assert d.meta["unknown_chars"] == 0
    assert (d.x_train[1:2000, :-1] == d.x_train[:1999, 1:]).all()


@pytest.mark.skipif(not DATA, reason="real-data tier: set FEDREPRO_DATA_ROOT")
def test_real_leaf_sample_matches_the_json_strings():
    t0 = time.perf_counter()
    d = S.load_shakespeare(Path(DATA), False, source="leaf", num_clients=2, train_per_client=100,
                           test_per_client=20)
    print(f"\nshakespeare leaf sample: loaded in {time.perf_counter() - t0:.2f} s; {d.source}")
    assert d.x_train.shape == (200, 80) and d.x_test.shape == (40, 80)
    folder = S.leaf_data_dir(DATA)
    for split, per, x, y in (("train", 100, d.x_train, d.y_train), ("test", 20, d.x_test, d.y_test)):
        data = {}
        for p in (folder / split).glob("*.json"):
            data.update(json.loads(p.read_text())["user_data"])
        for k, role in enumerate(d.meta["roles"]):
            o = d.meta[f"{split}_offsets"][k]
            assert [decode(r) for r in x[k * per:(k + 1) * per]] == data[role]["x"][o:o + per]
            assert decode(y[k * per:(k + 1) * per]) == "".join(data[role]["y"][o:o + per])


@pytest.mark.skipif(not DATA, reason="real-data tier: set FEDREPRO_DATA_ROOT")
def test_real_tff_role_text_is_leafs_role_text_reordered():
    """Our TFF conversion gives LEAF's role text up to the order of the speeches: same length
    (so the same number of windows as LEAF) and the same characters, for every role of the LEAF
    sample that TFF has and whose LEAF windows are contiguous (LEAF subsampled the last one)."""
    root = Path(DATA) / "shakespeare"
    tff = {s: S.read_tff_split(root / "tff" / S.TFF_FILES[s]) for s in S.SPLITS}
    leaf = {s: S.read_leaf_split(S.leaf_data_dir(DATA) / s) for s in S.SPLITS}
    checked = 0
    for role in leaf["train"]:
        (x, y), (xt, yt) = leaf["train"][role], leaf["test"][role]
        if role not in tff["train"] or any(x[i][1:] + y[i] != x[i + 1] for i in range(len(x) - 1)):
            continue
        # LEAF's split: train windows 0..n-1, test windows from n+79 on (79 dropped)
        text = x[0] + "".join(y) + (xt[0] + "".join(yt))[1:]
        ours = re.sub(r"   *", " ", tff["train"][role] + tff["test"][role])  # = role_text(all speeches)
        assert len(ours) == len(text) and sorted(ours) == sorted(text), role
        checked += 1
    print(f"\n{checked} LEAF-sample roles: TFF role text == LEAF role text up to speech order")
    assert checked >= 7
