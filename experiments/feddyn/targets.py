"""FedDyn's tables and figures as Targets (fedrepro.reports.target).

    python -m experiments feddyn table2 --profile quick [--datasets all] [--settings 10%] [--dsgd]
    python -m experiments feddyn fig8 --profile quick
    make feddyn-table2, make feddyn-fig8

Tables 1, 2, 4, 5, 6: common.py (`table_cells`, `render_table`); Figures 1, 2, 4-13:
figures.py; Figure 3 (the class concentration of the splits, no run): fig3.py.
"""
from __future__ import annotations

from experiments.feddyn import common, fig3, figures, table1, table2, table4, table5, table6
from fedrepro.reports.target import PaperTarget

# The knob every FedDyn run target shares (tests: small runs).
SCALE = {"num_devices": "devices of every run instead of the recipe's (100, 500, 1000; 20 synthetic)"}


def _dsgd_options(ap) -> None:
    common.add_table_options(ap)
    ap.add_argument("--dsgd", action="store_true",
                    help="also run distributed SGD (one gradient per client and round) for FDY-T2-7")


def _figure_options(ap) -> None:
    common.add_run_options(ap)
    ap.add_argument("--only-existing", dest="done_only", action="store_true",
                    help="the same as --done-only: draw only runs the store holds, run nothing")
    ap.add_argument("--dataset", default=None,
                    help="Figures 1, 2, 4 and 12 only: draw the paper's CIFAR-10 figure on this dataset instead")
    ap.set_defaults(seeds=1)  # seed 0 is drawn: SEEDS does not add runs


def table(name: str, spec: common.TableSpec, dsgd: bool = False) -> PaperTarget:
    """Tables 1, 2, 4, 5, 6: one run per (setting, dataset, split) x method, measured at each
    target of its dataset and split; Table 2 takes --dsgd (FDY-T2-7)."""
    return PaperTarget(name, f"FedDyn Table {spec.number}: {spec.title}",
                       cells_of=lambda options, scale: common.table_cells(spec, options, scale),
                       render_with=lambda results: common.render_table(spec, results),
                       claims=tuple(spec.claims), SCALE=SCALE,
                       options=_dsgd_options if dsgd else common.add_table_options)


def figure(number: int) -> PaperTarget:
    """Figures 1, 2, 4-13: seed 0's curves, from the tables' runs where they are the same."""
    name, dataset, _, _ = figures.FIGURES[number]
    return PaperTarget(f"fig{number}", f"FedDyn Figure {number}: {name} ({figures.NAMES[dataset]})",
                       cells_of=lambda options, scale: figures.figure_cells(number, options, scale),
                       render_with=lambda results: figures.render_figure(number, results),
                       claims=figures.FIGURE_CLAIMS[number], SCALE=SCALE, options=_figure_options)


TARGETS = [
    table("table1", table1.SPEC), table("table2", table2.SPEC, dsgd=True), table("table4", table4.SPEC),
    table("table5", table5.SPEC), table("table6", table6.SPEC),
    figure(1), figure(2),
    # how many classes hold 40 / 60 / 80 % of each MNIST device's data: no run
    PaperTarget("fig3", "FedDyn Figure 3: classes holding 40 / 60 / 80 % of each MNIST device's data",
                cells_of=lambda options, scale: [], render_with=lambda results: fig3.render(results.options),
                claims=("FDY-F3-1",), trains_outside_store="it trains nothing: it draws the partitions of the MNIST labels"),
    *(figure(n) for n in range(4, 14)),
]
