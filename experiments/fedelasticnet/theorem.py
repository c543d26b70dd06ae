"""REV-R2-2 (review 2, item 2): Theorem 3.1's extra term grows with lambda1^2 d; simulated on a
convex heterogeneous problem (beyond the paper).

    python -m experiments fen theorem --profile paper [--seeds 3]

The problem: FedDyn Table 6's synthetic multiclass logistic regression (App. A.1.1) with Type 1
heterogeneity (each device its own labelling model, so the pooled problem has a finite minimizer),
20 devices of 200 samples, 10 %, FedDyn's Table 6 recipe (experiments/feddyn/settings.py: lr 0.1,
10 epochs, batch 10, alpha 0.01, 1 000 rounds at paper) with weight decay 0 (the theorem's R has
no regularizer), at two model sizes: 30 and 300 features (d = 155 and 1 505 parameters).
Algorithm 3 runs with FedDyn's alpha as lambda2, epsilon 0 (the theorem has no threshold) and
lambda1 in {0, 1e-6, 1e-4, 1e-2}; FedDyn beside it. Every round is evaluated.

gap = R(gamma) - R(theta*), R the pooled training loss, gamma the mean of all clients' models
(the theorem's gamma^t; the runs' all_train_loss), averaged over the last 10 % of the rounds (the
theorem bounds the time average); theta* minimizes R, found by L-BFGS in float64 on the pooled
training data. Writes <results-root>/tables/fedelasticnet_theorem.{md,csv} and its claims file.
"""
from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import pandas as pd
import torch

from experiments.feddyn.settings import run_overrides as feddyn_overrides
from experiments.fedelasticnet.common import tail_mean
from experiments.fedelasticnet.figures import report_claims
from fedrepro.reports.grid import Cell, every_round
from fedrepro.reports.tables import markdown_grid
from fedrepro.results import run_metrics

LAMBDA1 = (0.0, 1e-6, 1e-4, 1e-2)
FEATURES = (30, 300)


def base_overrides(features: int, profile: str) -> list[str]:
    table6 = feddyn_overrides("synthetic", "natural", 0.1, 20, "balanced", "feddyn", setting="Type 1 Heterogeneous")
    return [*table6, "train.weight_decay=0", f"dataset.num_features={features}", *every_round(profile)]


def theorem_cells(args, scale: dict) -> list[Cell]:
    cells = []
    for f in scale.get("features", FEATURES):
        base = base_overrides(f, args.profile)
        cells.append(Cell({"features": f, "algorithm_key": "feddyn", "lambda1": math.nan}, base))
        alpha = next(o.split("=", 1)[1] for o in base if o.startswith("algorithm.alpha="))
        for lam in LAMBDA1:
            alg3 = [o for o in base if not o.startswith("algorithm")] + [
                "algorithm=fen_alg3", f"algorithm.alpha={alpha}", f"algorithm.lambda1={lam}", "algorithm.epsilon=0"]
            cells.append(Cell({"features": f, "algorithm_key": "fen_alg3", "lambda1": lam}, alg3))
    return cells


@lru_cache(maxsize=None)
def optimum(data_overrides: tuple[str, ...], data_root: str) -> tuple[float, int]:
    """(R(theta*), d): the pooled training loss's minimum by L-BFGS (float64) on the data these
    dataset= overrides make (every cell of one model size shares it: solved once)."""
    from fedrepro.config import compose_config
    from fedrepro.data.loaders import dataset_for

    data = dataset_for(compose_config([f"data_root={data_root}", *data_overrides]))
    x, y = data.x_train.double().flatten(1), data.y_train
    w = torch.zeros(x.shape[1] + 1, data.num_classes, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([w], lr=1, max_iter=5000, tolerance_grad=1e-12, tolerance_change=1e-15,
                            history_size=50, line_search_fn="strong_wolfe")

    def loss():
        opt.zero_grad()
        value = torch.nn.functional.cross_entropy(x @ w[:-1] + w[-1], y)
        value.backward()
        return value

    opt.step(loss)
    with torch.no_grad():
        return float(torch.nn.functional.cross_entropy(x @ w[:-1] + w[-1], y)), int(w.numel())


def tail_loss(run) -> float:
    """R(gamma) averaged over the evaluations in the last 10 % of the rounds."""
    return tail_mean(run_metrics(run.folder), "all_train_loss")


def theorem_frame(cells: list[Cell], status: pd.DataFrame, runs: dict, data_root: str) -> pd.DataFrame:
    rows = []
    for i, c in enumerate(cells):
        st = status.iloc[i]
        done = [r for r in runs.get(i, []) if r.summary["status"] == "finished"] if st["status"] == "ok" else []
        data = tuple(o for o in c.overrides if o.startswith("dataset"))
        r_star, d = optimum(data, data_root) if done else (math.nan, 0)
        rows.append({**c.keys, "status": st["status"], "reason": st["reason"], "d": d, "r_star": r_star,
                     "gap": [tail_loss(r) - r_star for r in done]})
    return pd.DataFrame(rows)


def render(results) -> int:
    args = results.options
    cells = theorem_cells(args, results.scale)
    status, runs = results.measure(cells)
    ours = theorem_frame(cells, status, runs, args.data_root)
    out = Path(args.results_root) / "tables"
    out.mkdir(parents=True, exist_ok=True)
    ours.to_csv(out / "fedelasticnet_theorem.csv", index=False)
    lines = [[r.features, r.d or "", r.algorithm_key, "" if math.isnan(r.lambda1) else f"{r.lambda1:g}",
              f"{r.r_star:.6g}" if r.gap else "", "; ".join(f"{g:.3e}" for g in r.gap) or f"{r.status}: {r.reason}"]
             for r in ours.itertuples()]
    text = (f"# FedElasticNet Theorem 3.1 simulated (review 2, item 2), profile={args.profile}, seeds "
            f"0..{args.seeds - 1}\n\nFedDyn Table 6's synthetic logistic problem, Type 1 heterogeneity, 20 devices, "
            "10 %, weight decay 0; Algorithm 3 with FedDyn's alpha, epsilon 0. gap = R(mean of all clients' models) - "
            "R(theta*), R the pooled training loss averaged over the last 10 % of the rounds, theta* by L-BFGS "
            "(float64), per seed.\n\n"
            + markdown_grid(["features", "d", "algorithm", "lambda1", "R(theta*)", "gap per seed"], lines,
                            right_align={0, 1, 3, 4}) + "\n")
    (out / "fedelasticnet_theorem.md").write_text(text)
    print(text)
    report_claims(["REV-R2-2"], ours, out / "fedelasticnet_theorem_claims.md", args.profile)
    return 0
