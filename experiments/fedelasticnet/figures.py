"""FedElasticNet's figures, redrawn from the runs of the results store (targets.py).

    python -m experiments fen fig1 [--profile quick] [--seeds 1] [--datasets all] [--splits iid,...]
    python -m experiments fen costs [--participation p10|p100]

  fig1   accuracy against the round, 10 %, Dirichlet (.3): a panel per dataset, six algorithms
  fig6   the same for IID and Dirichlet (.6)      fig7  Shakespeare IID and non-IID, 10 %
  fig8   MNIST and EMNIST-L at 100 % (Table 4's runs, its quick caps included)
  fig9   CIFAR-10 and CIFAR-100 at 100 %
  fig2   histograms of the Delta uploaded in the final round by FedDyn (transmitting updates),
         Algorithm 2 and Algorithm 3
  fig3 fig4 fig5  Algorithm 1, 2, 3 with lambda1 in {1e-8, 1e-6, 1e-4, 1e-2}: accuracy and nonzeros
  costs  beyond the paper (reviewer 3): nonzeros and entropy against the round, per round and
         cumulative, one figure per dataset and split

Figures 2-5 are CIFAR-10 in the paper; while CIFAR-10 cannot run here they use the first
runnable dataset (MNIST) and say so in their title. Panels whose runs cannot be made show
"not run: <reason>". PNGs and the checked claims go to <results-root>/figures/.

Fig. 2 needs the uploaded values themselves, which the store does not keep (the ledger reduces
each message at once). They are captured by running the figure's runs once more, in a
temporary results root, with a Ledger subclass (run_experiment's `ledger_class`) that also keeps the
last round's uplink messages: the run is the store's run (same config, same seeds), bit for bit
on the same device and thread count and up to float rounding on others (CIFAR-10's Algorithm 2,
re-run at one thread: 0.1 % more cumulative nonzeros, one test sample), and the capture is checked
against its own round's logged nonzeros and entropy. The
captured values are cached in <results-root>/captures/<run key>.pt.
"""
from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch

import fedrepro.runner
from experiments.fedelasticnet.claims import CHECKS, FEN_T2_UNIT
from experiments.fedelasticnet.common import (ACCURACY, IMAGE4, LABELS, PARTICIPATION, SIX, cell, dataset_reason,
                                              draw_curves, draw_reason, group_panels,
                                              new_figure, panels_figure, run_overrides, runnable_datasets,
                                              save, selection, table_grid, tail_accuracy, titled)
from fedrepro import store
from fedrepro.config import compose_config, run_key
from fedrepro.errors import ConfigError
from fedrepro.metrics.ledger import Ledger, shannon_entropy
from fedrepro.reports.claims import claims_markdown, evaluate_claims
from fedrepro.reports.figures import figure_dir
from fedrepro.reports.grid import Cell, refuse_done_only
from fedrepro.reports.reference import load_reference
from fedrepro.results import run_metrics

ALL_SPLITS = ["iid", "dirichlet0.6", "dirichlet0.3"]
# figure: (datasets, splits, participation, claims checked on its runs)
ACCURACY_FIGURES = {
    "1": (IMAGE4, ["dirichlet0.3"], "p10",
          ["FEN-F1-1", "FEN-F1-2", "FEN-F1-3", "FEN-S4-2", "REV-R2-4", "REV-R1-6"]),
    "6": (IMAGE4, ["iid", "dirichlet0.6"], "p10", ["FEN-F6-1", "REV-R1-6"]),
    "7": (["shakespeare"], ["iid", "natural"], "p10", ["FEN-F6-1", "REV-R2-4", "REV-R1-6"]),
    "8": (["mnist", "emnist_l"], ALL_SPLITS, "p100", ["FEN-F6-1", "REV-R1-6"]),
    "9": (["cifar10", "cifar100"], ALL_SPLITS, "p100", ["FEN-F6-1", "REV-R1-6"]),
}
SWEEP = {"3": "fen_alg1", "4": "fen_alg2", "5": "fen_alg3"}
LAMBDAS = [1e-8, 1e-6, 1e-4, 1e-2]
NAMES = {"fen_alg1": "Algorithm 1", "fen_alg2": "Algorithm 2", "fen_alg3": "Algorithm 3",
         "feddyn_update": "FedDyn (sending Delta)"}


