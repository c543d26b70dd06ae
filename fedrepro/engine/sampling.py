"""Client sampling: FedDyn's Bernoulli participation or a fixed-size cohort."""
from __future__ import annotations

import torch

from fedrepro.seeding import generator


def sample_clients(mode: str, rate: float, cohort_size: int | None, num_clients: int,
                   seed: int, round: int) -> torch.Tensor:
    """Sorted client ids taking part in `round`.

    bernoulli: each client joins independently with probability `rate` (FedDyn's act_prob,
    so the cohort size varies); an empty draw is redrawn with the next attempt's seed.
    fixed: exactly `cohort_size` (or round(rate * m), at least 1) clients, uniformly.
    """
    if mode == "bernoulli":
        attempt = 0
        while True:
            g = generator(seed, "sample", round, attempt)
            chosen = torch.nonzero(torch.rand(num_clients, generator=g) <= rate).flatten()
            if len(chosen):
                return chosen
            attempt += 1
    size = cohort_size if cohort_size is not None else max(1, round_half_up(rate * num_clients))
    g = generator(seed, "sample", round)
    return torch.randperm(num_clients, generator=g)[:size].sort().values


def round_half_up(x: float) -> int:
    return int(x + 0.5)
