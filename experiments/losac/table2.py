"""LoSAC Table II: rounds to 85 %, loss and accuracy at round 500, SCAFFOLD vs LoSAC (M x T).

MNIST / HAR / ESR x M in {2, 3, 5} x T in {2, 4, 6}; non-IID (sorted by label, divided evenly),
N = 100, S = 10 (a fixed cohort each round), eta = 1e-4.

    python -m experiments losac table2 --profile quick [--datasets mnist,esr] [--cells M2T2,M5T6]

Every paper row is listed; rows whose data is not here (HAR) say "not run" and name the
missing files. Settings and every assumed value: experiments/losac/settings.py. Quick caps
the rounds at 100 (the loss and accuracy are then those of round 100, rounds to 85 % are
censored at 100+); evaluation runs every round at every profile. Writes
<results-root>/tables/losac_table2.{md,csv}, losac_table2_runs.csv (one row per run cell,
what the claims read) and losac_table2_claims.md.
"""
from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path

import pandas as pd

from experiments.losac import settings
from experiments.losac.claims import CHECKS
from fedrepro.config import compose_config
from fedrepro.data.loaders import unavailable
from fedrepro.metrics.targets import Count, gain, mean_count, rounds_to_target
from fedrepro.reports.claims import evaluate_claims, write_claims
from fedrepro.reports.grid import Cell, every_round, mean_interval
from fedrepro.reports.reference import load_reference
from fedrepro.reports.tables import compare_table, fmt_value, markdown_grid, to_markdown, write_table
from fedrepro.results import run_metrics

# not __name__: experiments.* is outside the `fedrepro` loggers that reports.cli sets up
log = logging.getLogger("fedrepro.experiments")

CLAIMS = tuple(f"LSC-T2-{i}" for i in range(1, 10))
KEYS = ["dataset_key", "algorithm_key", "M", "T", "metric"]
RUN_KEYS = ["dataset_key", "algorithm_key", "M", "T"]
ROUNDS, LOSS, ACC = "rounds_to_85pct_accuracy", "loss", "test_accuracy_at_round_500"
COLUMN = "server_test_acc"  # the global model x's test accuracy
STEM = "losac_table2"


# ---------------------------------------------------------------------------------------------
# Options and the paper's table


def load_table() -> pd.DataFrame:
    ref = load_reference("losac_table2")
    ref["M"], ref["T"] = ref["M"].astype(int), ref["T"].astype(int)
    rounds = ref["metric"] == ROUNDS
    ref.loc[rounds, "value_raw"] = [f"{v} ({s}x)" for v, s in zip(ref.loc[rounds, "value"],
                                                                  ref.loc[rounds, "speedup_reported"])]
    return ref


def parse_cells(text: str) -> list[tuple[int, int]]:
    if text == "all":
        return [(m, t) for m in settings.MS for t in settings.TS]
    out = []
    for item in text.split(","):
        item = item.strip().upper()
        try:
            m, t = item[1:].split("T")
            out.append((int(m), int(t)))
        except ValueError:
            raise SystemExit(f"--cells: {item!r} is not of the form M2T4")
    return out


def select(ref: pd.DataFrame, datasets: str, cells: str) -> tuple[pd.DataFrame, list[str]]:
    notes = []
    if datasets not in (None, "all"):
        wanted = datasets.split(",")
        unknown = sorted(set(wanted) - set(settings.DATASETS))
        if unknown:
            raise SystemExit(f"--datasets: {', '.join(unknown)} not in Table II ({', '.join(settings.DATASETS)})")
        rest = sorted(set(ref.dataset_key) - set(wanted))
        if rest:
            notes.append(f"rows of {', '.join(rest)} omitted (--datasets all lists them)")
        ref = ref[ref.dataset_key.isin(wanted)]
    chosen = parse_cells(cells)
    if cells != "all":
        notes.append("only the (M, T) cells " + ", ".join(f"M={m} T={t}" for m, t in chosen) + " (--cells)")
        ref = ref[[(m, t) in chosen for m, t in zip(ref["M"], ref["T"])]]
    return ref, notes


# ---------------------------------------------------------------------------------------------
# The grid


def recipes(scale: dict) -> dict:
    """settings.TABLE2, shrunk by the target's scale (SCALE)."""
    return {d: dataclasses.replace(rec, **scale) for d, rec in settings.TABLE2.items()}


