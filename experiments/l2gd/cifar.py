"""L2GD Figures 4-11 and Table 2: CIFAR-10, Dirichlet 0.5 over 10 clients (100 for Figs. 7-8),
ResNet-18 / DenseNet-121 / MobileNet (ResNet-56), compressed L2GD against FedAvg (with and without
compression) and FedOpt: accuracy and loss against rounds and against bits / n, bits / n to the
target accuracy.

    python -m experiments l2gd fig4 [--profile quick] [--series l2gd_natural,fedopt]
    python -m experiments l2gd table2

Figs. 4-6: every series of the paper's comparison on one model (train row, test row: accuracy
against rounds, loss against bits, loss against rounds, accuracy against bits). Figs. 9-11: the
same runs, compressed L2GD against FedOpt. Figs. 7-8: L2GD with eta lambda / (n p) = 1 against
FedAvg on ResNet-56 with 100 clients (accuracy, loss). Table 2: bits / n to the target test
accuracy of L2GD-natural and FedAvg + natural per model, beside the paper's. Every (model,
series) is one run of the results store, shared by the figures and the table that show it.
Without CIFAR-10's training set every run is "not run" with the missing files named;
`python -m experiments.l2gd.fake_cifar DIR` writes generated CIFAR-format files for a smoke run
(`--data-root DIR --profile smoke`). Settings and what the paper leaves open: settings.py
(CifarRecipe, SCALES, CIFAR_ASSUMED). The Targets: targets.py.

Claims spanning models (L2G-F4-*, F9-*, T2-*) are judged on this target's runs and those of the
other CIFAR targets already in the results store. Writes <results-root>/figures/l2gd_fig<N>.{png,csv,md},
l2gd_fig<N>_curves.csv, l2gd_fig<N>_claims.md (tables/l2gd_table2.* for Table 2).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd

import fedrepro  # noqa: F401  (torchvision shim first)
from experiments.l2gd import settings
from experiments.l2gd.claims import CHECKS, PAPER_T2
from experiments.l2gd.common import fmt, rounds_of, tables_dir, test_samples
from fedrepro.data.loaders import unavailable
from fedrepro.reports.claims import evaluate_claims, write_claims
from fedrepro.reports.figures import figure_dir, panel_grid
from fedrepro.reports.grid import Cell, saved_config
from fedrepro.reports.tables import markdown_grid
from fedrepro.results import run_metrics

# a name under the fedrepro loggers (reports.cli sets those up), not experiments.*
log = logging.getLogger("fedrepro.experiments")

BUDGETS = 5  # L2G-F4-2: log-spaced budgets up to the smallest total bits/n of the figure's curves
PAPER_PARAMS = {"densenet121": 7.9e6, "mobilenet": 3.2e6, "resnet18": 1.1e7}


def scaled(recipe: settings.CifarRecipe, scale: dict) -> settings.CifarRecipe:
    """The recipe shrunk by the CIFAR targets' scale knobs (model, max_clients)."""
    if "model" in scale:
        recipe = dataclasses.replace(recipe, config_model=scale["model"])
    if "max_clients" in scale:
        recipe = dataclasses.replace(recipe, num_clients=min(recipe.num_clients, scale["max_clients"]))
    return recipe


def stem(key: str) -> str:
    """A target key's name in file and make-target names: "fig7", "table2"."""
    return key if key == "table2" else f"fig{key}"


def is_special(key: str) -> bool:
    """Figs. 7-8: L2GD at eta lambda / (n p) = 1 against FedAvg (settings.CifarFigure.kind)."""
    return key != "table2" and settings.CIFAR_FIGURES[int(key)].kind == "special"


def figure_spec(key: str, scale: dict):
    """(title, [(recipe, series)], claims, kind, assumed)."""
    if key == "table2":
        items = [(scaled(r, scale), s) for r in settings.TABLE2_MODELS for s in settings.TABLE2_SERIES]
        return "Table 2: bits / n to the target test accuracy", items, settings.TABLE2_CLAIMS, "table", ()
    fig = settings.CIFAR_FIGURES[int(key)]
    return fig.title, [(scaled(fig.recipe, scale), s) for s in fig.series], fig.claims, fig.kind, fig.assumed


