"""Compressors x algorithms at equal bits (beyond the papers; the comparison FedElasticNet's
reviewers asked for): FedElasticNet Algorithm 3 against FedAvg + Top-k + error feedback and
FedAvg + natural compression on MNIST, accuracy against cumulative uplink wire bits and against
rounds, and the accuracy each reached within matched bit budgets.

    python -m experiments compare-compression [--profile quick] [--splits iid,dirichlet0.3]

FedElasticNet's MNIST setting and Table 5's Alg. 3 values come from
experiments/fedelasticnet/settings.yaml (the same overrides its tables use), so the runs differ
from those tables' only by the compressor on the uplink (and evaluation every round). k of Top-k
is chosen so that a Top-k message costs what Alg. 3's mean message cost on the same split and
profile (settings.COMPARE notes), so Top-k's run is known only once Alg. 3's runs are done: the
target declares it when they are in the results store, and a first call, which computes them,
shows Top-k as "not run" until the next. Writes <results-root>/figures/compare_compression.{png,csv,md}
and compare_compression_curves.csv.
"""
from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd

import fedrepro  # noqa: F401  (torchvision shim first)
from experiments.fedelasticnet import common as fen
from experiments.l2gd import settings
from experiments.l2gd.common import selection_ignored
from fedrepro.data.loaders import unavailable
from fedrepro.reports.figures import figure_dir, panel_grid
from fedrepro.reports.grid import Cell
from fedrepro.reports.tables import markdown_grid
from fedrepro.reports.target import stored
from fedrepro.results import run_metrics

# a name under the fedrepro loggers (reports.cli sets those up), not experiments.*
log = logging.getLogger("fedrepro.experiments")

ACC = "all_test_acc"
TOLERANCE = 0.01  # a run is within a budget up to 1 % over it (k's rounding makes equal totals differ by < 0.2 %)
FIRST = ("fen_alg3", "fedavg_natural", "fedavg")  # the runs that need no other's outcome
K_LATER = ("needs FedElasticNet Alg. 3's run of this split to choose k: not in the results store yet (the "
           "target runs it first, then this one)")


def base(split: str) -> list[str]:
    """FedElasticNet's MNIST run and split (settings.yaml) at 10 % participation, every round evaluated."""
    ds = settings.COMPARE.dataset
    return [*fen.SETTINGS["datasets"][ds]["run"], *fen.SETTINGS["splits"][split],
            f"participation={settings.COMPARE.participation}", "profile.min_eval_every=1", "train.eval_every=1"]


def fen_run(algorithm: str, split: str, profile: str, *compressor: str) -> list[str]:
    """A FedElasticNet table's run of `algorithm` (settings.yaml, Table 5's values) on the
    comparison's dataset and participation, every round evaluated, with `compressor` overrides."""
    ds, part = settings.COMPARE.dataset, settings.COMPARE.participation
    return [*fen.run_overrides(ds, split, algorithm, part, profile), "profile.min_eval_every=1",
            "train.eval_every=1", *compressor]


def priced_fen_run(algorithm: str, split: str, profile: str, epsilon: float | None = None) -> list[str]:
    """`fen_run` with its uploads through compressor=threshold at `epsilon` (default: the
    algorithm's own Table 5 epsilon, which it already applied): a sparse upload is priced on the
    wire (positions + values) and no value changes."""
    if epsilon is None:
        epsilon = fen.hparams(settings.COMPARE.dataset, algorithm)["epsilon"]
    return fen_run(algorithm, split, profile, "compressor=threshold", f"compressor.epsilon={epsilon}")


def overrides(series: str, split: str, profile: str, k: int | None = None) -> list[str]:
    if series == "fen_alg3":
        return priced_fen_run("fen_alg3", split, profile)
    comp = {"fedavg": [], "fedavg_natural": ["compressor=natural"],
            "fedavg_topk_ef": ["compressor=topk_ef", f"compressor.k={k}"]}[series]
    return [*base(split), "algorithm=fedavg", *comp]


def _key(series: str, split: str, k=None) -> dict:
    return {"dataset_key": settings.COMPARE.dataset, "split_key": split, "series_key": series,
            "k": k if k is not None else ""}


def alg3_bits(runs: list) -> tuple[float, int]:
    """(Alg. 3's mean uplink wire bits per message over the seeds run, d)."""
    per = []
    for run in runs:
        last = run_metrics(run.folder).dropna(subset=["cum_up_messages"]).iloc[-1]
        per.append(float(last["cum_up_wire_bits"]) / max(float(last["cum_up_messages"]), 1.0))
    return float(np.mean(per)), int(runs[0].summary["dim"])


def read(run) -> pd.DataFrame:
    m = run_metrics(run.folder)
    m = m.assign(cum_up_wire_bits=m["cum_up_wire_bits"].ffill().fillna(0))
    m = m.dropna(subset=[ACC])
    return pd.DataFrame({"round": m["round"].astype(int), "up_bits": m["cum_up_wire_bits"].astype(float),
                         "acc": 100 * m[ACC].astype(float), "server_acc": 100 * m["server_test_acc"].astype(float)})