def report_claims(ids: list[str], frame: pd.DataFrame, path: Path, profile: str, data: str = "") -> None:
    """The claims file, headed by the profile it was measured at (the claims index reads it) and,
    for a figure drawn on another dataset than the paper's, by that (`data`)."""
    md = claims_markdown(evaluate_claims(ids, frame, checks=CHECKS))
    head = f"### Claims on our numbers ({path.stem.removesuffix('_claims')}), profile={profile}"
    path.write_text(head + (f"; data: {data}" if data else "") + f"\n\n{md}\n")
    print("\nClaims check (on our numbers):\n" + md)


def data_names(summaries: dict) -> str:
    names = sorted({run.summary["dataset"] for runs in summaries.values() for run in runs})
    return ", ".join(names) or "none run"


def stand_in(data_root: str, dataset: str = "cifar10") -> tuple[str, str]:
    """The paper's dataset when its data is in `data_root` (or no dataset's is), else the first
    runnable one, and a title note."""
    why = dataset_reason(dataset, data_root)
    runnable = runnable_datasets(data_root) if why else []
    if not runnable:
        return dataset, LABELS[dataset]
    here = runnable[0]
    return here, f"paper: {LABELS[dataset]}, here: {LABELS[here]} ({LABELS[dataset]}: {why})"


def figure_dataset(args) -> tuple[str, str, str]:
    """Figs. 2-5 (CIFAR-10 in the paper): (dataset, title note, file suffix): `--dataset` where
    given (its data must be here), else CIFAR-10 or its stand-in (`stand_in`)."""
    chosen = getattr(args, "dataset", None)
    if not chosen:
        return (*stand_in(args.data_root), "")
    if chosen not in LABELS:
        raise ConfigError(f"--dataset {chosen!r} is not a FedElasticNet dataset; choose one of {', '.join(LABELS)}")
    why = dataset_reason(chosen, args.data_root)
    if why:
        raise ConfigError(f"--dataset {chosen}: {why} (data root {args.data_root}); choose a dataset whose data is here")
    suffix = "" if chosen == "cifar10" else f"_{chosen}"
    return chosen, f"paper: {LABELS['cifar10']}, here: {LABELS[chosen]} (--dataset)", suffix


def grid_cells(datasets, splits, algorithms, participation, args) -> tuple[list[Cell], list[str]]:
    """Every panel's cells; those left out by --datasets/--splits say so instead of vanishing."""
    chosen_d, chosen_s, notes = selection(args, datasets, splits, panels=True)
    cells = []
    for d in datasets:
        for s in splits:
            for a in algorithms:
                c = cell({"dataset_key": d, "split_key": s, "algorithm_key": a, "participation": participation},
                         participation, args.profile, data_root=args.data_root)
                if not c.not_run and (d not in chosen_d or s not in chosen_s):
                    c = Cell(c.keys, not_run="not selected with --datasets / --splits")
                cells.append(c)
    return cells, notes


# ---------------------------------------------------------------------------------------------
# Figs. 1, 6-9: accuracy against the round


def accuracy_cells(number: str, args) -> tuple[list[Cell], list[str]]:
    datasets, splits, participation, _ = ACCURACY_FIGURES[number]
    return grid_cells(datasets, splits, SIX, participation, args)


