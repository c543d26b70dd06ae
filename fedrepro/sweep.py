"""What a Hydra multirun leaves besides its runs (docs/sweeps.md, "Sweep outputs").

`SweepSummary` is the Hydra callback conf/config.yaml registers under `hydra.callbacks`:

* at the end of each job, a symlink `run` in the job's folder points at the run's folder in the
  results store (`run.txt`, holding that path, where symlinks fail);
* at the end of a multirun, the sweep folder gets `runs.csv` (one row per job: its swept keys,
  status, final metrics, run folder; a job whose run failed or never started is a row with that
  status), `curves.csv` (the runs' metrics.csv in long format: key, round, metric, value) and
  `sweep.png` (the headline metric against the numeric swept key with the most values, a line for
  each combination of the other swept keys; with no numeric swept key, its curve per job).

The headline metric is the server model's test accuracy, or its test loss for regression (the
matrix-sensing model, whose accuracy is 0 by construction): `python -m fedrepro` returns it, so
an optimizing sweeper (Optuna) can use it.
"""
from __future__ import annotations

import copy
import logging
import math
import os
from pathlib import Path
from typing import Any, Optional

import pandas as pd
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)

REGRESSION_MODELS = ("matrix",)  # squared loss: accuracy is meaningless (fedrepro/models/flat.py)
STATUS_NOT_RUN = "not run"  # no run folder: an invalid config, missing data, or a job that raised


def headline_metric(model_name: Optional[str]) -> str:
    """The metric a sweep is judged by: test accuracy, or the test loss where there is no accuracy."""
    return "server_test_loss" if model_name in REGRESSION_MODELS else "server_test_acc"


def headline_value(summary: dict, model_name: Optional[str]) -> float:
    """The final headline metric of a run's summary; NaN unless the run finished (what
    hydra-optuna-sweeper records as a failed trial without stopping the sweep)."""
    if summary.get("status") != "finished":
        return math.nan
    return float(summary.get("final", {}).get(headline_metric(model_name), math.nan))


# -- each job: its run folder ------------------------------------------------------------------
def run_folder_of(config: DictConfig) -> Optional[Path]:
    """The results-store folder of the run a job's config asks for (the key the job computed),
    or None when there is none (an invalid config never gets one)."""
    from fedrepro.config import run_key
    from fedrepro.store import run_dir

    task = copy.deepcopy(config)
    with open_dict(task):
        task.pop("hydra", None)  # the task function's config has no hydra node either
    try:
        folder = run_dir(task.results_root, run_key(task)).resolve()
    except Exception:  # noqa: BLE001  (an invalid config: the job's log says why)
        return None
    return folder if folder.is_dir() else None


def link_run(job_dir: Path, folder: Optional[Path]) -> None:
    """`job_dir/run` -> `folder`; `job_dir/run.txt` holding the path where symlinks fail; neither
    when `folder` is None (a link left by an earlier sweep into this folder is removed)."""
    for old in (job_dir / "run", job_dir / "run.txt"):
        if old.is_symlink() or old.is_file():
            old.unlink()
    if folder is None:
        return
    try:
        (job_dir / "run").symlink_to(folder, target_is_directory=True)
    except OSError:  # a file system without symlinks (some network and Windows mounts)
        (job_dir / "run.txt").write_text(f"{folder}\n")


def linked_run(job_dir: Path) -> Optional[Path]:
    """The run folder `link_run` recorded for a job, or None."""
    if (job_dir / "run").is_symlink():
        return Path(os.readlink(job_dir / "run"))
    if (job_dir / "run.txt").exists():
        return Path((job_dir / "run.txt").read_text().strip())
    return None


# -- the sweep: runs.csv, curves.csv, sweep.png ------------------------------------------------
def job_dirs(sweep_dir: Path) -> list[Path]:
    """The sweep's job folders (those holding .hydra/overrides.yaml) in job order, but those left
    by an earlier multirun into the same folder: older than its multirun.yaml (the sweeper
    writes it before the jobs start; both times are the file system's, so nodes agree)."""
    started = sweep_dir / "multirun.yaml"
    since = started.stat().st_mtime - 1.0 if started.exists() else 0.0
    found = [p.parent.parent for p in sweep_dir.glob("*/.hydra/overrides.yaml") if p.stat().st_mtime >= since]
    return sorted(found, key=lambda p: (0, int(p.name)) if p.name.isdigit() else (1, p.name))


