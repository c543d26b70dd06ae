"""FedSaga (LoSAC Alg. 1), LoSAC (Alg. 2), LoSAC-Prox (Sec. III-C) and MimeSVRG (Mime with the
SVRG correction, Karimireddy et al.). docs/losac.md gives the derivations and choices.

Client i's data is cut into M fixed blocks (the paper's "local data division", Remark 1);
b_ij(w) is block j's mean-loss gradient, y (N, M, d) the stored block gradients (zero at the
start, phi = 0 with them). One local step on client i with block j drawn uniformly, g = b_ij(w):

scaling=consistent (default; objective f = (1/N) sum_i (1/M) sum_j f_ij, f_ij a block-mean loss)
  FedSaga  d = g - y_ij + ybar_i            ybar_i += (g - y_ij) / M       (ybar_i = mean_j y_ij)
  LoSAC    d = g - y_ij + phi_i             phi_i  += (g - y_ij) / (N M)   (phi = mean of all y)
           then y_ij = g;  w <- prox(w - lr d)
  server   x += mean_{i in S} Delta x_i;  LoSAC: phi += sum_{i in S} Delta phi_i (exact table mean)
scaling=literal (eqs. (9), (11), (13) as printed, block = component, n_i -> M)
  FedSaga  d = M g - M y_ij + sum_j y_ij    (y_ij = g)
  LoSAC    G = M g;  d = phi_i / N - y_ij + G;  phi_i += G - y_ij;  y_ij = G
  server   x += (1/N) sum_{i in S} Delta x_i;  LoSAC: phi += (N/|S|) sum_{i in S} Delta phi_i
MimeSVRG   phase 1: selected clients send grad f_i(x) (full batch), c = their mean comes back;
           local d = b_ij(w) - b_ij(x) + c;  server x += mean_{i in S} Delta x_i
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Optional

import torch

from fedrepro.algorithms.base import Algorithm, AlgorithmConfig, LocalObjective, LocalRule, param
from fedrepro.algorithms.prox import PROX_KINDS, check_prox_config, make_prox
from fedrepro.algorithms.registry import register
from fedrepro.errors import ConfigError

SCALINGS = ("consistent", "literal")  # the choices of algorithm.scaling (docs/losac.md)
log = logging.getLogger(__name__)


@dataclass
class FedSagaConfig(AlgorithmConfig):
    """LoSAC Algorithm 1: local SAGA over M fixed data blocks (docs/losac.md)."""

    name: str = "fedsaga"
    blocks: int = param(5, range=">= 1")  # M: blocks per client = stored gradients per client
    # consistent (docs/losac.md) | literal (eq. (9) and x += 1/N sum as printed)
    scaling: str = param("consistent", choices=SCALINGS)


@dataclass
class LosacConfig(AlgorithmConfig):
    """LoSAC Algorithm 2; with prox != none, LoSAC-Prox (Sec. III-C)."""

    name: str = "losac"
    blocks: int = param(5, range=">= 1")
    scaling: str = param("consistent", choices=SCALINGS)  # consistent | literal (eqs. (11), (13) as printed)
    prox: str = param("none", choices=PROX_KINDS)  # none | l1 | nuclear
    prox_weight: float = param(0.0, range=">= 0")
    prox_shape: Optional[list[int]] = param(None)


@dataclass
class MimeSVRGConfig(AlgorithmConfig):
    """Mime with the SVRG correction: full gradients at x first, then local steps."""

    name: str = "mimesvrg"
    # M fixed blocks as the step's batch; null: train.batch_size batches
    blocks: Optional[int] = param(5, range=">= 1", null="train.batch_size batches")


class SagaRule(LocalRule):
    """One client's SAGA walk over its block table, in the common form
        G = s g;  d = c (a m - y_j + G);  m += u (G - y_j);  y_j = G
    (m: the running mean / sum the correction uses, updated in place)."""

    def __init__(self, table: torch.Tensor, mean: torch.Tensor, *, s=1.0, a=1.0, c=1.0, u=1.0):
        self.num_blocks = table.shape[0]
        self.table, self.mean, self.s, self.a, self.c, self.u = table, mean, s, a, c, u

    def direction(self, step, block, w, g, grad_at):
        new = g * self.s if self.s != 1 else g
        old = self.table[block]
        d = (self.a * self.mean if self.a != 1 else self.mean) - old + new
        if self.c != 1:
            d = self.c * d
        self.mean += self.u * (new - old)  # uses the old y_ij, as (9) / (11) in order
        self.table[block] = new
        return d


class SvrgRule(LocalRule):
    """Mime's SVRG correction: d = b_j(w) - b_j(x) + c, x the round's server model."""

    def __init__(self, x: torch.Tensor, c: torch.Tensor, num_blocks: Optional[int]):
        self.x, self.c, self.num_blocks = x, c, num_blocks

    def direction(self, step, block, w, g, grad_at):
        return g - grad_at(self.x) + self.c


class _BlockTable(Algorithm):
    """Shared by FedSaga and LoSAC: the (N, M, d) table y, scalings, the optional prox."""

    weighted_mean = False  # the objective (6) weights clients uniformly
    per_step_rule = True  # SAGA's direction (a LocalRule) in every local step
    state_fields = ("y",)

    @classmethod
    def check_config(cls, params):
        check_prox_config(params)

    def __init__(self, blocks: int = 5, scaling: str = "consistent", prox: str = "none",
                 prox_weight: float = 0.0, prox_shape=None):
        if scaling not in SCALINGS:
            raise ConfigError(f"algorithm.scaling={scaling!r}; choose one of {SCALINGS}")
        if blocks < 1:
            raise ConfigError(f"algorithm.blocks={blocks} must be >= 1")
        self.blocks, self.scaling = int(blocks), scaling
        self.prox_shape = None if prox_shape is None else tuple(int(v) for v in prox_shape)
        self.prox = None if prox == "none" else make_prox(prox, prox_weight, self.prox_shape)
        self._rules: dict[int, SagaRule] = {}

    def setup(self, fed, theta0):
        super().setup(fed, theta0)
        if self.prox_shape is not None and self.prox_shape[0] * self.prox_shape[1] != fed.dim:
            raise ConfigError(f"algorithm.prox_shape={list(self.prox_shape)} has "
                              f"{self.prox_shape[0] * self.prox_shape[1]} entries; the model has {fed.dim}")
        shape = (fed.num_clients, self.blocks, fed.dim)
        need = shape[0] * shape[1] * shape[2] * theta0.element_size()
        log.info("%s stores y of shape %s: %.3g GB", self.name, shape, need / 1e9)
        try:
            self.y = torch.zeros(shape, dtype=theta0.dtype, device=theta0.device)
        except (RuntimeError, MemoryError) as exc:  # say what was asked for, not only "out of memory"
            raise ConfigError(f"{self.name}: the stored block gradients y (N, M, d) = {shape} need "
                              f"{need / 1e9:.3g} GB on {theta0.device}, which could not be allocated: "
                              f"lower algorithm.blocks or train.num_clients") from exc

    def local_steps(self, k, own_steps, equal_steps):
        return equal_steps  # the paper's fixed T local iterations (train.local_steps)

    def _move(self, delta: torch.Tensor) -> torch.Tensor:
        """The server's step from the selected clients' (|S|, d) updates."""
        if self.scaling == "literal":
            return delta.sum(0) / self.fed.num_clients
        return delta.mean(0)

    def upload(self, k, w, steps, received):
        self._rules.pop(k, None)
        return {"delta": w - received["model"]}

    def aggregate(self, selected, uploads):
        self.theta = self.theta + self._move(uploads["delta"])


@register("fedsaga", config=FedSagaConfig)
class FedSaga(_BlockTable):
    name = "fedsaga"

    def local_objective(self, k, received):
        table = self.y[k]
        literal = self.scaling == "literal"
        # ybar_i (consistent) / sum_j y_ij (literal) of the client's own table: FedSaga's local correction
        mean = table.mean(0) if not literal else table.sum(0)
        m = self.blocks
        rule = SagaRule(table, mean, c=m if literal else 1.0, a=1.0 / m if literal else 1.0,
                        u=1.0 if literal else 1.0 / m)
        return LocalObjective(anchor=received["model"], rule=rule, prox=self.prox)


@register("losac", config=LosacConfig)
# losac_prox keeps the run keys it had before this registry, whose list of per-step-rule names
# missed it: on the batched models they name the batched executor, which runs every job that has
# a LocalRule through its sequential path, so the numbers are the sequential executor's anyway
@register("losac_prox", config=LosacConfig, per_step_rule=False)
class LoSAC(_BlockTable):
    name = "losac"
    state_fields = ("phi",)

    def setup(self, fed, theta0):
        super().setup(fed, theta0)
        self.phi = torch.zeros_like(theta0)  # = the mean (consistent) / sum (literal) of y

    def broadcast(self):
        return {"model": self.theta, "phi": self.phi}

    def local_objective(self, k, received):
        n, m = self.fed.num_clients, self.blocks
        phi_k = received["phi"].clone()
        if self.scaling == "literal":
            rule = SagaRule(self.y[k], phi_k, s=m, a=1.0 / n)
        else:
            rule = SagaRule(self.y[k], phi_k, u=1.0 / (n * m))
        self._rules[k] = rule
        return LocalObjective(anchor=received["model"], rule=rule, prox=self.prox)

    def upload(self, k, w, steps, received):
        rule = self._rules.pop(k)
        return {"delta": w - received["model"], "delta_phi": rule.mean - received["phi"]}

    def aggregate(self, selected, uploads):
        self.theta = self.theta + self._move(uploads["delta"])
        dphi = uploads["delta_phi"].sum(0)
        if self.scaling == "literal":
            dphi = dphi * (self.fed.num_clients / len(selected))
        self.phi = self.phi + dphi


@register("mimesvrg", config=MimeSVRGConfig)
class MimeSVRG(Algorithm):
    name = "mimesvrg"
    weighted_mean = False  # Mime averages the selected clients' models uniformly
    per_step_rule = True  # the SVRG correction (a LocalRule) in every local step

    def __init__(self, blocks: Optional[int] = 5):
        self.blocks = blocks

    def local_steps(self, k, own_steps, equal_steps):
        return equal_steps

    def pre_upload(self, k, received, full_gradient):
        return {"full_gradient": full_gradient(received["model"])}

    def pre_aggregate(self, selected, uploads):
        return {"correction": uploads["full_gradient"].mean(0)}

    def local_objective(self, k, received):
        x = received["model"]
        return LocalObjective(anchor=x, rule=SvrgRule(x, received["correction"], self.blocks))

    def upload(self, k, w, steps, received):
        return {"delta": w - received["model"]}

    def aggregate(self, selected, uploads):
        self.theta = self.theta + uploads["delta"].mean(0)