def grid(ref: pd.DataFrame, args, scale: dict) -> tuple[list[Cell], list[dict]]:
    """One cell per (dataset, method, M, T) row; every round evaluated: rounds to 85 % counted
    exactly (quick's 5-round grid would round them up); smoke and paper already do, and their
    run keys stay."""
    cells, rows, table2 = [], [], recipes(scale)
    for _, r in ref.drop_duplicates(RUN_KEYS).iterrows():
        keys = {k: r[k] for k in RUN_KEYS}
        reason = unavailable(settings.loader_name(r.dataset_key), args.data_root)
        overrides = [*table2[r.dataset_key].overrides(r.algorithm_key, int(r["M"]), int(r["T"])),
                     *every_round(args.profile)]
        cells.append(Cell(keys, not_run=reason) if reason else Cell(keys, overrides))
        rows.append(keys)
    return cells, rows


# ---------------------------------------------------------------------------------------------
# Measuring


def read_run(run) -> dict:
    """One run's Table II numbers: rounds to 85 % (censored at the rounds run), and the loss and
    accuracy of the last evaluated round at or before round 500.

    A diverged run is a result, not a gap: if it never reached 85 % it never will (censored at
    the planned rounds); if it diverged before the round the loss and accuracy are read at, its
    loss there is inf and its accuracy undefined (NaN), which the claims count as worst."""
    metrics = run_metrics(run.folder)
    s = run.summary
    planned = int(s["rounds"])
    count = rounds_to_target(metrics, settings.TARGET, COLUMN)
    read_at = min(settings.ACC_ROUND, planned)
    out = {"rounds_run": int(metrics["round"].max()), "diverged_at": math.nan}
    if s["status"] != "finished":
        out["diverged_at"] = int(s["rounds_completed"]) + 1
        if count.censored:
            count = Count(planned, censored=True)
        if out["diverged_at"] <= read_at:
            return {**out, "count": count, "acc_round": read_at, "loss": math.inf, "test_loss": math.inf,
                    "acc": math.nan}
    evaluated = metrics.dropna(subset=[COLUMN])
    at = evaluated[evaluated["round"] <= read_at].iloc[-1]
    return {**out, "count": count, "acc_round": int(at["round"]), "loss": float(at["server_train_loss"]),
            "test_loss": float(at["server_test_loss"]), "acc": 100 * float(at[COLUMN])}


def measure(ref: pd.DataFrame, results) -> pd.DataFrame:
    """The runs frame: one row per (dataset, method, M, T) with status and the seed means."""
    args = results.options
    cells, rows = grid(ref, args, results.scale)
    frame, runs = results.measure(cells)
    out = []
    for i, keys in enumerate(rows):
        status = frame.iloc[i]
        base = {**keys, "status": status["status"], "reason": status["reason"], "profile": args.profile,
                "seeds": status["seeds"], "data": status["data"], "n_seeds": 0}
        done = runs.get(i, []) if status["status"] in ("ok", "diverged") else []
        if not done:
            out.append(base)
            continue
        per_seed = [read_run(run) for run in done]
        count = mean_count([p["count"] for p in per_seed])
        diverged = [p["diverged_at"] for p in per_seed if not math.isnan(p["diverged_at"])]
        row = {**base, "n_seeds": len(per_seed), "seeds": ",".join(str(r.summary["seed"]) for r in done),
               "data": done[0].summary.get("data_source", ""), "rounds": count.value,
               "censored": count.censored, "rounds_run": max(p["rounds_run"] for p in per_seed),
               "acc_round": min(p["acc_round"] for p in per_seed),
               "diverged_at": min(diverged) if diverged else math.nan}
        if diverged:
            row["reason"] = f"in round {min(diverged)}" + (
                f", after reaching 85 % in round {count}" if not count.censored else ", before reaching 85 %")
        for name in ("loss", "test_loss", "acc"):
            row[name], row[f"{name}_lo"], row[f"{name}_hi"] = mean_interval([p[name] for p in per_seed])
        row["rounds_lo"], row["rounds_hi"] = mean_interval([p["count"].value for p in per_seed])[1:]
        row["seconds"] = sum(r.summary["train_seconds"] for r in done) / len(done)
        out.append(row)
    cols = [*RUN_KEYS, "status", "reason", "profile", "seeds", "data", "n_seeds", "rounds", "censored",
            "rounds_run", "acc_round", "loss", "test_loss", "acc", "diverged_at"]
    frame = pd.DataFrame(out)
    return frame.reindex(columns=[*cols, *[c for c in frame.columns if c not in cols]])


