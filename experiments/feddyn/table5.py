"""FedDyn Table 5: models transmitted to reach the target at 1 % participation (100 devices,
balanced; about one client a round).

    python -m experiments feddyn table5 --profile quick --seeds 1 [--datasets all]
"""
from __future__ import annotations

from experiments.feddyn.common import TableSpec

SPEC = TableSpec(5, "models to the target, 1 % participation (100 devices, balanced)",
                 claims=("FDY-T5-1", "FDY-T5-2", "FDY-T2-3", "FDY-S3-2"))