def cells(key: str, args, scale: dict, series_filter=None) -> list[Cell]:
    _, items, _, _, _ = figure_spec(key, scale)
    reason = unavailable("cifar10", args.data_root)
    out = []
    for recipe, series in items:
        if series_filter and series not in series_filter:
            continue
        keys = {"figure": key, "model_key": recipe.model, "series_key": series}
        out.append(Cell(keys, not_run=reason) if reason else Cell(keys, recipe.overrides(series, args.profile)))
    return out


def recipe_of(model: str, scale: dict) -> settings.CifarRecipe:
    """The recipe of a model key, scaled."""
    recipes = [f.recipe for f in settings.CIFAR_FIGURES.values()] + list(settings.TABLE2_MODELS)
    return scaled({r.model: r for r in recipes}[model], scale)


def label(model: str) -> str:
    return settings.MODEL_LABELS.get(model, model)


def curve(run, series: str, n: int) -> pd.DataFrame:
    """The evaluated rounds of one run in the paper's metrics (settings.CIFAR_ASSUMED): round, bits/n,
    train / test loss, test accuracy (%) of the average model, train accuracy (%) where recorded."""
    m = run_metrics(run.folder)
    bits = (m["cum_up_wire_bits"].ffill().fillna(0) + m["cum_down_wire_bits"].ffill().fillna(0)) / n \
        if "cum_up_wire_bits" in m else pd.Series(0.0, index=m.index)
    m = m.assign(bits_per_n=bits)
    if settings.SERIES[series].overrides[0] == "algorithm=l2gd":
        cols = {"train_loss": m["personal_loss"] * n, "test_loss": m["personal_test_loss"],
                "test_acc": 100 * m["all_test_acc"], "train_acc": 100 * m["personal_train_acc"]}
    else:
        cols = {"train_loss": m["server_train_loss"], "test_loss": m["server_test_loss"],
                "test_acc": 100 * m["server_test_acc"], "train_acc": pd.Series(np.nan, index=m.index)}
    out = pd.DataFrame({"round": m["round"].astype(int), "bits_per_n": m["bits_per_n"], **cols})
    return out[out["test_acc"].notna()].reset_index(drop=True)


def at_fraction(c: pd.DataFrame, q: float, ran: int) -> float:
    rows = c[c["round"] <= q * ran]
    return float(rows["test_acc"].iloc[-1]) if len(rows) else math.nan


def summarize(c: pd.DataFrame, run, target: float) -> dict:
    diverged = run.summary["status"] != "finished"
    ran, planned = rounds_of(run)
    hit = c[c["test_acc"] >= 100 * target]
    last = c.iloc[-1]
    return {"final_test_acc": math.nan if diverged else float(last["test_acc"]),
            "final_train_acc": math.nan if diverged else float(last["train_acc"]),
            "final_loss": math.inf if diverged else float(last["train_loss"]),
            "final_test_loss": math.inf if diverged else float(last["test_loss"]),
            **{f"acc_{q}": at_fraction(c, q / 100, ran) for q in (25, 50, 100)},
            "bits_to_target": float(hit["bits_per_n"].iloc[0]) if len(hit) else math.inf,
            "rounds_to_target": float(hit["round"].iloc[0]) if len(hit) else math.inf,
            "total_bits_per_n": float(last["bits_per_n"]), "target": target,
            "rounds_run": planned if diverged else ran,  # diverged, not capped
            "rounds_planned": planned, "params": int(run.summary.get("dim") or 0),
            "test_samples": test_samples(run),
            "diverged_at": int(run.summary["rounds_completed"]) + 1 if diverged else math.nan}


def coin_sequence(recipe: settings.CifarRecipe, seed: int, rounds: int) -> list[int]:
    """L2GD's coins xi_0 ... xi_(rounds-1) for this recipe and seed (a pure function of them)."""
    from fedrepro.algorithms.l2gd import L2GD

    alg = L2GD(recipe.p, recipe.lam, coin_seed=seed)
    return [alg.coin(k) for k in range(rounds)]


