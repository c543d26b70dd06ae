"""LoSAC Figure 7: low-rank matrix estimation, LoSAC-Prox vs SCAFFOLD-Prox, error and rank per round.

The recovery error ||X - X_G||_F (top row) and rank(X) (singular values > 1e-3, bottom row) of
the server matrix against the round, one column per rank(X_G) in {32, 16, 8, 4, 2}.

    python -m experiments losac fig7 [--profile paper] [--ranks 32,8]

Sec. V-E: d = 64, D_j ~ N(0.1, 1), y_j = <X_G, D_j> + N(0, 0.1), (N, S) = (100, 10), M = 5,
nuclear-norm prox after every local step. The paper's step size does not carry over and its
lambda is not given: both methods use the lr and lambda of settings.FIG7 (named in the
outputs). The rounds run in this process (experiments/losac/common.py, the seeds of a stored
run of the same config) so the metrics of every round are at hand; seed 0 only. The profile
caps the rounds (quick: 100, smoke: 3) and the claims are then "not evaluated": the rule is
about the final round of the planned run (settings.FIG7.rounds = 500, profile paper, about
ten minutes on one core). Writes <results-root>/figures/losac_fig7.{png,csv,md} and
losac_fig7_claims.md.
"""
from __future__ import annotations

import dataclasses
import logging
import time

import pandas as pd

from experiments.losac import settings
from experiments.losac.claims import CHECKS
from experiments.losac.common import build_loop
from fedrepro.config import compose_config
from fedrepro.data.loaders import dataset_options
from fedrepro.data.synthetic import load_lowrank, recovery_metrics
from fedrepro.errors import DivergenceError
from fedrepro.reports.claims import evaluate_claims, write_claims
from fedrepro.reports.figures import figure_dir, panel_grid
from fedrepro.reports.grid import refuse_done_only
from fedrepro.reports.tables import markdown_grid

# not __name__: experiments.* is outside the `fedrepro` loggers that reports.cli sets up
log = logging.getLogger("fedrepro.experiments")

CLAIMS = ("LSC-F7-1", "LSC-F7-2", "LSC-F7-3")
NAME = "losac_fig7"


def config(recipe: settings.LowRankRecipe, method: str, rank: int, args):
    return compose_config([*recipe.overrides(method, rank), f"train.eval_every={recipe.rounds}",
                           f"profile={args.profile}", "seed=0", f"data_root={args.data_root}",
                           f"results_root={args.results_root}"])


def run_one(cfg, data) -> tuple[list[dict], str, str]:
    """Every round's recovery error and rank of the server matrix; (curve, status, reason)."""
    fed = build_loop(cfg, data=data)
    x_g = data.meta["X_G"]
    curve = [{"round": 0, **recovery_metrics(fed.algorithm.server_model(), x_g)}]
    try:
        for t in range(fed.eff.rounds):
            fed.loop.run_round(t)
            curve.append({"round": t + 1, **recovery_metrics(fed.algorithm.server_model(), x_g)})
    except DivergenceError as exc:
        return curve, "diverged", str(exc).split(":")[0]
    return curve, "ok", ""


def draw(curves: pd.DataFrame, ranks: list[int], path, title: str) -> None:
    fig, axes = panel_grid(2, len(ranks), (3.4, 3.0), dpi=120)
    for col, rank in enumerate(ranks):
        top, bottom = axes[0][col], axes[1][col]
        for method in settings.FIG7_METHODS:
            c = curves[(curves["rank_true"] == rank) & (curves.method == method)]
            if len(c):
                top.plot(c["round"], c["error"], label=settings.FIG7_LABELS[method])
                bottom.plot(c["round"], c["rank"], label=settings.FIG7_LABELS[method])
        bottom.axhline(rank, color="grey", linestyle=":", linewidth=1, label=f"rank(X_G) = {rank}")
        top.set_yscale("log")
        top.set_title(f"rank(X_G) = {rank}", fontsize="medium")
        top.set_ylabel("||X - X_G||_F")
        bottom.set_ylabel("rank(X) (s > 1e-3)")
        bottom.set_xlabel("round")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
        if col == 0:
            top.legend(fontsize="small")
            bottom.legend(fontsize="small")
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, format="png")


