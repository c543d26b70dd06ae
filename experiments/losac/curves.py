"""LoSAC Figures 1-5: training loss and test accuracy against the round, one column per panel.

    python -m experiments losac fig1 [--profile quick] [--jobs 2]

Fig. 1: MNIST, heterogeneity c %; Figs. 2 and 3: MNIST IID and non-IID over the cohort size S
and the local steps T; Figs. 4 and 5: HAR and ESR (non-IID) over S and T. Every panel x
algorithm is one run of the results store (reused on the next call), evaluated every round
(the server model x: training cross-entropy on the profile's subset, test accuracy). The
settings and every value the paper leaves open are in settings.CURVE_FIGURES; the panels whose
data is not here (HAR) are listed as "not run" with the missing files.

Claims. Some claims span figures (LSC-F2-* read Figs. 2 and 3, LSC-F2-5 also 4 and 5): each
target judges its claims on its own runs plus those of the other curve figures that are
already in the results store (run the other targets first to decide them); scope items with
no run are undecided. Writes <results-root>/figures/losac_fig<N>.{png,csv,md},
losac_fig<N>_summary.csv (one row per panel x algorithm: what the claims read) and
losac_fig<N>_claims.md.
"""
from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd

from experiments.losac import settings
from experiments.losac.claims import CHECKS
from fedrepro.data.loaders import unavailable
from fedrepro.reports.claims import evaluate_claims, write_claims
from fedrepro.reports.figures import figure_dir, panel_grid
from fedrepro.reports.grid import Cell, configured_rounds
from fedrepro.reports.tables import markdown_grid
from fedrepro.results import run_metrics

# not __name__: experiments.* is outside the `fedrepro` loggers that reports.cli sets up
log = logging.getLogger("fedrepro.experiments")

LOSS, ACC = "server_train_loss", "server_test_acc"


# Every round evaluated (curves and the fluctuation rules read round-to-round changes).
EVERY_ROUND = ["profile.min_eval_every=1"]


def figure(number: int, scale: dict) -> settings.CurveFigure:
    """settings.CURVE_FIGURES[number], shrunk by the target's scale (targets.py, SCALE)."""
    fig = settings.CURVE_FIGURES[number]
    if "num_clients" in scale:
        fig = dataclasses.replace(fig, recipe=dataclasses.replace(fig.recipe, num_clients=scale["num_clients"]))
    if "panels" in scale:
        fig = dataclasses.replace(fig, panels=fig.panels[:scale["panels"]])
    return fig


def cells(fig: settings.CurveFigure, data_root: str) -> list[Cell]:
    recipe = fig.recipe
    reason = unavailable(settings.loader_name(recipe.dataset), data_root)
    out = []
    for panel in fig.panels:
        for alg in fig.algorithms:
            keys = {"figure": fig.number, "dataset_key": recipe.dataset, "split_key": panel.split_key,
                    "c": panel.c, "S": panel.cohort, "T": panel.local_steps, "algorithm_key": alg}
            out.append(Cell(keys, not_run=reason) if reason else Cell(keys, [*recipe.overrides(alg, panel),
                                                                             *EVERY_ROUND]))
    return out


def fluctuation(loss: np.ndarray) -> float:
    """claims.csv LSC-F2-4: std of the round-to-round differences of the training loss."""
    d = np.diff(loss)
    return float(np.std(d)) if len(d) >= 2 and np.isfinite(d).all() else math.nan


def read_curve(metrics: pd.DataFrame) -> pd.DataFrame:
    m = metrics.dropna(subset=[ACC])
    return pd.DataFrame({"round": m["round"].astype(int), "loss": m[LOSS].astype(float),
                         "acc": 100 * m[ACC].astype(float)})


