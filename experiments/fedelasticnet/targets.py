"""FedElasticNet's tables and figures as Targets (fedrepro.reports.target).

    python -m experiments fen table2 --profile quick [--datasets all] [--splits iid]
    python -m experiments fen fig3 --profile quick [--dataset mnist]
    python -m experiments fen costs --participation p100
    make fen-table2 (alias: make table2), make fen-fig1, make fen-costs

No target has scale knobs: --datasets and --splits shrink them all.
"""
from __future__ import annotations

from experiments.fedelasticnet import ablations, compression, figures, overhead, skew, tables, theorem
from experiments.fedelasticnet.common import PARTICIPATION
from fedrepro.reports.cli import count
from fedrepro.reports.target import PaperTarget


def _printed(number: str, paths) -> int:
    for path in paths:
        print(f"[figure {number}] {path}")
    return 0


def table(name: str, spec: tables.TableSpec) -> PaperTarget:
    """Tables 2-4: one run per (dataset, split, algorithm) row of the paper's table."""
    return PaperTarget(name, spec.title("PROFILE").replace(", profile=PROFILE", ""),
                       cells_of=lambda options, scale: tables.table_cells(spec, options),
                       render_with=lambda results: tables.render_table(spec, results), claims=spec.judged)


def accuracy_figure(number: str, title: str) -> PaperTarget:
    """Figs. 1, 6-9: test accuracy against the round, a panel per (dataset, split)."""
    return PaperTarget(f"fig{number}", title,
                       cells_of=lambda options, scale: figures.accuracy_cells(number, options)[0],
                       render_with=lambda results: _printed(number, [figures.accuracy_figure(number, results)]),
                       claims=tuple(figures.ACCURACY_FIGURES[number][3]))


def _dataset_option(ap) -> None:
    ap.add_argument("--dataset", default=None,
                    help="draw the paper's CIFAR-10 figure on this dataset instead (mnist, emnist_l, ...): "
                         "named in the title and the file name")


def sweep_figure(number: str) -> PaperTarget:
    """Figs. 3-5: one algorithm with lambda1 in {1e-8, 1e-6, 1e-4, 1e-2}."""
    return PaperTarget(f"fig{number}",
                       f"FedElasticNet Fig. {number}: {figures.NAMES[figures.SWEEP[number]]} with lambda1 in "
                       "{1e-8, 1e-6, 1e-4, 1e-2}: accuracy and nonzeros",
                       cells_of=lambda options, scale: figures.sweep_cells(number, options),
                       render_with=lambda results: _printed(number, [figures.sweep_figure(number, results)]),
                       claims=(f"FEN-F{number}-1", f"FEN-F{number}-2"), options=_dataset_option)


def _on_seeds(n: int):
    """The options of a target judged on seeds: --seeds defaults to n, whatever SEEDS says
    (paired intervals over the seeds decide its verdicts)."""
    return lambda ap: ap.set_defaults(seeds=n)


def _overhead_options(ap) -> None:
    ap.add_argument("--rounds", type=count, default=20, help="rounds timed a side (the claim needs at least 20)")


def _costs_options(ap) -> None:
    ap.add_argument("--participation", default="p10", choices=list(PARTICIPATION),
                    help="the Tables 2/3 runs (p10) or Table 4's (p100)")