def acc_within(c: pd.DataFrame, budget: float) -> float:
    """The last evaluated accuracy while the cumulative uplink bits were <= budget (NaN: none)."""
    under = c[c["up_bits"] <= budget * (1 + TOLERANCE)]
    return float(under["acc"].iloc[-1]) if len(under) else math.nan


def choose_k(runs: list) -> tuple[int, float, int]:
    """(k, Alg. 3's mean bits a message, d): the Top-k whose message costs what Alg. 3's did."""
    bits, d = alg3_bits(runs)
    return settings.topk_k_for_bits(bits, d), bits, d


def add_options(ap) -> None:
    selection_ignored(ap, keep=("splits",))
    for action in ap._actions:
        if action.dest == "splits":
            action.help = f"comma-separated FedElasticNet split keys (default: {','.join(settings.COMPARE_SPLITS)})"
            action.default = ",".join(settings.COMPARE_SPLITS)


def splits_of(args) -> list[str]:
    return [s for s in args.splits.split(",") if s] if args.splits != "all" else list(settings.COMPARE_SPLITS)


def cells(args) -> list[Cell]:
    """Every run (Target.cells): the first grid (FIRST per split), then FedAvg + Top-k + EF of each
    split whose Alg. 3 runs are all in the results store, with the k they choose (K_LATER if not)."""
    reason = unavailable(fen.SETTINGS["datasets"][settings.COMPARE.dataset]["run"][0].split("=", 1)[1],
                         args.data_root)

    def cell(series, split, k=None, why=None):
        keys = _key(series, split, k)
        why = reason or why
        return Cell(keys, not_run=why) if why else Cell(keys, overrides(series, split, args.profile, k))

    first = [cell(s, split) for split in splits_of(args) for s in FIRST]
    alg3 = [c for c in first if c.keys["series_key"] == "fen_alg3"]
    _, done_runs = stored(alg3, args)
    second = []
    for i, c in enumerate(alg3):
        done = done_runs.get(i, [])
        second.append(cell("fedavg_topk_ef", c.keys["split_key"], k=choose_k(done)[0]) if len(done) == args.seeds
                      else cell("fedavg_topk_ef", c.keys["split_key"], why=K_LATER))
    return first + second