def accuracy_figure(number: str, results) -> Path:
    args = results.options
    _, splits, participation, claims = ACCURACY_FIGURES[number]
    cells, notes = accuracy_cells(number, args)
    ours, summaries = results.measure(cells, lambda run: tail_accuracy(run_metrics(run.folder)))
    title = (f"FedElasticNet Fig. {number}: test accuracy (mean of all clients' models) against the round, "
             f"{PARTICIPATION[participation]} participation, profile={args.profile}, data: "
             f"{data_names(summaries)}, seed 0")
    out = figure_dir(args.results_root)
    path = panels_figure(titled(group_panels(cells, ours, summaries, ["dataset_key", "split_key"], "algorithm_key")),
                         out / f"fedelasticnet_fig{number}.png", title=title, ncols=max(2, len(splits)))
    for line in notes:
        print(f"note: {line}")
    report_claims(claims, ours, out / f"fedelasticnet_fig{number}_claims.md", args.profile)
    return path


# ---------------------------------------------------------------------------------------------
# Fig. 2: the uploaded values of the final round


class RecordingLedger(Ledger):
    """The engine's ledger that also keeps a copy of every uplink message of the last round."""

    last: dict[str, list[torch.Tensor]] = {}

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._open: dict[str, list[torch.Tensor]] = {}

    def record(self, direction, client, name, tensor):
        super().record(direction, client, name, tensor)
        if direction == "up":
            self._open.setdefault(name, []).append(tensor.detach().cpu().clone())

    def end_round(self):
        RecordingLedger.last, self._open = self._open, {}
        return super().end_round()


def capture(overrides: list[str], args) -> dict:
    """{"uploads": {name: values pooled over the final round's clients}, "summary", "key"}."""
    cfg = compose_config([*overrides, f"profile={args.profile}", "seed=0", f"data_root={args.data_root}",
                          "logger.progress=false"])
    key = run_key(cfg)
    cache = Path(args.results_root) / "captures" / f"{key}.pt"
    if cache.exists():
        return torch.load(cache, weights_only=False)
    refuse_done_only("FedElasticNet Fig. 2 (its capture of the uploaded values)", args.done_only)
    with tempfile.TemporaryDirectory() as tmp:
        cfg.results_root = tmp
        result = fedrepro.runner.run_experiment(cfg, quiet=True, ledger_class=RecordingLedger)
    out = {"uploads": {n: torch.cat(v) for n, v in RecordingLedger.last.items()},
           "summary": result.summary, "key": key}
    cache.parent.mkdir(parents=True, exist_ok=True)
    torch.save(out, cache)
    return out


def _fits(x: np.ndarray) -> tuple[float, float]:
    """Mean log-likelihood of x under the maximum-likelihood Normal and Laplace."""
    if x.size < 2:
        return math.nan, math.nan
    var, b = x.var(), np.abs(x - np.median(x)).mean()
    normal = -0.5 * math.log(2 * math.pi * var) - 0.5 if var > 0 else math.nan
    laplace = -math.log(2 * b) - 1 if b > 0 else math.nan
    return normal, laplace


def update_stats(delta: torch.Tensor, summary: dict) -> dict:
    x = delta.double().numpy()
    centred = x - x.mean()
    final = summary["final"]
    ll_n, ll_l = _fits(x)
    ll_n_nz, ll_l_nz = _fits(x[x != 0])
    return {"zero_frac": float((x == 0).mean()),
            "run_zero_frac": 1 - final["cum_up_nonzeros"] / (summary["dim"] * final["cum_up_messages"]),
            "ll_normal": ll_n, "ll_laplace": ll_l, "ll_normal_nz": ll_n_nz, "ll_laplace_nz": ll_l_nz,
            "kurtosis": float((centred ** 4).mean() / (centred ** 2).mean() ** 2 - 3),
            "entropy": shannon_entropy(delta, 0.01), "n_values": x.size}


def capture_check(captured: dict, args) -> str:
    """Does the capture hold exactly the round's uplink (its logged nonzeros and entropy)?"""
    final = captured["summary"]["final"]
    every = torch.cat(list(captured["uploads"].values()))
    nnz, h = int(torch.count_nonzero(every)), shannon_entropy(every, 0.01)
    same = nnz == final["up_nonzeros"] and math.isclose(h, final["up_entropy"], rel_tol=1e-9)
    text = (f"capture vs logged final round: nnz {nnz} vs {final['up_nonzeros']}, "
            f"entropy {h:.6f} vs {final['up_entropy']:.6f}")
    stored = store.read_summary(store.run_dir(args.results_root, captured["key"]))
    if stored is not None:
        same_run = stored["final"]["cum_up_nonzeros"] == final["cum_up_nonzeros"]
        text += f"; the store's run has {'the same' if same_run else 'DIFFERENT'} cumulative nonzeros"
    return ("equal: " if same else "DIFFER: ") + text


