"""The compressed L2GD paper's figures and table, and the compressors x algorithms comparison, as
Targets (fedrepro.reports.target).

    python -m experiments l2gd fig2 --profile quick [--eta 0.14]       # Figs. 2-3 (logistic.py)
    python -m experiments l2gd fig4 [--series l2gd_natural,fedopt]     # Figs. 4-11, Table 2 (cifar.py)
    python -m experiments compare-compression [--splits iid]           # compare_compression.py
    make l2gd-fig2, make l2gd-table2, make compare-compression
"""
from __future__ import annotations

from dataclasses import dataclass

from experiments.l2gd import cifar, compare_compression, logistic, settings
from experiments.l2gd.common import selection_ignored


@dataclass(frozen=True)
class Sweeps:
    """Figures 2-3: the loss after 100 iterations against p and against lambda on a1a / a2a."""
    figure: settings.LogisticFigure
    SCALE = {"p_grid": "the p values of the lambda = 10 sweep (default settings.P_GRID)",
             "lambda_grid": "the lambda values of the p = 0.65 sweep (default settings.LAMBDA_GRID)"}

    @property
    def name(self) -> str:
        return f"fig{self.figure.number}"

    @property
    def title(self) -> str:
        return f"L2GD Figure {self.figure.number}: a1a / a2a sweeps of p and lambda, " + \
            ("uncompressed" if self.figure.compressor == "none" else "the natural compressor at the workers")

    @property
    def claims(self) -> list[str]:
        return list(self.figure.claims)

    def add_options(self, ap) -> None:
        selection_ignored(ap)
        ap.add_argument("--eta", type=float, default=None,
                        help="the step for every point (default: 1 / (2 gamma(p_e)) from the data, settings.theory_eta)")

    def cells(self, options, scale):
        return logistic.figure_cells(self.figure, options, scale)

    def render(self, results) -> int:
        return logistic.render(self.figure, results)


@dataclass(frozen=True)
class Cifar:
    """Figures 4-11 and Table 2: CIFAR-10 models, one run per (model, series), shared between them."""
    key: str  # "4" ... "11" or "table2"
    title: str
    SCALE = {"model": "the model= config every recipe runs instead of its network (a stand-in, e.g. logistic)",
             "max_clients": "at most this many clients in every recipe (Figs. 7-8's 100 made fewer)"}

    @property
    def name(self) -> str:
        return self.key if self.key == "table2" else f"fig{self.key}"

    @property
    def claims(self) -> list[str]:
        return list(cifar.figure_spec(self.key, {})[2])

    def add_options(self, ap) -> None:
        selection_ignored(ap)
        ap.add_argument("--series", default=None, help="comma-separated series keys to run (default: the figure's all)")

    def cells(self, options, scale):
        return cifar.cells(self.key, options, scale, cifar.series_of(options))

    def render(self, results) -> int:
        return cifar.render(self.key, results)


@dataclass(frozen=True)
class CompareCompression:
    """Beyond the papers: FedElasticNet Alg. 3 vs FedAvg + Top-k + EF vs FedAvg + natural at equal bits."""
    name: str = "compare-compression"
    title: str = "Compressors x algorithms at equal uplink bits on MNIST (beyond the papers)"
    claims: tuple = ()

    def add_options(self, ap) -> None:
        compare_compression.add_options(ap)

    def cells(self, options, scale):
        return compare_compression.cells(options)

    def render(self, results) -> int:
        return compare_compression.render(results)


TARGETS = [
    Sweeps(settings.LOGISTIC_FIGURES[2]), Sweeps(settings.LOGISTIC_FIGURES[3]),
    Cifar("table2", "L2GD Table 2: bits / n to the target accuracy per model (CIFAR-10)"),
    Cifar("4", "L2GD Figure 4: compressed L2GD vs FedAvg and FedOpt, ResNet-18 (CIFAR-10)"),
    Cifar("5", "L2GD Figure 5: compressed L2GD vs FedAvg and FedOpt, DenseNet-121 (CIFAR-10)"),
    Cifar("6", "L2GD Figure 6: compressed L2GD vs FedAvg and FedOpt, MobileNet (CIFAR-10)"),
    Cifar("7", "L2GD Figure 7: FedAvg as a case of L2GD, accuracy (ResNet-56, 100 clients)"),
    Cifar("8", "L2GD Figure 8: FedAvg as a case of L2GD, loss (ResNet-56, 100 clients)"),
    Cifar("9", "L2GD Figure 9: compressed L2GD vs FedOpt, ResNet-18 (CIFAR-10)"),
    Cifar("10", "L2GD Figure 10: compressed L2GD vs FedOpt, DenseNet-121 (CIFAR-10)"),
    Cifar("11", "L2GD Figure 11: compressed L2GD vs FedOpt, MobileNet (CIFAR-10)"),
    CompareCompression(),
]
