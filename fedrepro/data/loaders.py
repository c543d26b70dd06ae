"""The dataset registry: every `dataset.name` and the source module that reads it.

Each source module (fedrepro/data/<source>.py) reads its dataset's standard distribution
files, checks them and returns a `DatasetTensors` (fedrepro/data/common.py); generators
(FedDyn's synthetic data, LoSAC's low-rank sensing) build theirs from a seed. Loaded datasets
are cached per (name, resolved data_root, options): treat the tensors as read-only.
"""
from __future__ import annotations

import importlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from fedrepro.data.common import DatasetTensors
from fedrepro.errors import ConfigError


@dataclass(frozen=True)
class Source:
    module: str  # fedrepro.data.<module> defines load_<name> and missing_<name>
    name: str

    def _fn(self, prefix: str) -> Callable:
        return getattr(importlib.import_module(f"fedrepro.data.{self.module}"), f"{prefix}_{self.name}")

    def load(self, data_root: Path, download: bool, **options) -> DatasetTensors:
        return self._fn("load")(data_root, download, **options)

    def missing(self, data_root: Path, **options) -> list[Path]:
        return self._fn("missing")(data_root, **options)


LOADERS: dict[str, Source] = {name: Source(module, name) for name, module in {
    "mnist": "mnist", "mnist_5k": "mnist", "emnist_l": "mnist",
    "cifar10": "cifar", "cifar100": "cifar",
    "shakespeare": "shakespeare",
    "har": "uci", "esr": "uci",
    "a1a": "libsvm", "a2a": "libsvm",
    "synthetic_feddyn": "synthetic", "lowrank": "synthetic",
}.items()}
_CACHE: dict[tuple[str, str, str], DatasetTensors] = {}


def _known(name: str) -> Source:
    if name not in LOADERS:
        raise ConfigError(f"unknown dataset {name!r}; known datasets: {', '.join(sorted(LOADERS))}")
    return LOADERS[name]


def load_dataset(name: str, data_root: str | Path, download: bool = True,
                 options: Optional[dict[str, Any]] = None) -> DatasetTensors:
    """Load dataset `name` from `data_root` (cached per process; do not modify the tensors).
    `options`: the dataset config's other fields (a generator's parameters, a source choice)."""
    source = _known(name)
    options = dict(options or {})
    root = str(Path(data_root).expanduser().resolve())
    key = (name, root, json.dumps(options, sort_keys=True, default=str))
    if key not in _CACHE:
        _CACHE[key] = source.load(Path(root), download, **options)
    return _CACHE[key]


def unavailable(name: str, data_root: str | Path, options: Optional[dict[str, Any]] = None) -> Optional[str]:
    """Why dataset `name` cannot load from `data_root`, naming each missing file under the folder
    they share ("data not here: <folder>/ lacks a, b"), or None. Cheap: checks that the files
    are there, not their content."""
    missing = [Path(m) for m in _known(name).missing(Path(data_root).expanduser(), **dict(options or {}))]
    if not missing:
        return None
    folder = Path(os.path.commonpath([str(m.parent) for m in missing]))
    return f"data not here: {folder}/ lacks " + ", ".join(str(m.relative_to(folder)) for m in missing)


def dataset_for(cfg) -> DatasetTensors:
    """The dataset a run config names, with its options, from its data_root."""
    return load_dataset(cfg.dataset.name, cfg.data_root, download=cfg.dataset.download,
                        options=dataset_options(cfg.dataset))


def default_data_root() -> str:
    """The data folder when none is given: $FEDREPRO_DATA_ROOT, else ./data (the conf default)."""
    return os.environ.get("FEDREPRO_DATA_ROOT", "data")


def dataset_options(dataset_cfg) -> dict[str, Any]:
    """The loader options of a `dataset` config node: every field but name and download."""
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(dataset_cfg, resolve=True) if not isinstance(dataset_cfg, dict) else dict(dataset_cfg)
    return {k: v for k, v in data.items() if k not in ("name", "download")}
