"""FedDyn Table 4: models transmitted to reach the target, balanced vs unbalanced data
(lognormal client sizes, std 0.3), 100 devices, 10 %, IID and Dirichlet (.3).

    python -m experiments feddyn table4 --profile quick --seeds 1 [--datasets all]

Every row is CIFAR: until the CIFAR loaders and CNN arrive they are listed as not run. The
balanced block repeats Table 1's moderate block (same runs, reused from the store).
"""
from __future__ import annotations

from experiments.feddyn.common import TableSpec

SPEC = TableSpec(4, "models to the target, balanced vs unbalanced data (100 devices, 10 %)",
                 claims=("FDY-T4-1", "FDY-T4-2", "FDY-T4-3", "FDY-T4-4", "FDY-T2-4", "FDY-S3-2"))
