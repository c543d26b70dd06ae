"""The compressed L2GD paper's figures and table, and the compressors x algorithms comparison, as
Targets (fedrepro.reports.target).

    python -m experiments l2gd fig2 --profile quick [--eta 0.14]       # Figs. 2-3 (logistic.py)
    python -m experiments l2gd fig4 [--series l2gd_natural,fedopt]     # Figs. 4-11, Table 2 (cifar.py)
    python -m experiments compare-compression [--splits iid]           # compare_compression.py
    make l2gd-fig2, make l2gd-table2, make compare-compression
"""
from __future__ import annotations

from experiments.l2gd import cifar, compare_compression, logistic, noise, settings
from experiments.l2gd.common import selection_ignored
from fedrepro.reports.target import PaperTarget

SWEEP_SCALE = {"p_grid": "the p values of the lambda = 10 sweep (default settings.P_GRID)",
               "lambda_grid": "the lambda values of the p = 0.65 sweep (default settings.LAMBDA_GRID)"}
CIFAR_SCALE = {"model": "the model= config every recipe runs instead of its network (a stand-in, e.g. logistic)",
               "max_clients": "at most this many clients in every recipe (Figs. 7-8's 100 made fewer)"}


def _noise_options(ap) -> None:
    selection_ignored(ap)
    ap.set_defaults(seeds=3)  # the claim compares the seeds' intervals (SEEDS aside)


def _sweep_options(ap) -> None:
    selection_ignored(ap)
    ap.add_argument("--eta", type=float, default=None,
                    help="the step for every point (default: 1 / (2 gamma(p_e)) from the data, settings.theory_eta)")


def _cifar_options(ap) -> None:
    selection_ignored(ap)
    ap.add_argument("--series", default=None, help="comma-separated series keys to run (default: the figure's all)")


def sweeps(figure: settings.LogisticFigure) -> PaperTarget:
    """Figures 2-3: the loss after 100 iterations against p and against lambda on a1a / a2a."""
    kind = "uncompressed" if figure.compressor == "none" else "the natural compressor at the workers"
    return PaperTarget(
        f"fig{figure.number}", f"L2GD Figure {figure.number}: a1a / a2a sweeps of p and lambda, {kind}",
        cells_of=lambda options, scale: logistic.figure_cells(figure, options, scale),
        render_with=lambda results: logistic.render(figure, results),
        claims=tuple(figure.claims), SCALE=SWEEP_SCALE, options=_sweep_options)


def on_cifar(key: str, title: str) -> PaperTarget:
    """Figures 4-11 and Table 2 (key "4" ... "11" or "table2"): CIFAR-10 models, one run per
    (model, series), shared between them."""
    return PaperTarget(
        cifar.stem(key), title,
        cells_of=lambda options, scale: cifar.cells(key, options, scale, cifar.series_of(options)),
        render_with=lambda results: cifar.render(key, results),
        claims=tuple(cifar.figure_spec(key, {})[2]), SCALE=CIFAR_SCALE, options=_cifar_options)


TARGETS = [
    sweeps(settings.LOGISTIC_FIGURES[2]), sweeps(settings.LOGISTIC_FIGURES[3]),
    on_cifar("table2", "L2GD Table 2: bits / n to the target accuracy per model (CIFAR-10)"),
    on_cifar("4", "L2GD Figure 4: compressed L2GD vs FedAvg and FedOpt, ResNet-18 (CIFAR-10)"),
    on_cifar("5", "L2GD Figure 5: compressed L2GD vs FedAvg and FedOpt, DenseNet-121 (CIFAR-10)"),
    on_cifar("6", "L2GD Figure 6: compressed L2GD vs FedAvg and FedOpt, MobileNet (CIFAR-10)"),
    on_cifar("7", "L2GD Figure 7: FedAvg as a case of L2GD, accuracy (ResNet-56, 100 clients)"),
    on_cifar("8", "L2GD Figure 8: FedAvg as a case of L2GD, loss (ResNet-56, 100 clients)"),
    on_cifar("9", "L2GD Figure 9: compressed L2GD vs FedOpt, ResNet-18 (CIFAR-10)"),
    on_cifar("10", "L2GD Figure 10: compressed L2GD vs FedOpt, DenseNet-121 (CIFAR-10)"),
    on_cifar("11", "L2GD Figure 11: compressed L2GD vs FedOpt, MobileNet (CIFAR-10)"),
    # beyond the figures: the noise of L2GD's objective against eta lambda / (n p) (Sec. 7.2.1)
    PaperTarget("noise", "L2GD: noise of the objective against eta lambda / (n p), MNIST MLP (beyond the figures; "
                         "Sec. 7.2.1)",
                cells_of=noise.cells, render_with=noise.render, claims=("L2G-S7-1",), options=_noise_options,
                SCALE={"dataset": "the dataset= config of the runs instead of mnist (an MNIST-shaped one)"}),
    PaperTarget("compare-compression",
                "Compressors x algorithms at equal uplink bits on MNIST (beyond the papers)",
                cells_of=lambda options, scale: compare_compression.cells(options),
                render_with=compare_compression.render, options=compare_compression.add_options),
]