def figure2(args) -> Path:
    dataset, note, suffix = figure_dataset(args)
    algorithms = ["feddyn_update", "fen_alg2", "fen_alg3"]
    rows, values = [], {}
    for alg in algorithms:
        captured = capture(run_overrides(dataset, "dirichlet0.3", alg, "p10", args.profile), args)
        summary = captured["summary"]
        values[alg] = captured["uploads"]["delta"]  # Algorithm 2: the model part, not Delta c
        rows.append({"algorithm_key": alg, "status": "ok" if summary["status"] == "finished" else summary["status"],
                     "data": f"{dataset} Dirichlet (.3) 10 %, round {summary['rounds_completed']}",
                     **update_stats(values[alg], summary)})
        print(f"[fig2] {alg}: {capture_check(captured, args)}")
    stats = pd.DataFrame(rows)
    fig, axes = new_figure(3, f"FedElasticNet Fig. 2: Delta uploaded in the final round (round "
                              f"{summary['rounds_completed']}, pooled over its clients), {note}, Dirichlet (.3), "
                              f"10 %, profile={args.profile}, seed 0", ncols=3)
    q = max(float(np.quantile(np.abs(v.numpy()), 0.999)) for v in values.values()) or 1.0
    for ax, (alg, v), (_, r) in zip(axes, values.items(), stats.iterrows()):
        ax.hist(v.numpy(), bins=np.linspace(-q, q, 201), log=True, color="tab:blue")
        ax.set_title(f"{NAMES[alg]} ({int(r['n_values'])} values)", fontsize=9)
        ax.set_xlabel("Delta coordinate")
        ax.set_ylabel("count (log)")
        ax.text(0.02, 0.97, f"zeros {r['zero_frac']:.1%}\nexcess kurtosis {r['kurtosis']:.1f}\n"
                            f"entropy {r['entropy']:.2f} bits", transform=ax.transAxes, va="top", fontsize=8)
    out = figure_dir(args.results_root)
    path = save(fig, out / f"fedelasticnet_fig2{suffix}.png")
    stats.to_csv(out / f"fedelasticnet_fig2{suffix}_stats.csv", index=False)
    report_claims(["FEN-F2-1", "FEN-F2-2", "FEN-F2-3"], stats, out / f"fedelasticnet_fig2{suffix}_claims.md",
                  args.profile, note)
    return path


# ---------------------------------------------------------------------------------------------
# Figs. 3-5: the lambda1 sweep


def sweep_cells(number: str, args) -> list[Cell]:
    dataset, _, _ = figure_dataset(args)
    return [cell({"dataset_key": dataset, "split_key": "dirichlet0.3", "algorithm_key": SWEEP[number], "lambda1": lam},
                 "p10", args.profile, data_root=args.data_root, lambda1=lam) for lam in LAMBDAS]


