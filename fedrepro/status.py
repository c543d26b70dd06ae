"""`python -m fedrepro.status [--results-root R]` (`make status`): every run of the results store
with its state and wall time; `python -m experiments status TARGET` (`make status TARGET=table2`)
lists the runs of one target, as the target's `cells()` names them (fedrepro/reports/target.py),
with its PROFILE / SEEDS / --datasets: nothing is run or rendered to find them.

States: done (summary "finished"), diverged (summary "diverged": stopped at a non-finite loss),
running (a process holds the run's lock), failed (summary "failed": the error and round),
interrupted (a folder without summary: a killed run; it resumes from its checkpoint), archived
(not in this store, but finished in the run archive: `make restore` brings it in;
fedrepro/archive.py), missing (never started). Wall time: setup + training for done runs, until
the error for failed ones, since the start for running ones. Running and interrupted runs also
show the last round in their metrics.csv (flushed at each checkpoint) and, from the last
checkpoint's progress.json, the training time a round so far and what is left at that pace.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Optional

from fedrepro import store
from fedrepro.reports.cli import fmt_duration, fmt_wall

STATES = ("done", "diverged", "running", "failed", "interrupted", "archived", "missing")


def run_state(results_root: str | Path, key: str, archive: Optional[Path] = None) -> dict:
    """{state, wall (s or None), detail} of one run (`archive`: the run archive's folder)."""
    folder = store.run_dir(results_root, key)
    who = store.running(results_root, key)
    if who is not None:
        started = who.get("started")
        return {"state": "running", "wall": time.time() - started if started else None,
                "detail": f"pid {who.get('pid')} on {who.get('host')}" + _progress(folder)}
    s = store.read_summary(folder)
    if s is not None:
        status = s.get("status")
        if status == "finished":
            return {"state": "done", "wall": (s.get("setup_seconds") or 0) + (s.get("train_seconds") or 0),
                    "detail": f"{s.get('rounds_completed')} rounds"}
        if status == "diverged":
            return {"state": "diverged", "wall": (s.get("setup_seconds") or 0) + (s.get("train_seconds") or 0),
                    "detail": (s.get("error") or "").split(": ")[0]}
        if status == "failed":
            return {"state": "failed", "wall": s.get("wall_seconds"),
                    "detail": f"{s.get('error')} (round {s.get('round')}, attempt {s.get('attempts', 1)})"}
    if folder.exists():
        ckpt = [n for n in (store.CHECKPOINT, store.PREVIOUS_CHECKPOINT) if (folder / n).exists()]
        return {"state": "interrupted", "wall": None,
                "detail": ("killed; resumes from its checkpoint" if ckpt else "killed before its first checkpoint")
                + _progress(folder)}
    archived = (archive or store.ARCHIVE) / key
    if store.done_summary(archived) is not None:
        return {"state": "archived", "wall": None, "detail": f"in {archived}: make restore"}
    return {"state": "missing", "wall": None, "detail": ""}


def _progress(folder: Path) -> str:
    """', round R of N logged; M min a round so far, about H h to go' (the pace: training
    seconds per round at the last checkpoint, resumes included; the rest at that pace)."""
    r = store.last_round(folder)
    try:
        p = json.loads((folder / store.PROGRESS).read_text())
        rounds, pace = int(p["rounds"]), float(p["train_seconds"]) / int(p["round"])
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return f", round {r} logged" if r else ""
    r = max(r, int(p["round"]))
    return (f", round {r} of {rounds} logged; {fmt_duration(pace)} a round so far, "
            f"about {fmt_duration(pace * max(rounds - r, 0))} to go")


def _label_from_store(folder: Path) -> str:
    s = store.read_summary(folder) or {}
    if s.get("algorithm"):
        return f"{s.get('algorithm')} {s.get('dataset')} seed {s.get('seed')} ({s.get('profile')})"
    try:
        from omegaconf import OmegaConf

        c = OmegaConf.load(folder / "config.yaml")
        return f"{c.algorithm.name} {c.dataset.name} seed {c.seed} ({c.profile.name})"
    except Exception:  # noqa: BLE001
        return "?"


def report(rows: list[dict], title: str) -> str:
    from fedrepro.reports.tables import markdown_grid

    counts = {s: sum(r["state"] == s for r in rows) for s in STATES}
    head = f"{title}: {len(rows)} runs: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    table = markdown_grid(["state", "wall", "run", "key", "detail"],
                          [[r["state"], fmt_wall(r["wall"]), r["label"], r["key"], r["detail"]] for r in rows],
                          right_align={1})
    return head + "\n\n" + table + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fedrepro.status", description=__doc__.splitlines()[0])
    ap.add_argument("--results-root", default=os.environ.get("FEDREPRO_RESULTS", "results"))
    args = ap.parse_args(argv)
    root = args.results_root
    runs_dir = Path(root) / "runs"
    keys = sorted(p.name for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.exists() else []
    rows = [{**run_state(root, k), "label": _label_from_store(store.run_dir(root, k)), "key": k} for k in keys]
    print(report(rows, f"results store {root}"))
    return 0


if __name__ == "__main__":
    from fedrepro.reports.cli import run_target

    sys.exit(run_target(main))
