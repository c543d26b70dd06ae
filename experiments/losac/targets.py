"""LoSAC's table and figures as Targets (fedrepro.reports.target).

    python -m experiments losac table2 --profile quick [--datasets mnist,esr] [--cells M2T2,M5T6]
    python -m experiments losac fig1 ... fig5     # the curves (curves.py), runs in the results store
    python -m experiments losac fig6 [--datasets mnist,esr]    # DLG, trained in this process
    python -m experiments losac fig7 [--ranks 32,8]            # low-rank, trained in this process
    make losac-table2, losac-fig1 ... losac-fig7

Settings and every assumed value: settings.py; the claim checks: claims.py.
"""
from __future__ import annotations

from dataclasses import dataclass

from experiments.losac import curves, fig6, fig7, settings, table2
from experiments.losac.common import shared_options

DATASETS = "mnist, har, esr"


@dataclass(frozen=True)
class Table2:
    """Table II: one run per (dataset, method, M, T) of the paper's table."""
    name: str = "table2"
    title: str = "LoSAC Table II: rounds to 85 %, loss and accuracy, SCAFFOLD vs LoSAC"
    claims: tuple = table2.CLAIMS
    SCALE = {"num_clients": "N of every dataset's runs (paper 100); train.lr and the SCAFFOLD batch "
                            "follow n_i = training-set size / N"}

    def add_options(self, ap) -> None:
        shared_options(ap, DATASETS, ignored=("splits",))
        ap.add_argument("--cells", default="all",
                        help="comma-separated (M, T) cells such as M2T2,M5T6, or 'all' (the 9 of each dataset)")

    def cells(self, options, scale):
        return table2.cells(options, scale)

    def render(self, results) -> int:
        return table2.render_table(results)


@dataclass(frozen=True)
class Curves:
    """Figures 1-5: one run per panel x algorithm; the claims read the other curve figures' runs
    that are in the results store too."""
    number: int
    SCALE = {"num_clients": "N of the figure's runs (MNIST 1000, HAR and ESR 100); train.lr and the "
                            "batch follow n_i = training-set size / N",
             "panels": "only the figure's first k panels"}

    @property
    def name(self) -> str:
        return f"fig{self.number}"

    @property
    def title(self) -> str:
        return f"LoSAC Figure {self.number}: loss and accuracy curves, {settings.CURVE_FIGURES[self.number].title}"

    @property
    def claims(self) -> tuple:
        return settings.CURVE_FIGURES[self.number].claims

    def add_options(self, ap) -> None:
        shared_options(ap, ignored=("splits", "datasets"))

    def cells(self, options, scale):
        return curves.cells(curves.figure(self.number, scale), options.data_root)

    def render(self, results) -> int:
        return curves.render_figure(results, self.number)


@dataclass(frozen=True)
class DLG:
    """Figure 6: DLG on client 1's round-5 upload, each (dataset, algorithm) run to that round here."""
    name: str = "fig6"
    title: str = "LoSAC Figure 6: the DLG gradient-leakage attack"
    claims: tuple = fig6.CLAIMS
    trains_outside_store: str = "the attack needs client 1's round-5 upload, which a stored run does not keep"

    def add_options(self, ap) -> None:
        shared_options(ap, DATASETS, ignored=("seeds", "jobs", "splits"))

    def cells(self, options, scale):
        return []

    def render(self, results) -> int:
        return fig6.render_figure(results)


@dataclass(frozen=True)
class LowRank:
    """Figure 7: LoSAC-Prox vs SCAFFOLD-Prox on low-rank matrix estimation, run here round by round."""
    name: str = "fig7"
    title: str = "LoSAC Figure 7: low-rank matrix estimation (its claims need PROFILE=paper)"
    claims: tuple = fig7.CLAIMS
    trains_outside_store: str = "the figure needs the server matrix after every round, which a stored run does not keep"
    SCALE = {"num_clients": "N of the low-rank problem (paper 100)"}

    def add_options(self, ap) -> None:
        shared_options(ap, ignored=("seeds", "jobs", "splits"))
        ap.add_argument("--ranks", default=",".join(map(str, settings.FIG7_RANKS)),
                        help="comma-separated ranks of X_G (default: the paper's 32,16,8,4,2)")

    def cells(self, options, scale):
        return []

    def render(self, results) -> int:
        return fig7.render_figure(results)


TARGETS = [Table2(), *(Curves(n) for n in settings.CURVE_FIGURES), DLG(), LowRank()]
