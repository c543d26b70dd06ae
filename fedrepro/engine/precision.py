"""`train.precision` in local training and evaluation: Lightning Fabric's precision names and the
autocast context of its mixed-precision plugin.

- 32-true (the default, every run stored so far): float32 throughout, no context.
- bf16-mixed / 16-mixed: the model's forward passes run under torch.autocast(device type, dtype),
  the context `fabric.autocast()` enters for Fabric(precision=...) (Fabric's MixedPrecision plugin,
  `forward_context`): matrix products and activations in bfloat16 / float16, the losses autocast
  keeps in float32 (cross-entropy, the logistic loss) in float32, and the flat parameter vector,
  its gradient (autograd casts it back to the float32 leaf) and the SGD step in float32. The
  batched executor writes its backward out, so its backward products run in the context too,
  as autograd's do in bfloat16 (engine/batched.py). 16-mixed runs without a gradient scaler:
  gradients below float16's range (~6e-8) flush to zero, which bfloat16 (float32's range) avoids.

The executors (engine/local.py, batched.py) and the round loop's evaluation (engine/loop.py) take
the name and enter `autocast` themselves, so a run built without Fabric (a figure driving the
rounds, a test) computes what `run_federated` does. Which names a machine can run is decided at
start (config.check_machine).
"""
from __future__ import annotations

import contextlib

import torch

DEFAULT_PRECISION = "32-true"
AUTOCAST_DTYPES = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}
PRECISIONS = (DEFAULT_PRECISION, *AUTOCAST_DTYPES)

# Fabric's other precision names, refused at start with the reason (config.validate).
UNSUPPORTED_PRECISIONS = {
    "64-true": "the flat parameter vector, the executors' kernels, the compressors and the ledger's "
               "bit counts are float32 throughout",
    "16-true": "it would keep the parameters and the SGD step in float16; the mixed variant keeps "
               "them in float32",
    "bf16-true": "it would keep the parameters and the SGD step in bfloat16; the mixed variant keeps "
                 "them in float32",
    "transformer-engine": "it needs NVIDIA Transformer Engine's layers; the models here are plain torch modules",
    "transformer-engine-float16": "it needs NVIDIA Transformer Engine's layers; the models here are plain "
                                  "torch modules",
}


def is_mixed(precision: str) -> bool:
    return precision in AUTOCAST_DTYPES


def autocast(precision: str, device) -> contextlib.AbstractContextManager:
    """The forward passes' context under `precision` on `device` (a torch.device or its name):
    Fabric's `fabric.autocast()` for that precision; nothing for 32-true."""
    dtype = AUTOCAST_DTYPES.get(precision)
    if dtype is None:
        if precision != DEFAULT_PRECISION:
            raise ValueError(f"precision={precision!r}; choose one of {', '.join(PRECISIONS)}")
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)
