"""What the L2GD targets share: their command line, readers of a run's metrics and rounds, and
number formatting. Their runs are the Targets' cells (targets.py), measured through
`Results.measure` (run=False: only read from the results store when another target owns them)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import numpy as np

import fedrepro  # noqa: F401  (torchvision shim first)
from fedrepro.reports.grid import configured_rounds, saved_config


def selection_ignored(ap, keep: tuple = ()) -> None:
    """Say so in the help of the shared --datasets / --splits the target does not read."""
    for action in ap._actions:
        if action.dest in ("datasets", "splits") and action.dest not in keep:
            action.help = "ignored here"


def tables_dir(results_root) -> Path:
    """<results_root>/tables, made if missing."""
    path = Path(results_root) / "tables"
    path.mkdir(parents=True, exist_ok=True)
    return path


def rounds_of(run) -> tuple[int, int]:
    """(rounds run, rounds configured before the profile's cap)."""
    planned = configured_rounds(run.folder)
    ran = int(run.summary["rounds_completed"])
    return ran, int(planned if planned is not None else run.summary["rounds"])


def test_samples(run, test_set: int = 10_000) -> int:
    """The test samples a run's accuracy was measured on: its profile's cap, else the whole test
    set (`test_set`: CIFAR-10's 10 000)."""
    cfg = saved_config(run.folder)
    cap = cfg.get("profile", {}).get("max_test_samples") if cfg is not None else None
    return int(min(cap, test_set)) if cap else test_set


def mean_or_nan(values) -> float:
    vals = [float(v) for v in values]
    if not vals:
        return math.nan
    if any(math.isinf(v) for v in vals):
        return math.inf
    return float(np.mean(vals))


def fmt(value: Optional[float], digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if math.isinf(value):
        return "inf"
    return f"{value:.{digits}g}"
