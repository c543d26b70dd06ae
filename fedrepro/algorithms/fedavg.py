"""FedAvg (McMahan et al. 2017), FedProx (Li et al. 2020), FedElasticNet Algorithm 1, and
distributed SGD.

FedAvg   upload:    Delta_k = w_k - theta                 (the local update)
         server:    theta += sum_k (n_k / sum_{j in P} n_j) Delta_k   (selected clients)
FedProx  local:     L_k(w) + mu/2 ||w - theta||^2          (mu = 0 is FedAvg exactly)
FedElasticNet Algorithm 1 (FedProx + elastic net):
         local:     L_k(w) + lambda2/2 ||w - theta||^2 + lambda1 ||w - theta||_1   (lambda2 = mu)
         upload:    Delta_k with entries |Delta_k(i)| <= epsilon set to 0
DSGD     one local step; upload the stochastic gradient g_k; server: theta -= lr * sum_k w_k g_k

Config: FedProx's mu is `algorithm.lambda2` (FedElasticNet's name); `algorithm.mu` is its alias.

The average is over the selected clients' data sizes, as FedDyn's code does (FIDELITY.md;
FedElasticNet's Algorithm 1 step 7 read with n = the selected clients' total).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from fedrepro.algorithms.base import Algorithm, AlgorithmConfig, LocalObjective, alias, param, threshold
from fedrepro.algorithms.registry import register


@dataclass
class FedAvgConfig(AlgorithmConfig):
    name: str = "fedavg"


@dataclass
class FedProxConfig(AlgorithmConfig):
    """FedProx; with lambda1 / epsilon > 0, FedElasticNet Algorithm 1 (lambda2 = FedProx's mu)."""

    name: str = "fedprox"
    lambda1: float = param(0.0, range=">= 0")  # l1 weight on the local update
    lambda2: float = param(1e-4, range=">= 0")  # l2 / proximal weight: lambda2/2 ||w - theta_server||^2
    epsilon: float = param(0.0, range=">= 0")  # entries of the sent update with |x| <= epsilon become 0
    mu: Optional[float] = alias("lambda2", range=">= 0")  # FedProx's name of lambda2


@dataclass
class DSGDConfig(AlgorithmConfig):
    name: str = "dsgd"


@register("fedavg", config=FedAvgConfig)
class FedAvg(Algorithm):
    name = "fedavg"

    def upload(self, k, w, steps, received):
        return {"delta": w - received["model"]}

    def aggregate(self, selected, uploads):
        delta = uploads["delta"]
        self.theta = self.theta + self.client_weights(selected).to(delta) @ delta

    def server_is_selected_mean(self):
        return True


@register("fedprox", "fen_alg1", config=FedProxConfig)
class FedProx(FedAvg):
    """FedProx; with lambda1 / epsilon > 0 it is FedElasticNet's Algorithm 1."""

    name = "fedprox"

    def __init__(self, mu: float, lambda1: float = 0.0, epsilon: float = 0.0):
        self.mu, self.lambda1, self.epsilon = mu, lambda1, epsilon

    def local_objective(self, k, received):
        return LocalObjective(anchor=received["model"], prox_mu=self.mu, l1=self.lambda1)

    def upload(self, k, w, steps, received):
        return {"delta": threshold(w - received["model"], self.epsilon)}

    def server_is_selected_mean(self):
        return self.epsilon == 0  # the threshold moves the sent update off the client's


@register("dsgd", config=DSGDConfig)
class DSGD(FedAvg):
    """Distributed SGD: each selected client sends one minibatch gradient at the server model."""

    name = "dsgd"

    def local_steps(self, k, own_steps, equal_steps):
        return 1

    def upload(self, k, w, steps, received):
        # one step w = theta - lr * g (clipped, weight decay included), so g = (theta - w) / lr
        return {"gradient": (received["model"] - w) / self.lr}

    def aggregate(self, selected, uploads):
        g = uploads["gradient"]
        self.theta = self.theta - self.lr * (self.client_weights(selected).to(g) @ g)

    def server_is_selected_mean(self):
        return False  # kept apart: the gradient form rescales by the step size
