"""FedDyn Figures 1, 2 and 4-13 redrawn from runs: test accuracy (%) of the mean of all
clients' models against the round (App. A.2 "Convergence Plots"; SCAFFOLD's double cost is
in the tables, not in the curves).

    python -m experiments.feddyn.figures --figure 8 --profile quick
    python -m experiments.feddyn.figures --figure 1 --dataset mnist

Figures 4-13 use exactly the runs of the table grids (same overrides, so the results store
reuses what the tables ran; pass the same --profile and --eval-every-round). Figure 1 (alpha
sensitivity) and Figure 2 (FedSplit) are CIFAR-10 in the paper; `--dataset mnist` draws the
same sweep on MNIST and says so in the title. `--only-existing` draws what the store holds
and runs nothing. Seed 0's curve is drawn. A panel or curve without data says "not run" and
why. PNGs go to <results-root>/figures/.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from experiments.feddyn import common
from fedrepro import store
from fedrepro.config import compose_config, run_key
from fedrepro.reports.cli import run_target, table_parser
from fedrepro.reports.figures import figure_dir, panel_grid
from fedrepro.reports.grid import Cell, measure_cells

NAMES = {"mnist": "MNIST", "emnist_l": "EMNIST-L", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100",
         "shakespeare": "Shakespeare"}
SPLIT_NAMES = {"iid": "IID", "dirichlet0.6": "Dirichlet (.6)", "dirichlet0.3": "Dirichlet (.3)", "natural": "non-IID"}
ALPHAS = (1e-3, 1e-2, 1e-1)  # App. A.2's CIFAR-10 grid (Fig. 1 does not list its alphas)


@dataclass
class Panel:
    title: str
    cells: dict  # curve label -> Cell
    curves: dict = field(default_factory=dict)  # curve label -> metrics frame (filled by `fill`)
    missing: dict = field(default_factory=dict)  # curve label -> why it has no data (filled by `fill`)


def _cell(label: str, dataset: str, split: str, participation: float, devices: int, balance: str,
          algorithm: str, extra: tuple = ()) -> Cell:
    keys = {"panel": f"{dataset} {split} {participation:.0%} {devices} {balance}", "curve": label}
    cell = common.run_cell(keys, dataset, split, participation, devices, balance, algorithm)
    return cell if cell.not_run else Cell(cell.keys, [*cell.overrides, *extra])


def convergence(dataset: str, rows: list[tuple]) -> list[Panel]:
    """One panel per (participation, devices, balance, split), the four methods as curves."""
    panels = []
    for participation, devices, balance, split in rows:
        title = f"{SPLIT_NAMES[split]}, {participation:.0%}, {devices} devices" + \
            (", unbalanced" if balance == "unbalanced" else "")
        panels.append(Panel(title, {alg: _cell(alg, dataset, split, participation, devices, balance, alg)
                                    for alg in common.settings.ALGORITHMS}))
    return panels


def _participation_grid(dataset: str, splits=("iid", "dirichlet0.6", "dirichlet0.3")) -> list[Panel]:
    return convergence(dataset, [(p, 100, "balanced", s) for s in splits for p in (1.0, 0.1, 0.01)])


def _devices_grid(dataset: str, massive: int) -> list[Panel]:
    return convergence(dataset, [(0.1, n, "balanced", s) for s in ("iid", "dirichlet0.3") for n in (100, massive)])


def _balance_grid(dataset: str) -> list[Panel]:
    return convergence(dataset, [(0.1, 100, b, s) for s in ("iid", "dirichlet0.3") for b in ("balanced", "unbalanced")])


def _alpha_sweep(dataset: str) -> list[Panel]:
    cells = {f"alpha={a:g}": _cell(f"alpha={a:g}", dataset, "iid", 0.1, 100, "balanced", "feddyn",
                                   (f"algorithm.alpha={a}",)) for a in ALPHAS}
    return [Panel("(a) convergence, IID, 10 %, 100 devices", cells)]


def _fedsplit(dataset: str) -> list[Panel]:
    # FedSplit's step and split are unstated: step 1 (conf default), IID balanced, FedAvg's epochs.
    def panel(p):
        cells = {"FedDyn": _cell("FedDyn", dataset, "iid", p, 100, "balanced", "feddyn"),
                 "FedSplit Act": _cell("FedSplit Act", dataset, "iid", p, 100, "balanced", "fedsplit",
                                       ("algorithm.server=act",))}
        if p < 1:  # at 100 % All and Act are the same algorithm: one curve (Fig. 2a)
            cells["FedSplit All"] = _cell("FedSplit All", dataset, "iid", p, 100, "balanced", "fedsplit",
                                          ("algorithm.server=all",))
        return Panel(f"{p:.0%} participation, IID, 100 devices", cells)
    return [panel(1.0), panel(0.1)]


def _resnet(dataset: str) -> list[Panel]:
    """App. A.2: ResNet-18 with GroupNorm on CIFAR-10, IID, 100 devices, balanced, 10 %; the
    CNN's recipe otherwise (the appendix states no other value for it)."""
    return [Panel("IID, 10 %, 100 devices", {alg: _cell(alg, dataset, "iid", 0.1, 100, "balanced", alg,
                                                        ("model=resnet18_gn",))
                                             for alg in common.settings.ALGORITHMS})]


