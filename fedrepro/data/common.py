"""What every dataset source shares: the loaded-dataset record, checksums, the idx format.

A source module (`fedrepro/data/<source>.py`) provides, per dataset name it serves,
`load_<name>(data_root, download, **options) -> DatasetTensors` and
`missing_<name>(data_root, **options) -> list[Path]` (the required files that are not there;
[] for generators). `fedrepro/data/loaders.py` registers them.
"""
from __future__ import annotations

import gzip
import hashlib
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

import numpy as np
import torch

from fedrepro.errors import DataError


@dataclass
class DatasetTensors:
    name: str
    x_train: torch.Tensor   # float32 features (normalized), or int64 token ids (text)
    y_train: torch.Tensor   # int64 class labels; float32 targets for regression
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int        # 1 for regression (one real output)
    source: str             # one line of provenance: which files/package/generator
    # The dataset's own federation (split=natural): one array of x_train row indices per
    # client (Shakespeare's speaking roles, FedDyn's synthetic devices, HAR's subjects).
    natural_clients: Optional[list[np.ndarray]] = None
    augment: Optional[str] = None   # training augmentation applied per batch ("cifar")
    task: str = "classification"    # classification | regression
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. the ground truth of a generator


def missing_error(dataset: str, missing: list[Path], folder: Path, where: str) -> DataError:
    """The error for absent files: names them, the folder they belong in and where to get them."""
    names = ", ".join(str(Path(m).name) for m in missing)
    return DataError(f"{dataset}: missing {names}. Put the file(s) in the folder {folder}/ . {where}")


def labels_tensor(y: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(y, dtype=np.int64).copy())


def ascii_token_lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, whitespace-separated tokens) of each non-blank line of an ASCII text file
    (LIBSVM, UCI HAR); a DataError for any other encoding, e.g. a UTF-16 re-encoded copy."""
    try:
        with open(path, encoding="ascii") as f:
            for lineno, line in enumerate(f, 1):
                tokens = line.split()
                if tokens:
                    yield lineno, tokens
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not an ASCII text file ({e}); get the original file.") from e


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


def normalize_flat(images: np.ndarray, mean: float, std: float) -> torch.Tensor:
    """uint8 images (n, h, w) -> float32 (n, h*w), scaled to [0, 1] then standardized."""
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32))
    return x.div_(255.0).sub_(mean).div_(std)  # in place: no 190 MB temporaries
