"""FedDyn Table 1: models transmitted to reach the target, 100 vs 1000 (CIFAR-10) / 500
(CIFAR-100) devices, 10 % participation, balanced, IID and Dirichlet (.3).

    python -m experiments feddyn table1 --profile quick --seeds 1 [--datasets all]

Every row is CIFAR: until the CIFAR loaders and CNN arrive they are listed as not run.
"""
from __future__ import annotations

from experiments.feddyn.common import TableSpec

SPEC = TableSpec(1, "models to the target, moderate vs massive device number (10 %, balanced)",
                 claims=("FDY-T1-1", "FDY-T1-2", "FDY-T1-3", "FDY-T1-4", "FDY-T1-5", "FDY-S3-2"))