def coin_stats(recipe: settings.CifarRecipe, seed: int, rounds: int) -> dict:
    """L2G-S7-3 from the coin sequence itself (a pure function of (coin_seed, k)): the mean number of
    local steps between consecutive communications and the mean iterations between them."""
    coins = coin_sequence(recipe, seed, rounds)
    talks = [k for k in range(rounds) if coins[k] == 1 and (coins[k - 1] if k else 1) == 0]
    local = [sum(1 for j in range(a, b) if coins[j] == 0) for a, b in zip(talks, talks[1:])]
    return {"mean_local_steps": float(np.mean(local)) if local else math.nan,
            "mean_cycle": float(np.mean(np.diff(talks))) if len(talks) > 1 else math.nan,
            "coin_rounds": rounds, "p": recipe.p}


def local_steps(run, series: str, recipe: settings.CifarRecipe) -> float:
    """The local steps a client took over the run (the clients' mean), which Figs. 7-8 compare
    beside the curves: L2GD one per iteration whose coin is 0 (a pure function of (seed, k));
    FedAvg / FedOpt, every client every round, its capped steps of a round (config.effective) on
    its share of the data (partition.json)."""
    from fedrepro.config import effective

    cfg = saved_config(run.folder)
    ran, _ = rounds_of(run)
    if settings.SERIES[series].overrides[0] == "algorithm=l2gd":
        return float(coin_sequence(recipe, int(cfg.seed), ran).count(0))
    sizes = [sum(c) for c in json.loads((Path(run.folder) / "partition.json").read_text())["label_counts"]]
    steps = [effective(cfg).steps_for(n, int(cfg.train.batch_size)) for n in sizes]
    return ran * float(np.mean(steps))


def frame(cell_list: list[Cell], status: pd.DataFrame, runs: dict, target: float, profile: str, scale: dict):
    """(summary: one row per cell, means over the seeds run; curves: seed 0's evaluated rounds)."""
    rows, curves = [], []
    for i, cell in enumerate(cell_list):
        st = status.iloc[i]
        keys = cell.keys
        recipe = recipe_of(keys["model_key"], scale)
        special = is_special(keys["figure"])
        row = {**keys, "status": st["status"], "reason": st["reason"], "seeds": st.get("seeds", ""),
               "label": settings.SERIES[keys["series_key"]].label}
        if keys["series_key"] == "l2gd" and recipe.agg == 1.0:
            row.update(coin_stats(recipe, 0, recipe.rounds_at(profile)))
        done = runs.get(i, []) if st["status"] in ("ok", "diverged") else []
        if done:
            per = []
            for j, run in enumerate(done):
                c = curve(run, keys["series_key"], recipe.num_clients)
                per.append(summarize(c, run, target))
                if special:
                    per[-1]["local_steps"] = local_steps(run, keys["series_key"], recipe)
                if j == 0:
                    curves += [{**keys, **r} for r in c.to_dict("records")]
            for k in per[0]:
                vals = [p[k] for p in per]
                row[k] = float(np.mean(vals)) if all(isinstance(v, (int, float)) for v in vals) else vals[0]
        rows.append(row)
    summary, curves = pd.DataFrame(rows), pd.DataFrame(curves)
    return add_budgets(summary, curves), curves


def add_budgets(summary: pd.DataFrame, curves: pd.DataFrame) -> pd.DataFrame:
    """L2G-F4-2's losses at 5 log-spaced budgets (up to the smallest total bits/n of any curve of
    the same model): the last evaluated loss with bits/n <= B."""
    summary = summary.copy()
    summary["loss_at_budgets"] = ""
    summary["budgets"] = ""
    if curves.empty or "total_bits_per_n" not in summary:
        return summary
    for model, s in summary.groupby("model_key"):
        totals = s["total_bits_per_n"].astype(float)
        totals = totals[totals > 0]
        if totals.empty:
            continue
        top = float(totals.min())
        budgets = [top * 10 ** (-(BUDGETS - 1 - j) / 2) for j in range(BUDGETS)]
        for idx, r in s.iterrows():
            c = curves[(curves.model_key == model) & (curves.series_key == r["series_key"])]
            if c.empty:
                continue
            vals = []
            for b in budgets:
                under = c[c["bits_per_n"] <= b]
                vals.append(float(under["train_loss"].iloc[-1]) if len(under) else math.nan)
            summary.at[idx, "loss_at_budgets"] = ";".join(f"{v:.6g}" for v in vals)
            summary.at[idx, "budgets"] = ";".join(f"{b:.4g}" for b in budgets)
    return summary


