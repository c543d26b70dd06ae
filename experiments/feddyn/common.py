"""What FedDyn's target tables (1, 2, 4, 5, 6) share: the grid of runs (`table_cells`), the
models-to-target measurement, the rendering beside the paper and the claims check
(`render_table`).

A table row is (setting, dataset, split, target) x algorithm. One run serves both targets of
its (setting, dataset, split), so the grid has one cell per run and every run is measured
at each target (and, for the claims, at the other targets of its dataset and split).
Figures (`figures.py`) build the same overrides, so they reuse these runs from the store.
"""
from __future__ import annotations

import argparse
import io
import logging
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

import pandas as pd

import fedrepro  # noqa: F401  (torchvision shim first)
from experiments.feddyn import settings
from experiments.feddyn.claims import CHECKS
from fedrepro.config import compose_config, effective, validate
from fedrepro.data.loaders import unavailable
from fedrepro.metrics.targets import (Count, gain, mean_count, models_to_target, rounds_to_target,
                                      uplink_factor, with_gain)
from fedrepro.reports.claims import evaluate_claims, write_claims
from fedrepro.reports.grid import Cell, every_round, mean_interval
from fedrepro.reports.reference import load_reference
from fedrepro.reports.tables import compare_table, fmt_value, to_markdown, write_table
from fedrepro.results import run_metrics

# the targets run as __main__: a fixed name keeps their lines under the fedrepro loggers
log = logging.getLogger("fedrepro.experiments")

KEYS = ["setting", "dataset_key", "split_key", "target", "algorithm_key"]
RUN_COLS = ["setting", "num_devices", "participation", "balance", "dataset_key", "split_key"]


@dataclass(frozen=True)
class TableSpec:
    number: int
    title: str
    claims: tuple
    column: str = "all_test_acc"  # FedDyn reports the mean of all clients' models
    lower_is_better: bool = False
    scale: float = 100.0  # printed target / scale = the column's unit (accuracy % -> fraction)
    target_name: str = "test accuracy"


# ---------------------------------------------------------------------------------------------
# Options


def add_table_options(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--settings", default="all",
                    help="comma-separated values of the table's setting column (Table 2: '10%%,100%%'; "
                         "Table 4: 'Balanced,Unbalanced'; ...) or 'all'")
    add_run_options(ap)


def add_run_options(ap: argparse.ArgumentParser) -> None:
    """Options that change the runs themselves: tables and figures must agree to share them."""
    ap.add_argument("--eval-every-round", action="store_true",
                    help="evaluate every round (profile.min_eval_every=1): rounds to the target "
                         "are then not rounded up to quick's 5-round evaluation grid")


def eval_extra(args) -> list[str]:
    """--eval-every-round's override (reports.grid.every_round): only profiles that evaluate
    less often (quick) change, so runs of the other profiles stay the same runs."""
    return list(every_round(args.profile)) if args.eval_every_round else []


def with_eval_extra(cells: list[Cell], args) -> list[Cell]:
    """The cells as their runs are run: --eval-every-round's override on top of each cell's
    (part of the run key; tables and figures add it alike, so they share runs)."""
    extra = eval_extra(args)
    return [Cell(c.keys, [*c.overrides, *extra], c.not_run) for c in cells]


def eval_interval(args) -> int:
    return effective(compose_config([f"profile={args.profile}", *eval_extra(args)])).eval_every


# ---------------------------------------------------------------------------------------------
# The paper's table


def paper_cell(row) -> str:
    """The printed cell: "1852 (2.9x)", "1000+ (>1.6x)"; value_raw carries the '+' already."""
    value, g = row["value_raw"], row["gain_reported"]
    if not value or not g:
        return value
    return f"{value} ({'>' if row['gain_is_lower_bound'] == 'true' else ''}{g}x)"


def load_table(number: int) -> pd.DataFrame:
    ref = load_reference(f"feddyn_table{number}")
    ref["target"] = ref["target_accuracy"].where(ref["target_accuracy"] != "", ref["target_train_loss"])
    ref["target_value"] = ref["target"].astype(float)
    ref["participation"] = ref["participation"].astype(float)
    ref["num_devices"] = ref["num_devices"].astype(int)
    ref["censored"] = ref["censored"].str.lower() == "true"
    ref["table"] = number
    group = ref.groupby(["setting", "dataset_key", "split_key"])["target_value"]
    ref["target_rank"] = (ref["target_value"] == group.transform("max")).map({True: "higher", False: "lower"})
    ref["value_raw"] = [paper_cell(r) for _, r in ref.iterrows()]
    return ref


