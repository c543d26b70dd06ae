"""CIFAR-10 and CIFAR-100 in torchvision's layout, with an array cache.

Under `<data_root>/CIFAR10/` (`CIFAR100/`) each split (train, test) is found on its own:
1. the array cache `cifar10_<split>.npz` (`cifar100_<split>.npz`): x uint8 (n, 32, 32, 3), HWC
   RGB, and y; the layout of the shared data folder (its zip members are LZMA: np.load reads both);
2. else the python pickles of the original archive (`cifar-10-batches-py/`, `cifar-100-python/`),
   md5-verified against torchvision's list; after a parse the cache is written next to them.
Either way the arrays are checked (shape, label range, per-class counts) before use. Features
are scaled to [0, 1] and standardized per channel with FedDyn's constants; the training split is
augmented per batch (`fedrepro/data/augment.py`). See docs/datasets/cifar.md.
"""
from __future__ import annotations

import os
import pickle
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedrepro.data.common import DatasetTensors, check_md5, labels_tensor
from fedrepro.errors import ConfigError, DataError

SPLITS = ("train", "test")
OPTIONS = ("write_cache",)  # the dataset config fields these loaders accept


@dataclass(frozen=True)
class CifarSpec:
    name: str                               # registry name, also the cache file prefix
    title: str
    folder: str                             # <data_root>/<folder>/; also torchvision's class name
    archive: str                            # the original tar.gz, unpacked into the folder
    pickle_dir: str                         # the folder the archive unpacks to
    pickles: dict[str, tuple[str, ...]]     # split -> pickle files, in row order
    md5: dict[str, str]                     # torchvision's checksums of the pickles
    label_key: bytes
    num_classes: int
    sizes: dict[str, int]                   # rows per split, spread evenly over the classes
    mean: tuple[float, float, float]
    std: tuple[float, float, float]

    @property
    def where(self) -> str:
        return (f"Get them with torchvision.datasets.{self.folder}(root='<data_root>/{self.folder}', "
                f"download=True) (unpacks {self.pickle_dir}/), or download {self.archive} from "
                f"https://www.cs.toronto.edu/~kriz/cifar.html and unpack it in that folder.")


SPECS: dict[str, CifarSpec] = {
    "cifar10": CifarSpec(
        "cifar10", "CIFAR-10", "CIFAR10", "cifar-10-python.tar.gz", "cifar-10-batches-py",
        {"train": tuple(f"data_batch_{i}" for i in range(1, 6)), "test": ("test_batch",)},
        {"data_batch_1": "c99cafc152244af753f735de768cd75f",
         "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
         "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
         "data_batch_4": "634d18415352ddfa80567beed471001a",
         "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
         "test_batch": "40351d587109b95175f43aff81a1287e"},
        b"labels", 10, {"train": 50_000, "test": 10_000},
        # FedDyn's code (utils_dataset.py), rounded training-set statistics
        (0.491, 0.482, 0.447), (0.247, 0.243, 0.262)),
    "cifar100": CifarSpec(
        "cifar100", "CIFAR-100", "CIFAR100", "cifar-100-python.tar.gz", "cifar-100-python",
        {"train": ("train",), "test": ("test",)},
        {"train": "16019d7e3df5f24257cddd939b257f8d", "test": "f0ef6b0ae62326f3e7ffdfab6717acfc"},
        b"fine_labels", 100, {"train": 50_000, "test": 10_000},
        # FedDyn's code uses CIFAR-100's own statistics here, not CIFAR-10's
        (0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761)),
}


def _spec(dataset: str) -> CifarSpec:
    if dataset not in SPECS:
        raise ValueError(f"unknown CIFAR dataset {dataset!r}; known: {', '.join(SPECS)}")
    return SPECS[dataset]


def cifar_folder(data_root: str | Path, dataset: str) -> Path:
    return Path(data_root) / _spec(dataset).folder


def cache_path(folder: Path, spec: CifarSpec, split: str) -> Path:
    return Path(folder) / f"{spec.name}_{split}.npz"


def _pickle_paths(folder: Path, spec: CifarSpec, split: str) -> list[Path]:
    return [Path(folder) / spec.pickle_dir / n for n in spec.pickles[split]]


def _absent(folder: Path, spec: CifarSpec, split: str) -> list[Path]:
    """[] when the split is here (its cache or all its pickles); else the cache and absent pickles."""
    cache, pickles = cache_path(folder, spec, split), _pickle_paths(folder, spec, split)
    if cache.is_file() or all(p.is_file() for p in pickles):
        return []
    return [cache] + [p for p in pickles if not p.is_file()]


