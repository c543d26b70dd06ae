"""FedElasticNet Tables 2-5: each beside the paper's, with its claims checked on our numbers.

    python -m experiments fen table2 --profile quick --seeds 1 [--datasets all] [--splits iid]

The paper's setting per dataset and Table 5's hyperparameters come from settings.yaml (see
common.py); rows that cannot run here are printed as "not run" with the reason. Tables 2-4
share one flow (`render_table`): select rows, read their runs, compare with the paper, check
the claims, plot, and list the runs behind the cells (<stem>_runs.csv: key, time, final
accuracy and costs).

* Table 2: cumulative nonzero elements uploaded (x 1e7), 10 % participation. FedDyn is one
  row: its nonzeros do not depend on what it transmits, so the row is the transmit=model run,
  the same run as Table 3's feddyn_model.
* Table 3: cumulative entropy of the uploaded values, 10 % participation. Entropy as the
  ledger's `cum_up_entropy`: each round, every value the participating clients upload pooled
  into one sample, binned at 0.01, Shannon entropy in bits; summed over rounds (FIDELITY.md).
  FedDyn has two rows, transmitting the local model (feddyn_model, the Table 2 run) or the
  update (feddyn_update). Same runs as Table 2 otherwise.
* Table 4: as Table 3 with every client in every round. At profile=quick a 100 % run would
  cost 10 times a 10 % run, so this table (and Figs. 8-9, the same runs) adds the caps of
  settings.yaml's `full_participation_quick_caps` (profile.max_local_steps=6: 100 clients x 6
  steps ~ the 600 local steps of a 10 % round); the table notes print them. FEN-S4-1 reads the
  Table 2 and 3 CSVs in <results-root>/tables/ made with the same profile and seeds.
* Table 5: the lambda1, lambda2 and epsilon our runs used, beside the paper's. Reads the
  resolved config.yaml of every run of the Table 2/3 grid (10 %) and prints, per dataset,
  algorithm and hyperparameter, the value the runs used (one value when every run of that
  dataset and algorithm agrees) beside the paper's. lambda2 is FedProx's mu, SCAFFOLD's
  lambda2 and FedDyn's alpha; "-" in the paper means the term is off (0 here). Table 4's runs
  get their values from the same function (common.run_overrides).
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import pandas as pd

from experiments.fedelasticnet.claims import CHECKS, FEN_T2_UNIT
from experiments.fedelasticnet.common import (KEYS, PARTICIPATION, SETTINGS, group_panels,
                                              panels_figure, selection, setting_notes, table_grid, tail_accuracy,
                                              titled)
from fedrepro.reports.claims import claims_markdown, evaluate_claims
from fedrepro.reports.grid import Cell, executed_on, saved_config, why_no_numbers
from fedrepro.reports.reference import load_reference
from fedrepro.reports.tables import compare_table, fmt_value, to_markdown, write_table
from fedrepro.results import run_metrics

# a name under "fedrepro": its loggers' setup (reports.cli) shows these lines
log = logging.getLogger("fedrepro.experiments")


# ---------------------------------------------------------------------------------------------
# Tables 2-4


@dataclass
class TableSpec:
    number: int
    participation: str  # p10 | p100
    metric: Callable  # RunResult -> the table's value
    value_name: str
    unit_note: str
    claims: list[str]
    notes: list[str] = field(default_factory=list)
    # (results, cells, ours) -> [(claim ids, the frame they read)] beyond `claims` on `ours`
    extra_claims: Optional[Callable] = None
    extra_ids: tuple[str, ...] = ()  # the claims extra_claims judges

    @property
    def judged(self) -> tuple[str, ...]:
        return (*self.claims, *self.extra_ids)

    @property
    def stem(self) -> str:
        return f"fedelasticnet_table{self.number}"

    def title(self, profile: str) -> str:
        return (f"FedElasticNet Table {self.number}: {self.value_name} ({self.unit_note.split(',')[0]}), "
                f"{PARTICIPATION[self.participation]} participation, profile={profile}")


def runs_frame(cells: list[Cell], summaries: dict) -> pd.DataFrame:
    """One row per run behind a table: its cell, seed, run key, status, time and final costs."""
    rows = []
    for i, c in enumerate(cells):
        for r in summaries.get(i, []):
            s, final = r.summary, r.summary.get("final") or {}
            rows.append({**c.keys, "seed": s["seed"], "key": r.key, "status": s["status"],
                         "train_seconds": s["train_seconds"], "seconds_per_round": s["seconds_per_round"],
                         "client_rounds": s["client_rounds"], "server_test_acc": final.get("server_test_acc"),
                         "cum_up_nonzeros": final.get("cum_up_nonzeros"),
                         "cum_up_entropy": final.get("cum_up_entropy"), "executor": executed_on(s)})
    return pd.DataFrame(rows)


def _table_rows(spec: TableSpec, args) -> tuple[pd.DataFrame, list[str], list[str]]:
    """(the paper's rows chosen by --datasets / --splits, their datasets, notes on the rest)."""
    reference = load_reference(spec.stem)
    datasets, splits, omitted = selection(args, list(dict.fromkeys(reference.dataset_key)),
                                          list(dict.fromkeys(reference.split_key)))
    return reference[reference.dataset_key.isin(datasets) & reference.split_key.isin(splits)], datasets, omitted


def table_cells(spec: TableSpec, args) -> list[Cell]:
    """Every run of a table (Target.cells)."""
    reference, _, _ = _table_rows(spec, args)
    return table_grid(reference, spec.participation, args.profile, args.data_root)


def render_table(spec: TableSpec, results) -> int:
    """A table from its runs (Target.render): the table beside the paper's, its claims, the runs
    behind it and their accuracy curves."""
    args = results.options
    reference, datasets, omitted = _table_rows(spec, args)
    cells = table_grid(reference, spec.participation, args.profile, args.data_root)
    title = spec.title(args.profile)
    log.info(f"{title}, seeds={args.seeds}: {sum(c.not_run is None for c in cells)} runnable cells of {len(cells)}")
    ours, summaries = results.measure(cells, spec.metric)
    table = compare_table(ours, reference, KEYS, value_name=spec.value_name, unit_note=spec.unit_note)
    notes = [f"profile: {args.profile} (conf/profile/{args.profile}.yaml)",
             *spec.notes, *setting_notes(datasets, spec.participation, args.profile, args.data_root),
             *omitted]
    out_dir = Path(args.results_root) / "tables"
    paths = write_table(table, out_dir, spec.stem, title=title, notes=notes)
    paths["runs"] = out_dir / f"{spec.stem}_runs.csv"
    runs_frame(cells, summaries).to_csv(paths["runs"], index=False)
    print(to_markdown(table, title, notes))

    groups = [(spec.claims, ours)] + (spec.extra_claims(results, cells, ours) if spec.extra_claims else [])
    claims = pd.concat([evaluate_claims(ids, frame, checks=CHECKS) for ids, frame in groups],
                       ignore_index=True)
    claims_md = claims_markdown(claims)
    print("\nClaims check (on our numbers):\n" + claims_md)
    paths["claims"] = out_dir / f"{spec.stem}_claims.md"
    paths["claims"].write_text(claims_md + "\n")

    panels = titled(group_panels(cells, ours, summaries, ["dataset_key", "split_key"], "algorithm_key"))
    paths["figure"] = panels_figure(panels, out_dir / f"{spec.stem}_accuracy.png",
                                    title=f"FedElasticNet Table {spec.number} runs ({PARTICIPATION[spec.participation]}"
                                          f" participation, profile={args.profile}): test accuracy of the "
                                          "mean of all clients' models, seed 0")
    for name, path in paths.items():
        print(f"[table{spec.number}] {name}: {path}")
    return 0


def previous_table(args, number: int) -> tuple[pd.DataFrame, str]:
    """Table `number`'s CSV as an `ours` frame when it was made with this profile and seeds."""
    path = Path(args.results_root) / "tables" / f"fedelasticnet_table{number}.csv"
    if not path.exists():
        return pd.DataFrame(), f"{path} not found: run table{number} first"
    frame = pd.read_csv(path, dtype={"seeds": str, "profile": str, "status": str})
    ok = frame[frame["status"] == "ok"]
    wanted = ",".join(str(s) for s in range(args.seeds))
    if ok.empty or set(ok["profile"].astype(str)) != {args.profile} or set(ok["seeds"].astype(str)) != {wanted}:
        return pd.DataFrame(), f"{path} was not made with profile={args.profile} and seeds {wanted}"
    return frame, ""


# ---------------------------------------------------------------------------------------------
# What Tables 2-4 measure


def entropy(run) -> float:
    return run.summary["final"]["cum_up_entropy"]


def nonzeros(run) -> float:
    return run.summary["final"]["cum_up_nonzeros"] / FEN_T2_UNIT


def nonzero_claims(results, cells, ours):
    """FEN-T2-8 (FedDyn's nonzeros do not depend on transmit) on the same runs' nonzeros."""
    frame, _ = results.measure(cells, nonzeros)
    return [(["FEN-T2-8"], frame)]


def marginal_claim(results, cells, ours):
    """REV-R4-3 on the table's cost beside the same runs' tail accuracy (points)."""
    acc, _ = results.measure(cells, lambda run: tail_accuracy(run_metrics(run.folder)))
    frame = ours.merge(acc[KEYS + ["ours_mean"]].rename(columns={"ours_mean": "acc"}), on=KEYS, how="left")
    return [(["REV-R4-3"], frame)]


def entropy_claims(results, cells, ours):
    """Table 3: FEN-T2-8 and REV-R4-3."""
    return nonzero_claims(results, cells, ours) + marginal_claim(results, cells, ours)


def summary_claim(results, cells, ours):
    """FEN-T2-8, REV-R4-3, and FEN-S4-1 on Table 4 and the Table 2 and 3 CSVs beside it."""
    args = results.options
    frames, missing = [ours.assign(table="4")], []
    for number in (2, 3):
        frame, why = previous_table(args, number)
        frames.append(frame.assign(table=str(number)) if why == "" else frame)
        missing += [why] if why else []
    if missing:
        log.warning("FEN-S4-1 lacks: " + "; ".join(missing))
    return entropy_claims(results, cells, ours) + [(["FEN-S4-1"], pd.concat(frames, ignore_index=True))]


# Tables 3 and 4 measure the same and label it alike.
ENTROPY = dict(
    metric=entropy, value_name="cumulative entropy of uploaded values",
    unit_note="bits: pooled per-round Shannon entropy at 0.01 bins, summed over rounds",
    notes=["ours: ledger cum_up_entropy (per round: all uploaded values of the round pooled)"])

TABLE2 = TableSpec(
    number=2, participation="p10", metric=nonzeros,
    value_name="cumulative nonzeros uploaded", unit_note="x 1e7 elements, summed over rounds and clients",
    claims=[f"FEN-T2-{i}" for i in range(1, 8)], extra_claims=marginal_claim, extra_ids=("REV-R4-3",),
    notes=["ours: uplink nonzeros of every participating client, summed over all rounds (ledger)"])
TABLE3 = TableSpec(number=3, participation="p10", claims=["FEN-T3-1", "FEN-T3-2", "FEN-T3-3"],
                   extra_claims=entropy_claims, extra_ids=("FEN-T2-8", "REV-R4-3"), **ENTROPY)
TABLE4 = TableSpec(number=4, participation="p100", claims=["FEN-T4-1", "FEN-T4-2", "FEN-T4-3"],
                   extra_claims=summary_claim, extra_ids=("FEN-T2-8", "REV-R4-3", "FEN-S4-1"), **ENTROPY)


# ---------------------------------------------------------------------------------------------
# Table 5: the hyperparameters the runs used

HPARAMS = ["lambda1", "lambda2", "epsilon"]
T5_KEYS = ["dataset_key", "algorithm_key", "hyperparameter"]


def used(run, algorithm: str) -> dict[str, float]:
    """The values in the run's resolved config, under Table 5's names."""
    cfg = saved_config(run.folder).algorithm
    names = {"lambda1": "lambda1", "lambda2": SETTINGS["algorithms"][algorithm]["lambda2_is"], "epsilon": "epsilon"}
    return {h: float(cfg[names[h]]) for h in HPARAMS}


def ours_frame(cells, runs: pd.DataFrame, summaries, profile: str, seeds: str) -> pd.DataFrame:
    """One row per (dataset, Table 5 algorithm, hyperparameter): the value every run used.
    `runs` and `summaries` are what `measure` gives for `cells` (its rows say why a cell has no run)."""
    found: dict[tuple, list] = {}  # (dataset, Table 5 algorithm, hyperparameter) -> [(value, data)]
    reasons: dict[tuple, str] = {}
    for i, c in enumerate(cells):
        alg = c.keys["algorithm_key"]
        for h in HPARAMS:
            key = (c.keys["dataset_key"], SETTINGS["algorithms"][alg]["table5"], h)
            if c.not_run or not summaries.get(i):
                reasons.setdefault(key, why_no_numbers(runs, i))
            for run in summaries.get(i, []):
                found.setdefault(key, []).append((used(run, alg)[h], run.summary["data_source"]))
    rows = []
    for key in dict.fromkeys([*found, *reasons]):
        values = sorted({v for v, _ in found.get(key, [])})
        row = dict(zip(T5_KEYS, key), profile=profile, n_seeds=1, seeds=seeds,
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


def _table5_rows(args) -> tuple[pd.DataFrame, pd.DataFrame, list[str], list[str]]:
    """(Table 5's rows and the Table 2/3 rows whose runs it reads, chosen by --datasets /
    --splits, the splits, notes on the rest)."""
    reference = load_reference("fedelasticnet_table5_hparams")
    runs_of = load_reference("fedelasticnet_table3")  # the Table 2/3 grid: every algorithm key
    datasets, splits, omitted = selection(args, list(dict.fromkeys(reference.dataset_key)),
                                          list(dict.fromkeys(runs_of.split_key)))
    return (reference[reference.dataset_key.isin(datasets)],
            runs_of[runs_of.dataset_key.isin(datasets) & runs_of.split_key.isin(splits)], splits, omitted)


def table5_cells(args) -> list[Cell]:
    return table_grid(_table5_rows(args)[1], "p10", args.profile, args.data_root)


def render_table5(results) -> int:
    args = results.options
    reference, runs_of, splits, omitted = _table5_rows(args)
    cells = table_grid(runs_of, "p10", args.profile, args.data_root)
    log.info(f"FedElasticNet Table 5 from the configs of {sum(c.not_run is None for c in cells)} runnable cells")
    runs, summaries = results.measure(cells, lambda run: 0.0)
    seeds = ",".join(str(i) for i in range(args.seeds))
    table = compare_table(ours_frame(cells, runs, summaries, args.profile, seeds), reference, T5_KEYS,
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

