"""FedDyn Table 6: models transmitted to reach a target *training loss* on the synthetic
convex problem (multiclass logistic regression, 30 features, 5 classes, 20 devices, 10 %),
homogeneous and with one of three types of heterogeneity (App. A.1.1).

    python -m experiments feddyn table6 --profile quick --seeds 1

The target is on the training loss of the mean of all clients' models (all_train_loss).
The data is fedrepro/data/synthetic.py's generator (docs/datasets/synthetic.md) on its own
20 devices (split=natural), one type of heterogeneity at a time (settings.SYNTHETIC_TYPES).
"""
from __future__ import annotations

from experiments.feddyn.common import TableSpec

SPEC = TableSpec(6, "models to the target training loss, synthetic convex problem (20 devices, 10 %)",
                 claims=("FDY-T6-1", "FDY-S3-2"), column="all_train_loss", lower_is_better=True,
                 scale=1.0, target_name="training loss")