# -- drawing ------------------------------------------------------------------------------------------


def _not_run(ax, text: str) -> None:
    import textwrap

    ax.text(0.5, 0.5, "not run:\n" + "\n".join(textwrap.wrap(text, 40)[:6]), ha="center", va="center",
            transform=ax.transAxes, fontsize="x-small")
    ax.set_xticks([])
    ax.set_yticks([])


def _panel(ax, curves, series, x, y, title, xlabel, ylabel, reason) -> None:
    ax.set_title(title, fontsize="small")
    drawn = 0
    for s in series:
        c = curves[curves.series_key == s] if not curves.empty else curves
        if c.empty or c[y].isna().all():
            continue
        c = c[np.isfinite(c[y].astype(float))]
        xs = c[x].astype(float)
        if x == "bits_per_n":
            c, xs = c[xs > 0], xs[xs > 0]
        ax.plot(xs, c[y], label=settings.SERIES[s].label, linewidth=1, marker="." if len(c) < 30 else None)
        drawn += 1
    if not drawn:
        _not_run(ax, reason or f"no {y} recorded for these series")
        return
    if x == "bits_per_n":
        ax.set_xscale("log")
    ax.set_xlabel(xlabel, fontsize="small")
    ax.set_ylabel(ylabel, fontsize="small")
    ax.grid(alpha=0.3)


def draw(curves: pd.DataFrame, summary: pd.DataFrame, key: str, scale: dict, path, title: str) -> None:
    _, items, _, kind, _ = figure_spec(key, scale)
    series = [s for _, s in items if s in set(summary.series_key)]
    reasons = summary[~summary.status.isin(["ok", "diverged"])]["reason"]
    reason = str(reasons.iloc[0]) if len(reasons) == len(summary) else ""
    labels = {"rounds": ("round", "rounds"), "bits": ("bits_per_n", "bits / n")}
    if kind == "compare":
        plot, axes = panel_grid(2, 4, (3.4, 2.9), extra_height=0.6)
        for row, split in enumerate(("train", "test")):
            for col, (xk, y, yl) in enumerate((("rounds", "acc", "Top-1 (%)"), ("bits", "loss", "loss"),
                                               ("rounds", "loss", "loss"), ("bits", "acc", "Top-1 (%)"))):
                x, xl = labels[xk]
                ycol = f"{split}_{y}"
                letter = "abcdefgh"[4 * row + col]
                _panel(axes[row][col], curves, series, x, ycol, f"({letter}) {split} {yl} vs {xl}", xl, yl, reason)
    elif kind == "fedopt":
        plot, axes = panel_grid(2, 4, (3.4, 2.9), extra_height=0.6)
        for row, xk in enumerate(("rounds", "bits")):
            x, xl = labels[xk]
            for col, (ycol, yl) in enumerate((("train_loss", "train loss"), ("train_acc", "train Top-1 (%)"),
                                              ("test_loss", "test loss"), ("test_acc", "test Top-1 (%)"))):
                _panel(axes[row][col], curves, series, x, ycol, f"{yl} vs {xl}", xl, yl, reason)
    elif kind == "special":
        plot, axes = panel_grid(1, 2, (4.4, 3.3), extra_height=0.6)
        pair = (("test_acc", "test Top-1 (%)"), ("train_acc", "train Top-1 (%)")) if key == "7" else \
            (("test_loss", "test loss"), ("train_loss", "train loss"))
        for col, (ycol, yl) in enumerate(pair):
            _panel(axes[0][col], curves, series, "round", ycol, yl, "round", yl, reason)
    else:  # table 2: bits/n to the target against the model
        plot, axes = panel_grid(1, 1, (5.0, 3.3), extra_height=0.6)
        ax = axes[0][0]
        ok = summary[summary.status.isin(["ok", "diverged"])]
        if ok.empty:
            _not_run(ax, reason or "no runs")
        else:
            bars = ok[np.isfinite(ok["bits_to_target"].astype(float)) & (ok["bits_to_target"].astype(float) > 0)]
            for s, g in bars.groupby("series_key"):
                ax.bar([f"{label(m)}\n{s}" for m in g.model_key], g["bits_to_target"], label=s)
            if bars.empty:
                ax.text(0.5, 0.5, "no run reached the target after sending bits", ha="center", va="center",
                        transform=ax.transAxes, fontsize="small")
            else:
                ax.set_yscale("log")
            ax.set_ylabel("bits / n to the target")
    handles = [len(ax.get_legend_handles_labels()[0]) for ax in plot.axes]
    if handles and max(handles):  # the legend on the panel that draws the most series
        plot.axes[handles.index(max(handles))].legend(fontsize="xx-small")
    plot.suptitle(title, fontsize="medium")
    plot.tight_layout()
    plot.savefig(path, format="png")


