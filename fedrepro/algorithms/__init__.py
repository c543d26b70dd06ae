"""Algorithm registry: config name -> constructor taking the algorithm's config node.

FedElasticNet's Algorithms 1-3 are their base methods with the l1 penalty (lambda1) and the
epsilon threshold switched on: `fen_alg1` = FedProx, `fen_alg2` = SCAFFOLD, `fen_alg3` =
FedDyn transmitting updates. With lambda1 = epsilon = 0 each is its base, bit for bit.
"""
from __future__ import annotations

from fedrepro.algorithms.base import Algorithm, Federation, LocalObjective
from fedrepro.algorithms.fedavg import DSGD, FedAvg, FedProx
from fedrepro.algorithms.feddyn import FedDyn
from fedrepro.algorithms.fedsplit import FedSplit
from fedrepro.algorithms.scaffold import Scaffold
from fedrepro.errors import ConfigError


def _fedprox(cfg):
    return FedProx(mu=cfg.mu, lambda1=cfg.lambda1, epsilon=cfg.epsilon)


def _scaffold(cfg):
    return Scaffold(lambda1=cfg.lambda1, lambda2=cfg.lambda2, epsilon=cfg.epsilon, global_lr=cfg.global_lr)


def _feddyn(cfg):
    return FedDyn(alpha=cfg.alpha, lambda1=cfg.lambda1, epsilon=cfg.epsilon, transmit=cfg.transmit)


REGISTRY = {
    "fedavg": lambda cfg: FedAvg(),
    "fedprox": _fedprox,
    "fen_alg1": _fedprox,
    "scaffold": _scaffold,
    "fen_alg2": _scaffold,
    "feddyn": _feddyn,
    "fen_alg3": _feddyn,
    "fedsplit": lambda cfg: FedSplit(step=cfg.step, server=cfg.server),
    "dsgd": lambda cfg: DSGD(),
}


def build_algorithm(cfg) -> Algorithm:
    if cfg.name not in REGISTRY:
        raise ConfigError(f"algorithm {cfg.name!r} is unknown; choose one of: {', '.join(REGISTRY)}")
    algorithm = REGISTRY[cfg.name](cfg)
    algorithm.name = cfg.name
    return algorithm


__all__ = ["Algorithm", "Federation", "LocalObjective", "build_algorithm", "REGISTRY"]
