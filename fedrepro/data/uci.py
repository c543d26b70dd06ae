"""UCI HAR (smartphone activity recognition) and ESR (Epileptic Seizure Recognition), LoSAC §V.

HAR: the original zip's layout `<data_root>/UCI_HAR/UCI HAR Dataset/{train,test}/...`; 561 features
per row, already scaled to [-1, 1] by the dataset's authors, kept as they are. Labels 1..6 -> 0..5.
7 352 train / 2 947 test rows; natural clients = the 21 training subjects (subject_train.txt).

ESR: the UCI `data.csv` table (id, X1..X178, y; 11 500 rows; y 1..5, 2 300 each). Read from
`<data_root>/ESR/` under UCI's name, Kaggle's name, or as the reconstruction from the Bonn
recordings (same rows and labels, other ids and order). LoSAC's 9 200 / 2 300 split is a seeded
stratified 80/20 holdout taken after sorting the rows by their content (label, then X1..X178):
the split then depends on the seed only, not on the file's row order or ids, so UCI's file and the
reconstruction give the same tensors. Features are z-scored per column with training statistics
(raw amplitudes reach the thousands).

Binary views (LoSAC's DLG study, option binary=True): HAR label <= 3 (walking, upstairs,
downstairs) -> 0, else 1; ESR seizure (y == 1) -> 1, else 0.
`download` is accepted for the registry's signature but never used: these sources never fetch.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fedrepro.data.common import DatasetTensors, ascii_token_lines, labels_tensor, missing_error
from fedrepro.data.mnist import stratified_holdout
from fedrepro.errors import ConfigError, DataError

# Expected sizes of the real files; None skips the check (tests patch these for tiny fixtures).
HAR_ROWS: dict[str, int] | None = {"train": 7352, "test": 2947}
HAR_FEATURES = 561
ESR_ROWS: int | None = 11_500
ESR_FEATURES, ESR_CLASSES, ESR_TEST_FRACTION = 178, 5, 0.2


def _reject_unknown(dataset: str, extra: dict, valid: tuple[str, ...]) -> None:
    if extra:
        raise ConfigError(f"{dataset}: unknown option(s) {', '.join(sorted(extra))}; "
                          f"valid: {', '.join(valid)}")


def _read_rows(path: Path, n_cols: int, dtype) -> np.ndarray:
    """Whitespace-separated numeric table with exactly n_cols per non-blank line."""
    rows = []
    for lineno, tokens in ascii_token_lines(path):
        if len(tokens) != n_cols:
            raise DataError(f"{path}: line {lineno} has {len(tokens)} values, expected "
                            f"{n_cols}; the file is damaged or truncated.")
        try:
            rows.append(np.array(tokens, dtype=dtype))
        except ValueError as e:
            raise DataError(f"{path}: line {lineno} is not numeric ({e}).") from e
    return np.stack(rows) if rows else np.zeros((0, n_cols), dtype)


# ---------------------------------------------------------------- HAR

HAR_WHERE = ("Get 'UCI HAR Dataset.zip' from https://archive.ics.uci.edu/dataset/240 and unzip it "
             "into <data_root>/UCI_HAR/ (it creates the folder 'UCI HAR Dataset').")


def har_dir(data_root: str | Path) -> Path:
    return Path(data_root) / "UCI_HAR" / "UCI HAR Dataset"


def _har_files(split: str) -> list[str]:
    return [f"{split}/{kind}_{split}.txt" for kind in ("X", "y", "subject")]


def missing_har(data_root: Path, **options) -> list[Path]:
    d = har_dir(data_root)
    return [d / n for s in ("train", "test") for n in _har_files(s) if not (d / n).is_file()]


def read_har_split(folder: Path, split: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x float32 (n, 561), labels 1..6, subject ids) of split 'train' | 'test', checked."""
    px, py, ps = (folder / n for n in _har_files(split))
    x = _read_rows(px, HAR_FEATURES, np.float32)
    y = _read_rows(py, 1, np.int64)[:, 0]
    s = _read_rows(ps, 1, np.int64)[:, 0]
    n = HAR_ROWS[split] if HAR_ROWS else len(x)
    for path, arr in ((px, x), (py, y), (ps, s)):
        if len(arr) != n:
            raise DataError(f"{path}: {len(arr)} rows, expected {n}; the file is damaged or "
                            f"truncated. {HAR_WHERE}")
    if len(y) and (y.min() < 1 or y.max() > 6):
        raise DataError(f"{py}: labels must lie in 1..6, found {y.min()}..{y.max()}.")
    if len(s) and s.min() < 1:
        raise DataError(f"{ps}: subject ids must be positive, found {s.min()}.")
    return x, y, s


def load_har(data_root: Path, download: bool = False, *, binary: bool = False, seed: int = 0,
             **extra) -> DatasetTensors:
    # seed: unused (HAR has a fixed split); accepted because HAR and ESR share a config schema
    _reject_unknown("har", extra, ("binary", "seed"))
    folder = har_dir(data_root)
    missing = missing_har(data_root)
    if missing:  # name train/… and test/…: missing_error would drop the subfolders
        rel = ", ".join(str(m.relative_to(folder)) for m in missing)
        raise DataError(f"har: missing {rel} in the folder {folder}/ . {HAR_WHERE}")
    x_tr, y_tr, s_tr = read_har_split(folder, "train")
    x_te, y_te, _ = read_har_split(folder, "test")
    y_tr, y_te = y_tr - 1, y_te - 1
    if binary:  # LoSAC: label <= 3 on 1..6 -> 0, else 1
        y_tr, y_te = (y_tr >= 3).astype(np.int64), (y_te >= 3).astype(np.int64)
    clients = [np.flatnonzero(s_tr == s).astype(np.int64) for s in np.unique(s_tr)]
    view = " binary view (labels 1-3 -> 0, 4-6 -> 1)," if binary else ""
    return DatasetTensors(
        "har", torch.from_numpy(x_tr), labels_tensor(y_tr), torch.from_numpy(x_te),
        labels_tensor(y_te), 2 if binary else 6,
        f"UCI HAR text files in {folder}:{view} {len(y_tr)} train / {len(y_te)} test, features as "
        f"published ([-1, 1]); natural clients = {len(clients)} training subjects",
        natural_clients=clients)