def parse_overrides(job_dir: Path) -> dict[str, str]:
    """A job's task overrides (`hydra.overrides.task`) as {key: value}."""
    overrides = OmegaConf.to_container(OmegaConf.load(job_dir / ".hydra" / "overrides.yaml"))
    pairs = (o.split("=", 1) for o in overrides if "=" in o)
    return {key.lstrip("+~"): value for key, value in pairs}


def swept_keys(overrides: list[dict[str, str]]) -> list[str]:
    """The keys whose values differ between the jobs (all of them for a single job)."""
    keys = list(dict.fromkeys(k for o in overrides for k in o))
    if len(overrides) < 2:
        return keys
    return [k for k in keys if len({o.get(k) for o in overrides}) > 1]


def _job_error(job_dir: Path) -> str:
    """The last error line of a job's log (the task logs why its run failed or never started)."""
    lines = [line for p in job_dir.glob("*.log") for line in p.read_text(errors="replace").splitlines()
             if "][ERROR] - " in line]
    return lines[-1].split("][ERROR] - ", 1)[1] if lines else "no run folder (see the job's log)"


def sweep_table(jobs: list[Path]) -> pd.DataFrame:
    """runs.csv: one row per job: job, the swept keys, status, the headline metric's name and
    final value, rounds, training seconds, error, run key and folder, every final metric
    (`final.<metric>`); `attrs["swept"]` names the swept keys."""
    from fedrepro.results import load_runs

    overrides = [parse_overrides(j) for j in jobs]
    keys = swept_keys(overrides)
    folders = [linked_run(j) for j in jobs]
    stores = {f.parent.parent for f in folders if f is not None}
    runs = pd.concat([load_runs(s) for s in stores], ignore_index=True) if stores else pd.DataFrame()
    by_folder = {Path(r["folder"]).resolve(): r for r in runs.to_dict("records")}
    rows = []
    for job, given, folder in zip(jobs, overrides, folders):
        run = by_folder.get(folder.resolve()) if folder is not None else None
        row: dict[str, Any] = {"job": job.name, **{k: given.get(k) for k in keys}}
        if run is None:
            row.update(status=STATUS_NOT_RUN, error=_job_error(job))
        else:
            metric = headline_metric(run.get("model.name"))
            row.update(status=run["status"], metric=metric, headline=run.get(f"final.{metric}"),
                       rounds_completed=run.get("rounds_completed"), train_seconds=run.get("train_seconds"),
                       error=run.get("error"), key=run["key"], folder=str(folder),
                       **{k: v for k, v in run.items() if k.startswith("final.")})
        rows.append(row)
    table = pd.DataFrame(rows)
    if "rounds_completed" in table:  # whole numbers, though the jobs without a run have none
        table["rounds_completed"] = table["rounds_completed"].astype("Int64")
    table.attrs["swept"] = keys
    return table


def sweep_curves(table: pd.DataFrame) -> pd.DataFrame:
    """curves.csv: the long-format curves (key, round, metric, value) of the sweep's runs."""
    from fedrepro.results import load_curves

    ran = table.dropna(subset=["key"]) if "key" in table else pd.DataFrame(columns=["key", "folder"])
    parts = [load_curves(Path(folder).parent.parent, keys=[key]) for key, folder in zip(ran["key"], ran["folder"])]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=["key", "round", "metric", "value"])
    return pd.concat(parts, ignore_index=True)


def _numeric(values) -> Optional[list[float]]:
    try:
        return [float(v) for v in values]
    except (TypeError, ValueError):
        return None


def _x_key(done: pd.DataFrame, swept: list[str]) -> Optional[str]:
    """The swept key to put on the x axis: the numeric one with the most distinct values (at least
    two), or None when no swept key is numeric."""
    best = None
    for key in swept:
        xs = _numeric(done[key])
        if xs is not None and len(set(xs)) >= 2 and (best is None or len(set(xs)) > best[1]):
            best = (key, len(set(xs)))
    return best[0] if best else None