TARGETS = [
    table("table2", tables.TABLE2), table("table3", tables.TABLE3), table("table4", tables.TABLE4),
    # the hyperparameters the runs of the Table 2/3 grid used, read from their configs
    PaperTarget("table5", "FedElasticNet Table 5: the lambda1, lambda2 and epsilon our runs used, beside the paper's",
                cells_of=lambda options, scale: tables.table5_cells(options), render_with=tables.render_table5),
    accuracy_figure("1", "FedElasticNet Fig. 1: test accuracy against the round, 10 %, Dirichlet (.3), "
                         "a panel per dataset"),
    # the Delta uploaded in the final round, captured by rerunning three runs
    PaperTarget("fig2", "FedElasticNet Fig. 2: histograms of the Delta uploaded in the final round by FedDyn "
                        "(sending updates), Algorithms 2 and 3",
                cells_of=lambda options, scale: [],
                render_with=lambda results: _printed("2", [figures.figure2(results.options)]),
                claims=("FEN-F2-1", "FEN-F2-2", "FEN-F2-3"), options=_dataset_option,
                trains_outside_store="the uploaded values are captured by rerunning the runs with a recording "
                                     "ledger (cached in <results-root>/captures)"),
    sweep_figure("3"), sweep_figure("4"), sweep_figure("5"),
    accuracy_figure("6", "FedElasticNet Fig. 6: test accuracy against the round, 10 %, IID and Dirichlet (.6)"),
    accuracy_figure("7", "FedElasticNet Fig. 7: test accuracy against the round, Shakespeare IID and non-IID, 10 %"),
    accuracy_figure("8", "FedElasticNet Fig. 8: test accuracy against the round, MNIST and EMNIST-L, 100 %"),
    accuracy_figure("9", "FedElasticNet Fig. 9: test accuracy against the round, CIFAR-10 and CIFAR-100, 100 %"),
    # beyond the paper: epsilon on and off (FEN-S3-1), FedAvg + l1 with and without l2 (REV-R2-6)
    PaperTarget("ablations", "FedElasticNet ablations: epsilon on and off, FedAvg + l1 with and without l2, "
                             "on seeds (beyond the paper; Sec. 3 and review 2)",
                cells_of=lambda options, scale: ablations.ablation_cells(options), render_with=ablations.render,
                claims=("FEN-S3-1", "REV-R2-6"), options=_on_seeds(5)),
    # beyond the paper: accuracy from IID to strong skew (Table 1's robustness row, review 2)
    PaperTarget("skew", "FedElasticNet under label skew: IID and Dirichlet 1.0 / .6 / .3 / .1, on seeds "
                        "(beyond the paper; Table 1's robustness row and review 2)",
                cells_of=lambda options, scale: skew.skew_cells(options), render_with=skew.render,
                claims=("FEN-T1-1", "REV-R2-3"), options=_on_seeds(5)),
    # beyond the paper: compressed baselines with error feedback at matched uplink bits (review 2)
    PaperTarget("compression", "FedElasticNet against FedDyn / SCAFFOLD / FedAvg + compressor + error feedback at "
                               "matched uplink bits, MNIST, on seeds (beyond the paper; review 2)",
                cells_of=lambda options, scale: compression.compression_cells(options),
                render_with=compression.render, claims=compression.CLAIMS, options=_on_seeds(3)),
    # beyond the paper: Theorem 3.1's lambda1^2 d term on a convex problem (review 2)
    PaperTarget("theorem", "FedElasticNet Theorem 3.1 simulated: Algorithm 3's excess loss over FedDyn against lambda1 "
                           "and d, synthetic logistic regression, on seeds (beyond the paper; review 2)",
                cells_of=theorem.theorem_cells, render_with=theorem.render, claims=("REV-R2-2",),
                options=_on_seeds(3), SCALE={"features": "the model sizes run, as numbers of features "
                                                              "(default 30 and 300: d = 155 and 1 505)"}),
    # beyond the paper: each variant's round time against its base's, interleaved (Sec. 1)
    PaperTarget("overhead", "FedElasticNet's training cost: each variant's local training time against its base's, "
                            "interleaved (beyond the paper; Sec. 1)",
                cells_of=lambda options, scale: [], render_with=overhead.render, claims=("FEN-S4-3",),
                options=_overhead_options,
                trains_outside_store="a timing: both sides are built and timed now, in this process"),
    # beyond the paper (reviewer 3): uplink costs against the round, Table 3's or 4's runs
    PaperTarget("costs", "FedElasticNet costs: nonzeros and entropy against the round, per algorithm "
                         "(beyond the paper; reviewer 3)",
                cells_of=lambda options, scale: figures.cost_cells(options)[0],
                render_with=lambda results: _printed("costs", figures.cost_figures(results)),
                claims=("REV-R3-3",), options=_costs_options),
]
