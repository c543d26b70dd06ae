"""FedOpt (Reddi et al. 2021, "Adaptive Federated Optimization", Algorithms 1 and 2): FedAvg's clients,
a server optimizer on the averaged update -- the L2GD paper's no-compression baseline (section 7.2).

clients:  as FedAvg: local SGD from x, upload Delta_k = w_k - x
server:   Delta = sum_k (n_k / sum_{j in S} n_j) Delta_k    (FedAvg's data-weighted mean over the selected
          clients, so FedAvg is the special case; the pseudo-gradient is g = -Delta)
  fedavgm    m = momentum m + Delta;  x = x + server_lr m   (heavy ball: torch's SGD convention without
             dampening, Hsu et al.'s FedAvgM; momentum 0 and server_lr 1 are FedAvg bit for bit)
  fedadam    m = beta1 m + (1 - beta1) Delta;  v = beta2 v + (1 - beta2) Delta^2
  fedadagrad m = beta1 m + (1 - beta1) Delta;  v = v + Delta^2
  fedyogi    m = beta1 m + (1 - beta1) Delta;  v = v - (1 - beta2) Delta^2 sign(v - Delta^2)
             then x = x + server_lr m / (sqrt(v) + tau)
          m_{-1} = 0, v_{-1} = tau^2 (Algorithm 2's "v_{-1} >= tau^2"), no bias correction (as Algorithm 2; a
          server built on torch.optim.Adam corrects the bias and starts v at 0: docs/l2gd.md).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from fedrepro.algorithms.base import AlgorithmConfig, param
from fedrepro.algorithms.fedavg import FedAvg
from fedrepro.algorithms.registry import register
from fedrepro.errors import ConfigError

# The server optimizer of each algorithm name (the names are registered below).
SERVER_OPTIMIZERS = {"fedavgm": "sgd", "fedadam": "adam", "fedadagrad": "adagrad", "fedyogi": "yogi"}
_UNIT = "[0, 1)"


@dataclass
class FedAvgMConfig(AlgorithmConfig):
    """FedOpt with server SGD + momentum (Hsu et al.'s FedAvgM); momentum 0, server_lr 1 = FedAvg."""

    name: str = "fedavgm"
    server_lr: float = param(1.0, range="> 0")
    momentum: float = param(0.9, range=_UNIT)  # m = momentum m + Delta; x += server_lr m


@dataclass
class FedAdaptiveConfig(AlgorithmConfig):
    """FedAdam / FedAdagrad / FedYogi (Reddi et al., Algorithm 2); the name picks the server
    optimizer. FedAdagrad ignores beta2."""

    name: str = "fedadam"  # fedadam | fedadagrad | fedyogi
    server_lr: float = param(0.01, range="> 0")
    beta1: float = param(0.9, range=_UNIT)
    beta2: float = param(0.99, range=_UNIT)
    # adaptivity: x += server_lr m / (sqrt(v) + tau); v starts at tau^2
    tau: float = param(1.0e-3, range="> 0", note="the adaptivity epsilon")


@register("fedavgm", config=FedAvgMConfig)
@register("fedadam", "fedadagrad", "fedyogi", config=FedAdaptiveConfig)
class FedOpt(FedAvg):
    name = "fedopt"
    server_optimizer = True
    state_fields = ("m", "v")  # v is None under SGD (not saved)

    @classmethod
    def from_config(cls, params):
        params = dict(params)
        return cls(SERVER_OPTIMIZERS[params.pop("name")], **params)

    def __init__(self, optimizer: str, server_lr: float = 1.0, momentum: float = 0.0,
                 beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3):
        if optimizer not in SERVER_OPTIMIZERS.values():
            raise ConfigError(f"server optimizer {optimizer!r}; choose one of: {', '.join(SERVER_OPTIMIZERS.values())}")
        if server_lr <= 0:
            raise ConfigError(f"algorithm.server_lr={server_lr} must be > 0")
        for key, value in (("momentum", momentum), ("beta1", beta1), ("beta2", beta2)):
            if not 0 <= value < 1:
                raise ConfigError(f"algorithm.{key}={value} must be in [0, 1)")
        if tau <= 0:
            raise ConfigError(f"algorithm.tau={tau} must be > 0 (the adaptivity epsilon)")
        self.optimizer, self.server_lr, self.momentum = optimizer, server_lr, momentum
        self.beta1, self.beta2, self.tau = beta1, beta2, tau

    def server_is_selected_mean(self):
        return False  # the server optimizer steps from theta along the mean update

    def setup(self, fed, theta0):
        super().setup(fed, theta0)
        self.m = torch.zeros_like(theta0)
        self.v = None if self.optimizer == "sgd" else torch.full_like(theta0, self.tau ** 2)

    def aggregate(self, selected, uploads):
        delta = uploads["delta"]
        delta = self.client_weights(selected).to(delta) @ delta  # Delta_t
        if self.optimizer == "sgd":
            if self.momentum:
                self.m = self.momentum * self.m + delta
                step = self.m
            else:
                step = delta
            self.theta = self.theta + (step if self.server_lr == 1 else self.server_lr * step)
            return
        self.m = self.beta1 * self.m + (1 - self.beta1) * delta
        sq = delta * delta
        if self.optimizer == "adam":
            self.v = self.beta2 * self.v + (1 - self.beta2) * sq
        elif self.optimizer == "adagrad":
            self.v = self.v + sq
        else:  # yogi
            self.v = self.v - (1 - self.beta2) * sq * torch.sign(self.v - sq)
        self.theta = self.theta + self.server_lr * self.m / (self.v.sqrt() + self.tau)