def markdown(summary: pd.DataFrame, recipe, args) -> str:
    rows = []
    for r in summary.to_dict("records"):
        if r["status"] != "ok":
            rows.append([r["rank"], r["algorithm_key"], f"{r['status']} ({r['reason']})", "", ""])
            continue
        rows.append([r["rank"], r["algorithm_key"], f"{r['final_error']:.4g}", r["final_rank"],
                     f"{r['rounds_run']} of {r['rounds_planned']}"])
    notes = [f"profile {args.profile}; seed 0; final = the last round run"
             + ("" if (summary["rounds_run"] >= summary["rounds_planned"]).all() else
                f" ({int(summary['rounds_run'].max())} rounds, the profile's cap: the claims are not evaluated, "
                f"run --profile paper for the planned {recipe.rounds})"),
             f"lr = {recipe.lr} and nuclear weight lambda = {recipe.prox_weight} (on our 0.5 * mean squared "
             f"loss) for both methods; the per-step threshold is lr * lambda = {recipe.lr * recipe.prox_weight:g}",
             *settings.FIG7_ASSUMED,
             f"d = {recipe.d}, N = {recipe.num_clients}, S = {recipe.cohort}, M = {recipe.blocks}, "
             f"T = {recipe.local_steps}, {recipe.samples_per_client} samples per client"]
    headers = ["rank(X_G)", "method", "final ||X - X_G||_F", "final rank(X)", "rounds"]
    return "\n".join(["### LoSAC Figure 7: low-rank matrix estimation (final values)", "",
                      markdown_grid(headers, rows, right_align={2, 3}), "", *(f"- {n}" for n in notes)]) + "\n"


def render_figure(results) -> int:
    """Seed 0, in this process; settings.FIG7 shrunk by the target's scale (targets.py, SCALE)."""
    args = results.options
    refuse_done_only("losac-fig7", args.done_only)
    ranks = [int(x) for x in args.ranks.split(",")]
    recipe = dataclasses.replace(settings.FIG7, **results.scale)
    log.info(f"LoSAC Figure 7 at profile={args.profile}, lr={recipe.lr}, lambda={recipe.prox_weight}")
    rows, curves = [], []
    for rank in ranks:
        # generated here, not through the loader's cache: five ranks would keep ~1 GB alive
        first = config(recipe, settings.FIG7_METHODS[0], rank, args)
        data = load_lowrank(None, False, **dataset_options(first.dataset))
        for method in settings.FIG7_METHODS:
            cfg = config(recipe, method, rank, args)
            t0 = time.perf_counter()
            curve, status, reason = run_one(cfg, data)
            curves += [{"rank_true": rank, "method": method, **c} for c in curve]
            last = curve[-1]
            rows.append({"rank": rank, "algorithm_key": method, "status": status, "reason": reason,
                         "final_error": last["error"], "final_rank": last["rank"], "rounds_run": last["round"],
                         "rounds_planned": recipe.rounds, "seconds": round(time.perf_counter() - t0, 2)})
            log.info(f"rank {rank} {method}: error {last['error']:.4g}, rank {last['rank']} after "
                  f"{last['round']} rounds ({rows[-1]['seconds']} s)")
    summary = pd.DataFrame(rows)
    curves = pd.DataFrame(curves)
    out_dir = figure_dir(args.results_root)
    paths = {"png": out_dir / f"{NAME}.png", "csv": out_dir / f"{NAME}.csv", "md": out_dir / f"{NAME}.md",
             "summary": out_dir / f"{NAME}_summary.csv", "claims": out_dir / f"{NAME}_claims.md"}
    title = (f"LoSAC Figure 7 (ours): low-rank estimation, lr {recipe.lr}, lambda {recipe.prox_weight}, "
             f"profile {args.profile}")
    draw(curves, ranks, paths["png"], title)
    curves.to_csv(paths["csv"], index=False)
    summary.to_csv(paths["summary"], index=False)
    md = markdown(summary, recipe, args)
    paths["md"].write_text(md, encoding="utf-8")
    print(md)
    print(write_claims(paths["claims"], evaluate_claims(list(CLAIMS), summary, checks=CHECKS),
                       "Claims on our numbers (LSC-F7-*, rules of claims.csv):"))
    for name, path in paths.items():
        print(f"[losac fig7] {name}: {path}")
    return 0