# -- text ---------------------------------------------------------------------------------------------


def markdown(summary: pd.DataFrame, key: str, args, scale: dict, target: float) -> str:
    title, items, _, kind, assumed = figure_spec(key, scale)
    rows = []
    for r in summary.to_dict("records"):
        name = f"{label(r['model_key'])} / {r['series_key']}"
        if r["status"] not in ("ok", "diverged"):
            rows.append([name, f"{r['status']} ({r['reason']})", "", "", "", "", ""])
            continue
        div = f"diverged in round {int(r['diverged_at'])}" if r["status"] == "diverged" else ""
        rows.append([name, div or fmt(r["final_test_acc"], 4), fmt(r["final_loss"]), fmt(r["total_bits_per_n"], 3),
                     fmt(r["bits_to_target"], 3) if math.isfinite(r["bits_to_target"]) else "not reached",
                     fmt(r["rounds_to_target"], 5) if math.isfinite(r["rounds_to_target"]) else "not reached",
                     f"{int(r['rounds_run'])} of {int(r['rounds_planned'])}"])
    scale = settings.SCALES[args.profile]
    recipes = list(dict.fromkeys(r for r, _ in items))
    notes = [f"profile {args.profile}; seeds {args.seeds}; target test accuracy {target:g} "
             f"({'the paper' if args.profile == 'paper' else 'lower than the paper 0.7: named for this profile'}); "
             f"batch {scale.batch_size}" + (f"; {', '.join(scale.extra)}" if scale.extra else ""),
             *(f"{label(r.model)}: {r.rounds_at(args.profile)} rounds here (paper {r.rounds}), "
               f"n = {r.num_clients}" for r in recipes),
             *(settings.l2gd_assumed(r, scale.batch_size) for r in recipes if any(s.startswith("l2gd") for _, s in items)),
             *settings.CIFAR_ASSUMED, *assumed]
    if kind == "special":  # Figs. 7-8: the local work behind each curve differs at quick
        notes.append("local steps a client over the run: " + ", ".join(
            f"{r['series_key']} {r['local_steps']:.0f}" if pd.notna(r.get("local_steps")) else
            f"{r['series_key']} not run" for r in summary.to_dict("records")))
    if args.profile != "paper":
        target_name = f"l2gd-{stem(key)}"
        notes.append(f"paper scale (a GPU): `make {target_name} PROFILE=paper OVERRIDES=\"train.accelerator=cuda\"` "
                     f"(`python -m experiments.cost {target_name} --profile paper --device cuda` first says what it takes)")
    headers = ["model / series", "final test Top-1 (%)", "final loss", "bits / n", f"bits / n to {target:g}",
               f"rounds to {target:g}", "rounds"]
    return "\n".join([f"### L2GD {'Figure ' + key if key != 'table2' else 'Table 2'}: {title}", "",
                      markdown_grid(headers, rows, right_align={1, 2, 3, 4, 5}), "",
                      *(f"- {n}" for n in notes)]) + "\n"


