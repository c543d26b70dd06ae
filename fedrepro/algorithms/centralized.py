"""The papers' centralized baseline as a registered name: its config and capabilities only.

`algorithm=centralized` trains one model on the pooled training data with a Lightning Trainer
(fedrepro/centralized.py, run by fedrepro.runner); it has no federation, so no round loop runs
it and `build_algorithm` refuses it. Registering it here gives it what every algorithm has: its
schema and validation in fedrepro.config, and a run key without the federation's settings
(`federated = False`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from fedrepro.algorithms.base import Algorithm, AlgorithmConfig, param
from fedrepro.algorithms.registry import register


@dataclass
class CentralizedConfig(AlgorithmConfig):
    """The papers' centralized baseline: one model trained on the pooled training data
    (a LightningModule and a Lightning Trainer), lr = train.lr, batch = train.batch_size."""

    name: str = "centralized"
    epochs: int = param(150, range=">= 1")
    # epochs between lr multiplications by lr_step_factor
    lr_step_every: Optional[int] = param(50, range=">= 1", null="constant lr")
    lr_step_factor: float = param(0.5, range="(0, 1]")  # FedDyn MNIST: halved every 50 epochs


@register("centralized", config=CentralizedConfig)
class Centralized(Algorithm):
    """Not run by the engine (fedrepro/centralized.py trains the baseline)."""

    name = "centralized"
    federated = False
    not_attackable = "there is no federation and nothing is uploaded"
