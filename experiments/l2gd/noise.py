"""L2G-S7-1 (Sec. 7.2.1): "L2GD's objective is very noisy when eta lambda / (n p) is between 0.5
and 0.95", measured on a DNN that trains in minutes here (beyond the paper's figures).

    python -m experiments l2gd noise --profile paper [--seeds 3]

The network: the MNIST MLP (784-200-200-10, two hidden layers), the claim's "any DNN run" (the
paper's ResNet-18 costs hours a run here). The setting is the CIFAR recipes' (settings.CifarRecipe)
with MNIST in place of CIFAR-10: 10 clients, Dirichlet 0.5 with equal sizes, full participation,
uncompressed L2GD with p = 0.2 and an effective local step 0.1 on L_i (eta = 8), batch 256,
constant eta, no weight decay or clipping; only the aggregation weight a = eta lambda / (n p)
moves, over the claim's five values (lambda = a n p / eta). Rounds (= iterations): 300 at paper
(ours: the paper's DNN runs are 12 000-25 000 iterations), the profile's cap below; every round
evaluated, the training loss on 10 000 samples (as profile=quick does) and the test metrics on 2 000
(unused here): the evaluation is most of a round. The noise of a run: the standard deviation of its training loss f (n x personal_loss,
cifar.curve) over the last 10 % of the rounds; the claim compares the seeds' mean std of the
noisy values (0.5, 0.75, 0.95) with twice that of the calm ones (0.1, 1), with 95 % intervals.
Writes <results-root>/tables/l2gd_noise.{md,csv} and its claims file.
"""
from __future__ import annotations

from dataclasses import replace

import pandas as pd

from experiments.l2gd import settings
from experiments.l2gd.cifar import curve
from experiments.l2gd.claims import CHECKS
from experiments.l2gd.common import fmt, tables_dir
from fedrepro.reports.claims import evaluate_claims, write_claims
from fedrepro.reports.grid import Cell, every_round, mean_interval
from fedrepro.reports.tables import markdown_grid

AGGREGATION = (0.1, 0.5, 0.75, 0.95, 1.0)  # the claim's values of eta lambda / (n p)
RECIPE = settings.CifarRecipe("mlp_mnist", 300)  # p 0.2, local step 0.1, 10 clients; agg set per cell


def overrides(agg: float, profile: str, dataset: str = "mnist") -> list[str]:
    r = replace(RECIPE, agg=agg)
    return [f"dataset={dataset}", "model=mlp_mnist", "split=dirichlet", f"split.alpha={r.alpha}", "split.balance=balanced",
            f"train.num_clients={r.num_clients}", "participation=p100", f"train.rounds={RECIPE.rounds}",
            "train.batch_size=256", "train.lr_decay=1", "train.weight_decay=0", "train.clip_norm=null",
            "train.eval_every=1", *every_round(profile), "profile.max_train_eval_samples=10000",
            "profile.max_test_samples=2000", "algorithm=l2gd", f"algorithm.p={r.p}",
            f"algorithm.lam={r.lam}", "algorithm.weighting=data", f"train.lr={r.eta}"]


def cells(options, scale: dict) -> list[Cell]:
    return [Cell({"agg": a}, overrides(a, options.profile, scale.get("dataset", "mnist"))) for a in AGGREGATION]


def tail_std(run) -> float:
    """Standard deviation of the training loss f over the last 10 % of the rounds run."""
    c = curve(run, "l2gd", RECIPE.num_clients)
    last = int(c["round"].max())
    return float(c[c["round"] > 0.9 * last]["train_loss"].std())


def frame(cell_list: list[Cell], status: pd.DataFrame, runs: dict) -> pd.DataFrame:
    rows = []
    for i, c in enumerate(cell_list):
        st = status.iloc[i]
        done = [r for r in runs.get(i, []) if r.summary["status"] == "finished"] if st["status"] == "ok" else []
        stds = [tail_std(r) for r in done]
        mean, lo, hi = mean_interval(stds) if stds else (float("nan"),) * 3
        rows.append({"agg": c.keys["agg"], "status": st["status"], "reason": st["reason"], "n_seeds": len(stds),
                     "std_per_seed": stds, "std_mean": mean, "std_lo": lo, "std_hi": hi,
                     "rounds": int(done[0].summary["rounds_completed"]) if done else 0,
                     "lam": replace(RECIPE, agg=c.keys["agg"]).lam})
    return pd.DataFrame(rows)


def render(results) -> int:
    args = results.options
    cell_list = cells(args, results.scale)
    status, runs = results.measure(cell_list)
    ours = frame(cell_list, status, runs)
    out = tables_dir(args.results_root)
    ours.to_csv(out / "l2gd_noise.csv", index=False)
    lines = [[f"{r.agg:g}", f"{r.lam:g}", r.rounds, "; ".join(fmt(v) for v in r.std_per_seed),
              (f"{fmt(r.std_mean)} [{fmt(r.std_lo)}, {fmt(r.std_hi)}]" if r.std_mean == r.std_mean else "-")
              if r.n_seeds else f"{r.status}: {r.reason}"]
             for r in ours.itertuples()]
    text = (f"# L2GD: noise of the objective against eta lambda / (n p), profile={args.profile}, seeds "
            f"0..{args.seeds - 1}\n\nMNIST MLP (a DNN stand-in for the paper's ResNet-18), 10 clients, Dirichlet 0.5, "
            f"p = {RECIPE.p:g}, eta = {RECIPE.eta:g} (effective local step {RECIPE.local_step:g}), batch 256, "
            "uncompressed; std = standard deviation of the training loss f over the last 10 % of the rounds, "
            "every round evaluated.\n\n"
            + markdown_grid(["eta lambda / (n p)", "lambda", "rounds", "std per seed", "mean std [95 %]"], lines,
                            right_align={0, 1, 2}) + "\n")
    (out / "l2gd_noise.md").write_text(text)
    print(text)
    print(write_claims(out / "l2gd_noise_claims.md", evaluate_claims(["L2G-S7-1"], ours, checks=CHECKS),
                       f"Claims on our numbers (L2G-S7-1), profile={args.profile}:"))
    return 0
