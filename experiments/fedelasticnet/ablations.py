"""FedElasticNet's ablations beyond its tables, each judged on seeds with paired intervals:

* FEN-S3-1 (Sec. 3): the epsilon threshold "does not change accuracy": each variant with Table
  5's epsilon against the same run with epsilon = 0 (same lambda1, lambda2, seed).
* REV-R2-6 (review 2): FedAvg + l1 + l2 evaluated on its own: FedAvg, FedAvg + l1 (lambda2 = 0)
  and FedAvg + l1 + l2 (Algorithm 1, FedProx's prox being the l2 term, at Table 5's lambda2;
  also at FedProx's larger lambda2, reported beside). FedAvg and FedAvg + l1 are Algorithm 1
  with the terms set to 0 (the same local objective as algorithm=fedavg; their own run keys).

    python -m experiments fen ablations --profile quick [--seeds 5] [--datasets mnist,emnist_l]

Setting: Dirichlet (.3), 10 %, each dataset's Table 2 setting; seeds 0..n-1 (default 5: the
verdicts compare paired differences, seed by seed, with their 95 % t-interval). The table lands
in <results-root>/tables/fedelasticnet_ablations.{md,csv}.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import pandas as pd

from experiments.fedelasticnet.claims import FEN_T2_UNIT
from experiments.fedelasticnet.common import LABELS, SETTINGS, cell, hparams, tail_accuracy
from experiments.fedelasticnet.figures import report_claims
from fedrepro.errors import ConfigError
from fedrepro.reports.grid import Cell
from fedrepro.results import run_metrics

SPLIT, PARTICIPATION = "dirichlet0.3", "p10"
VARIANTS = ("fen_alg1", "fen_alg2", "fen_alg3")
# REV-R2-6's arms: (label, Algorithm 1 with these Table 5 values replaced); the judged l2 is
# Algorithm 1's own (Table 5: 1e-6 on MNIST); FedProx's (1e-4 on MNIST, the paper's drift-fighting
# value) is run beside it and reported
L2_ARMS = (("fedavg", lambda d: {"lambda1": 0.0, "lambda2": 0.0, "epsilon": 0.0}),
           ("fedavg_l1", lambda d: {"lambda2": 0.0}),
           ("fedavg_l1_l2", lambda d: {}),
           ("fedavg_l1_l2_fedprox", lambda d: {"lambda2": hparams(d, "fedprox")["lambda2"]}))


def datasets_of(args) -> list[str]:
    """--datasets (default mnist; all: every FedElasticNet dataset); a name it does not know is refused."""
    chosen = (args.datasets or "mnist").split(",")
    if chosen == ["all"]:
        return list(SETTINGS["datasets"])
    unknown = [d for d in chosen if d not in SETTINGS["datasets"]]
    if unknown:
        raise ConfigError(f"--datasets {','.join(unknown)}: not a FedElasticNet dataset; choose from "
                          f"{', '.join(SETTINGS['datasets'])} or all")
    return [d for d in SETTINGS["datasets"] if d in chosen]


def ablation_cells(args) -> list[Cell]:
    """Every run: per dataset, each variant at Table 5's epsilon and at 0, and REV-R2-6's arms."""
    cells = []
    for d in datasets_of(args):
        for alg in VARIANTS:
            for arm, changes in (("table5", {}), ("epsilon0", {"epsilon": 0.0})):
                keys = {"dataset_key": d, "split_key": SPLIT, "algorithm_key": alg, "study": "epsilon", "arm": arm}
                cells.append(cell(keys, PARTICIPATION, args.profile, data_root=args.data_root, **changes))
        for arm, changes in L2_ARMS:
            keys = {"dataset_key": d, "split_key": SPLIT, "algorithm_key": "fen_alg1", "study": "l2", "arm": arm}
            cells.append(cell(keys, PARTICIPATION, args.profile, data_root=args.data_root, **changes(d)))
    return cells


def _per_seed(runs: list, metric) -> list[float]:
    return [metric(r) for r in runs if r.summary["status"] == "finished"]


def frame(cells: list[Cell], status: pd.DataFrame, runs: dict) -> pd.DataFrame:
    """One row per cell: its keys, status, seeds' tail accuracies (points) and cumulative uplink
    nonzeros (x 1e7), in seed order (the checks pair them by seed)."""
    rows = []
    for i, c in enumerate(cells):
        st = status.iloc[i]
        done = runs.get(i, []) if st["status"] == "ok" else []
        rows.append({**c.keys, "status": st["status"], "reason": st["reason"],
                     "acc": _per_seed(done, lambda r: tail_accuracy(run_metrics(r.folder))),
                     "nnz": _per_seed(done, lambda r: r.summary["final"]["cum_up_nonzeros"] / FEN_T2_UNIT)})
    return pd.DataFrame(rows)


def per_seed_text(values: list) -> str:
    """Values one per seed, "; "-separated to 2 decimals ("-" for none)."""
    return "; ".join(f"{v:.2f}" for v in values) if values else "-"


def write_seed_table(ours: pd.DataFrame, args, stem: str, title: str, note: str, headers: list[str],
                     row_cells: Callable[[int, pd.Series], list[str]], claims: list[str]) -> None:
    """<results-root>/tables/<stem>.{md,csv}: one row per setting with its seeds' accuracies and
    nonzeros (row_cells(i, row) gives the leading columns), then the claims judged on `ours`."""
    out = Path(args.results_root) / "tables"
    out.mkdir(parents=True, exist_ok=True)
    table = ours.assign(acc=ours["acc"].map(per_seed_text), nnz=ours["nnz"].map(per_seed_text))
    table.to_csv(out / f"{stem}.csv", index=False)
    lines = [f"# {title}, profile={args.profile}, seeds 0..{args.seeds - 1}", "", note, "",
             "| " + " | ".join([*headers, "acc per seed", "nnz per seed", "status"]) + " |",
             "|" + "---|" * (len(headers) + 3)]
    for i, r in table.iterrows():
        lines.append("| " + " | ".join([*row_cells(i, r), r["acc"], r["nnz"],
                                         f"{r['status']}{': ' + r['reason'] if r['reason'] else ''}"]) + " |")
    text = "\n".join(lines) + "\n"
    (out / f"{stem}.md").write_text(text)
    print(text)
    report_claims(claims, ours, out / f"{stem}_claims.md", args.profile)


def render(results) -> int:
    args = results.options
    cells = ablation_cells(args)
    status, runs = results.measure(cells)
    ours = frame(cells, status, runs)

    def row_cells(i: int, r: pd.Series) -> list[str]:
        values = " / ".join(o.split("=", 1)[1] for o in cells[i].overrides if o.startswith("algorithm.")
                            and o.split("=")[0].rsplit(".", 1)[-1] in ("lambda1", "mu", "lambda2", "alpha", "epsilon"))
        return [LABELS.get(r["dataset_key"], r["dataset_key"]), r["study"], f"{r['algorithm_key']} {r['arm']}", values]

    write_seed_table(ours, args, "fedelasticnet_ablations", "FedElasticNet ablations (beyond its tables)",
                     "Dirichlet (.3), 10 %; each dataset's Table 2 setting; acc = tail mean test accuracy (all clients' "
                     "models, last 10 % of rounds, points) and nnz = cumulative uplink nonzeros (x 1e7) of "
                     "each seed, in seed order.", ["dataset", "study", "run", "lambda1 / lambda2 / epsilon"],
                     row_cells, ["FEN-S3-1", "REV-R2-6"])
    return 0