def sweep_figure(table: pd.DataFrame, curves: pd.DataFrame, out: Path) -> Path:
    """sweep.png: the headline metric against a numeric swept key (the one with the most values),
    one line for each combination of the other swept keys; else, with no numeric swept key, the
    headline metric's curve of each job."""
    from fedrepro.reports.figures import metric_figure, panel_grid

    done = table[table["status"] == "finished"] if "headline" in table else table.iloc[:0]
    metric = done["metric"].mode().iloc[0] if len(done) else "server_test_acc"
    swept = table.attrs["swept"]
    failed = len(table) - len(done)
    note = f" ({failed} of {len(table)} jobs not finished)" if failed else ""
    x_key = _x_key(done, swept) if len(done) else None
    if x_key is not None:
        others = [k for k in swept if k != x_key]
        fig, axes = panel_grid(1, 1, (7.2 if others else 6.4, 4.2), dpi=120)
        ax = axes[0, 0]
        groups = done.groupby(others, sort=False, dropna=False) if others else [((), done)]
        for values, rows in groups:
            values = values if isinstance(values, tuple) else (values,)
            points = sorted((x, y) for x, y in zip(_numeric(rows[x_key]), rows["headline"].astype(float))
                            if math.isfinite(y))
            label = " ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in zip(others, values)) or None
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=label)
        xs = _numeric(done[x_key])
        if min(xs) > 0 and max(xs) / min(xs) >= 100:  # a sweep over decades (lr, lambda1): log scale
            ax.set_xscale("log")
        ax.set(xlabel=x_key, ylabel=f"final {metric}", title=f"{metric} against {x_key}{note}")
        ax.grid(alpha=0.3)
        if others:
            ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
        fig.tight_layout()
        fig.savefig(out, format="png")
        return out
    frames = {}
    for _, job in done.iterrows():  # in job order, labelled by the job's swept values
        label = " ".join(f"{k}={job[k]}" for k in swept) or f"job {job['job']}"
        curve = curves[(curves["key"] == job["key"]) & (curves["metric"] == metric)]
        if len(curve):
            frames[label] = curve.rename(columns={"value": metric})
    if not frames:  # nothing finished: still a figure, saying so
        frames = {"no finished run": pd.DataFrame({"round": [], metric: []})}
    return metric_figure(frames, out, y=metric, ylabel=metric, title=f"{metric} by job{note}")


def summarize_sweep(sweep_dir: Path) -> Optional[pd.DataFrame]:
    """Write runs.csv, curves.csv and sweep.png into `sweep_dir`; returns the runs table."""
    jobs = job_dirs(sweep_dir)
    if not jobs:
        log.warning(f"{sweep_dir}: no job folder with .hydra/overrides.yaml; runs.csv needs them "
                    f"(keep hydra.output_subdir set)")
        return None
    table = sweep_table(jobs)
    table.to_csv(sweep_dir / "runs.csv", index=False)
    curves = sweep_curves(table)
    curves.to_csv(sweep_dir / "curves.csv", index=False)
    sweep_figure(table, curves, sweep_dir / "sweep.png")
    log.info(f"sweep of {len(table)} jobs: {sweep_dir / 'runs.csv'}, curves.csv, sweep.png")
    return table


class SweepSummary(Callback):
    """Links each job to its run; summarizes the multirun in its sweep folder (module doc)."""

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        try:
            link_run(Path(config.hydra.runtime.output_dir), run_folder_of(config))
        except Exception as exc:  # noqa: BLE001  (a missing link must not fail the job)
            log.warning(f"could not link the job folder to its run: {exc}")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            summarize_sweep(Path(config.hydra.sweep.dir))
        except Exception as exc:  # noqa: BLE001  (the runs are stored; only the summary is lost)
            log.exception(f"the sweep's runs.csv / curves.csv / sweep.png were not written: {exc}; "
                          f"`python -m fedrepro.sweep {config.hydra.sweep.dir}` writes them again")


def main(argv: Optional[list[str]] = None) -> int:
    """`python -m fedrepro.sweep SWEEP_DIR`: write a finished multirun's summary (again)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m fedrepro.sweep", description=main.__doc__)
    parser.add_argument("sweep_dir", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return 0 if summarize_sweep(args.sweep_dir) is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