def _missing_message(folder: Path, spec: CifarSpec, splits: list[str]) -> str:
    parts = []
    for split in splits:
        absent = [p.name for p in _absent(folder, spec, split)[1:]]
        parts.append(f"the {split} split (neither {cache_path(folder, spec, split).name} nor all of "
                     f"{spec.pickle_dir}/{{{', '.join(spec.pickles[split])}}}; absent: {', '.join(absent)})")
    return (f"{spec.title} files missing: {'; '.join(parts)}. Put the cache file or the pickles "
            f"(in {spec.pickle_dir}/) in the folder {folder}/ . {spec.where}")


def _check_options(options: dict) -> bool:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ConfigError(f"unknown CIFAR dataset option(s) {', '.join(unknown)}; "
                          f"known: {', '.join(OPTIONS)}")
    return bool(options.get("write_cache", True))


# ---------------------------------------------------------------- reading and checking

def _read_pickle(path: Path, spec: CifarSpec, check: bool) -> tuple[np.ndarray, np.ndarray]:
    """One pickle: images (n, 32, 32, 3) uint8 HWC, labels (n,) int64."""
    try:
        if check:  # also keeps pickle.load away from files that are not the originals
            check_md5(path, spec.md5[path.name])
    except DataError as e:
        raise DataError(f"{e} {spec.where}") from e
    try:
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="bytes")  # written by Python 2: byte-string keys
        data, labels = batch[b"data"], np.asarray(batch[spec.label_key], dtype=np.int64)
    except Exception as e:  # a damaged pickle fails in many ways (EOF, bad opcode, wrong type...)
        raise DataError(f"{path}: cannot read this {spec.title} pickle ({type(e).__name__}: {e}); the file "
                        f"is damaged or not a {spec.title} batch. Delete {path.name} and fetch it again. "
                        f"{spec.where}") from e
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 \
            or data.shape[1] != 3072 or labels.shape != (len(data),):
        shape = getattr(data, "shape", type(data).__name__)
        raise DataError(f"{path}: b'data' is {shape} with {labels.shape} labels; expected (n, 3072) uint8 "
                        f"rows (the R, G, B planes of a 32x32 image) and n labels. Delete {path.name} "
                        f"and fetch it again. {spec.where}")
    # each row holds the R, G and B planes one after the other, each row-major 32x32
    return data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1), labels


def _read_cache(path: Path, spec: CifarSpec) -> tuple[np.ndarray, np.ndarray]:
    try:
        with np.load(path) as z:  # allow_pickle stays off: arrays only
            x, y = z["x"], z["y"]
    except Exception as e:  # truncated zip, damaged member, missing key
        raise DataError(f"{path}: cannot read this {spec.title} array cache ({type(e).__name__}: {e}); "
                        f"the file is damaged. Delete {path.name} and fetch it again (or load again "
                        f"with the pickles in {spec.pickle_dir}/: the cache is rebuilt from them).") from e
    if x.dtype != np.uint8 or y.dtype.kind not in "iu":
        raise DataError(f"{path}: x is {x.dtype} and y {y.dtype}; expected uint8 images and integer labels. "
                        f"Delete {path.name} and fetch it again.")
    return x, y.astype(np.int64)


