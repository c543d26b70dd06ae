"""FedSplit (Pathak & Wainwright 2020, Peaceman-Rachford splitting) with the two
partial-participation variants of FedDyn's appendix A.4.

state:   server x (d,); per client z_k (m, d) = x0
local:   z_k^{t+1/2} = prox_{s L_k}(2 x - z_k)   (SGD on L_k(u) + 1/(2s) ||u - (2x - z_k)||^2,
                                                 started at 2x - z_k)
client:  z_k^{t+1} = z_k + 2 (z_k^{t+1/2} - x)   (inactive clients keep z_k frozen)
upload:  z_k^{t+1}
server:  x = mean of every client's z_k (server=all, "FedSplit All") or of the round's
         active clients (server=act, "FedSplit Act"); identical under full participation.
"""
from __future__ import annotations

from dataclasses import dataclass

from fedrepro.algorithms.base import Algorithm, AlgorithmConfig, LocalObjective, param
from fedrepro.algorithms.registry import register

SERVERS = ("act", "all")


@dataclass
class FedSplitConfig(AlgorithmConfig):
    name: str = "fedsplit"
    step: float = param(1.0, range="> 0")  # s of prox_{s L_k}
    # act (mean of active clients) | all (mean of every client)
    server: str = param("act", choices=SERVERS)


@register("fedsplit", config=FedSplitConfig)
class FedSplit(Algorithm):
    name = "fedsplit"
    upload_state = {"z": "z"}  # z_k is the message
    state_fields = ("z",)
    not_attackable = "clients upload their splitting variables z_i, not models or gradients"
    weighted_mean = False

    def __init__(self, step: float, server: str = "act"):
        self.step, self.server = step, server

    def setup(self, fed, theta0):
        super().setup(fed, theta0)
        self.z = theta0.expand(fed.num_clients, -1).clone()

    def local_objective(self, k, received):
        reflected = 2 * received["model"] - self.z[k]
        return LocalObjective(anchor=reflected, prox_mu=1.0 / self.step, start=reflected)

    def upload(self, k, w, steps, received):
        self.z[k] = self.z[k] + 2 * (w - received["model"])
        return {"z": self.z[k].clone()}

    def aggregate(self, selected, uploads):
        self.theta = self.z.mean(0) if self.server == "all" else uploads["z"].mean(0)
