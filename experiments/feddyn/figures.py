"""FedDyn Figures 1, 2 and 4-13 redrawn from runs: test accuracy (%) of the mean of all
clients' models against the round (App. A.2 "Convergence Plots"; SCAFFOLD's double cost is
in the tables, not in the curves).

    python -m experiments feddyn fig8 --profile quick
    python -m experiments feddyn fig1 --dataset mnist

Figures 4-13 use exactly the runs of the table grids (same overrides, so the results store
reuses what the tables ran; pass the same --profile and --eval-every-round). Figure 1 (alpha
sensitivity), Figure 2 (FedSplit), Figure 4 (100 vs 1 000 devices) and Figure 12 (balanced vs
unbalanced) are CIFAR-10 in the paper; `--dataset mnist` draws the same figure on MNIST with
MNIST's recipe (settings.py; 1 000 devices cut its data finer) and says so in the title and
the file name. `--done-only` (or `--only-existing`) draws what
the store holds and runs nothing. Seed 0's curve is drawn (--seeds defaults to 1 here, SEEDS
aside); `--seeds N` draws each curve as the mean over seeds 0..N-1 with the band of their range
(with --done-only: the seeds the store holds, counted in the legend) and judges FDY-F4-1 on the
seeds two curves share (claims.py). A panel or curve without data says "not run" and why. PNGs
go to <results-root>/figures/. Each figure is a Target (targets.py): `figure_cells`,
`render_figure`.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pandas as pd

from experiments.feddyn import common
from experiments.feddyn.claims import CHECKS, fedsplit_label
from fedrepro.errors import ConfigError
from fedrepro.reports.claims import evaluate_claims, write_claims
from fedrepro.reports.figures import figure_dir, not_run_note, panel_grid
from fedrepro.reports.grid import Cell
from fedrepro.results import run_metrics

NAMES = {"mnist": "MNIST", "emnist_l": "EMNIST-L", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100",
         "shakespeare": "Shakespeare"}
SPLIT_NAMES = {"iid": "IID", "dirichlet0.6": "Dirichlet (.6)", "dirichlet0.3": "Dirichlet (.3)", "natural": "non-IID"}
ALPHAS = (1e-3, 1e-2, 1e-1)  # App. A.2's CIFAR-10 grid (Fig. 1 does not list its alphas)
# FedSplit's step s (prox_{s L_k}; the paper states none): a decade either side of 1. Local SGD on
# the prox term is stable only for lr / s < 2, so lr 0.1 puts the grid's floor above 0.05.
FEDSPLIT_STEPS = (0.1, 1.0, 10.0)


@dataclass
class Panel:
    title: str
    cells: dict  # curve label -> Cell
    participation: Optional[float] = None
    curves: dict = field(default_factory=dict)  # curve label -> {seed: metrics frame} (filled by `fill`)
    missing: dict = field(default_factory=dict)  # curve label -> why it has no data (filled by `fill`)
    # curve label -> {seed: (metrics frame, rounds completed)} of the seeds that diverged: drawn up
    # to their last round, never read by the claims (filled by `fill`)
    diverged: dict = field(default_factory=dict)


def _cell(label: str, dataset: str, split: str, participation: float, devices: int, balance: str,
          algorithm: str, extra: tuple = (), num_devices: Optional[int] = None, *, data_root: str) -> Cell:
    keys = {"panel": f"{dataset} {split} {participation:.0%} {devices} {balance}", "curve": label}
    cell = common.run_cell(keys, dataset, split, participation, devices, balance, algorithm,
                           num_devices=num_devices, data_root=data_root)
    return cell if cell.not_run else Cell(cell.keys, [*cell.overrides, *extra])


def convergence(dataset: str, rows: list[tuple], num_devices: Optional[int], data_root: str) -> list[Panel]:
    """One panel per (participation, devices, balance, split), the four methods as curves."""
    panels = []
    for participation, devices, balance, split in rows:
        title = f"{SPLIT_NAMES[split]}, {participation:.0%}, {devices} devices" + \
            (", unbalanced" if balance == "unbalanced" else "")
        panels.append(Panel(title, {alg: _cell(alg, dataset, split, participation, devices, balance, alg,
                                               num_devices=num_devices, data_root=data_root)
                                    for alg in common.settings.ALGORITHMS}, participation))
    return panels


def _participation_grid(dataset: str, num_devices, data_root: str,
                        splits=("iid", "dirichlet0.6", "dirichlet0.3")) -> list[Panel]:
    return convergence(dataset, [(p, 100, "balanced", s) for s in splits for p in (1.0, 0.1, 0.01)], num_devices,
                       data_root)


def _devices_grid(dataset: str, massive: int, num_devices, data_root: str) -> list[Panel]:
    return convergence(dataset, [(0.1, n, "balanced", s) for s in ("iid", "dirichlet0.3") for n in (100, massive)],
                       num_devices, data_root)


def _balance_grid(dataset: str, num_devices, data_root: str) -> list[Panel]:
    return convergence(dataset, [(0.1, 100, b, s) for s in ("iid", "dirichlet0.3") for b in ("balanced", "unbalanced")],
                       num_devices, data_root)


def _alpha_sweep(dataset: str, num_devices, data_root: str) -> list[Panel]:
    cells = {f"alpha={a:g}": _cell(f"alpha={a:g}", dataset, "iid", 0.1, 100, "balanced", "feddyn",
                                   (f"algorithm.alpha={a}",), num_devices, data_root=data_root) for a in ALPHAS}
    return [Panel("(a) convergence, IID, 10 %, 100 devices", cells, 0.1)]


def _fedsplit(dataset: str, num_devices, data_root: str) -> list[Panel]:
    # FedSplit's step and split are unstated: IID balanced, FedAvg's epochs, and each variant's step
    # tuned over FEDSPLIT_STEPS (claims.csv's rule for FDY-F2-1); claims.py compares FedDyn with
    # each variant's best step.
    def panel(p):
        cells = {"FedDyn": _cell("FedDyn", dataset, "iid", p, 100, "balanced", "feddyn", (), num_devices,
                                 data_root=data_root)}
        for server in ("act", "all") if p < 1 else ("act",):  # at 100 % All and Act are the same (Fig. 2a)
            for step in FEDSPLIT_STEPS:
                label = fedsplit_label(server, step)
                cells[label] = _cell(label, dataset, "iid", p, 100, "balanced", "fedsplit",
                                     (f"algorithm.server={server}", f"algorithm.step={step:g}"), num_devices,
                                     data_root=data_root)
        return Panel(f"{p:.0%} participation, IID, 100 devices", cells, p)
    return [panel(1.0), panel(0.1)]


def _resnet(dataset: str, num_devices, data_root: str) -> list[Panel]:
    """App. A.2: ResNet-18 with GroupNorm on CIFAR-10, IID, 100 devices, balanced, 10 %; the
    CNN's recipe otherwise (the appendix states no other value for it)."""
    return [Panel("IID, 10 %, 100 devices", {alg: _cell(alg, dataset, "iid", 0.1, 100, "balanced", alg,
                                                        ("model=resnet18_gn",), num_devices, data_root=data_root)
                                             for alg in common.settings.ALGORITHMS}, 0.1)]


