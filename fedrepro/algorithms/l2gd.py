"""Compressed L2GD (Bergou, Burlachenko, Dutta, Richtarik: "Personalized Federated Learning with
Communication Compression", Algorithm 1) and the optimal p of its Theorems 3 and 4.

Problem (1): min over x = (x_1, ..., x_n) of F(x) = f(x) + h(x),
    f(x) = (1/n) sum_i f_i(x_i),   h(x) = (1/n) sum_i (lambda/2) ||x_i - xbar||^2,   xbar = (1/n) sum_i x_i.

One engine round is one iteration k of Algorithm 1, every client taking part (participation=p100):

    xi_k = 1 with probability p (drawn at the server from generator(coin_seed, "l2gd-coin", k);
           xi_{-1} = 1, xbar^{-1} = the mean of the initial models = theta0)
    xi_k = 0:                 x_i <- x_i - eta / (n (1 - p)) grad f_i(x_i)        (local step, no message)
    xi_k = 1, xi_{k-1} = 0:   client i sends C_i(x_i)                            (uplink "model")
                              master: ybar = (1/n) sum_j C_j(x_j), sends C_M(ybar) (downlink "average")
                              x_i <- x_i - eta lambda / (n p) (x_i - C_M(ybar)); clients keep C_M(ybar)
    xi_k = 1, xi_{k-1} = 1:   x_i <- x_i - eta lambda / (n p) (x_i - xbar), xbar the kept C_M(ybar)
                              (no message: Algorithm 1's "xbar^k = xbar^{k-1}")

eta is the round's learning rate (train.lr, decayed by train.lr_decay). C_i is the uplink compressor
(`compressor.name`), C_M the downlink one (`compressor.downlink`), both from the engine's channel.
Engine mapping (docs/l2gd.md): the communication uses the round's first phase (`pre_upload` /
`pre_aggregate`); a local step is one step of the executor (batch train.batch_size; a batch larger
than every client's data gives the paper's full gradient) at the step size `local_lr` returns; an
aggregation step runs zero executor steps from the aggregated point that `local_objective` computes,
so the engine's `latest` (and its "all" model, the data-weighted average) are the x_i.

`weighting=data` is section 7.2's f_i = w_i L_i with w_i = n_i / N (the data gradient of client i is
scaled by w_i); `uniform` (default) is f_i = L_i, problem (1) and section 7.1 as written.
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from typing import Optional, Sequence

import torch
from omegaconf import II

from fedrepro.algorithms.base import Algorithm, AlgorithmConfig, LocalObjective, LocalRule, Personalized, param
from fedrepro.algorithms.registry import register
from fedrepro.errors import ConfigError
from fedrepro.seeding import generator

WEIGHTINGS = ("uniform", "data")


@dataclass
class L2GDConfig(AlgorithmConfig):
    """Compressed L2GD (Algorithm 1 of the L2GD paper; docs/l2gd.md). One round = one iteration,
    every client every round (participation=p100); eta = train.lr; C_i = compressor.name,
    C_M = compressor.downlink."""

    name: str = "l2gd"
    # probability of an aggregation step (xi_k = 1)
    p: float = param(0.65, range="(0, 1)", note="the probability of an aggregation step "
                                                "(p = 1 never trains locally, p = 0 never aggregates)")
    lam: float = param(10.0, range=">= 0")  # lambda of problem (1): h = (1/n) sum lambda/2 ||x_i - xbar||^2
    # uniform (f_i = L_i, problem (1)) | data (section 7.2: f_i = n_i/N L_i)
    weighting: str = param("uniform", choices=WEIGHTINGS)
    coin_seed: int = II("seed")  # the coins xi_k come from generator(coin_seed, "l2gd-coin", k); any value


class _ScaledGradient(LocalRule):
    """The data gradient times a constant (section 7.2's f_i = w_i L_i)."""

    num_blocks = None

    def __init__(self, scale: float):
        self.scale = scale

    def direction(self, step, block, w, g, grad_at):
        return g * self.scale


@register("l2gd", config=L2GDConfig)
class L2GD(Algorithm):
    name = "l2gd"
    weighted_mean = True  # the engine's "all" model: the data-weighted average of the x_i (section 7.2)
    upload_state: dict[str, str] = {}  # a client keeps its exact x_i; only the master's average is compressed
    state_fields = ("x", "xbar")  # the coins are a function of (coin_seed, k): nothing to save
    full_participation = "every client in every iteration (Algorithm 1)"
    not_attackable = "clients upload personalized models x_i that no broadcast model anchors"

    def __init__(self, p: float, lam: float, coin_seed: int = 0, weighting: str = "uniform"):
        if not 0 < p < 1:
            raise ConfigError(f"algorithm.p={p} must be in (0, 1): the probability of an aggregation step")
        if lam < 0:
            raise ConfigError(f"algorithm.lam={lam} must be >= 0")
        if weighting not in WEIGHTINGS:
            raise ConfigError(f"algorithm.weighting={weighting!r}; choose one of: {', '.join(WEIGHTINGS)}")
        self.p, self.lam, self.coin_seed, self.weighting = float(p), float(lam), int(coin_seed), weighting

    # -- the coin ---------------------------------------------------------------------------------
    def coin(self, k: int) -> int:
        """xi_k: 1 (aggregation step) with probability p; xi_{-1} = 1 (Algorithm 1's input).
        A pure function of (coin_seed, k): no state, so a resumed run draws the same coins."""
        if k < 0:
            return 1
        u = torch.rand(1, generator=generator(self.coin_seed, "l2gd-coin", k), dtype=torch.float64)
        return int(float(u) < self.p)

    def communicates(self, k: int) -> bool:
        """Iteration k sends messages: an aggregation step right after a local step."""
        return self.coin(k) == 1 and self.coin(k - 1) == 0

    # -- state ------------------------------------------------------------------------------------
    def setup(self, fed, theta0):
        super().setup(fed, theta0)
        n = fed.num_clients
        self.x = theta0.expand(n, -1).clone()  # x_i: the personalized models
        self.xbar = theta0.clone()  # the average the clients hold (xbar^{-1}; then the last C_M(ybar))
        sizes = fed.client_sizes.to(torch.float64)
        self.loss_weights = (sizes / sizes.sum()) if self.weighting == "data" else None
        self.xi, self.talk, self.agg = 1, False, 0.0

    def begin_round(self, t, lr, base_lr):
        super().begin_round(t, lr, base_lr)
        n = self.fed.num_clients
        self.xi = self.coin(t)
        self.talk = self.communicates(t)
        self.agg = lr * self.lam / (n * self.p)  # eta lambda / (n p)

    def local_lr(self, lr: float) -> float:
        """The executor's step size for a local step: eta / (n (1 - p)) (engine hook)."""
        return lr / (self.fed.num_clients * (1 - self.p))

    def local_steps(self, k, own_steps, equal_steps):
        return 0 if self.xi else 1

    def broadcast(self):
        return {}  # nothing goes down before the clients speak (the average goes in the first phase)

    def pre_upload(self, k, received, full_gradient):
        return {"model": self.x[k]} if self.talk else {}

    def pre_aggregate(self, selected, uploads):
        self._check_everyone(selected)
        self.theta = uploads["model"].mean(0)  # ybar = (1/n) sum_j C_j(x_j): the master's model
        return {"average": self.theta}

    def local_objective(self, k, received):
        if not self.xi:  # local step from x_i
            rule = None if self.loss_weights is None else _ScaledGradient(float(self.loss_weights[k]))
            return LocalObjective(anchor=self.x[k], rule=rule)
        if self.talk:
            self.xbar = received["average"]  # C_M(ybar) as decoded; every client decodes the same
        # x_i - a (x_i - xbar); lerp is exact at a = 1 (the aggregation is the average itself)
        return LocalObjective(anchor=torch.lerp(self.x[k], self.xbar.to(self.x.dtype), self.agg))

    def upload(self, k, w, steps, received):
        self.x[k] = w
        return {}

    def aggregate(self, selected, uploads):
        self._check_everyone(selected)

    def _check_everyone(self, selected):
        if len(selected) != self.fed.num_clients:
            raise ConfigError(f"l2gd needs every client in every iteration ({len(selected)} of "
                              f"{self.fed.num_clients} took part): use participation=p100")

    def personalized(self) -> Personalized:
        """The engine's personalized-evaluation hook: the x_i and the c_i of f = (1/n) sum c_i L_i."""
        return Personalized(self.x, self.loss_weights)

    def penalty(self) -> float:
        """h(x) = (1/n) sum_i (lambda/2) ||x_i - xbar||^2 at the current x (exact mean)."""
        mean = self.x.mean(0)
        return float(self.lam / 2 * (self.x - mean).pow(2).sum(1).mean())


# -- Optimal p (section 6, Theorems 3 and 4, Lemma 7; proofs in A.1.4) ---------------------------------
#
# Inputs named as the paper: L = n L_f (L_f the smoothness constant of f on R^{nd}, so L = max_i L_i
# with L_i that of f_i), lambda, n, and alpha = 4 (4 omega + 4 omega_M (1 + omega)) / mu (Lemma 5),
# omega = max_i omega_i the clients' compressors' variance factor, omega_M the master's, mu the strong
# convexity constant of f (= min_i mu_i / n). docs/l2gd.md derives each formula.

CRITERIA = ("rate", "communication")
BOUNDS = ("gamma", "gamma_u", "uncompressed")


def compression_alpha(omega: float, omega_M: float, mu: float) -> float:
    """alpha of Lemma 5: 4 (4 omega + 4 omega_M (1 + omega)) / mu (0 without compression)."""
    if mu <= 0:
        raise ValueError(f"mu={mu} must be > 0 (f is mu-strongly convex)")
    if omega < 0 or omega_M < 0:
        raise ValueError(f"omega={omega}, omega_M={omega_M} must be >= 0 (unbiased compressors)")
    return 4 * (4 * omega + 4 * omega_M * (1 + omega)) / mu


def gamma(p: float, L: float, lam: float, n: int, alpha: float, bound: str = "gamma") -> float:
    """The expected-smoothness constant gamma of Lemma 6 (bound="gamma"), its upper bound gamma_u of
    section 6 ("gamma_u"), or Remark 3's uncompressed gamma = max{L/(n(1-p)), lambda/(np)}."""
    if bound == "uncompressed":
        return max(L / (n * (1 - p)), lam / (n * p))
    comp = alpha * lam ** 2 * (1 - p) / (2 * n ** 2 * p)
    agg = 4 * lam / (n * p) if bound == "gamma_u" else lam / n * (1 + 4 * (1 - p) / p)
    return comp + max(L / (n * (1 - p)), agg)


def communication_cost(p: float, L: float, lam: float, n: int, alpha: float, bound: str = "gamma") -> float:
    """C = p (1 - p) gamma: the communication rounds are proportional to it (section 6)."""
    return p * (1 - p) * gamma(p, L, lam, n, alpha, bound)


def p_e(L: float, lam: float, bound: str = "gamma") -> float:
    """Where the two branches of the max in gamma meet: (7 lam + L - sqrt(lam^2 + 14 lam L + L^2)) / (6 lam)
    (Theorems 3, 4); 4 lam / (L + 4 lam) for gamma_u (Remarks 5, 6); lam / (L + lam) uncompressed."""
    if lam <= 0:
        return 0.0
    if bound == "gamma_u":
        return 4 * lam / (L + 4 * lam)
    if bound == "uncompressed":
        return lam / (L + lam)
    return (7 * lam + L - math.sqrt(lam ** 2 + 14 * lam * L + L ** 2)) / (6 * lam)


def p_A_rate(L: float, lam: float, n: int, alpha: float) -> float:
    """The minimizer in (0, 1) of A(p) = alpha lam^2 / (2 n^2 p) + L / (n (1 - p)) (Theorem 3, Lemma 7):
    sqrt(a) / (sqrt(a) + sqrt(b)), a = alpha lam^2 / (2 n^2), b = L / n; 0 when alpha lam = 0 (A increases).

    Lemma 7 writes the roots of (2nL - alpha lam^2) p^2 + 2 alpha lam^2 p - alpha lam^2 = 0; its cases
    1/2 (2nL = alpha lam^2) and (-2 alpha lam^2 + 2 lam sqrt(2 alpha n L)) / (2 (2nL - alpha lam^2))
    (2nL > alpha lam^2) equal this; its third case, the other root, lies above 1 (docs/l2gd.md): the
    formula above holds in every case."""
    a = alpha * lam ** 2 / (2 * n ** 2)
    b = L / n
    return math.sqrt(a) / (math.sqrt(a) + math.sqrt(b))


def p_A_communication(L: float, lam: float, n: int, alpha: float) -> float:
    """Theorem 4: p_A = 1 - L n / (alpha lam^2), the minimizer of A(p) = alpha lam^2 (1 - p)^2 / (2n) + L p
    (-inf when alpha lam = 0: A increases on [0, 1]). n p (1 - p) gamma gives this A; the proof prints
    + alpha lam^2 p (1 - p) / (2n) where (1 - p)^2 = (1 - p) - p (1 - p) needs a minus (docs/l2gd.md)."""
    if alpha * lam ** 2 == 0:
        return -math.inf
    return 1 - L * n / (alpha * lam ** 2)


def optimal_p(L: float, lam: float, n: int, alpha: float = 0.0, criterion: str = "rate",
              bound: str = "gamma") -> float:
    """p* = max{p_e, p_A}: Theorem 3 (criterion="rate": minimizes gamma, the iteration count) or
    Theorem 4 ("communication": minimizes p (1 - p) gamma, the communication rounds). bound="gamma_u"
    uses Remarks 5 / 6's p_e; "uncompressed" is Remark 3's gamma (alpha must be 0): p* = lam / (L + lam)."""
    if criterion not in CRITERIA:
        raise ValueError(f"criterion={criterion!r}; choose one of {CRITERIA}")
    if bound not in BOUNDS:
        raise ValueError(f"bound={bound!r}; choose one of {BOUNDS}")
    if L <= 0 or n < 1 or lam < 0 or alpha < 0:
        raise ValueError(f"need L > 0, n >= 1, lambda >= 0, alpha >= 0; got L={L}, n={n}, lambda={lam}, alpha={alpha}")
    if bound == "uncompressed":
        if alpha:
            raise ValueError("bound='uncompressed' is Remark 3's gamma, for alpha = 0 (no compression)")
        return p_e(L, lam, bound)
    pa = p_A_rate(L, lam, n, alpha) if criterion == "rate" else p_A_communication(L, lam, n, alpha)
    return max(p_e(L, lam, bound), pa)


def logistic_constants(features: Sequence[torch.Tensor], l2: float) -> tuple[float, float]:
    """(L, mu) of problem (1) for l2-regularized logistic regression (section 7.1): f_i(x) = mean
    log(1 + exp(-b a^T x)) + l2/2 ||x||^2 on client i's rows A_i, so L_i = lambda_max(A_i^T A_i) / (4 n_i)
    + l2 and mu_i = l2; L = n L_f = max_i L_i and mu = min_i mu_i / n (f averages the n blocks)."""
    Ls = [float(torch.linalg.eigvalsh(a.double().T @ a.double())[-1]) / (4 * len(a)) + l2 for a in features]
    return max(Ls), l2 / len(features)


def bits_per_client(frame, n: int, directions: Sequence[str] = ("up", "down")):
    """bits/n of section 7.2: the cumulative wire bits of a run's metrics frame (both directions by
    default), divided by the number of clients n."""
    return sum(frame[f"cum_{d}_wire_bits"] for d in directions) / n


def empirical_optimum(frame, x: str = "p", y: str = "personal_loss", by: Optional[str] = "lam"):
    """The sweep's best x (smallest y) per value of `by` (all rows when None): a frame [by,] x, y."""
    import pandas as pd

    groups = [(None, frame)] if by is None or by not in frame else list(frame.groupby(by))
    rows = []
    for key, g in groups:
        best = g.loc[g[y].idxmin()]
        rows.append({**({} if key is None else {by: key}), f"empirical_{x}": float(best[x]), y: float(best[y])})
    return pd.DataFrame(rows)


def compare_with_sweep(frame, *, L: float, n: int, alpha: float, lam: Optional[float] = None,
                       x: str = "p", y: str = "personal_loss", by: str = "lam", bound: str = "gamma"):
    """Theorems 3 and 4's p* beside the sweep's empirical optimum, one row per lambda of the sweep
    (or the given `lam` when the frame has no `by` column)."""
    by_col = by if by in frame else None
    table = empirical_optimum(frame, x, y, by_col)
    if by_col is None:
        if lam is None:
            raise ValueError(f"the sweep has no {by!r} column: pass lam=")
        table.insert(0, by, float(lam))
    lams = [float(v) for v in table[by]]
    table["p_rate"] = [optimal_p(L, v, n, alpha, "rate", bound) for v in lams]
    table["p_communication"] = [optimal_p(L, v, n, alpha, "communication", bound) for v in lams]
    return table


def main(argv: Optional[Sequence[str]] = None) -> None:
    ap = argparse.ArgumentParser(
        prog="python -m fedrepro.algorithms.l2gd",
        description="The optimal p of compressed L2GD (Theorems 3 and 4), optionally beside a sweep's optimum.")
    ap.add_argument("--L", type=float, required=True, help="L = n L_f = max_i L_i")
    ap.add_argument("--lam", type=float, default=None, help="lambda (else every lambda of the sweep)")
    ap.add_argument("--n", type=int, required=True, help="number of clients")
    ap.add_argument("--alpha", type=float, default=None, help="alpha of Lemma 5 (else from omega, omega-M, mu)")
    ap.add_argument("--omega", type=float, default=0.0, help="clients' compressor variance factor")
    ap.add_argument("--omega-M", type=float, default=0.0, help="master's compressor variance factor")
    ap.add_argument("--mu", type=float, default=None, help="strong convexity of f (needed for alpha > 0)")
    ap.add_argument("--bound", choices=BOUNDS, default="gamma")
    ap.add_argument("--sweep", default=None, help="CSV with columns p, [lam,] and the loss column")
    ap.add_argument("--y", default="personal_loss", help="the sweep's loss column")
    a = ap.parse_args(argv)
    if a.alpha is not None:
        alpha = a.alpha
    elif a.omega == 0 and a.omega_M == 0:
        alpha = 0.0
    elif a.mu is None:
        ap.error("--mu is needed to compute alpha from --omega / --omega-M (or pass --alpha)")
    else:
        alpha = compression_alpha(a.omega, a.omega_M, a.mu)
    if a.sweep is None:
        if a.lam is None:
            ap.error("--lam is needed without --sweep")
        print(f"alpha={alpha:.6g}  p_e={p_e(a.L, a.lam, a.bound):.4f}  "
              f"p*_rate={optimal_p(a.L, a.lam, a.n, alpha, 'rate', a.bound):.4f}  "
              f"p*_communication={optimal_p(a.L, a.lam, a.n, alpha, 'communication', a.bound):.4f}")
        return
    import pandas as pd

    table = compare_with_sweep(pd.read_csv(a.sweep), L=a.L, n=a.n, alpha=alpha, lam=a.lam, y=a.y, bound=a.bound)
    print(f"alpha={alpha:.6g}")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))


if __name__ == "__main__":
    main(sys.argv[1:])