# figure -> (title, dataset in the paper, panel builder(dataset), dataset can be swapped)
FIGURES = {
    1: ("alpha sensitivity of FedDyn", "cifar10", _alpha_sweep, True),
    2: ("FedSplit (All / Act) vs FedDyn", "cifar10", _fedsplit, True),
    4: ("convergence, 100 vs 1000 devices", "cifar10", lambda d: _devices_grid(d, 1000), False),
    5: ("convergence, 100 vs 500 devices", "cifar100", lambda d: _devices_grid(d, 500), False),
    6: ("convergence, 100 % / 10 % / 1 % participation", "cifar10", _participation_grid, False),
    7: ("convergence, 100 % / 10 % / 1 % participation", "cifar100", _participation_grid, False),
    8: ("convergence, 100 % / 10 % / 1 % participation", "mnist", _participation_grid, False),
    9: ("convergence, 100 % / 10 % / 1 % participation", "emnist_l", _participation_grid, False),
    10: ("convergence, 100 % / 10 % / 1 % participation", "shakespeare",
         lambda d: _participation_grid(d, ("iid", "natural")), False),
    11: ("ResNet-18 (GroupNorm) convergence", "cifar10", _resnet, False),
    12: ("convergence, balanced vs unbalanced data", "cifar10", _balance_grid, False),
    13: ("convergence, balanced vs unbalanced data", "cifar100", _balance_grid, False),
}


# ---------------------------------------------------------------------------------------------
# Runs


def _existing(cell: Cell, args) -> Path | str:
    """The store's finished run of this cell (seed 0) as its folder, or why there is none."""
    overrides = [*cell.overrides, *common.run_extra(args), f"profile={args.profile}", "seed=0"]
    folder = store.run_dir(args.results_root, run_key(compose_config(overrides)))
    summary = store.read_summary(folder)
    if summary is None or summary.get("status") != "finished":
        return f"no finished run in {args.results_root} (run the table or drop --only-existing)"
    return folder


def fill(panels: list[Panel], args, log=None) -> None:
    """Run (or reuse) every runnable curve, seed 0, and read its metrics into its panel."""
    todo = [(p, label, c) for p in panels for label, c in p.cells.items() if not c.not_run]
    if args.only_existing:
        where = [_existing(c, args) for _, _, c in todo]
    else:
        frame, runs = measure_cells([c for _, _, c in todo], lambda run: 0.0, profile=args.profile, seeds=1,
                                    results_root=args.results_root, extra=common.run_extra(args),
                                    jobs=args.jobs, log=log)
        where = [runs[i][0].folder if r.status == "ok" else f"{r.status}: {r.reason}"
                 for i, r in enumerate(frame.itertuples())]
    for p in panels:
        p.missing.update({label: c.not_run for label, c in p.cells.items() if c.not_run})
    for (p, label, _), w in zip(todo, where):
        if isinstance(w, Path):
            p.curves[label] = pd.read_csv(w / "metrics.csv")
        else:
            p.missing[label] = w


# ---------------------------------------------------------------------------------------------
# Drawing


def _draw(ax, panel: Panel) -> None:
    for label, df in panel.curves.items():
        pts = df[["round", "all_test_acc"]].apply(pd.to_numeric, errors="coerce").dropna()
        ax.plot(pts["round"], 100 * pts["all_test_acc"], label=label, marker="." if len(pts) < 30 else None)
    if panel.curves:
        ax.legend(fontsize="x-small")
    if panel.missing:
        reasons = set(panel.missing.values())
        if not panel.curves and len(reasons) == 1:  # one reason for the whole panel
            text = "not run: " + reasons.pop()
        else:
            text = "not run:\n" + "\n".join(f"{label}: {why}" for label, why in panel.missing.items())
        ax.text(0.5, 0.05 if panel.curves else 0.5, _wrap(text), ha="center",
                va="bottom" if panel.curves else "center", transform=ax.transAxes, fontsize="x-small",
                color="dimgray")
    ax.set_title(panel.title, fontsize="small")
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    ax.grid(alpha=0.3)


def _wrap(text: str, width: int = 48) -> str:
    import textwrap

    return "\n".join(textwrap.fill(line, width) for line in text.splitlines())


def _best_alpha_panel(ax, panel: Panel) -> None:
    # Fig. 1b: the best test accuracy over rounds per alpha.
    best = {float(label.split("=")[1]): 100 * pd.to_numeric(df["all_test_acc"], errors="coerce").max()
            for label, df in panel.curves.items()}
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
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, format="png")
    return out_path


def main(argv=None) -> int:
    ap = table_parser(__doc__.splitlines()[0])
    common.add_run_options(ap)
    ap.add_argument("--figure", type=int, required=True, choices=sorted(FIGURES))
    ap.add_argument("--dataset", default=None,
                    help="Figures 1 and 2 only: draw the paper's CIFAR-10 sweep on this dataset instead")
    ap.add_argument("--only-existing", action="store_true", help="draw only runs the store holds; run nothing")
    args = ap.parse_args(argv)

    name, paper_dataset, build, swappable = FIGURES[args.figure]
    if args.dataset and not swappable:
        ap.error(f"--dataset applies to Figures 1 and 2 only; Figure {args.figure} is {NAMES[paper_dataset]}")
    dataset = args.dataset or paper_dataset
    panels = build(dataset)
    fill(panels, args)
    where = NAMES[paper_dataset] if dataset == paper_dataset else \
        f"on {NAMES.get(dataset, dataset)} (the paper: {NAMES[paper_dataset]})"
    title = f"FedDyn Figure {args.figure}, {where}: {name} (profile={args.profile}, seed 0)"
    suffix = "" if dataset == paper_dataset else f"_{dataset}"
    path = draw(args.figure, panels, title,
                figure_dir(args.results_root) / f"feddyn_fig{args.figure}{suffix}.png")
    print(f"[feddyn figure {args.figure}] {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_target(main))
