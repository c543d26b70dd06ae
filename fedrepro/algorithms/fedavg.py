"""FedAvg (McMahan et al. 2017) and FedProx (Li et al. 2020).

FedAvg   upload:    Delta_k = w_k - theta                 (the local update)
         server:    theta += sum_k (n_k / sum_{j in P} n_j) Delta_k   (selected clients)
FedProx  local:     L_k(w) + mu/2 ||w - theta||^2          (mu = 0 is FedAvg exactly)

The average is over the selected clients' data sizes, as FedDyn's code does (FIDELITY.md;
FedElasticNet's Algorithm 1 step 7 read with n = the selected clients' total).
"""
from __future__ import annotations

import torch

from fedrepro.algorithms.base import Algorithm, LocalObjective


class FedAvg(Algorithm):
    name = "fedavg"

    def upload(self, k, w, received):
        return {"delta": w - received["model"]}

    def aggregate(self, selected, uploads):
        delta = uploads["delta"]
        self.theta = self.theta + self.client_weights(selected).to(delta) @ delta


class FedProx(FedAvg):
    name = "fedprox"

    def __init__(self, mu: float):
        self.mu = mu

    def local_objective(self, k, received):
        return LocalObjective(anchor=received["model"], prox_mu=self.mu)
