"""FedDyn's tables and figures as Targets (fedrepro.reports.target).

    python -m experiments feddyn table2 --profile quick [--datasets all] [--settings 10%] [--dsgd]
    python -m experiments feddyn fig8 --profile quick
    make feddyn-table2, make feddyn-fig8

Tables 1, 2, 4, 5, 6: common.py (`table_cells`, `render_table`); Figures 1, 2, 4-13:
figures.py; Figure 3 (the class concentration of the splits, no run): fig3.py.
"""
from __future__ import annotations

from dataclasses import dataclass

from experiments.feddyn import common, fig3, figures, table1, table2, table4, table5, table6

# The knob every FedDyn run target shares (tests: small runs).
SCALE = {"num_devices": "devices of every run instead of the recipe's (100, 500, 1000; 20 synthetic)"}


@dataclass(frozen=True)
class Table:
    """Tables 1, 2, 4, 5, 6: one run per (setting, dataset, split) x method, measured at each
    target of its dataset and split."""
    name: str
    spec: common.TableSpec
    dsgd: bool = False  # Table 2's --dsgd (FDY-T2-7)
    SCALE = SCALE

    @property
    def title(self) -> str:
        return f"FedDyn Table {self.spec.number}: {self.spec.title}"

    @property
    def claims(self) -> list[str]:
        return list(self.spec.claims)

    def add_options(self, ap) -> None:
        common.add_table_options(ap)
        if self.dsgd:
            ap.add_argument("--dsgd", action="store_true",
                            help="also run distributed SGD (one gradient per client and round) for FDY-T2-7")

    def cells(self, options, scale):
        return common.table_cells(self.spec, options, scale)

    def render(self, results) -> int:
        return common.render_table(self.spec, results)


@dataclass(frozen=True)
class Figure:
    """Figures 1, 2, 4-13: seed 0's curves, from the tables' runs where they are the same."""
    number: int
    SCALE = SCALE
    claims = ()

    @property
    def name(self) -> str:
        return f"fig{self.number}"

    @property
    def title(self) -> str:
        name, dataset, _, _ = figures.FIGURES[self.number]
        return f"FedDyn Figure {self.number}: {name} ({figures.NAMES[dataset]})"

    def add_options(self, ap) -> None:
        common.add_run_options(ap)
        ap.add_argument("--only-existing", dest="done_only", action="store_true",
                        help="the same as --done-only: draw only runs the store holds, run nothing")
        ap.add_argument("--dataset", default=None,
                        help="Figures 1 and 2 only: draw the paper's CIFAR-10 sweep on this dataset instead")
        ap.set_defaults(seeds=1)  # seed 0 is drawn: SEEDS does not add runs

    def cells(self, options, scale):
        return figures.figure_cells(self.number, options, scale)

    def render(self, results) -> int:
        return figures.render_figure(self.number, results)


@dataclass(frozen=True)
class Figure3:
    """Figure 3: how many classes hold 40 / 60 / 80 % of each MNIST device's data."""
    name = "fig3"
    title = "FedDyn Figure 3: classes holding 40 / 60 / 80 % of each MNIST device's data"
    claims = ("FDY-F3-1",)
    trains_outside_store = "it trains nothing: it draws the partitions of the MNIST labels"

    def cells(self, options, scale):
        return []

    def render(self, results) -> int:
        return fig3.render(results.options)


TARGETS = [Table("table1", table1.SPEC), Table("table2", table2.SPEC, dsgd=True), Table("table4", table4.SPEC),
           Table("table5", table5.SPEC), Table("table6", table6.SPEC),
           *(Figure(n) for n in (1, 2)), Figure3(), *(Figure(n) for n in range(4, 14))]
