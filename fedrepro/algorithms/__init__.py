"""Algorithm registry: config name -> constructor taking the algorithm's config node."""
from __future__ import annotations

from fedrepro.algorithms.base import Algorithm, Federation, LocalObjective
from fedrepro.algorithms.fedavg import FedAvg, FedProx
from fedrepro.errors import ConfigError

REGISTRY = {
    "fedavg": lambda cfg: FedAvg(),
    "fedprox": lambda cfg: FedProx(mu=cfg.mu),
}


def build_algorithm(cfg) -> Algorithm:
    if cfg.name not in REGISTRY:
        raise ConfigError(f"algorithm {cfg.name!r} is unknown; choose one of: {', '.join(REGISTRY)}")
    return REGISTRY[cfg.name](cfg)


__all__ = ["Algorithm", "Federation", "LocalObjective", "build_algorithm", "REGISTRY"]
