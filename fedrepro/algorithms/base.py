"""The algorithm interface every method of the four papers is written in.

An algorithm keeps its server and per-client state as flat tensors and answers five
questions, in the order the engine asks them each round:

0. `begin_round()`     the round index and its learning rate;
1. `broadcast()`       what the server sends to every selected client (ledger: downlink);
2. `local_objective()` the terms a client adds to its data loss in local training, and
   `local_steps()`     how many local steps it takes;
3. `upload()`          what a client sends back after local training (ledger: uplink), and
                       the client's own state update, made from what it actually sent;
4. `aggregate()`       how the server combines the uploads it received;
5. `server_model()`    the model the server holds (evaluated as "server").

The engine owns client sampling, local SGD, the ledger, evaluation and checkpoints; an
algorithm never counts its own communication.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch


@dataclass
class LocalObjective:
    """Terms added to a client's data loss L_k(w) during local training.

    Gradient seen by the local step (before clipping, as in FedDyn's code where these
    terms are part of the loss):
        grad L_k(w) + prox_mu (w - anchor) + l1 sign(w - anchor) + linear
    then, after clipping, (weight_decay + extra_decay) * w is added (FedDyn carries the
    alpha * w part of its penalty in the optimizer's weight decay).
    """

    anchor: torch.Tensor  # the point the penalties refer to: the received server model
    prox_mu: float = 0.0
    l1: float = 0.0
    linear: Optional[torch.Tensor] = None
    extra_decay: float = 0.0
    start: Optional[torch.Tensor] = None  # where local training starts (None: the anchor)

    def gradient(self, w: torch.Tensor) -> Optional[torch.Tensor]:
        """The penalty part of the gradient at w (None when there is none)."""
        g = None
        if self.prox_mu:
            g = self.prox_mu * (w - self.anchor)
        if self.l1:
            s = self.l1 * torch.sign(w - self.anchor)
            g = s if g is None else g + s
        if self.linear is not None:
            g = self.linear if g is None else g + self.linear
        return g


def threshold(delta: torch.Tensor, epsilon: float) -> torch.Tensor:
    """FedElasticNet's sparsification of what is sent: entries with |x| <= epsilon become 0.

    epsilon = 0 returns the input untouched (bit for bit, signed zeros included)."""
    if not epsilon:
        return delta
    return torch.where(delta.abs() <= epsilon, torch.zeros_like(delta), delta)


@dataclass
class Federation:
    """What an algorithm may know about the federation."""

    num_clients: int
    dim: int
    client_sizes: torch.Tensor  # (m,) float: n_k


class Algorithm:
    name = "base"
    # How "the mean of clients' models" is weighted in evaluation: FedDyn's code weights by
    # data size for FedAvg/FedProx and uniformly for FedDyn and SCAFFOLD.
    weighted_mean = True

    def setup(self, fed: Federation, theta0: torch.Tensor) -> None:
        self.fed = fed
        self.theta = theta0.clone()
        self.round, self.lr, self.base_lr = 0, 0.0, 0.0

    def begin_round(self, t: int, lr: float, base_lr: float) -> None:
        """Round t (0-based) starts; local steps use `lr` (the undecayed rate is `base_lr`)."""
        self.round, self.lr, self.base_lr = t, lr, base_lr

    def local_steps(self, k: int, own_steps: int, equal_steps: int) -> int:
        """Local steps of client k: `own_steps` = epochs over its own data (FedAvg, FedDyn);
        `equal_steps` = the same for a client of mean size, for methods with a fixed K."""
        return own_steps

    def server_model(self) -> torch.Tensor:
        return self.theta

    def broadcast(self) -> dict[str, torch.Tensor]:
        return {"model": self.theta}

    def local_objective(self, k: int, received: dict[str, torch.Tensor]) -> LocalObjective:
        return LocalObjective(anchor=received["model"])

    def upload(self, k: int, w: torch.Tensor, steps: int, received: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Client k's message after `steps` local steps ended at `w` (and its state update)."""
        raise NotImplementedError

    def aggregate(self, selected: torch.Tensor, uploads: dict[str, torch.Tensor]) -> None:
        """`uploads[name]` is (len(selected), d): the messages as the server received them."""
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {"theta": self.theta}

    def load_state_dict(self, state: dict) -> None:
        self.theta = state["theta"].clone()

    def client_weights(self, clients: torch.Tensor) -> torch.Tensor:
        """Averaging weights over `clients` (sum to 1) for the evaluated client means."""
        if self.weighted_mean:
            n = self.fed.client_sizes[clients]
            return n / n.sum()
        return torch.full((len(clients),), 1.0 / len(clients))