# figure -> (title, dataset in the paper, panel builder(dataset, num_devices, data_root), dataset
# can be swapped)
FIGURES = {
    1: ("alpha sensitivity of FedDyn", "cifar10", _alpha_sweep, True),
    2: ("FedSplit (All / Act) vs FedDyn", "cifar10", _fedsplit, True),
    4: ("convergence, 100 vs 1000 devices", "cifar10", lambda d, n, root: _devices_grid(d, 1000, n, root), True),
    5: ("convergence, 100 vs 500 devices", "cifar100", lambda d, n, root: _devices_grid(d, 500, n, root), False),
    6: ("convergence, 100 % / 10 % / 1 % participation", "cifar10", _participation_grid, False),
    7: ("convergence, 100 % / 10 % / 1 % participation", "cifar100", _participation_grid, False),
    8: ("convergence, 100 % / 10 % / 1 % participation", "mnist", _participation_grid, False),
    9: ("convergence, 100 % / 10 % / 1 % participation", "emnist_l", _participation_grid, False),
    10: ("convergence, 100 % / 10 % / 1 % participation", "shakespeare",
         lambda d, n, root: _participation_grid(d, n, root, ("iid", "natural")), False),
    11: ("ResNet-18 (GroupNorm) convergence", "cifar10", _resnet, False),
    12: ("convergence, balanced vs unbalanced data", "cifar10", _balance_grid, True),
    13: ("convergence, balanced vs unbalanced data", "cifar100", _balance_grid, False),
}

