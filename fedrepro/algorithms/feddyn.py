"""FedDyn (Acar et al. 2021) in the form of the authors' code, and FedElasticNet Algorithm 3
(FedDyn + l1 on the update).

state:   server theta (d,); per client lambda_k (m, d) = 0, lambda_k = -grad L_k(theta_k) / alpha_k
local:   L_k(w) + alpha_k <w, lambda_k - theta> + alpha_k/2 ||w||^2 [+ lambda1 ||w - theta||_1]
         alpha_k = alpha / w_k, w_k = n_k / mean n; the alpha_k w part rides in the weight
         decay (after clipping), the linear part in the loss: together the paper's
         L_k(w) - <grad L_k(theta_k^{t-1}), w> + alpha/2 ||w - theta||^2.
upload:  the local model theta_k (transmit=model, FedDyn as published) or
         Delta_k = theta_k - theta (transmit=update, Algorithm 3); entries of Delta_k with
         |.| <= epsilon are set to 0 and the client proceeds with theta + Delta_k as sent.
client:  lambda_k += Delta_k + (lambda1 / alpha_k) sign(Delta_k)      (Algorithm 3, step 5)
server:  theta = mean_{k in P} theta_k + mean_{all k} lambda_k
         (= the paper's h-state form: h = -(alpha/m) sum_k lambda_k, theta = mean - h/alpha;
          steps 11-12 of Algorithm 3 with the sign terms inside lambda_k)
config:  alpha is `algorithm.lambda2` (FedElasticNet's name); `algorithm.alpha`, FedDyn's, is its alias
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from fedrepro.algorithms.base import Algorithm, AlgorithmConfig, LocalObjective, alias, param, threshold
from fedrepro.algorithms.registry import register

TRANSMITS = ("model", "update")


@dataclass
class FedDynConfig(AlgorithmConfig):
    """FedDyn; with lambda1 / epsilon and transmit=update, FedElasticNet Algorithm 3."""

    name: str = "feddyn"
    lambda1: float = param(0.0, range=">= 0")
    lambda2: float = param(1e-2, range="> 0")  # the dynamic regularizer's weight (FedDyn's alpha)
    epsilon: float = param(0.0, range=">= 0")
    # model (theta_k, as published) | update (Delta_k)
    transmit: str = param("model", choices=TRANSMITS)
    alpha: Optional[float] = alias("lambda2", range="> 0")  # FedDyn's name of lambda2


@register("feddyn", "fen_alg3", config=FedDynConfig)
class FedDyn(Algorithm):
    name = "feddyn"
    state_fields = ("memory",)  # lambda_k, with theta
    upload_state = {"delta": "memory", "model": "memory"}  # lambda_k += Delta_k, sent as update or model
    weighted_mean = False

    def __init__(self, alpha: float, lambda1: float = 0.0, epsilon: float = 0.0, transmit: str = "model"):
        self.alpha, self.lambda1, self.epsilon, self.transmit = alpha, lambda1, epsilon, transmit

    def setup(self, fed, theta0):
        super().setup(fed, theta0)
        self.memory = torch.zeros(fed.num_clients, fed.dim, dtype=theta0.dtype, device=theta0.device)
        self.alpha_k = (self.alpha * fed.client_sizes.mean() / fed.client_sizes).tolist()

    def local_objective(self, k, received):
        a = self.alpha_k[k]
        return LocalObjective(anchor=received["model"], l1=self.lambda1,
                              linear=a * (self.memory[k] - received["model"]), extra_decay=a)

    def upload(self, k, w, steps, received):
        theta = received["model"]
        delta = threshold(w - theta, self.epsilon)
        step = delta if not self.lambda1 else delta + (self.lambda1 / self.alpha_k[k]) * torch.sign(delta)
        self.memory[k] += step
        return {"model": theta + delta} if self.transmit == "model" else {"delta": delta}

    def aggregate(self, selected, uploads):
        if "model" in uploads:
            mean_selected = uploads["model"].mean(0)
        else:
            mean_selected = self.theta + uploads["delta"].mean(0)
        self.theta = mean_selected + self.memory.mean(0)