def select_rows(ref: pd.DataFrame, datasets: Optional[str], splits: str,
                setting_values: str = "all", *, data_root: str) -> tuple[pd.DataFrame, list[str]]:
    """Keep the chosen datasets (None: those whose data is in `data_root`), splits and settings
    (the table's setting column: participation, device count, ...); a note names every omitted
    group of rows."""
    if datasets is None:
        datasets = ",".join(d for d in settings.DATASETS if not unrunnable(d, data_root))
    # Settings are the table's own (unlike datasets, which make passes to every table): an
    # unknown one is a typo, and must not fall back to running every row.
    unknown = sorted(set(setting_values.split(",")) - set(ref["setting"])) if setting_values != "all" else []
    if unknown:
        raise SystemExit(f"--settings: this table has no setting {', '.join(map(repr, unknown))}; "
                         f"its settings are {', '.join(sorted(set(ref['setting'])))}")
    notes = []
    for col, choice, what in (("dataset_key", datasets, "datasets"), ("split_key", splits, "splits"),
                              ("setting", setting_values, "settings")):
        if choice == "all":
            continue
        wanted = choice.split(",")
        rest = sorted(set(ref[col]) - set(wanted))
        if not ref[col].isin(wanted).any():
            notes.append(f"this table has no rows for {what} {choice}: every row is listed")
            continue
        if rest:
            n = int((~ref[col].isin(wanted)).sum())
            notes.append(f"{n} rows of {what} {', '.join(rest)} omitted; --{what} all lists them "
                         "(as not run where they cannot run here)")
        ref = ref[ref[col].isin(wanted)]
    return ref, notes


# ---------------------------------------------------------------------------------------------
# The grid


@lru_cache(maxsize=None)
def _compose_error(overrides: tuple) -> str:
    try:
        validate(compose_config(list(overrides)))
    except Exception as exc:  # Hydra's errors and our ConfigError alike
        return f"config does not compose: {str(exc).splitlines()[0]}"
    return ""


def unrunnable(dataset: str, data_root: str) -> str:
    """Why `dataset` cannot run on the data in `data_root` ("" when it can)."""
    name = settings.loader_name(dataset)
    if name is None:
        return f"no settings for dataset {dataset!r}"
    return unavailable(name, data_root) or ""


def run_cell(keys: dict, dataset: str, split: str, participation: float, devices: int,
             balance: str, algorithm: str, setting: str = "", num_devices: Optional[int] = None, *,
             data_root: str) -> Cell:
    """One run's cell: its overrides, or the reason it cannot run here (its data not in
    `data_root`, the target's --data-root; `num_devices`: the target's scale knob,
    settings.run_overrides)."""
    reason = unrunnable(dataset, data_root)
    if reason:
        return Cell(keys, not_run=reason)
    overrides = settings.run_overrides(dataset, split, participation, devices, balance, algorithm, setting,
                                       num_devices)
    if isinstance(overrides, str):
        return Cell(keys, not_run=overrides)
    error = _compose_error(tuple(overrides))
    return Cell(keys, not_run=error) if error else Cell(keys, overrides)


def grid(ref: pd.DataFrame, algorithms=settings.ALGORITHMS, num_devices: Optional[int] = None, *,
         data_root: str) -> tuple[list[Cell], list[dict]]:
    """One cell per (setting, dataset, split) x algorithm, and each cell's row attributes (a
    cell whose data is not in `data_root` is "not run")."""
    cells, rows = [], []
    for _, r in ref.drop_duplicates(RUN_COLS).iterrows():
        for alg in algorithms:
            keys = {"setting": r["setting"], "dataset_key": r["dataset_key"], "split_key": r["split_key"],
                    "algorithm_key": alg}
            cells.append(run_cell(keys, r["dataset_key"], r["split_key"], r["participation"],
                                  r["num_devices"], r["balance"], alg, r["setting"], num_devices,
                                  data_root=data_root))
            rows.append({**{c: r[c] for c in RUN_COLS}, "algorithm_key": alg})
    return cells, rows


