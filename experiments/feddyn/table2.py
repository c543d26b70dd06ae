"""FedDyn Table 2: models transmitted to reach the target, 100 % and 10 % participation,
100 devices, balanced, IID / Dirichlet (.6) / Dirichlet (.3) (Shakespeare: IID / natural).

    python -m experiments feddyn table2 --profile quick --seeds 1 [--datasets all] [--dsgd]

`--dsgd` adds distributed SGD runs (IID and Dirichlet .3, rows of our own: the paper only
says it was not competitive, FDY-T2-7). The paper's Table 2 is OCR-garbled in places:
reconstructed cells carry "?", unreadable ones say so (reference README).
"""
from __future__ import annotations

from experiments.feddyn.common import TableSpec

SPEC = TableSpec(2, "models to the target, 100 % and 10 % participation (100 devices, balanced)",
                 claims=("FDY-T2-1", "FDY-T2-2", "FDY-T2-3", "FDY-T2-4", "FDY-T2-5", "FDY-T2-6",
                         "FDY-T2-7", "FDY-S3-2"))
