"""A paper table as a grid of runs: each cell is a set of config overrides run for every seed.

`measure_cells` runs (or reuses, through the results store) every cell for seeds 0..n-1 and
returns the long `ours` frame that `reports.tables.compare_table` and `reports.claims`
read: one row per cell with the mean over seeds, a 95 % t-interval, the profile, the seeds
and the data behind the number. Cells that cannot run here carry status "not run" and the
reason, so the table shows them instead of leaving them out.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Callable, Optional

import pandas as pd

from fedrepro.config import compose_config
from fedrepro.errors import FedreproError

# Two-sided 95 % Student t quantiles by degrees of freedom (beyond 30: the normal 1.96).
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the 95 % t-interval of the mean (low = high = mean for one value)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, mean, mean
    df = len(values) - 1
    half = (_T975[df - 1] if df <= len(_T975) else 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


@dataclass
class Cell:
    keys: dict  # e.g. {"dataset_key": "mnist", "split_key": "iid", "algorithm_key": "fedprox"}
    overrides: list[str] = field(default_factory=list)
    not_run: Optional[str] = None  # the reason this cell cannot run here


def measure_cells(cells: list[Cell], metric: Callable[[dict], float], *, profile: str, seeds: int,
                  results_root: str = "results", extra: list[str] = (),
                  log: Callable[[str], None] = print) -> tuple[pd.DataFrame, dict]:
    """Run every runnable cell for seeds 0..seeds-1; returns (ours frame, {cell index: [summaries]})."""
    from fedrepro.run import run_experiment

    rows, summaries = [], {}
    for i, cell in enumerate(cells):
        base = {**cell.keys, "profile": profile, "n_seeds": 0, "seeds": "", "data": ""}
        if cell.not_run:
            rows.append({**base, "ours_mean": float("nan"), "status": "not run", "reason": cell.not_run})
            continue
        values, runs, status, reason = [], [], "ok", ""
        for seed in range(seeds):
            overrides = [*cell.overrides, *extra, f"profile={profile}", f"seed={seed}",
                         f"results_root={results_root}", "logger.progress=false"]
            label = " ".join(f"{v}" for v in cell.keys.values())
            try:
                result = run_experiment(compose_config(overrides), quiet=True)
            except FedreproError as exc:
                status, reason = "failed", str(exc)
                log(f"  {label} seed {seed}: failed: {exc}")
                break
            s = result.summary
            runs.append(s)
            if s["status"] != "finished":
                status, reason = "diverged", s.get("error") or ""
                break
            values.append(metric(s))
            log(f"  {label} seed {seed}: {'reused' if result.reused else 'ran'} "
                f"{result.folder} ({s['train_seconds']:.1f} s)")
        summaries[i] = runs
        mean, lo, hi = mean_interval(values) if values and status == "ok" else (float("nan"),) * 3
        rows.append({**base, "ours_mean": mean, "ours_lo": lo, "ours_hi": hi, "status": status,
                     "reason": reason, "n_seeds": len(values),
                     "seeds": ",".join(str(s["seed"]) for s in runs),
                     "data": runs[0]["data_source"] if runs else "",
                     "dim": runs[0]["dim"] if runs else None,
                     "client_rounds": statistics.fmean(r["client_rounds"] for r in runs) if runs else None})
    return pd.DataFrame(rows), summaries