# ---------------------------------------------------------------------------------------------
# Rendering


def speedup_text(base: Count, method: Count) -> str:
    g = gain(base, method)
    return "(?)" if g.bound == "?" else f"({g.bound}{g.value:.2f}x)"


def long_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """compare_table's `ours`: three metric rows per run (rounds, loss, accuracy in %). A diverged
    run's rounds row is ok when it reached 85 % first; its loss and accuracy rows are ok when read
    before it diverged."""
    out = []
    names = {ROUNDS: "rounds", LOSS: "loss", ACC: "acc"}
    for r in runs.to_dict("records"):
        for metric, col in names.items():
            status, reason = r["status"], r["reason"]
            if status == "diverged":
                fine = (not r["censored"]) if col == "rounds" else math.isfinite(r["loss"])
                status = "ok" if fine else "diverged"
            ok = status == "ok"
            out.append({**{k: r[k] for k in RUN_KEYS}, "metric": metric, "status": status,
                        "reason": reason, "profile": r["profile"], "seeds": r["seeds"], "data": r["data"],
                        "n_seeds": r["n_seeds"], "ours_mean": r.get(col, math.nan) if ok else math.nan,
                        "ours_lo": r.get(f"{col}_lo", math.nan) if ok else math.nan,
                        "ours_hi": r.get(f"{col}_hi", math.nan) if ok else math.nan})
    return pd.DataFrame(out)