# figure -> the claims (claims.csv) its curves judge; FDY-F4-1 covers every convergence figure
FIGURE_CLAIMS = {1: ("FDY-F1-1", "FDY-F1-2"), 2: ("FDY-F2-1", "FDY-F2-2"), 11: ("FDY-F11-1",),
                 **{n: ("FDY-F4-1",) for n in (4, 5, 6, 7, 8, 9, 10, 12, 13)}}


# ---------------------------------------------------------------------------------------------
# Runs


def dataset_of(number: int, args) -> str:
    """The figure's dataset: the paper's, or --dataset (the CIFAR-10 Figures 1, 2, 4 and 12, whose
    settings carry over to another dataset; not 6, whose MNIST and EMNIST-L versions are Figures 8
    and 9, nor 11, whose ResNet is CIFAR's)."""
    _, paper_dataset, _, swappable = FIGURES[number]
    if args.dataset and not swappable:
        which = ", ".join(str(n) for n, f in FIGURES.items() if f[3])
        raise ConfigError(f"--dataset applies to Figures {which} only; Figure {number} is {NAMES[paper_dataset]}")
    if args.dataset and args.dataset not in NAMES:
        raise ConfigError(f"--dataset {args.dataset}: FedDyn has no recipe for it; choose from {', '.join(NAMES)}")
    return args.dataset or paper_dataset


def panels_of(number: int, args, scale) -> list[Panel]:
    return FIGURES[number][2](dataset_of(number, args), scale.get("num_devices"), args.data_root)


def figure_cells(number: int, args, scale) -> list[Cell]:
    """Every run a figure draws (Target.cells): one per curve, for seeds 0..--seeds-1."""
    return common.with_eval_extra([c for p in panels_of(number, args, scale) for c in p.cells.values()], args)


def fill(panels: list[Panel], results) -> None:
    """Read every runnable curve's finished runs, one per seed, into its panel (`results`: the
    target's runs). With --done-only a seed the store lacks is left out, so a curve holds the
    seeds that finished; a curve none of whose seeds finished, or one with a seed that diverged
    or failed, is missing, with why (a mean over the other seeds would hide it). Its diverged
    seeds are kept apart, to be drawn up to where they stopped."""
    todo = [(p, label, c) for p in panels for label, c in p.cells.items() if not c.not_run]
    frame, runs = results.measure(common.with_eval_extra([c for _, _, c in todo], results.options),
                                  lambda run: 0.0)
    for p in panels:
        p.missing.update({label: c.not_run for label, c in p.cells.items() if c.not_run})
    for i, ((p, label, _), row) in enumerate(zip(todo, frame.itertuples())):
        finished = {r.summary["seed"]: r.folder for r in runs.get(i, []) if r.summary["status"] == "finished"}
        if finished and row.status in ("ok", "not run"):  # "not run": only missing seeds
            p.curves[label] = {seed: run_metrics(folder) for seed, folder in sorted(finished.items())}
        else:
            p.missing[label] = f"{row.status}: {row.reason}"
            if row.status == "diverged":  # drawn up to where it stopped (a failed seed beside it: the note only)
                p.diverged[label] = {r.summary["seed"]: (run_metrics(r.folder), r.summary["rounds_completed"])
                                     for r in sorted(runs.get(i, []), key=lambda r: r.summary["seed"])
                                     if r.summary["status"] == "diverged"}


def _horizon(cell: Cell) -> float:
    """The rounds the paper's setting asks of this curve (its train.rounds; a profile may stop it
    sooner), or NaN when the cell names none."""
    asked = [o.split("=", 1)[1] for o in cell.overrides if o.startswith("train.rounds=")]
    return float(asked[-1]) if asked else math.nan


def _tails(metrics: pd.DataFrame) -> dict:
    """Test accuracy (%) of the evaluated rounds: mean of the last 10 % (at least one round), of
    the 10 % before, best, final; finite unless a value is NaN or infinite."""
    acc = 100 * pd.to_numeric(metrics["all_test_acc"], errors="coerce").dropna()
    acc = acc[metrics.loc[acc.index, "round"] > 0] if "round" in metrics else acc  # round 0: the start
    k = max(1, math.ceil(0.1 * len(acc)))
    return {"rounds": int(metrics.loc[acc.index, "round"].max()) if len(acc) else 0,
            "tail": acc.iloc[-k:].mean(), "prev_tail": acc.iloc[-2 * k:-k].mean() if len(acc) > k else math.nan,
            "best": acc.max(), "final": acc.iloc[-1] if len(acc) else math.nan,
            "finite": bool(len(acc)) and bool(acc.map(math.isfinite).all())}