def table2_markdown(summary: pd.DataFrame, target: float) -> tuple[str, pd.DataFrame]:
    """Table 2: ours beside the paper's (reference/l2gd_table2.csv values)."""
    out, rows = [], []
    for recipe in settings.TABLE2_MODELS:
        m = recipe.model
        s = summary[summary.model_key == m].set_index("series_key")
        paper_l2gd, paper_base = PAPER_T2[m]

        def val(series, col):
            if series not in s.index or s.loc[series, "status"] not in ("ok", "diverged"):
                return None
            return float(s.loc[series, col])

        l2, base = val("l2gd_natural", "bits_to_target"), val("fedavg_c", "bits_to_target")
        params = val("l2gd_natural", "params") or val("fedavg_c", "params")
        why = "" if l2 is not None or base is not None else \
            f"not run ({s['reason'].iloc[0]})" if len(s) else "not run"
        ratio = base / l2 if l2 and base and math.isfinite(l2) and math.isfinite(base) else None
        out.append({"model": label(m), "params_ours": params, "params_paper": PAPER_PARAMS[m],
                    "l2gd_bits_ours": l2, "l2gd_bits_paper": paper_l2gd, "fedavg_c_bits_ours": base,
                    "fedavg_c_bits_paper": paper_base, "ratio_ours": ratio, "ratio_paper": paper_base / paper_l2gd,
                    "status": why or "ok"})

        def big(v):
            return "" if v is None else "not reached" if math.isinf(v) else f"{v:.3g}"
        rows.append([label(m), f"{big(params)} / {PAPER_PARAMS[m]:.2g}",
                     f"{big(l2)} / {paper_l2gd:.2g}" if not why else why, f"{big(base)} / {paper_base:.2g}",
                     f"{big(ratio)} / {paper_base / paper_l2gd:.2g}"])
    text = markdown_grid(["model", "parameters (ours / paper)", f"L2GD-natural bits/n to {target:g} (ours / paper)",
                          f"FedAvg + natural bits/n to {target:g} (ours / paper)", "ratio (ours / paper)"], rows,
                         right_align={1, 2, 3, 4})
    return text, pd.DataFrame(out)


def other_frames(key: str, claims: tuple, results, target: float) -> list[pd.DataFrame]:
    """The stored runs of the other CIFAR targets that share a claim with this one (nothing runs)."""
    args, scale = results.options, results.scale
    out = []
    for other in [*(str(k) for k in settings.CIFAR_FIGURES), "table2"]:
        if other == key or not set(figure_spec(other, scale)[2]) & set(claims):
            continue
        cell_list = cells(other, args, scale)
        status, runs = results.measure(cell_list, run=False)
        out.append(frame(cell_list, status, runs, target, args.profile, scale)[0])
    return out


def series_of(args):
    """The series --series asks for (None: the figure's all)."""
    return set(args.series.split(",")) if args.series else None


def render(key: str, results) -> int:
    """A figure (or Table 2), its tables and claims from its runs (Target.render)."""
    args, scale = results.options, results.scale
    title, _, claims, _, _ = figure_spec(key, scale)
    target = settings.SCALES[args.profile].target
    log.info(f"L2GD {'Figure ' + key if key != 'table2' else 'Table 2'} ({title}) at profile={args.profile}, "
             f"seeds={args.seeds}, target {target:g}")
    cell_list = cells(key, args, scale, series_of(args))
    status, runs = results.measure(cell_list)
    summary, curves = frame(cell_list, status, runs, target, args.profile, scale)

    name = f"l2gd_{stem(key)}"
    out_dir = figure_dir(args.results_root) if key != "table2" else tables_dir(args.results_root)
    paths = {"png": out_dir / f"{name}.png", "csv": out_dir / f"{name}.csv", "md": out_dir / f"{name}.md",
             "curves": out_dir / f"{name}_curves.csv", "claims": out_dir / f"{name}_claims.md"}
    draw(curves, summary, key, scale, paths["png"], f"L2GD {'Figure ' + key if key != 'table2' else 'Table 2'} "
                                                     f"(ours): {title}, profile {args.profile}")
    summary.to_csv(paths["csv"], index=False)
    curves.to_csv(paths["curves"], index=False)
    md = markdown(summary, key, args, scale, target)
    if key == "table2":
        text, t2 = table2_markdown(summary, target)
        md = f"### L2GD Table 2 (ours / paper)\n\n{text}\n\n{md}"
        t2.to_csv(out_dir / "l2gd_table2_compare.csv", index=False)
    paths["md"].write_text(md, encoding="utf-8")
    print(md)
    judged = pd.concat([summary, *other_frames(key, claims, results, target)], ignore_index=True)
    print(write_claims(paths["claims"], evaluate_claims(list(claims), judged, checks=CHECKS),
                       f"Claims on our numbers ({', '.join(claims)}; rules of claims.csv), judged on this target's runs "
                       f"and those of the other CIFAR targets already in the results store:"))
    for k, path in paths.items():
        print(f"[l2gd {name[5:]}] {k}: {path}")
    return 0