def summarize(curve: pd.DataFrame, summary: dict, planned: int) -> dict:
    """One run's numbers for the claims: final loss / accuracy (a diverged run: inf / NaN), the
    loss at half the rounds, the fluctuation over the first 10 % and over the second half of the
    rounds. `planned` = train.rounds before the profile's cap; a capped run's numbers are those
    of the rounds it ran (the claims leave it undecided)."""
    diverged = summary["status"] != "finished"
    last = curve.iloc[-1]
    ran = int(last["round"])
    loss, rounds = curve["loss"].to_numpy(), curve["round"].to_numpy()
    half = loss[rounds <= ran // 2]
    return {"rounds_planned": planned, "rounds_run": ran,
            "diverged_at": int(summary["rounds_completed"]) + 1 if diverged else math.nan,
            "final_loss": math.inf if diverged else float(last["loss"]),
            "final_acc": math.nan if diverged else float(last["acc"]),
            "loss_half": math.inf if diverged else float(half[-1]) if len(half) else math.nan,
            "fluct_late": math.nan if diverged else fluctuation(loss[rounds >= ran // 2]),
            "fluct_early": fluctuation(loss[rounds <= max(2, math.ceil(0.1 * ran))])}


def frame(cell_list: list[Cell], status: pd.DataFrame, runs: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summary: one row per cell, curves: one row per cell and evaluated round); seed 0's curve
    is drawn and the summary values are means over the seeds run."""
    rows, curves = [], []
    for i, cell in enumerate(cell_list):
        st = status.iloc[i]
        row = {**cell.keys, "status": st["status"], "reason": st["reason"], "seeds": st.get("seeds", ""),
               "data": st.get("data", "")}
        done = runs.get(i, []) if st["status"] in ("ok", "diverged") else []
        if done:
            per_seed = []
            for j, run in enumerate(done):
                curve = read_curve(run_metrics(run.folder))
                per_seed.append(summarize(curve, run.summary, configured_rounds(run.folder)))
                if j == 0:
                    curves += [{**cell.keys, **c} for c in curve.to_dict("records")]
            for key in per_seed[0]:
                row[key] = float(np.mean([p[key] for p in per_seed]))
            row["seconds"] = float(np.mean([r.summary["train_seconds"] for r in done]))
        rows.append(row)
    return pd.DataFrame(rows), pd.DataFrame(curves)


def draw(curves: pd.DataFrame, fig: settings.CurveFigure, path: Path, title: str) -> None:
    panels = fig.panels
    plot, axes = panel_grid(2, len(panels), (3.3, 3.0))
    for col, panel in enumerate(panels):
        top, bottom = axes[0][col], axes[1][col]
        for alg in fig.algorithms:
            if curves.empty:
                break
            c = curves[(curves.split_key == panel.split_key) & (curves.S == panel.cohort)
                       & (curves["T"] == panel.local_steps) & (curves.algorithm_key == alg)]
            c = c[np.isfinite(c["loss"])]
            if len(c):
                top.plot(c["round"], c["loss"], label=settings.CURVE_LABELS[alg], linewidth=1)
                bottom.plot(c["round"], c["acc"], label=settings.CURVE_LABELS[alg], linewidth=1)
        top.set_title(panel.label, fontsize="medium")
        top.set_yscale("log")
        top.set_ylabel("training loss")
        bottom.set_ylabel("test accuracy (%)")
        bottom.set_xlabel("round")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
        if col == 0 and not curves.empty:
            top.legend(fontsize="small")
    plot.suptitle(title, fontsize="medium")
    plot.tight_layout()
    plot.savefig(path, format="png")


def markdown(summary: pd.DataFrame, fig: settings.CurveFigure, args) -> str:
    rows = []
    for r in summary.to_dict("records"):
        panel = f"{r['split_key']}, S={r['S']}, T={r['T']}"
        if r["status"] not in ("ok", "diverged"):
            rows.append([panel, r["algorithm_key"], f"{r['status']} ({r['reason']})", "", "", ""])
            continue
        div = f"diverged in round {int(r['diverged_at'])}" if r["status"] == "diverged" else ""
        rows.append([panel, r["algorithm_key"], f"{r['final_loss']:.4g}" if not div else div,
                     "" if div else f"{r['final_acc']:.2f}", f"{r['fluct_late']:.3g}" if not div else "",
                     f"{int(r['rounds_run'])} of {int(r['rounds_planned'])}"])
    recipe = fig.recipe
    run = summary[summary.status.isin(["ok", "diverged"])]
    capped = len(run) and (run["rounds_run"] < run["rounds_planned"]).any()
    notes = [f"profile {args.profile}; seeds {args.seeds}; final = the last round run"
             + (" (the profile's cap, not the planned rounds)" if capped else ""),
             f"{recipe.dataset}: N = {recipe.num_clients}, M = {recipe.blocks}, eta = {recipe.eta_paper:g} -> "
             f"train.lr = n_i eta = {recipe.n_i:g} x {recipe.eta_paper:g} = {recipe.lr:g} for every algorithm; "
             f"fixed cohort of S clients each round; no clipping, weight decay or lr decay",
             "fluctuation (LSC-F2-4): std of the round-to-round differences of the training loss over the "
             "second half of the rounds run",
             *fig.assumed]
    headers = ["panel", "algorithm", "final training loss", "final test acc (%)", "fluctuation", "rounds"]
    return "\n".join([f"### LoSAC Figure {fig.number}: {fig.title} (final values)", "",
                      markdown_grid(headers, rows, right_align={2, 3, 4}), "",
                      *(f"- {n}" for n in notes)]) + "\n"


def render_figure(results, number: int) -> int:
    """Figure `number` from its runs, its claims judged with the other curve figures' runs that
    are in the results store (run=False)."""
    args = results.options
    fig = figure(number, results.scale)
    log.info(f"LoSAC Figure {fig.number} ({fig.title}) at profile={args.profile}, seeds={args.seeds}")
    cell_list = cells(fig, args.data_root)
    status, runs = results.measure(cell_list)
    summary, curves = frame(cell_list, status, runs)
    everything = [summary]
    for other_number in settings.CURVE_FIGURES:
        other = figure(other_number, results.scale)
        if other_number != fig.number and set(other.claims) & set(fig.claims):
            other_cells = cells(other, args.data_root)
            everything.append(frame(other_cells, *results.measure(other_cells, run=False))[0])

    out_dir = figure_dir(args.results_root)
    name = f"losac_fig{fig.number}"
    paths = {"png": out_dir / f"{name}.png", "csv": out_dir / f"{name}.csv", "md": out_dir / f"{name}.md",
             "summary": out_dir / f"{name}_summary.csv", "claims": out_dir / f"{name}_claims.md"}
    draw(curves, fig, paths["png"], f"LoSAC Figure {fig.number} (ours): {fig.title}, profile {args.profile}")
    curves.to_csv(paths["csv"], index=False)
    summary.to_csv(paths["summary"], index=False)
    md = markdown(summary, fig, args)
    paths["md"].write_text(md, encoding="utf-8")
    print(md)
    judged = pd.concat(everything, ignore_index=True)
    print(write_claims(paths["claims"], evaluate_claims(list(fig.claims), judged, checks=CHECKS),
                       f"Claims on our numbers ({', '.join(fig.claims)}; rules of claims.csv), judged on the runs "
                       f"of this figure and those of the other curve figures already in the results store:"))
    for key, path in paths.items():
        print(f"[losac fig{fig.number}] {key}: {path}")
    return 0