# ---------------------------------------------------------------------------------------------
# Measuring


def _final_acc(run) -> float:
    return float(run.summary["final"].get("all_test_acc", math.nan))


def _up_vectors_per_d(run) -> float:
    """Uplink floats per participating client and round, in units of d (FDY-S3-2's identity)."""
    s = run.summary
    floats = s["final"].get("cum_up_dense_bits", math.nan) / 32  # the ledger's 32-bit values
    return floats / max(s["client_rounds"], 1) / s["dim"]


def measure(ref: pd.DataFrame, spec: TableSpec, results, algorithms=settings.ALGORITHMS,
            num_devices: Optional[int] = None) -> tuple[pd.DataFrame, list[Cell], dict]:
    """Measure every run of the grid (`results`: the target's runs) at every target of its
    dataset and split.

    Returns the long frame (one row per run x target; `own_target` marks the targets of the
    run's own table row, the ones printed; the others serve cross-target claims such as
    FDY-T1-4), the cells and {cell index: [RunResult]}.
    """
    args = results.options
    cells, rows = grid(ref, algorithms, num_devices, data_root=args.data_root)
    cells = with_eval_extra(cells, args)
    runs_frame, summaries = results.measure(cells, _final_acc)
    targets = ref.drop_duplicates(["setting", "dataset_key", "split_key", "target"])
    out = []
    for i, row in enumerate(rows):
        status = runs_frame.iloc[i]
        runs = summaries.get(i, []) if status["status"] == "ok" else []
        curves = [run_metrics(run.folder) for run in runs]
        same_data = targets[(targets.dataset_key == row["dataset_key"]) & (targets.split_key == row["split_key"])]
        for target in dict.fromkeys(same_data["target"]):
            own = same_data[(same_data.setting == row["setting"]) & (same_data.target == target)]
            out.append({**row, "table": spec.number, "target": target, "own_target": not own.empty,
                        "target_rank": own["target_rank"].iloc[0] if not own.empty else "",
                        "status": status["status"], "reason": status["reason"], "profile": args.profile,
                        "seeds": status["seeds"], "data": status["data"], "n_seeds": len(curves),
                        **_counts(curves, runs, float(target) / spec.scale, spec)})
    return pd.DataFrame(out), cells, summaries


def _counts(curves: list, runs: list, target: float, spec: TableSpec) -> dict:
    """Models to the target over seeds (mean, 95 % interval, censored if any seed is)."""
    if not curves:
        return {"ours_mean": math.nan, "censored": False}
    kw = {"column": spec.column, "lower_is_better": spec.lower_is_better}
    models = [models_to_target(c, target, **kw) for c in curves]
    rounds = mean_count([rounds_to_target(c, target, **kw) for c in curves])
    mean, lo, hi = mean_interval([m.value for m in models])
    return {"ours_mean": mean, "ours_lo": lo, "ours_hi": hi, "censored": mean_count(models).censored,
            "rounds": rounds.value, "rounds_run": max(int(c["round"].max()) for c in curves),
            "factor": uplink_factor(curves[0]),
            "up_vectors_per_d": sum(map(_up_vectors_per_d, runs)) / len(runs)}


def cell_texts(frame: pd.DataFrame) -> dict:
    """Our printed cell per table key: the count, ± over seeds, FedDyn's gain over it."""
    ok = frame[frame.own_target & (frame.status == "ok")]
    texts = {}
    for key, group in ok.groupby(["setting", "dataset_key", "split_key", "target"]):
        counts = {r.algorithm_key: Count(r.ours_mean, bool(r.censored)) for r in group.itertuples()}
        for r in group.itertuples():
            spread = fmt_value((r.ours_hi - r.ours_lo) / 2) if r.n_seeds > 1 and not r.censored else ""
            g = gain(counts[r.algorithm_key], counts["feddyn"]) \
                if r.algorithm_key != "feddyn" and "feddyn" in counts else None
            texts[(*key[:3], float(key[3]), r.algorithm_key)] = with_gain(counts[r.algorithm_key], g, spread)
    return texts


