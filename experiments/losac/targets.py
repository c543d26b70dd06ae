"""LoSAC's table and figures as Targets (fedrepro.reports.target).

    python -m experiments losac table2 --profile quick [--datasets mnist,esr] [--cells M2T2,M5T6]
    python -m experiments losac fig1 ... fig5     # the curves (curves.py), runs in the results store
    python -m experiments losac fig6 [--datasets mnist,esr]    # DLG, trained in this process
    python -m experiments losac fig7 [--ranks 32,8]            # low-rank, trained in this process
    make losac-table2, losac-fig1 ... losac-fig7

Settings and every assumed value: settings.py; the claim checks: claims.py.
"""
from __future__ import annotations

from experiments.losac import curves, fig6, fig7, settings, table2
from experiments.losac.common import shared_options
from fedrepro.reports.target import PaperTarget

DATASETS = "mnist, har, esr"


def _table2_options(ap) -> None:
    shared_options(ap, DATASETS, ignored=("splits",))
    ap.add_argument("--cells", default="all",
                    help="comma-separated (M, T) cells such as M2T2,M5T6, or 'all' (the 9 of each dataset)")


def _fig7_options(ap) -> None:
    shared_options(ap, ignored=("seeds", "jobs", "splits"))
    ap.add_argument("--ranks", default=",".join(map(str, settings.FIG7_RANKS)),
                    help="comma-separated ranks of X_G (default: the paper's 32,16,8,4,2)")


def _no_cells(options, scale) -> list:
    return []


def curve_figure(number: int) -> PaperTarget:
    """Figures 1-5: one run per panel x algorithm; the claims read the other curve figures' runs
    that are in the results store too."""
    return PaperTarget(
        f"fig{number}", f"LoSAC Figure {number}: loss and accuracy curves, {settings.CURVE_FIGURES[number].title}",
        cells_of=lambda options, scale: curves.cells(curves.figure(number, scale), options.data_root),
        render_with=lambda results: curves.render_figure(results, number),
        claims=settings.CURVE_FIGURES[number].claims,
        SCALE={"num_clients": "N of the figure's runs (MNIST 1000, HAR and ESR 100); train.lr and the "
                              "batch follow n_i = training-set size / N",
               "panels": "only the figure's first k panels"},
        options=lambda ap: shared_options(ap, ignored=("splits", "datasets")))


TARGETS = [
    # Table II: one run per (dataset, method, M, T) of the paper's table
    PaperTarget("table2", "LoSAC Table II: rounds to 85 %, loss and accuracy, SCAFFOLD vs LoSAC",
                cells_of=table2.cells, render_with=table2.render_table, claims=table2.CLAIMS,
                SCALE={"num_clients": "N of every dataset's runs (paper 100); train.lr and the SCAFFOLD batch "
                                      "follow n_i = training-set size / N"},
                options=_table2_options),
    *(curve_figure(n) for n in settings.CURVE_FIGURES),
    PaperTarget("fig6", "LoSAC Figure 6: the DLG gradient-leakage attack",
                cells_of=_no_cells, render_with=fig6.render_figure, claims=fig6.CLAIMS,
                options=lambda ap: shared_options(ap, DATASETS, ignored=("seeds", "jobs", "splits")),
                trains_outside_store="the attack needs client 1's round-5 upload, which a stored run does not keep"),
    PaperTarget("fig7", "LoSAC Figure 7: low-rank matrix estimation (its claims need PROFILE=paper)",
                cells_of=_no_cells, render_with=fig7.render_figure, claims=fig7.CLAIMS,
                SCALE={"num_clients": "N of the low-rank problem (paper 100)"}, options=_fig7_options,
                trains_outside_store="the figure needs the server matrix after every round, which a stored "
                                     "run does not keep"),
]