def curve_frame(number: int, panels: list[Panel]) -> pd.DataFrame:
    """One row per curve (claims.py, 'Figures'): panel, participation, curve, status ("ok" or why
    it has no data), the tail statistics (means over the curve's seeds), `tails` ({seed: tail
    mean}, for comparisons on the seeds two curves share), `seeds` and the metrics of its first
    seed (rounds to a target are read on one seed's curve)."""
    rows = []
    for p in panels:
        for label in p.cells:
            base = {"figure": number, "panel": p.title, "participation": p.participation, "curve": label,
                    "horizon": _horizon(p.cells[label])}
            if label in p.curves:
                per_seed = {seed: _tails(m) for seed, m in p.curves[label].items()}
                stats = {k: (all(t[k] for t in per_seed.values()) if k == "finite" else
                             min(t[k] for t in per_seed.values()) if k == "rounds" else
                             statistics.fmean(t[k] for t in per_seed.values()))
                         for k in next(iter(per_seed.values()))}
                rows.append({**base, "status": "ok", **stats, "tails": {s: t["tail"] for s, t in per_seed.items()},
                             "seeds": tuple(per_seed), "metrics": next(iter(p.curves[label].values()))})
            else:
                rows.append({**base, "status": p.missing.get(label, "not run")})
    return pd.DataFrame(rows)


def diverged_label(label: str, rounds_completed: list[int]) -> str:
    """A diverged curve's name: where its seeds stopped (rounds completed, one a seed)."""
    return f"{label}: diverged after round{'s' if len(rounds_completed) > 1 else ''} " + \
        ", ".join(map(str, rounds_completed))


def panel_data(panels: list[Panel]) -> pd.DataFrame:
    """Every drawn point: panel, curve, seed, round, all_test_acc (the figure's data, as CSV); a
    diverged seed's points under its curve's label with where it stopped."""
    parts = [df[["round", "all_test_acc"]].assign(panel=p.title, curve=label, seed=seed)
             for p in panels for label, seeds in p.curves.items() for seed, df in seeds.items()]
    parts += [df[["round", "all_test_acc"]].assign(panel=p.title, curve=diverged_label(label, [done]), seed=seed)
              for p in panels for label, seeds in p.diverged.items() for seed, (df, done) in seeds.items()]
    columns = ["panel", "curve", "seed", "round", "all_test_acc"]
    return pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)


# ---------------------------------------------------------------------------------------------
# Drawing


def _seed_curves(seeds: dict) -> pd.DataFrame:
    """Test accuracy (%) by round (index), one column per seed, the rounds every seed evaluated."""
    cols = {seed: df[["round", "all_test_acc"]].apply(pd.to_numeric, errors="coerce").dropna()
            .set_index("round")["all_test_acc"] * 100 for seed, df in seeds.items()}
    return pd.DataFrame(cols).dropna()


def _draw(ax, panel: Panel) -> None:
    for label, seeds in panel.curves.items():
        acc = _seed_curves(seeds)
        name = label if len(seeds) == 1 else f"{label} ({len(seeds)} seeds)"
        line, = ax.plot(acc.index, acc.mean(axis=1), label=name, marker="." if len(acc) < 30 else None)
        if len(seeds) > 1:  # the seeds' range
            ax.fill_between(acc.index, acc.min(axis=1), acc.max(axis=1), color=line.get_color(), alpha=0.2)
    for label, seeds in panel.diverged.items():  # dashed up to the last evaluated round, x at its end
        color = None
        for seed, (df, done) in seeds.items():
            acc = _seed_curves({seed: df})[seed]
            acc = acc[acc.map(math.isfinite)]
            name = diverged_label(label, [d for _, d in seeds.values()]) if color is None else None
            line, = ax.plot(acc.index, acc, linestyle="--", label=name, color=color)
            color = line.get_color()  # one colour and one legend entry a curve, whatever its seeds
            ax.plot(acc.index[-1:], acc.iloc[-1:], marker="x", color=color)
    drawn = bool(panel.curves or panel.diverged)
    if drawn:
        ax.legend(fontsize="x-small" if len(panel.curves) + len(panel.diverged) < 6 else "xx-small")
    unexplained = {label: why for label, why in panel.missing.items() if label not in panel.diverged}
    if unexplained:
        ax.text(0.5, 0.05 if drawn else 0.5, _wrap(not_run_note(unexplained, drawn)), ha="center",
                va="bottom" if drawn else "center", transform=ax.transAxes, fontsize="x-small", color="dimgray")
    ax.set_title(panel.title, fontsize="small")
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    ax.grid(alpha=0.3)