# ---------------------------------------------------------------------------------------------
# Rendering


def render(frame: pd.DataFrame, ref: pd.DataFrame, spec: TableSpec) -> pd.DataFrame:
    """compare_table on the printed rows, with our cells written as the paper writes them."""
    ours = frame[frame.own_target].copy()
    table = compare_table(ours, ref, KEYS, value_name=f"models transmitted to reach the target {spec.target_name}",
                          unit_note="relative to one FedAvg round: rounds x uplink vectors per client "
                                    "and round, from the ledger (SCAFFOLD 2)")
    texts = cell_texts(frame)
    keys = list(zip(table.setting, table.dataset_key, table.split_key, table.target.astype(float), table.algorithm_key))
    table["ours"] = [texts.get(k, text) for k, text in zip(keys, table["ours"])]
    # A censored count is a lower bound: no ratio beside it (nor beside a censored paper cell).
    censored = {k for k, c in zip(zip(ours.setting, ours.dataset_key, ours.split_key, ours.target.astype(float),
                                      ours.algorithm_key), ours.censored) if c}
    paper_censored = table["paper"].str.contains(r"\+", regex=True)
    ours_censored = pd.Series([k in censored for k in keys], index=table.index)
    table.loc[ours_censored | paper_censored, "ratio"] = math.nan
    return table


def notes(spec: TableSpec, args, frame: pd.DataFrame, extra: list[str]) -> list[str]:
    every = eval_interval(args)
    profile = {
        "quick": "quick (conf/profile/quick.yaml): rounds capped at 100 (paper: 500-2000) and local "
                 "epochs at 1 (paper: 2-50; SCAFFOLD's K becomes one epoch's steps), so accuracy per "
                 "round is lower and counts are often censored at 100+ (SCAFFOLD 200+)",
        "smoke": "smoke (conf/profile/smoke.yaml): 3 rounds of at most 5 local steps: a pipeline check, "
                 "every count is censored",
        "paper": "paper: App. A.2's rounds and local epochs",
    }[args.profile]
    lines = [f"profile: {profile}",
             f"ours: models transmitted until the mean of all clients' models ({spec.column}) first reaches "
             f"the target ({'<=' if spec.lower_is_better else '>='} target), from the first evaluated round",
             f"evaluation every {every} round(s)" + (
                 ": counts are rounded up to that grid (--eval-every-round evaluates every round)" if every > 1 else ""),
             "N+: the target was not reached in the N rounds run (x2 for SCAFFOLD): a lower bound. In "
             "parentheses FedDyn's gain, baseline / FedDyn: (>g) when the baseline is censored, (<g) "
             "when FedDyn is, (?) when both are",
             "ours / paper is blank where either side is censored",
             "hyperparameters: FedDyn App. A.2 (experiments/feddyn/settings.py)"]
    given = list(getattr(args, "override", None) or [])
    if given:  # e.g. train.rounds=200: the paper's settings with fewer rounds, censored at that cap
        lines.append("overrides of every run, after the table's own settings (they win): " + " ".join(given))
    assumed: dict[str, dict] = {}  # dataset -> the unstated values its runs use (ordered set)
    for _, g in frame[frame.status != "not run"].drop_duplicates(RUN_COLS).iterrows():
        rec = settings.recipe(g.dataset_key, g.participation, g.split_key, g.num_devices, g.balance)
        assumed.setdefault(g.dataset_key, {}).update(dict.fromkeys(rec.assumed))
    lines += [f"{d}: values the paper leaves open: " + "; ".join(a) for d, a in assumed.items() if a]
    return lines + extra


# ---------------------------------------------------------------------------------------------
# Claims across tables


def _frames_path(root, number: int) -> Path:
    return Path(root) / "tables" / f"feddyn_table{number}_runs.csv"


# A saved row is one run (its table row and algorithm) measured at one target, at one profile
# and evaluation interval.
ROW_ID = [*RUN_COLS, "algorithm_key", "target", "profile", "eval_every"]


