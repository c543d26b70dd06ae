"""FedElasticNet Table 5: the lambda1, lambda2 and epsilon our runs used, beside the paper's.

    python -m experiments.fedelasticnet.table5 --profile quick [--datasets all] [--splits iid]

Reads the resolved config.yaml of every run of the Table 2/3 grid (10 %; finished runs are
reused from the store, missing ones are run) and prints, per dataset, algorithm and
hyperparameter, the value the runs used (one value when every run of that dataset and
algorithm agrees) beside the paper's. lambda2 is FedProx's mu, SCAFFOLD's lambda2 and
FedDyn's alpha; "-" in the paper means the term is off (0 here). Table 4's runs get their
values from the same function (common.run_overrides).
"""
from __future__ import annotations

import logging
import math
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from experiments.fedelasticnet.common import SETTINGS, parser, selection, table_grid
from fedrepro.reports.cli import run_target
from fedrepro.reports.grid import measure_target
from fedrepro.reports.reference import load_reference
from fedrepro.reports.tables import compare_table, fmt_value, to_markdown, write_table

# the targets run as __main__: a fixed name keeps their lines under the fedrepro loggers
log = logging.getLogger("fedrepro.experiments")

HPARAMS = ["lambda1", "lambda2", "epsilon"]
KEYS = ["dataset_key", "algorithm_key", "hyperparameter"]


def used(run, algorithm: str) -> dict[str, float]:
    """The values in the run's resolved config, under Table 5's names."""
    cfg = OmegaConf.load(Path(run.folder) / "config.yaml").algorithm
    names = {"lambda1": "lambda1", "lambda2": SETTINGS["algorithms"][algorithm]["lambda2_is"], "epsilon": "epsilon"}
    return {h: float(cfg[names[h]]) for h in HPARAMS}


def ours_frame(cells, summaries, profile: str, seeds: str) -> pd.DataFrame:
    """One row per (dataset, Table 5 algorithm, hyperparameter): the value every run used."""
    found: dict[tuple, list] = {}  # (dataset, Table 5 algorithm, hyperparameter) -> [(value, data)]
    reasons: dict[tuple, str] = {}
    for i, c in enumerate(cells):
        alg = c.keys["algorithm_key"]
        for h in HPARAMS:
            key = (c.keys["dataset_key"], SETTINGS["algorithms"][alg]["table5"], h)
            if c.not_run or not summaries.get(i):
                reasons.setdefault(key, c.not_run or "failed (see the log)")
            for run in summaries.get(i, []):
                found.setdefault(key, []).append((used(run, alg)[h], run.summary["data_source"]))
    rows = []
    for key in dict.fromkeys([*found, *reasons]):
        values = sorted({v for v, _ in found.get(key, [])})
        row = dict(zip(KEYS, key), profile=profile, n_seeds=1, seeds=seeds,
                   data="; ".join(sorted({d for _, d in found.get(key, [])})))
        if len(values) == 1:
            row.update(ours_mean=values[0], status="ok", reason="")
        elif values:
            row.update(ours_mean=math.nan, status="failed",
                       reason="runs disagree: " + ", ".join(fmt_value(v) for v in values))
        else:
            row.update(ours_mean=math.nan, status="not run", reason=reasons[key])
        rows.append(row)
    return pd.DataFrame(rows)


def agreement(table: pd.DataFrame) -> list[str]:
    """Notes saying where ours = paper ("-" in the paper counts as 0)."""
    ran = table[(table["status"] == "ok") & (table["paper_confidence"] != "no reference")]
    paper = ran["paper_value"].fillna(0.0)
    same = [math.isclose(a, b, rel_tol=1e-9, abs_tol=0) for a, b in zip(ran["ours_mean"], paper)]
    lines = [f"ours = paper in {sum(same)} of {len(ran)} rows run (a '-' in the paper = the term is off = 0)"]
    bad = ran[[not s for s in same]]
    if len(bad):
        lines.append("differ: " + "; ".join(f"{r.dataset_key} {r.algorithm_key} {r.hyperparameter}: "
                                            f"ours {fmt_value(r.ours_mean)} vs paper {r.paper}"
                                            for r in bad.itertuples()))
    if (table["paper_confidence"] == "no reference").any():
        lines.append("scaffold is not in the paper's Table 5: it runs as published (all three 0)")
    return lines


def main(argv=None) -> int:
    args = parser(__doc__.splitlines()[0]).parse_args(argv)
    reference = load_reference("fedelasticnet_table5_hparams")
    runs_of = load_reference("fedelasticnet_table3")  # the Table 2/3 grid: every algorithm key
    datasets, splits, omitted = selection(args, list(dict.fromkeys(reference.dataset_key)),
                                          list(dict.fromkeys(runs_of.split_key)))
    reference = reference[reference.dataset_key.isin(datasets)]
    runs_of = runs_of[runs_of.dataset_key.isin(datasets) & runs_of.split_key.isin(splits)]
    cells = table_grid(runs_of, "p10", args.profile)
    log.info(f"FedElasticNet Table 5 from the configs of {sum(c.not_run is None for c in cells)} runnable cells")
    _, summaries = measure_target(cells, args, lambda run: 0.0)
    seeds = ",".join(str(i) for i in range(args.seeds))
    table = compare_table(ours_frame(cells, summaries, args.profile, seeds), reference, KEYS,
                          value_name="hyperparameter value used", unit_note="ratio 1.00 = the paper's value",
                          missing_reason="no run of this dataset in the selected splits")
    title = (f"FedElasticNet Table 5: lambda1, lambda2 (FedProx mu, SCAFFOLD lambda2, FedDyn alpha) and "
             f"epsilon our runs used, profile={args.profile}")
    notes = [f"ours: read from the config.yaml of every run of the Table 2/3 grid (10 %, splits "
             f"{', '.join(splits)}, seeds {seeds}; FedDyn: the transmit=model and =update runs)",
             *agreement(table), *omitted]
    paths = write_table(table, Path(args.results_root) / "tables", "fedelasticnet_table5", title=title, notes=notes)
    print(to_markdown(table, title, notes))
    for name, path in paths.items():
        print(f"[table5] {name}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_target(main))