def _wrap(text: str, width: int = 48) -> str:
    import textwrap

    return "\n".join(textwrap.fill(line, width) for line in text.splitlines())


def _best_alpha_panel(ax, panel: Panel) -> None:
    # Fig. 1b: the best test accuracy over rounds per alpha.
    best = {float(label.split("=")[1]): _seed_curves(seeds).mean(axis=1).max()
            for label, seeds in panel.curves.items()}
    if best:
        xs = sorted(best)
        ax.plot(xs, [best[x] for x in xs], marker="o")
        ax.set_xscale("log")
    else:
        why = next(iter(panel.missing.values()), "no data")
        ax.text(0.5, 0.5, _wrap(f"not run: {why}"), ha="center", va="center", transform=ax.transAxes,
                fontsize="x-small", color="dimgray")
    ax.set_title("(b) best test accuracy per alpha", fontsize="small")
    ax.set_xlabel("alpha")
    ax.set_ylabel("best test accuracy (%)")
    ax.grid(alpha=0.3)


def draw(number: int, panels: list[Panel], title: str, out_path: Path) -> Path:
    n = len(panels) + (number == 1)
    ncols = min(n, 3)
    nrows = math.ceil(n / ncols)
    fig, axes = panel_grid(nrows, ncols, (4.6, 3.6), extra_height=0.6)
    axes = axes.ravel()
    for ax, panel in zip(axes, panels):
        _draw(ax, panel)
    if number == 1:
        _best_alpha_panel(axes[len(panels)], panels[0])
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.suptitle(_wrap(title, 60 * ncols), fontsize="medium")  # a one-panel figure is narrow
    fig.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, format="png")
    return out_path


def render_figure(number: int, results) -> int:
    """Draw a figure from its runs (Target.render)."""
    args = results.options
    name, paper_dataset, _, _ = FIGURES[number]
    dataset = dataset_of(number, args)
    panels = panels_of(number, args, results.scale)
    fill(panels, results)
    where = NAMES[paper_dataset] if dataset == paper_dataset else \
        f"on {NAMES.get(dataset, dataset)} (the paper: {NAMES[paper_dataset]})"
    seeds = sorted({s for p in panels for curve in p.curves.values() for s in curve})
    drawn = "seed 0" if seeds in ([], [0]) else f"seeds {', '.join(map(str, seeds))} (as each curve has them)"
    title = f"FedDyn Figure {number}, {where}: {name} (profile={args.profile}, {drawn})"
    suffix = "" if dataset == paper_dataset else f"_{dataset}"
    out = figure_dir(args.results_root)
    path = draw(number, panels, title, out / f"feddyn_fig{number}{suffix}.png")
    panel_data(panels).to_csv(out / f"feddyn_fig{number}{suffix}_data.csv", index=False)
    print(f"[feddyn figure {number}] {path} (panel data: feddyn_fig{number}{suffix}_data.csv)")
    ours = curve_frame(number, panels)
    ours.attrs["targets_100_iid"] = table2_targets(dataset)
    header = f"### FedDyn Figure {number} claims on our curves, {where}, profile={args.profile}, {drawn}"
    print("\n" + write_claims(out / f"feddyn_fig{number}{suffix}_claims.md",
                              evaluate_claims(list(FIGURE_CLAIMS[number]), ours, checks=CHECKS), header))
    return 0


def table2_targets(dataset: str) -> tuple:
    """Table 2's accuracy targets (%) for the dataset's IID split at 100 % participation (FDY-F2-1)."""
    ref = common.load_table(2)
    rows = ref[(ref["dataset_key"] == dataset) & (ref["split_key"] == "iid") & (ref["participation"] == 1.0)]
    return tuple(sorted(set(rows["target_value"]), reverse=True))
