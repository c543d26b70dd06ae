"""Every run of a results store as pandas frames, for notebooks and ad-hoc analysis.

    from fedrepro.results import load_runs, load_curves
    runs = load_runs("results", dataset="mnist", algorithm=["fedprox", "fen_alg1"])
    curves = load_curves("results", keys=runs.key, metrics=["server_test_acc"])

`load_runs` gives one row per run folder: its key, status (finished, diverged, failed, or
"incomplete" for a folder without summary: running or interrupted), the resolved config
flattened to dotted columns (`algorithm.name`, `train.lr`, ...), and the final metrics
(`final.server_test_acc`, `final.cum_up_nonzeros`, ...), its wall times and folder. `where`
filters on any column, with short names for the usual ones (dataset, algorithm, split,
profile, seed); a list value means "any of". `load_curves` gives the long format (key, round,
metric, value) of the runs' metrics.csv: one row per logged value, NaNs (rounds a metric was
not computed in) left out. `run_metrics` is one run's metrics.csv as it is (the targets' renders
read runs through it).
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Optional

import pandas as pd

SHORT = {"dataset": "dataset.name", "algorithm": "algorithm.name", "split": "split.kind",
         "profile": "profile.name", "model": "model.name", "compressor": "compressor.name"}
_SUMMARY = ("status", "rounds_completed", "setup_seconds", "train_seconds", "seconds_per_round", "executor",
            "data_source", "error")


def _flatten(node, prefix: str = "") -> dict:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: str(node) if isinstance(node, list) else node}


def _row(folder: Path) -> Optional[dict]:
    from omegaconf import OmegaConf

    if not (folder / "config.yaml").exists():
        return None
    config = OmegaConf.to_container(OmegaConf.load(folder / "config.yaml"), resolve=False)
    row = {"key": folder.name, "status": "incomplete", **_flatten(config)}
    path = folder / "summary.json"
    if path.exists():
        summary = json.loads(path.read_text())
        row.update({k: summary.get(k) for k in _SUMMARY})
        row.update({f"final.{k}": v for k, v in (summary.get("final") or {}).items()})
    row["folder"] = str(folder)
    return row


def load_runs(root: str | Path = "results", **where) -> pd.DataFrame:
    """One row per run of <root>/runs (see the module doc); `where` filters the rows."""
    folders = sorted(p for p in (Path(root) / "runs").glob("*") if p.is_dir())
    frame = pd.DataFrame([r for r in map(_row, folders) if r is not None])
    if frame.empty:
        return pd.DataFrame(columns=["key", "status", "folder"])
    for name, wanted in where.items():
        column = SHORT.get(name, name)
        if column not in frame:
            raise KeyError(f"load_runs: no column {column!r} to filter on; columns: "
                           f"{', '.join(sorted(frame.columns))}")
        values = list(wanted) if isinstance(wanted, (list, tuple, set, pd.Series)) else [wanted]
        frame = frame[frame[column].isin(values)]
    front = ["key", "status", *[SHORT[k] for k in SHORT if SHORT[k] in frame], "seed"]
    front = [c for c in dict.fromkeys(front) if c in frame]
    return frame[front + [c for c in frame.columns if c not in front]].reset_index(drop=True)


def run_metrics(folder: str | Path) -> pd.DataFrame:
    """A run folder's metrics.csv (one row per logged round). A render asks for one run's several
    times (a table, its claims, its figure): the file is parsed once per process and version (its
    modification time and size), and each caller gets its own copy to change."""
    stat = (Path(folder) / "metrics.csv").stat()
    return _parsed_metrics(str(Path(folder) / "metrics.csv"), stat.st_mtime_ns, stat.st_size).copy()


@lru_cache(maxsize=512)
def _parsed_metrics(path: str, mtime_ns: int, size: int) -> pd.DataFrame:
    return pd.read_csv(path)


def load_curves(root: str | Path = "results", keys: Optional[Iterable[str]] = None,
                metrics: Optional[Iterable[str]] = None) -> pd.DataFrame:
    """The long-format curves (key, round, metric, value) of the runs `keys` (default: all)."""
    runs = Path(root) / "runs"
    keys = sorted(p.name for p in runs.glob("*") if p.is_dir()) if keys is None else list(keys)
    parts = []
    for key in keys:
        try:
            wide = run_metrics(runs / key)
        except FileNotFoundError:  # a run that logged no round yet
            continue
        wide = wide.drop(columns=[c for c in ("step",) if c in wide])  # a copy of round
        value_columns = [c for c in wide.columns if c != "round" and (metrics is None or c in set(metrics))]
        long = wide.melt(id_vars=["round"], value_vars=value_columns, var_name="metric").dropna(subset=["value"])
        parts.append(long.assign(key=key))
    if not parts:
        return pd.DataFrame(columns=["key", "round", "metric", "value"])
    out = pd.concat(parts, ignore_index=True)[["key", "round", "metric", "value"]]
    out["round"] = out["round"].astype(int)
    return out
