"""Make torchvision (and so lightning, via torchmetrics) importable next to a CPU-only torch.

The PyPI torchvision wheel is a CUDA build. With a CPU torch its compiled extension `_C.so`
cannot load, so the operator schemas `torchvision::nms` and `torchvision::qnms` are never
defined, and `import torchvision` fails while registering fake kernels for them
("operator torchvision::nms does not exist"). Datasets, transforms and models never call
these ops, so defining the two schemas (without kernels) is enough to import everything.

Where the extension loads (matching CPU build, or a CUDA machine) this module does nothing.
This module must run before anything imports torchvision or lightning: `fedrepro/__init__.py`
imports it first.
"""
from __future__ import annotations

import glob
import importlib.util
import os

import torch

_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_library = None  # the torch.library.Library that owns our definitions (kept alive here)
SHIM_ACTIVE = False  # True when we had to define the schemas ourselves


def _op_defined(name: str) -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw(f"torchvision::{name}", "")
        return True
    except RuntimeError:
        return False


def _try_load_extension() -> None:
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return
    for path in glob.glob(os.path.join(os.path.dirname(spec.origin), "_C*.so")):
        try:
            torch.ops.load_library(path)
        except OSError:
            pass  # a CUDA build of torchvision next to a CPU torch: fall back to the shim


def ensure_torchvision_ops() -> bool:
    """Define the missing torchvision op schemas if the extension cannot provide them.

    Returns True when the shim was needed (and is now active)."""
    global _library, SHIM_ACTIVE
    if all(_op_defined(n) for n in _SCHEMAS):
        return SHIM_ACTIVE
    _try_load_extension()
    missing = [n for n in _SCHEMAS if not _op_defined(n)]
    if not missing:
        return False
    if _library is None:
        _library = torch.library.Library("torchvision", "FRAGMENT")
    for name in missing:
        _library.define(_SCHEMAS[name])
    SHIM_ACTIVE = True
    return True


ensure_torchvision_ops()
