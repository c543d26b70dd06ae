"""The federated algorithms, one module each, found by the registry (fedrepro/algorithms/registry.py).

`build_algorithm(cfg.algorithm)` builds the algorithm a config names; `entries()` lists every
registered name with its class, config dataclass and capabilities. A module registers its names
with `@register(...)`; the registry imports every module of this package on its first lookup,
so adding an algorithm edits nothing here (docs/adding_an_algorithm.md).

FedElasticNet's Algorithms 1-3 are their base methods with the l1 penalty (lambda1) and the
epsilon threshold switched on: `fen_alg1` = FedProx, `fen_alg2` = SCAFFOLD, `fen_alg3` =
FedDyn transmitting updates. With lambda1 = epsilon = 0 each is its base, bit for bit.
LoSAC's family (docs/losac.md): `fedsaga`, `losac`, `losac_prox` (LoSAC with a prox),
`mimesvrg`, and `scaffold_prox` (SCAFFOLD with a prox after every local step).
Compressed L2GD (`l2gd`, personalized models) and FedOpt's server optimizers (`fedavgm`,
`fedadam`, `fedadagrad`, `fedyogi`): docs/l2gd.md. `centralized` registers the centralized
baseline's config (fedrepro/centralized.py trains it).
"""
from __future__ import annotations

from fedrepro.algorithms.base import Algorithm, AlgorithmConfig, Federation, LocalObjective, param
from fedrepro.algorithms.fedavg import FedAvg
from fedrepro.algorithms.registry import build_algorithm, entries, entry, register

__all__ = ["Algorithm", "AlgorithmConfig", "FedAvg", "Federation", "LocalObjective", "build_algorithm",
           "entries", "entry", "param", "register"]
