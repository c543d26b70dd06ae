"""Training augmentation applied per batch, on the normalized tensors.

"cifar" is FedDyn's (utils_dataset.py, Dataset.__getitem__), per image: a horizontal flip with
probability 0.5, then with probability 0.5 a 32x32 crop of the image zero-padded by 4 pixels on
each side, at an offset drawn uniformly from 0..8 in each direction (offset 4, 4 is the image
itself). FedDyn pads the already normalized image, so the fill is 0 in normalized space (the
channel mean), not black; we do the same.

All randomness comes from `g`, a CPU torch.Generator, so a run is reproducible whatever device
the batch is on. Draw order per call: flip (B), crop (B), offsets (B, 2).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

PAD = 4


def _cifar(x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    b, _, h, w = x.shape
    flip = torch.rand(b, generator=g) < 0.5
    crop = torch.rand(b, generator=g) < 0.5
    offset = torch.randint(0, 2 * PAD + 1, (b, 2), generator=g)
    offset[~crop] = PAD  # the centred window of the padded image: no crop
    rows = offset[:, :1] + torch.arange(h)  # (b, h) rows of the padded image
    cols = offset[:, 1:] + torch.arange(w)  # (b, w) columns of the padded (flipped) image
    # cropping the flipped padded image at column c = cropping the padded image at its mirror
    cols = torch.where(flip[:, None], w + 2 * PAD - 1 - cols, cols)
    padded = F.pad(x, (PAD, PAD, PAD, PAD))  # zeros
    dev = x.device
    i = torch.arange(b, device=dev)[:, None, None]
    # advanced indices around a slice: the result is (b, h, w, c)
    out = padded[i, :, rows.to(dev)[:, :, None], cols.to(dev)[:, None, :]]
    return out.permute(0, 3, 1, 2).contiguous()


AUGMENTS = {"cifar": _cifar}


def augment_batch(kind: str, x: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """A freshly augmented copy of the batch `x` (B, C, H, W); `x` is left unchanged."""
    if kind not in AUGMENTS:
        raise ValueError(f"unknown augmentation {kind!r}; known: {', '.join(AUGMENTS)}")
    if x.dim() != 4:
        raise ValueError(f"augmentation {kind!r} needs a batch of shape (B, C, H, W), got {tuple(x.shape)}")
    return AUGMENTS[kind](x, g)
