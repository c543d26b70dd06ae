"""FedElasticNet's tables and figures as Targets (fedrepro.reports.target).

    python -m experiments fen table2 --profile quick [--datasets all] [--splits iid]
    python -m experiments fen fig3 --profile quick
    python -m experiments fen costs --participation p100
    make fen-table2 (alias: make table2), make fen-fig1, make fen-costs

No target has scale knobs: --datasets and --splits shrink them all.
"""
from __future__ import annotations

from dataclasses import dataclass

from experiments.fedelasticnet import figures, tables
from experiments.fedelasticnet.common import PARTICIPATION


@dataclass(frozen=True)
class Table:
    """Tables 2-4: one run per (dataset, split, algorithm) row of the paper's table."""
    name: str
    spec: tables.TableSpec

    @property
    def title(self) -> str:
        return self.spec.title("PROFILE").replace(", profile=PROFILE", "")

    @property
    def claims(self) -> list[str]:
        return list(self.spec.claims)

    def cells(self, options, scale):
        return tables.table_cells(self.spec, options)

    def render(self, results) -> int:
        return tables.render_table(self.spec, results)


@dataclass(frozen=True)
class Table5:
    """The hyperparameters the runs of the Table 2/3 grid used, read from their configs."""
    name: str = "table5"
    title: str = "FedElasticNet Table 5: the lambda1, lambda2 and epsilon our runs used, beside the paper's"
    claims: tuple = ()

    def cells(self, options, scale):
        return tables.table5_cells(options)

    def render(self, results) -> int:
        return tables.render_table5(results)


def _printed(number: str, paths) -> int:
    for path in paths:
        print(f"[figure {number}] {path}")
    return 0


@dataclass(frozen=True)
class AccuracyFigure:
    """Figs. 1, 6-9: test accuracy against the round, a panel per (dataset, split)."""
    number: str
    title: str

    @property
    def name(self) -> str:
        return f"fig{self.number}"

    @property
    def claims(self) -> list[str]:
        return list(figures.ACCURACY_FIGURES[self.number][3])

    def cells(self, options, scale):
        return figures.accuracy_cells(self.number, options)[0]

    def render(self, results) -> int:
        return _printed(self.number, [figures.accuracy_figure(self.number, results)])


@dataclass(frozen=True)
class UploadsFigure:
    """Fig. 2: the Delta uploaded in the final round, captured by rerunning three runs."""
    name: str = "fig2"
    title: str = ("FedElasticNet Fig. 2: histograms of the Delta uploaded in the final round by FedDyn "
                  "(sending updates), Algorithms 2 and 3")
    claims: tuple = ("FEN-F2-1", "FEN-F2-2", "FEN-F2-3")
    trains_outside_store: str = ("the uploaded values are captured by rerunning the runs with a recording "
                                 "ledger (cached in <results-root>/captures)")

    def cells(self, options, scale):
        return []

    def render(self, results) -> int:
        return _printed("2", [figures.figure2(results.options)])


@dataclass(frozen=True)
class SweepFigure:
    """Figs. 3-5: one algorithm with lambda1 in {1e-8, 1e-6, 1e-4, 1e-2}."""
    number: str

    @property
    def name(self) -> str:
        return f"fig{self.number}"

    @property
    def title(self) -> str:
        return (f"FedElasticNet Fig. {self.number}: {figures.NAMES[figures.SWEEP[self.number]]} with lambda1 in "
                "{1e-8, 1e-6, 1e-4, 1e-2}: accuracy and nonzeros")

    @property
    def claims(self) -> list[str]:
        return [f"FEN-F{self.number}-1", f"FEN-F{self.number}-2"]

    def cells(self, options, scale):
        return figures.sweep_cells(self.number, options)

    def render(self, results) -> int:
        return _printed(self.number, [figures.sweep_figure(self.number, results)])


@dataclass(frozen=True)
class Costs:
    """Beyond the paper (reviewer 3): uplink costs against the round, Table 3's or 4's runs."""
    name: str = "costs"
    title: str = ("FedElasticNet costs: nonzeros and entropy against the round, per algorithm "
                  "(beyond the paper; reviewer 3)")
    claims: tuple = ("REV-R3-3",)

    @staticmethod
    def add_options(ap) -> None:
        ap.add_argument("--participation", default="p10", choices=list(PARTICIPATION),
                        help="the Tables 2/3 runs (p10) or Table 4's (p100)")

    def cells(self, options, scale):
        return figures.cost_cells(options)[0]

    def render(self, results) -> int:
        return _printed("costs", figures.cost_figures(results))


TARGETS = [
    Table("table2", tables.TABLE2), Table("table3", tables.TABLE3), Table("table4", tables.TABLE4), Table5(),
    AccuracyFigure("1", "FedElasticNet Fig. 1: test accuracy against the round, 10 %, Dirichlet (.3), "
                        "a panel per dataset"),
    UploadsFigure(),
    SweepFigure("3"), SweepFigure("4"), SweepFigure("5"),
    AccuracyFigure("6", "FedElasticNet Fig. 6: test accuracy against the round, 10 %, IID and Dirichlet (.6)"),
    AccuracyFigure("7", "FedElasticNet Fig. 7: test accuracy against the round, Shakespeare IID and non-IID, 10 %"),
    AccuracyFigure("8", "FedElasticNet Fig. 8: test accuracy against the round, MNIST and EMNIST-L, 100 %"),
    AccuracyFigure("9", "FedElasticNet Fig. 9: test accuracy against the round, CIFAR-10 and CIFAR-100, 100 %"),
    Costs(),
]
