"""Every random draw of a run comes from a generator seeded by (run seed, purpose, round, client).

No random state is carried from one round to the next, so a run resumed from a checkpoint
draws exactly what an uninterrupted run draws (DESIGN.md principle 5).
"""
from __future__ import annotations

import hashlib

import torch


def derive_seed(seed: int, *keys) -> int:
    """A 63-bit seed from the run seed and any hashable keys (stable across processes)."""
    text = "/".join(str(k) for k in (seed, *keys))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def generator(seed: int, *keys, device: str | torch.device = "cpu") -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(derive_seed(seed, *keys))
    return g