def sweep_figure(number: str, results) -> Path:
    args = results.options
    alg = SWEEP[number]
    _, note, suffix = figure_dataset(args)
    cells = sweep_cells(number, args)
    nnz, summaries = results.measure(cells, lambda run: run.summary["final"]["cum_up_nonzeros"] / FEN_T2_UNIT)
    acc, _ = results.measure(cells, lambda run: tail_accuracy(run_metrics(run.folder)))
    frame = nnz[["algorithm_key", "lambda1", "status"]].assign(nnz=nnz["ours_mean"], acc=acc["ours_mean"])
    fig, axes = new_figure(3, f"FedElasticNet Fig. {number} ({NAMES[alg]}): lambda1 sweep, {note}, Dirichlet (.3), "
                              f"10 %, other values from Table 5, profile={args.profile}", ncols=3)
    curves = {f"lambda1={c.keys['lambda1']:g}": run_metrics(summaries[i][0].folder)
              for i, c in enumerate(cells) if summaries.get(i)}
    draw_curves(axes[0], "test accuracy (seed 0)", curves, ACCURACY, "test accuracy")
    ok = frame[frame["status"] == "ok"]
    for ax, column, label in ((axes[1], "nnz", "cumulative nonzeros (x 1e7)"),
                              (axes[2], "acc", "accuracy, last 10 % of rounds (points)")):
        if ok.empty:
            draw_reason(ax, label, cells[0].not_run or "no finished run")
            continue
        ax.plot(ok["lambda1"], ok[column], marker="o")
        ax.set_xscale("log")
        ax.set_xlabel("lambda1")
        ax.set_title(label, fontsize=9)
        ax.grid(alpha=0.3)
    out = figure_dir(args.results_root)
    path = save(fig, out / f"fedelasticnet_fig{number}{suffix}.png")
    frame.to_csv(out / f"fedelasticnet_fig{number}{suffix}_data.csv", index=False)
    report_claims([f"FEN-F{number}-1", f"FEN-F{number}-2"], frame,
                  out / f"fedelasticnet_fig{number}{suffix}_claims.md", args.profile, note)
    return path


# ---------------------------------------------------------------------------------------------
# Costs against the round (reviewer 3)

COST_PANELS = [("nonzeros per round (x 1e7)", "up_nonzeros", 1 / FEN_T2_UNIT),
               ("cumulative nonzeros (x 1e7)", "cum_up_nonzeros", 1 / FEN_T2_UNIT),
               ("entropy per round (bits)", "up_entropy", 1.0),
               ("cumulative entropy (bits)", "cum_up_entropy", 1.0)]


def cost_cells(args) -> tuple[list[Cell], list[str]]:
    """The runs of Table 3 (p10) or 4 (p100): its rows, with FedDyn's two transmit modes."""
    reference = load_reference("fedelasticnet_table3")
    datasets, splits, notes = selection(args, list(dict.fromkeys(reference.dataset_key)),
                                        list(dict.fromkeys(reference.split_key)))
    reference = reference[reference.dataset_key.isin(datasets) & reference.split_key.isin(splits)]
    return table_grid(reference, args.participation, args.profile, args.data_root), notes


def cost_figures(results) -> list[Path]:
    args = results.options
    cells, notes = cost_cells(args)
    ours, summaries = results.measure(cells, lambda run: run.summary["final"]["cum_up_nonzeros"])
    out = figure_dir(args.results_root)
    paths, per_round = [], []
    for (d, s), content in group_panels(cells, ours, summaries, ["dataset_key", "split_key"], "algorithm_key").items():
        fig, axes = new_figure(4, f"Uplink costs against the round (beyond the paper; reviewer 3): {LABELS[d]} "
                                  f"{LABELS[s]}, {PARTICIPATION[args.participation]} participation, "
                                  f"profile={args.profile}, seed 0", ncols=2)
        for ax, (name, column, scale) in zip(axes, COST_PANELS):
            if isinstance(content, str):
                draw_reason(ax, name, content)
            else:
                draw_curves(ax, name, content, column, name, scale)
        paths.append(save(fig, out / f"fedelasticnet_costs_{d}_{s}_{args.participation}.png"))
    for i, runs in summaries.items():
        for run in runs[:1]:
            per_round.append(run_metrics(run.folder).assign(
                **{k: cells[i].keys[k] for k in ("dataset_key", "split_key", "algorithm_key")},
                final_cum_up_nonzeros=run.summary["final"]["cum_up_nonzeros"]))
    for line in notes:
        print(f"note: {line}")
    report_claims(["REV-R3-3"], pd.concat(per_round, ignore_index=True) if per_round else pd.DataFrame(),
                  out / f"fedelasticnet_costs_{args.participation}_claims.md", args.profile)
    return paths

