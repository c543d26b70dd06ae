"""FedElasticNet under label skew, judged on seeds with paired intervals (beyond its tables):

* FEN-T1-1 (Table 1's robustness row): FedAvg loses clearly more accuracy from IID to
  Dirichlet (.3) than SCAFFOLD, FedDyn and Algorithm 3 do. FedAvg is the ablations' arm
  (Algorithm 1 with lambda1 = lambda2 = epsilon = 0: FedAvg's local objective, the same run key
  as `make fen-ablations`' fedavg).
* REV-R2-3 (review 2, item 3): more heterogeneity levels than one Dirichlet setting: IID and
  Dirichlet alpha 1.0, 0.6, 0.3, 0.1 for Algorithm 3, FedDyn and FedProx.

    python -m experiments fen skew --profile quick [--seeds 5] [--datasets mnist,emnist_l]

Setting: 10 %, each dataset's Table 2 setting (Table 5's values), seeds 0..n-1 (default 5).
Seed 0 of the IID, (.6) and (.3) runs are Table 2's runs, and Dirichlet (.3)'s are the
ablations' (same overrides, same keys). The table lands in
<results-root>/tables/fedelasticnet_skew.{md,csv}.
"""
from __future__ import annotations

from experiments.fedelasticnet.ablations import L2_ARMS, datasets_of, frame, write_seed_table
from experiments.fedelasticnet.claims import SKEW_SPLITS as SPLITS
from experiments.fedelasticnet.common import LABELS, cell
from fedrepro.reports.grid import Cell

PARTICIPATION = "p10"
ROBUST_SPLITS = ("iid", "dirichlet0.3")  # FEN-T1-1: Table 1 contrasts IID with the paper's skew
# (algorithm key, the splits it runs at): FEN-T1-1 needs fedavg and scaffold at IID and (.3);
# REV-R2-3 needs fen_alg3, feddyn and fedprox at every level
RUNS = (("fedavg", ROBUST_SPLITS), ("scaffold", ROBUST_SPLITS),
        ("fen_alg3", SPLITS), ("feddyn", SPLITS), ("fedprox", SPLITS))
FEDAVG = dict(L2_ARMS)["fedavg"]  # Algorithm 1 with its three terms at 0


def skew_cells(args) -> list[Cell]:
    cells = []
    for d in datasets_of(args):
        for alg, splits in RUNS:
            for s in splits:
                keys = {"dataset_key": d, "split_key": s, "algorithm_key": alg}
                if alg == "fedavg":  # Algorithm 1's run, under its own name
                    run = cell({**keys, "algorithm_key": "fen_alg1"}, PARTICIPATION, args.profile,
                               data_root=args.data_root, **FEDAVG(d))
                    cells.append(Cell(keys, run.overrides, not_run=run.not_run))
                else:
                    cells.append(cell(keys, PARTICIPATION, args.profile, data_root=args.data_root))
    return cells


def render(results) -> int:
    args = results.options
    cells = skew_cells(args)
    status, runs = results.measure(cells)
    write_seed_table(
        frame(cells, status, runs), args, "fedelasticnet_skew", "FedElasticNet under label skew (beyond its tables)",
        "10 %; each dataset's Table 2 setting (Table 5's values); fedavg = Algorithm 1 with lambda1 = lambda2 = "
        "epsilon = 0. acc = tail mean test accuracy (all clients' models, last 10 % of rounds, points) and nnz = "
        "cumulative uplink nonzeros (x 1e7) of each seed, in seed order.", ["dataset", "split", "algorithm"],
        lambda i, r: [LABELS.get(r["dataset_key"], r["dataset_key"]), LABELS.get(r["split_key"], r["split_key"]),
                      r["algorithm_key"]], ["FEN-T1-1", "REV-R2-3"])
    return 0