# ---------------------------------------------------------------- ESR

ESR_NAMES = ("data.csv", "Epileptic Seizure Recognition.csv", "data_reconstructed_from_bonn.csv")
ESR_WHERE = ("Get data.csv from https://archive.ics.uci.edu/dataset/388 (Epileptic Seizure "
             "Recognition; Kaggle's copy 'Epileptic Seizure Recognition.csv' also works).")


def esr_path(data_root: str | Path) -> Path | None:
    """The first ESR table present, in ESR_NAMES order, or None."""
    for name in ESR_NAMES:
        if (Path(data_root) / "ESR" / name).is_file():
            return Path(data_root) / "ESR" / name
    return None


def missing_esr(data_root: Path, **options) -> list[Path]:
    return [] if esr_path(data_root) else [Path(data_root) / "ESR" / ESR_NAMES[0]]


def _fields(line: str) -> list[str]:
    return [f.strip().strip('"') for f in line.rstrip("\r\n").split(",")]


def read_esr_csv(path: Path) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(ids, x float64 (n, 178), labels 1..5) from a data.csv-layout table, checked."""
    want = [f"X{i}" for i in range(1, ESR_FEATURES + 1)] + ["y"]
    ids, rows = [], []
    try:
        with open(path, encoding="utf-8-sig") as f:
            head = _fields(f.readline())
            if len(head) != ESR_FEATURES + 2 or head[1:] != want \
                    or head[0].lower() not in ("", "id", "unnamed", "unnamed: 0"):
                raise DataError(f"{path}: header has {len(head)} columns starting {head[:3]}; "
                                f"expected an id column, X1..X{ESR_FEATURES}, y (UCI data.csv). "
                                f"{ESR_WHERE}")
            for lineno, line in enumerate(f, 2):
                if not line.strip():
                    continue
                fields = _fields(line)
                if len(fields) != ESR_FEATURES + 2:
                    raise DataError(f"{path}: line {lineno} has {len(fields)} columns, expected "
                                    f"{ESR_FEATURES + 2}; the file is damaged or truncated.")
                try:
                    rows.append(np.array(fields[1:], dtype=np.float64))
                except ValueError as e:
                    raise DataError(f"{path}: line {lineno} is not numeric ({e}).") from e
                ids.append(fields[0])
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not a text csv ({e}). {ESR_WHERE}") from e
    table = np.stack(rows) if rows else np.zeros((0, ESR_FEATURES + 1))
    x, y = table[:, :-1], table[:, -1]
    counts = [int((y == c).sum()) for c in range(1, ESR_CLASSES + 1)]
    if sum(counts) != len(y) or not np.all(y == np.round(y)):
        raise DataError(f"{path}: labels must be integers 1..{ESR_CLASSES}, found "
                        f"{sorted(set(y.tolist()))[:10]}.")
    if ESR_ROWS is not None and (len(y) != ESR_ROWS or counts != [ESR_ROWS // ESR_CLASSES] * ESR_CLASSES):
        raise DataError(f"{path}: {len(y)} rows with per-class counts {counts}; expected {ESR_ROWS} "
                        f"rows, {ESR_ROWS // ESR_CLASSES} per class. The file is damaged or not "
                        f"UCI's ESR table. {ESR_WHERE}")
    return ids, x, y.astype(np.int64)


def load_esr(data_root: Path, download: bool = False, *, binary: bool = False, seed: int = 0,
             standardize: bool = True, **extra) -> DatasetTensors:
    _reject_unknown("esr", extra, ("binary", "seed", "standardize"))
    path = esr_path(data_root)
    if path is None:
        raise missing_error("esr", missing_esr(data_root), Path(data_root) / "ESR", ESR_WHERE)
    _, x, y = read_esr_csv(path)
    order = np.lexsort(np.column_stack([y, x]).T[::-1])  # by label, then X1..X178: file order free
    x, y = x[order], y[order] - 1
    tr, te = stratified_holdout(y, int(round(ESR_TEST_FRACTION * len(y))), seed)
    mean, std = x[tr].mean(0), x[tr].std(0)
    std[std == 0] = 1.0  # a constant column stays 0 instead of NaN
    if standardize:
        x = (x - mean) / std
    if binary:  # LoSAC's DLG view: seizure vs the rest; the split stays the 5-class one
        y = (y == 0).astype(np.int64)
    what = ("reconstruction of UCI's table from the Bonn EEG recordings (same rows and labels, "
            "other ids and order)" if path.name == ESR_NAMES[2] else "UCI ESR table")
    scaled = "z-scored per feature with training statistics" if standardize else "raw amplitudes"
    view = "binary view (seizure y=1 -> 1, else 0), " if binary else ""
    xt = torch.from_numpy(x.astype(np.float32))
    return DatasetTensors(
        "esr", xt[tr], labels_tensor(y[tr]), xt[te], labels_tensor(y[te]), 2 if binary else 5,
        f"{path} ({what}): {view}stratified 80/20 split (seed {seed}) of the rows sorted by content, "
        f"{len(tr)} train / {len(te)} test, {scaled}",
        meta={"feature_mean": mean, "feature_std": std})
