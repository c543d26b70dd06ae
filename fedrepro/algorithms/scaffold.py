"""SCAFFOLD option II (Karimireddy et al. 2020) as FedDyn's reference code runs it, and
FedElasticNet Algorithm 2 (SCAFFOLD + elastic net).

state:   server x (d,), c (d,); per client c_k (m, d) = 0
local:   K steps for every client, K = epochs * ceil(mean_k n_k / B) (not epochs of its own data)
         gradient: grad L_k(w) - c_k + c / w_k  [+ lambda2 (w - x) + lambda1 sign(w - x)]
         (w_k = n_k / mean n: c scaled down for unbalanced data, as the reference code)
upload:  Delta_k = y_k - x (entries |.| <= epsilon set to 0), Delta c_k = c_k+ - c_k
client:  c_k+ = c_k - c + (x - y_k) / (K * lr)   with the undecayed lr and y_k = x + Delta_k sent
server:  x += global_lr * mean_k Delta_k;  c += (1/m) sum_k w_k Delta c_k
prox:    SCAFFOLD-Prox (LoSAC V-E's comparison): w <- prox_{lr Psi}(w) after every local step
         (`prox` = fedrepro.algorithms.prox.make_prox(...)); the control variates are unchanged

Two vectors cross the uplink per client and round: the ledger counts both.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from fedrepro.algorithms.base import Algorithm, AlgorithmConfig, LocalObjective, param, threshold
from fedrepro.algorithms.prox import PROX_KINDS, check_prox_config, make_prox
from fedrepro.algorithms.registry import register


@dataclass
class ScaffoldConfig(AlgorithmConfig):
    """SCAFFOLD option II; with lambda1 / lambda2 / epsilon, FedElasticNet Algorithm 2."""

    name: str = "scaffold"
    lambda1: float = param(0.0, range=">= 0")
    lambda2: float = param(0.0, range=">= 0")
    epsilon: float = param(0.0, range=">= 0")
    global_lr: float = param(1.0, range="> 0")


@dataclass
class ScaffoldProxConfig(ScaffoldConfig):
    """SCAFFOLD-Prox (LoSAC V-E): a proximal step after every local step (docs/losac.md)."""

    name: str = "scaffold_prox"
    prox: str = param("nuclear", choices=PROX_KINDS)  # none | l1 | nuclear
    prox_weight: float = param(0.0, range=">= 0")  # lambda of Psi = lambda ||x||_1 or lambda ||X||_*
    # nuclear: the matrix shape of the flat model, e.g. [64, 64]
    prox_shape: Optional[list[int]] = param(None)


@register("scaffold", "fen_alg2", config=ScaffoldConfig)
@register("scaffold_prox", config=ScaffoldProxConfig, per_step_rule=True)
class Scaffold(Algorithm):
    name = "scaffold"
    upload_state = {"delta_control": "c_clients"}  # c_k += Delta c_k
    weighted_mean = False  # FedDyn's code evaluates SCAFFOLD's client mean unweighted
    state_fields = ("c", "c_clients")

    @classmethod
    def from_config(cls, params):
        params = dict(params)
        params.pop("name")
        if "prox" in params:  # scaffold_prox
            kind, weight, shape = params.pop("prox"), params.pop("prox_weight"), params.pop("prox_shape")
            prox = make_prox(kind, weight, None if shape is None else tuple(shape))
            params["prox"] = None if kind == "none" else prox
        return cls(**params)

    @classmethod
    def check_config(cls, params):
        check_prox_config(params)

    def __init__(self, lambda1: float = 0.0, lambda2: float = 0.0, epsilon: float = 0.0,
                 global_lr: float = 1.0, prox=None):
        self.lambda1, self.lambda2, self.epsilon, self.global_lr = lambda1, lambda2, epsilon, global_lr
        self.prox = prox

    def setup(self, fed, theta0):
        super().setup(fed, theta0)
        self.c = torch.zeros_like(theta0)
        self.c_clients = torch.zeros(fed.num_clients, fed.dim, dtype=theta0.dtype, device=theta0.device)
        self.size_weight = (fed.client_sizes / fed.client_sizes.mean()).tolist()  # w_k = n_k / mean n

    def broadcast(self):
        return {"model": self.theta, "control": self.c}

    def local_steps(self, k, own_steps, equal_steps):
        return equal_steps

    def local_objective(self, k, received):
        shift = received["control"] / self.size_weight[k] - self.c_clients[k]
        return LocalObjective(anchor=received["model"], prox_mu=self.lambda2, l1=self.lambda1, linear=shift,
                              prox=self.prox)

    def upload(self, k, w, steps, received):
        x = received["model"]
        delta = threshold(w - x, self.epsilon)
        new_c = self.c_clients[k] - received["control"] + (-delta) / (steps * self.base_lr)
        delta_c = new_c - self.c_clients[k]
        self.c_clients[k] = new_c
        return {"delta": delta, "delta_control": delta_c}

    def aggregate(self, selected, uploads):
        self.theta = self.theta + self.global_lr * uploads["delta"].mean(0)
        weights = torch.tensor([self.size_weight[k] for k in selected.tolist()]).to(self.c)
        self.c = self.c + (weights @ uploads["delta_control"]) / self.fed.num_clients
