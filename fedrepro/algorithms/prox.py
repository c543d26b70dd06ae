"""Proximal operators for composite objectives f(x) + Psi(x) (LoSAC Sec. III-C).

A proximal (composite) method replaces the plain step x <- x - eta d by

    x <- prox_{eta Psi}(x - eta d),   prox_{eta Psi}(v) = argmin_z 0.5 ||z - v||^2 + eta Psi(z).

Two regularizers are provided, each with its closed-form prox:

* ``l1``:      Psi = weight * ||x||_1  -> soft thresholding of every coordinate by eta * weight;
* ``nuclear``: Psi = weight * ||X||_*  (X the flat vector seen as a matrix of a given shape)
               -> singular value thresholding: soft-threshold the singular values by eta * weight.

`make_prox` builds the step-size-scaled operator f(w, lr) = prox_{lr * weight * Psi}(w), the
form every algorithm calls right after its gradient step.
"""
from __future__ import annotations

from typing import Callable

import torch

from fedrepro.errors import ConfigError

PROX_KINDS = ("none", "l1", "nuclear")  # the choices of algorithm.prox (LoSAC, SCAFFOLD-Prox)

ProxFn = Callable[[torch.Tensor, float], torch.Tensor]


def soft_threshold(x: torch.Tensor, tau: float) -> torch.Tensor:
    """sign(x) * max(|x| - tau, 0): the prox of tau * ||.||_1 (elementwise; tau >= 0)."""
    if tau < 0:
        raise ConfigError(f"soft_threshold needs tau >= 0, got {tau}")
    return torch.sign(x) * torch.clamp(x.abs() - tau, min=0.0)


def singular_value_threshold(x: torch.Tensor, tau: float, shape: tuple[int, int]) -> torch.Tensor:
    """The prox of tau * ||.||_* (nuclear norm): U diag(max(s - tau, 0)) V^T.

    `x` is either flat with shape[0] * shape[1] entries or already a matrix of that size; the
    result has x's own shape (flat in, flat out).
    """
    if tau < 0:
        raise ConfigError(f"singular_value_threshold needs tau >= 0, got {tau}")
    rows, cols = int(shape[0]), int(shape[1])
    if x.numel() != rows * cols:
        raise ConfigError(f"singular_value_threshold: shape={tuple(shape)} needs {rows * cols} entries, "
                          f"the tensor has {x.numel()}")
    mat = x.reshape(rows, cols)
    u, s, vh = torch.linalg.svd(mat, full_matrices=False)
    s = torch.clamp(s - tau, min=0.0)
    out = (u * s.unsqueeze(0)) @ vh
    return out.reshape(x.shape)


def make_prox(kind: str, weight: float, shape: tuple[int, int] | None = None) -> ProxFn:
    """f(w, lr) = prox_{lr * weight * Psi}(w) for Psi named by `kind` (one of PROX_KINDS).

    "none" returns w itself (the same tensor object, no copy); "nuclear" needs `shape`, the
    matrix shape of the flat vector.
    """
    if kind not in PROX_KINDS:
        raise ConfigError(f"prox kind={kind!r} is unknown; choose one of {PROX_KINDS}")
    if weight < 0:
        raise ConfigError(f"prox weight must be >= 0, got {weight}")
    if kind == "none":
        return lambda w, lr: w
    if kind == "l1":
        return lambda w, lr: soft_threshold(w, float(lr) * weight)
    if shape is None or len(shape) != 2:
        raise ConfigError("prox kind='nuclear' needs shape=(rows, cols), the matrix shape of the flat vector")
    mat_shape = (int(shape[0]), int(shape[1]))
    return lambda w, lr: singular_value_threshold(w, float(lr) * weight, mat_shape)


def check_prox_config(params: dict) -> None:
    """The config check of an algorithm with a prox (`prox`, `prox_shape` fields): nuclear needs
    the matrix shape of the flat model."""
    if params.get("prox") == "nuclear":
        shape = params.get("prox_shape")
        if shape is None or len(shape) != 2 or min(shape) < 1:
            raise ConfigError(f"algorithm.prox=nuclear needs algorithm.prox_shape=[rows, cols], the matrix "
                              f"shape of the flat model (e.g. [64, 64]); got {shape}")