def save_rows(frame: pd.DataFrame, path: Path) -> None:
    """Write this render's rows over the saved ones, keeping the saved rows it does not cover:
    a render filtered by --datasets or --settings must not drop the other rows, which the
    other tables' claims read. Both sides are handled as the file spells them (text), so
    0.1 and '0.1' are one row; a file without these columns (older) is replaced."""
    rows = pd.read_csv(io.StringIO(frame.to_csv(index=False)), dtype=str, keep_default_na=False)
    if path.exists():
        saved = pd.read_csv(path, dtype=str, keep_default_na=False)
        if set(ROW_ID) <= set(saved.columns):
            new_ids = set(map(tuple, rows[ROW_ID].values))
            keep = [tuple(r) not in new_ids for r in saved[ROW_ID].values]
            rows = pd.concat([saved[keep], rows], ignore_index=True)
    rows.to_csv(path, index=False)


def claims_frame(frame: pd.DataFrame, args, number: int) -> tuple[pd.DataFrame, list[int]]:
    """This table's rows plus the saved rows of the other FedDyn tables at the same profile and
    evaluation interval (cross-table claims such as FDY-T2-3 need Tables 1, 2 and 5)."""
    parts, used = [frame], []
    for other in (1, 2, 4, 5, 6):
        path = _frames_path(args.results_root, other)
        if other == number or not path.exists():
            continue
        saved = pd.read_csv(path, keep_default_na=False, na_values=[""])
        if "eval_every" not in saved:  # written before the column existed: not comparable
            continue
        saved = saved[(saved["profile"].astype(str) == args.profile)
                      & (saved["eval_every"] == frame["eval_every"].iloc[0])]
        if len(saved):
            for col in ("split_key", "reason", "target_rank", "seeds", "data"):
                saved[col] = saved[col].fillna("").astype(str)
            parts.append(saved)
            used.append(other)
    return pd.concat(parts, ignore_index=True), used


def table_algorithms(args) -> tuple:
    """The table's methods: the four of the paper, and DSGD with Table 2's --dsgd."""
    return (*settings.ALGORITHMS, "dsgd") if getattr(args, "dsgd", False) else settings.ALGORITHMS


def table_ref(spec: TableSpec, args) -> tuple[pd.DataFrame, list[str]]:
    """The paper's rows chosen by --datasets, --splits and --settings, and notes on the rest."""
    return select_rows(load_table(spec.number), args.datasets, args.splits, args.settings,
                       data_root=args.data_root)


def table_cells(spec: TableSpec, args, scale) -> list[Cell]:
    """Every run of a table (Target.cells)."""
    cells, _ = grid(table_ref(spec, args)[0], table_algorithms(args), scale.get("num_devices"),
                    data_root=args.data_root)
    return with_eval_extra(cells, args)


def render_table(spec: TableSpec, results) -> int:
    """The whole table from its runs (Target.render): write it, print it with its claims."""
    args = results.options
    ref, omitted = table_ref(spec, args)
    log.info(f"FedDyn Table {spec.number} at profile={args.profile}, seeds={args.seeds}")
    frame, cells, _ = measure(ref, spec, results, table_algorithms(args), results.scale.get("num_devices"))
    frame["eval_every"] = eval_interval(args)
    log.info(f"FedDyn Table {spec.number}: {sum(c.not_run is None for c in cells)} runnable runs of {len(cells)}")
    out_dir = Path(args.results_root) / "tables"
    out_dir.mkdir(parents=True, exist_ok=True)
    runs_csv = _frames_path(args.results_root, spec.number)
    save_rows(frame, runs_csv)  # every run x target, for the claims of the other tables

    table = render(frame, ref, spec)
    stem, title = f"feddyn_table{spec.number}", f"FedDyn Table {spec.number}: {spec.title}"
    lines = notes(spec, args, frame, omitted)
    paths = write_table(table, out_dir, stem, title=title, notes=lines)
    print(to_markdown(table, title, lines))

    everything, used = claims_frame(frame, args, spec.number)
    source = f" (with the saved rows of Tables {', '.join(map(str, used))})" if used else ""
    paths["claims"] = out_dir / f"{stem}_claims.md"
    print("\n" + write_claims(paths["claims"], evaluate_claims(list(spec.claims), everything, checks=CHECKS),
                              f"Claims on our numbers{source}:"))
    paths["runs"] = runs_csv
    for name, path in paths.items():
        print(f"[feddyn table{spec.number}] {name}: {path}")
    return 0
