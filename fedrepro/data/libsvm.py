"""LIBSVM's a1a and a2a (Adult census, binarized): L2GD's logistic-regression data (Figs. 2-3).

Files in `<data_root>/libsvm/`: `a1a`, `a2a` (training) and optionally `a1a.t`, `a2a.t` (test), in
LIBSVM's sparse text format `±1 idx:val ...` (1-based indices, at most 123). Read into dense float32
(n, 123); labels -1/+1 -> 0/1. L2GD's d = 124 is these 123 features plus a bias; the repo's
binary_logistic model has its own bias, so no constant column is appended.

Without a test file the training set doubles as the test set (L2GD reports training loss) unless
require_test=True. Only `libsvm/a1a.t` counts as a1a's test file: the modified copy in
shared/data/libsvm/nonoriginal/ (features 120-123 deleted) is used only if someone copies it there
deliberately. No natural split: L2GD deals each file out in order to 5 workers (the partitioner).
`download` is accepted for the registry's signature but never used: this source never fetches.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fedrepro.data.common import DatasetTensors, ascii_token_lines, labels_tensor, missing_error
from fedrepro.errors import ConfigError, DataError

N_FEATURES = 123
# Rows of the published files; a file missing from this dict (tests patch it) is not checked.
LIBSVM_ROWS: dict[str, int] = {"a1a": 1605, "a1a.t": 30956, "a2a": 2265, "a2a.t": 30296}
LIBSVM_URL = "https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary.html"


def read_libsvm(path: str | Path, n_features: int = N_FEATURES) -> tuple[np.ndarray, np.ndarray]:
    """(x float32 (n, n_features), y int64 0/1) from a ±1-labelled LIBSVM text file."""
    path = Path(path)
    labels, rows, cols, vals = [], [], [], []
    for lineno, tokens in ascii_token_lines(path):
        if tokens[0] not in ("+1", "-1", "1"):
            raise DataError(f"{path}: line {lineno}: label {tokens[0]!r}, expected +1 or -1.")
        r = len(labels)
        labels.append(tokens[0] != "-1")
        for tok in tokens[1:]:
            idx, sep, val = tok.partition(":")
            try:
                i, v = int(idx), float(val)
            except ValueError:
                i = v = None
            if not sep or i is None:
                raise DataError(f"{path}: line {lineno}: malformed token {tok!r}, expected "
                                f"idx:value; the file is damaged or truncated.")
            if not 1 <= i <= n_features:
                raise DataError(f"{path}: line {lineno}: feature index {i} outside "
                                f"1..{n_features}.")
            rows.append(r)
            cols.append(i - 1)
            vals.append(v)
    x = np.zeros((len(labels), n_features), np.float32)
    x[rows, cols] = vals
    return x, np.array(labels, dtype=np.int64)


def libsvm_dir(data_root: str | Path) -> Path:
    return Path(data_root) / "libsvm"


def _missing(data_root: Path, name: str, require_test: bool) -> list[Path]:
    d = libsvm_dir(data_root)
    need = [name, f"{name}.t"] if require_test else [name]
    return [d / n for n in need if not (d / n).is_file()]


def _read_checked(path: Path) -> tuple[np.ndarray, np.ndarray]:
    x, y = read_libsvm(path)
    n = LIBSVM_ROWS.get(path.name)
    if not len(y) or (n is not None and len(y) != n):
        raise DataError(f"{path}: {len(y)} examples, expected {n or 'at least one'}; the file is "
                        f"damaged or truncated. Get it again from {LIBSVM_URL}#{path.name.split('.')[0]}")
    return x, y


def _load(name: str, data_root: Path, require_test: bool, extra: dict) -> DatasetTensors:
    if extra:
        raise ConfigError(f"{name}: unknown option(s) {', '.join(sorted(extra))}; valid: require_test")
    d = libsvm_dir(data_root)
    missing = _missing(data_root, name, require_test)
    if missing:
        raise missing_error(name, missing, d, f"Get them from {LIBSVM_URL}#{name} .")
    x, y = _read_checked(d / name)
    x_te, y_te = _read_checked(d / f"{name}.t") if (d / f"{name}.t").is_file() else (x, y)
    test = f"test {d / name}.t" if x_te is not x else "no test file: the training set is also the test set"
    return DatasetTensors(
        name, torch.from_numpy(x), labels_tensor(y), torch.from_numpy(x_te), labels_tensor(y_te), 2,
        f"LIBSVM {d / name} ({len(y)} rows, {N_FEATURES} features, labels -1/+1 -> 0/1); {test}")


def load_a1a(data_root: Path, download: bool = False, *, require_test: bool = False,
             **extra) -> DatasetTensors:
    return _load("a1a", data_root, require_test, extra)


def missing_a1a(data_root: Path, require_test: bool = False, **options) -> list[Path]:
    return _missing(data_root, "a1a", require_test)


def load_a2a(data_root: Path, download: bool = False, *, require_test: bool = False,
             **extra) -> DatasetTensors:
    return _load("a2a", data_root, require_test, extra)


def missing_a2a(data_root: Path, require_test: bool = False, **options) -> list[Path]:
    return _missing(data_root, "a2a", require_test)