def _validate(x: np.ndarray, y: np.ndarray, spec: CifarSpec, split: str, what: str) -> None:
    n, k = spec.sizes[split], spec.num_classes
    counts = np.bincount(y, minlength=k) if len(y) and y.min() >= 0 else np.zeros(0, int)
    if x.shape != (n, 32, 32, 3) or y.shape != (n,) or len(counts) != k or (counts != n // k).any():
        span = f"{y.min()}..{y.max()}" if len(y) else "none"
        raise DataError(f"{what}: {spec.title} {split} split holds images {x.shape} and labels {y.shape} "
                        f"(range {span}, per-class counts {counts.tolist()}); expected ({n}, 32, 32, 3) "
                        f"images and {n} labels, {n // k} of each class 0..{k - 1}. The file(s) are damaged "
                        f"or not {spec.title}: delete them and fetch them again. {spec.where}")


def _write_cache(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:  # a file object: savez would append .npz to a name
            np.savez_compressed(f, x=x, y=y.astype(np.uint8))
        os.replace(tmp, path)  # atomic: a concurrent reader never sees half a cache
    except OSError as e:  # e.g. a read-only data folder: work on without the cache
        tmp.unlink(missing_ok=True)
        warnings.warn(f"could not write the array cache {path} ({e}); the pickles will be parsed again")


def _read_split(folder: Path, spec: CifarSpec, split: str, check: bool,
                write_cache: bool) -> tuple[np.ndarray, np.ndarray, str]:
    cache = cache_path(folder, spec, split)
    if cache.is_file():
        x, y = _read_cache(cache, spec)
        _validate(x, y, spec, split, str(cache))
        return x, y, f"{cache.name} (array cache)"
    pickles = _pickle_paths(folder, spec, split)
    if not all(p.is_file() for p in pickles):
        raise DataError(_missing_message(folder, spec, [split]))
    parts = [_read_pickle(p, spec, check) for p in pickles]
    x, y = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    _validate(x, y, spec, split, f"{folder / spec.pickle_dir}/{{{', '.join(spec.pickles[split])}}}")
    if write_cache:
        _write_cache(cache, x, y)
    names = ", ".join(spec.pickles[split])
    return x, y, f"{spec.pickle_dir}/{{{names}}} (pickles{', md5-verified' if check else ''})"


def read_cifar_split(folder: str | Path, dataset: str, split: str, check: bool = True,
                     write_cache: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Images (n, 32, 32, 3) uint8 HWC RGB and labels (n,) int64 of `split` ('train' | 'test')
    of `dataset` ('cifar10' | 'cifar100') from `folder` (`<data_root>/CIFAR10` or `/CIFAR100`):
    the array cache if present, else the pickles (md5-checked unless `check=False`), which then
    write the cache unless `write_cache=False`."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; known: {', '.join(SPLITS)}")
    x, y, _ = _read_split(Path(folder), _spec(dataset), split, check, write_cache)
    return x, y


def normalize_images(x: np.ndarray, mean, std) -> torch.Tensor:
    """uint8 (n, 32, 32, 3) HWC -> float32 (n, 3, 32, 32): ToTensor's /255, then Normalize."""
    t = torch.from_numpy(x).permute(0, 3, 1, 2).to(torch.float32, memory_format=torch.contiguous_format)
    view = (1, 3, 1, 1)
    return t.div_(255.0).sub_(torch.tensor(mean).view(view)).div_(torch.tensor(std).view(view))


# ---------------------------------------------------------------- registry entry points

def _missing(data_root: Path, dataset: str) -> list[Path]:
    spec = _spec(dataset)
    folder = cifar_folder(data_root, dataset)
    return [p for split in SPLITS for p in _absent(folder, spec, split)]


def _load(data_root: Path, dataset: str, download: bool, options: dict) -> DatasetTensors:
    write_cache = _check_options(options)
    spec, folder = _spec(dataset), cifar_folder(data_root, dataset)
    if download and _missing(data_root, dataset):
        try:  # lazy: torchvision is optional; any failure here means "no network"
            import torchvision
            getattr(torchvision.datasets, spec.folder)(root=str(folder), train=True, download=True)
        except Exception:
            pass
    absent = [s for s in SPLITS if _absent(folder, spec, s)]
    if absent:
        raise DataError(_missing_message(folder, spec, absent))
    x_tr, y_tr, src_tr = _read_split(folder, spec, "train", True, write_cache)
    x_te, y_te, src_te = _read_split(folder, spec, "test", True, write_cache)
    return DatasetTensors(
        spec.name, normalize_images(x_tr, spec.mean, spec.std), labels_tensor(y_tr),
        normalize_images(x_te, spec.mean, spec.std), labels_tensor(y_te), spec.num_classes,
        f"{spec.title} in {folder}: train {src_tr}; test {src_te}", augment="cifar")


def load_cifar10(data_root: Path, download: bool, **options) -> DatasetTensors:
    return _load(Path(data_root), "cifar10", download, options)


def load_cifar100(data_root: Path, download: bool, **options) -> DatasetTensors:
    return _load(Path(data_root), "cifar100", download, options)


def missing_cifar10(data_root: Path, **options) -> list[Path]:
    """Absent files per split that is not here: its cache and its absent pickles (either would do)."""
    _check_options(options)
    return _missing(Path(data_root), "cifar10")


def missing_cifar100(data_root: Path, **options) -> list[Path]:
    _check_options(options)
    return _missing(Path(data_root), "cifar100")