def render(results) -> int:
    """The comparison's figure and tables from its runs (Target.render)."""
    args = results.options
    splits = splits_of(args)
    log.info(f"compare-compression ({settings.COMPARE.dataset}, splits {', '.join(splits)}) at profile={args.profile}, "
             f"seeds={args.seeds}")
    cell_list = results.cells
    status, runs = results.measure(cell_list)
    alg3 = {c.keys["split_key"]: i for i, c in enumerate(cell_list) if c.keys["series_key"] == "fen_alg3"}
    ks = {c.keys["split_key"]: choose_k(runs[alg3[c.keys["split_key"]]]) for c in cell_list
          if c.keys["series_key"] == "fedavg_topk_ef" and not c.not_run}

    rows, curves = [], []
    for i, c in enumerate(cell_list):
        st = status.iloc[i]
        row = {**c.keys, "label": settings.COMPARE_LABELS[c.keys["series_key"]], "status": st["status"],
               "reason": st["reason"], "seeds": st.get("seeds", "")}
        done = runs.get(i, []) if st["status"] in ("ok", "diverged") else []
        if done:
            cur = read(done[0])
            curves += [{**c.keys, **r} for r in cur.to_dict("records")]
            last = cur.iloc[-1]
            row.update({"final_acc": float(np.mean([read(r)["acc"].iloc[-1] for r in done])),
                        "final_server_acc": float(last["server_acc"]), "total_up_bits": float(last["up_bits"]),
                        "rounds": int(last["round"]),
                        "bits_per_message": float(np.mean([alg3_bits([r])[0] for r in done]))})
        rows.append(row)
    order = {(sp, se): i for i, (sp, se) in enumerate((sp, se) for sp in splits for se in settings.COMPARE_SERIES)}
    rows.sort(key=lambda r: order[(r["split_key"], r["series_key"])])
    summary, curves = pd.DataFrame(rows), pd.DataFrame(curves)

    budget_rows, budget_records = [], []
    for split in splits:
        s = summary[(summary.split_key == split) & summary.status.isin(["ok", "diverged"])]
        if s.empty:
            why = summary[summary.split_key == split]["reason"].iloc[0]
            budget_rows.append([split, f"not run ({why})", *[""] * len(settings.BUDGET_FRACTIONS)])
            continue
        smallest = float(s["total_up_bits"].min())
        budgets = [f * smallest for f in settings.BUDGET_FRACTIONS]
        for r in s.to_dict("records"):
            c = curves[(curves.split_key == split) & (curves.series_key == r["series_key"])]
            accs = [acc_within(c, b) for b in budgets]
            budget_records.append({"split_key": split, "series_key": r["series_key"],
                                   **{f"acc_at_{f:g}": a for f, a in zip(settings.BUDGET_FRACTIONS, accs)},
                                   **{f"budget_{f:g}": b for f, b in zip(settings.BUDGET_FRACTIONS, budgets)}})
            budget_rows.append([split, r["label"] + (f" (k = {r['k']})" if r["k"] != "" else ""),
                                *("-" if math.isnan(a) else f"{a:.2f}" for a in accs)])
    budgets_frame = pd.DataFrame(budget_records)

    run_rows = []
    for r in summary.to_dict("records"):
        if r["status"] not in ("ok", "diverged"):
            run_rows.append([r["split_key"], r["label"], f"{r['status']} ({r['reason']})", "", "", "", ""])
            continue
        run_rows.append([r["split_key"], r["label"] + (f" (k = {r['k']})" if r["k"] != "" else ""),
                         f"{r['final_acc']:.2f}", f"{r['final_server_acc']:.2f}", f"{r['total_up_bits']:.3g}",
                         f"{r['bits_per_message']:.4g}", str(r["rounds"])])
    k_notes = [f"{split}: Alg. 3 sent {bits:.4g} bits a message on average (d = {d}); k = round({bits:.4g} / "
               f"(32 + {settings.index_bits(d)})) = {k} ({k / d:.4%} of d)" for split, (k, bits, d) in ks.items()]
    md = "\n".join([
        f"### Compressors x algorithms at equal bits ({settings.COMPARE.dataset.upper()}, profile {args.profile}, "
        f"seeds {args.seeds})", "",
        "Test accuracy (%) reached within matched cumulative uplink budgets (fractions of the smallest total "
        "uplink bits among the split's runs, 1 % tolerance; '-': nothing evaluated within the budget):", "",
        markdown_grid(["split", "series", *(f"{f:g} x min total" for f in settings.BUDGET_FRACTIONS)], budget_rows,
                      right_align=set(range(2, 2 + len(settings.BUDGET_FRACTIONS)))), "",
        markdown_grid(["split", "series", "final acc (%)", "server acc (%)", "uplink bits", "bits / message",
                       "rounds"], run_rows, right_align={2, 3, 4, 5, 6}), "",
        *(f"- {n}" for n in [*k_notes, *settings.COMPARE.notes])]) + "\n"

    out_dir = figure_dir(args.results_root)
    paths = {"png": out_dir / "compare_compression.png", "csv": out_dir / "compare_compression.csv",
             "budgets": out_dir / "compare_compression_budgets.csv", "curves": out_dir / "compare_compression_curves.csv",
             "md": out_dir / "compare_compression.md"}
    draw(curves, summary, splits, paths["png"], f"Compressors x algorithms at equal bits (ours), profile {args.profile}")
    summary.to_csv(paths["csv"], index=False)
    budgets_frame.to_csv(paths["budgets"], index=False)
    curves.to_csv(paths["curves"], index=False)
    paths["md"].write_text(md, encoding="utf-8")
    print(md)
    for key, path in paths.items():
        print(f"[compare-compression] {key}: {path}")
    return 0


def draw(curves: pd.DataFrame, summary: pd.DataFrame, splits, path, title: str) -> None:
    import textwrap

    plot, axes = panel_grid(2, len(splits), (4.6, 3.4), extra_height=0.5)
    for col, split in enumerate(splits):
        top, bottom = axes[0][col], axes[1][col]
        c = curves[curves.split_key == split] if not curves.empty else curves
        if c.empty:
            why = summary[summary.split_key == split]["reason"].iloc[0]
            for ax in (top, bottom):
                ax.text(0.5, 0.5, "not run:\n" + "\n".join(textwrap.wrap(str(why), 44)[:6]), ha="center",
                        va="center", transform=ax.transAxes, fontsize="x-small")
            continue
        for series in settings.COMPARE_SERIES:
            s = c[c.series_key == series]
            if s.empty:
                continue
            lab = settings.COMPARE_LABELS[series]
            pos = s[s["up_bits"] > 0]
            top.plot(pos["up_bits"], pos["acc"], label=lab, linewidth=1)
            bottom.plot(s["round"], s["acc"], label=lab, linewidth=1)
        top.set_xscale("log")
        top.set_xlabel("cumulative uplink wire bits")
        bottom.set_xlabel("round")
        for ax in (top, bottom):
            ax.set_ylabel("test accuracy (%)")
            ax.grid(alpha=0.3)
        top.set_title(split, fontsize="medium")
        if col == 0:
            top.legend(fontsize="x-small")
    plot.suptitle(title, fontsize="medium")
    plot.tight_layout()
    plot.savefig(path, format="png")