def render(runs: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    table = compare_table(long_frame(runs), ref, KEYS, value_name="rounds to 85 % test accuracy (speed-up "
                          "= SCAFFOLD's rounds / this row's, same dataset, M, T); loss; test accuracy (%)",
                          unit_note="rounds: communication rounds of the server model x; loss: training "
                                    "cross-entropy; accuracy in %")
    ok = runs[runs.status.isin(["ok", "diverged"])]
    counts = {(r.dataset_key, r.M, r.T, r.algorithm_key): Count(r.rounds, bool(r.censored))
              for r in ok.itertuples(index=False)}
    texts, censored = {}, set()
    for (d, m, t, alg), c in counts.items():
        base = counts.get((d, m, t, "scaffold"))
        spread = ""
        row = ok[(ok.dataset_key == d) & (ok["M"] == m) & (ok["T"] == t) & (ok.algorithm_key == alg)].iloc[0]
        if row.n_seeds > 1 and not c.censored:
            spread = f" ± {fmt_value((row.rounds_hi - row.rounds_lo) / 2)}"
        suffix = "" if base is None else " (1x)" if alg == "scaffold" else " " + speedup_text(base, c)
        if row.status == "diverged":
            suffix += f", diverged in round {int(row.diverged_at)}"
        texts[(d, alg, m, t)] = f"{c}{spread}{suffix}"
        if c.censored:
            censored.add((d, alg, m, t))
    keys = list(zip(table.dataset_key, table.algorithm_key, table.M.astype(int), table["T"].astype(int)))
    is_rounds = table.metric == ROUNDS
    table.loc[is_rounds, "ours"] = [texts.get(k, o) for k, o, r in zip(keys, table.ours, is_rounds) if r]
    no_ratio = [r and k in censored for k, r in zip(keys, is_rounds)]
    table.loc[no_ratio, "ratio"] = math.nan  # a censored count is a bound: no ours / paper
    for col in ("M", "T"):
        table[col] = table[col].astype(int)
    # the loss and accuracy rows say the round they were read at (quick stops at 100, not 500)
    read_at = {(r.dataset_key, r.algorithm_key, int(r.M), int(r.T)): int(r.acc_round)
               for r in ok.itertuples(index=False)}
    keys = list(zip(table.dataset_key, table.algorithm_key, table.M, table["T"]))
    table["metric"] = [read_label(m, read_at.get(k)) for m, k in zip(table.metric, keys)]
    return table


def read_label(metric: str, read_round) -> str:
    """The loss / accuracy row's label for a run read at `read_round` (None: not run), beside
    the paper's round 500."""
    if metric == ROUNDS or read_round is None or read_round == 500:
        return metric
    return f"{'loss' if metric == LOSS else 'test_accuracy'}_at_round_{read_round} (paper: 500)"


def speedup_grid(runs: pd.DataFrame, ref: pd.DataFrame) -> str:
    """Ours beside the paper's speed-up, one line per (dataset, M, T)."""
    ok = runs[runs.status.isin(["ok", "diverged"])]
    paper = ref[(ref.metric == ROUNDS) & (ref.algorithm_key == "losac")]
    lines = []
    for r in paper.itertuples(index=False):
        pick = ok[(ok.dataset_key == r.dataset_key) & (ok["M"] == r.M) & (ok["T"] == r.T)]
        c = {x.algorithm_key: Count(x.rounds, bool(x.censored)) for x in pick.itertuples(index=False)}
        ours = speedup_text(c["scaffold"], c["losac"]).strip("()") if len(c) == 2 else "not run"
        lines.append([r.dataset_key, r.M, r.T, ours, f"{r.speedup_reported}x"])
    return markdown_grid(["dataset", "M", "T", "ours", "paper"], lines, right_align={3, 4})


def notes(args, runs: pd.DataFrame, extra: list[str], table2: dict) -> list[str]:
    cap = compose_config([f"profile={args.profile}"]).profile.max_rounds
    profile = {
        "quick": f"quick: rounds capped at {cap} (paper: 500, ESR 2000), so rounds to 85 % are censored "
                 f"at {cap}+ when not reached and the loss and accuracy are those of round {cap}, not 500",
        "smoke": f"smoke: {cap} rounds of at most 5 local steps: a pipeline check, every count is censored",
        "paper": "paper: 500 rounds (ESR 2000, read at round 500 for loss and accuracy)",
    }[args.profile]
    ok = runs[runs.status == "ok"]
    read = ", ".join(str(int(x)) for x in sorted(set(ok["acc_round"]))) if len(ok) else "(none run)"
    lines = [f"profile: {profile}",
             f"ours: rounds until the server model's test accuracy first reaches 85 % (evaluated every "
             f"round; N+ = not reached in the N rounds run, a lower bound, no ours / paper beside it); "
             f"loss (training cross-entropy) and test accuracy of the round {read}",
             "speed-up in parentheses: SCAFFOLD's rounds / this row's at the same dataset, M and T "
             "(>: SCAFFOLD censored, <: LoSAC censored, ?: both)"]
    for d in dict.fromkeys(runs.dataset_key):
        rec = table2[d]
        lines.append(f"{d}: N={rec.num_clients}, S={rec.cohort}, eta={rec.eta_paper:g} -> train.lr = n_i eta = "
                     f"{rec.n_i:g} x {rec.eta_paper:g} = {rec.lr:g}; SCAFFOLD batch ceil(n_i / M) = "
                     + ", ".join(f"{rec.batch_size(m)} (M={m})" for m in settings.MS))
    lines.append("assumed for every dataset: " + "; ".join(settings.TABLE2_ASSUMED))
    for d in dict.fromkeys(runs.dataset_key):
        lines.append(f"{d}: " + "; ".join(table2[d].assumed))
    return lines + extra


# ---------------------------------------------------------------------------------------------
# The target (experiments/losac/targets.py)


def cells(args, scale: dict) -> list[Cell]:
    ref, _ = select(load_table(), args.datasets, args.cells)
    return grid(ref, args, scale)[0]


def render_table(results) -> int:
    args = results.options
    ref, omitted = select(load_table(), args.datasets, args.cells)
    log.info(f"LoSAC Table II at profile={args.profile}, seeds={args.seeds}")
    runs = measure(ref, results)
    out_dir = Path(args.results_root) / "tables"
    out_dir.mkdir(parents=True, exist_ok=True)
    runs_csv = out_dir / f"{STEM}_runs.csv"
    runs.to_csv(runs_csv, index=False)

    table = render(runs, ref)
    title = "LoSAC Table II: rounds to 85 %, loss and test accuracy, SCAFFOLD vs LoSAC (non-IID, N=100, S=10)"
    lines = notes(args, runs, omitted, recipes(results.scale))
    paths = write_table(table, out_dir, STEM, title=title, notes=lines)
    speed = "\n### Speed-up (SCAFFOLD rounds / LoSAC rounds), ours beside the paper's\n\n" + \
        speedup_grid(runs, ref) + "\n"
    with open(paths["md"], "a", encoding="utf-8") as f:
        f.write(speed)
    print(to_markdown(table, title, lines) + speed)

    paths["claims"] = out_dir / f"{STEM}_claims.md"
    print("\n" + write_claims(paths["claims"], evaluate_claims(list(CLAIMS), runs, checks=CHECKS),
                              "Claims on our numbers (LSC-T2-*, rules of claims.csv):"))
    paths["runs"] = runs_csv
    for name, path in paths.items():
        print(f"[losac table2] {name}: {path}")
    return 0
