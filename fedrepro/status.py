"""`python -m fedrepro.status [TARGET] [--results-root R]` (`make status [TARGET=table2]`): which
runs of a target are done, diverged, running, failed, interrupted, archived or missing, with wall
times.

TARGET is a make target (table2, feddyn-table6, losac-fig1, ...) or a module with its arguments
(`fedrepro.reports.grid --cell a=... -- ...`). Its runs are found by running the target in plan
mode: every `measure_cells` only records the run keys it would compute (nothing is trained; the
target's tables go to a temporary folder), with the target's PROFILE / SEEDS / --datasets.
Without TARGET, every run of the results store is listed.

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
import contextlib
import io
import json
import logging
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from fedrepro import store
from fedrepro.errors import FedreproError, one_line
from fedrepro.reports.cli import fmt_duration, fmt_wall

STATES = ("done", "diverged", "running", "failed", "interrupted", "archived", "missing")


def target_command(target: str) -> tuple[str, list[str]]:
    """(module, argv) that `make TARGET` runs (the Makefile's rules)."""
    if "." in target.split()[0]:
        module, *argv = target.split()
        return module, argv
    rules = [
        (r"table([2-5])", lambda m: ("experiments.fedelasticnet.table" + m[1], [])),
        (r"feddyn-table([0-9]+)", lambda m: ("experiments.feddyn.table" + m[1], [])),
        (r"losac-table2", lambda m: ("experiments.losac.table2", [])),
        (r"losac-fig([1-5])", lambda m: ("experiments.losac.curves", ["--figure", m[1]])),
        (r"losac-fig([67])", lambda m: ("experiments.losac.fig" + m[1], [])),
        (r"l2gd-fig([23])", lambda m: ("experiments.l2gd.logistic", ["--figure", m[1]])),
        (r"l2gd-table2", lambda m: ("experiments.l2gd.cifar", ["--figure", "table2"])),
        (r"l2gd-fig([0-9]+)", lambda m: ("experiments.l2gd.cifar", ["--figure", m[1]])),
        (r"compare-compression", lambda m: ("experiments.l2gd.compare_compression", [])),
        (r"centralized", lambda m: ("experiments.centralized", [])),
        (r"fen-costs", lambda m: ("experiments.fedelasticnet.figures", ["--figure", "costs"])),
        (r"fen-fig([0-9]+)", lambda m: ("experiments.fedelasticnet.figures", ["--figure", m[1]])),
        (r"feddyn-fig3", lambda m: ("experiments.feddyn.fig3", [])),
        (r"feddyn-fig([0-9]+)", lambda m: ("experiments.feddyn.figures", ["--figure", m[1]])),
    ]
    for pattern, command in rules:
        m = re.fullmatch(pattern, target)
        if m:
            return command(m)
    raise SystemExit(f"fedrepro status: unknown target {target!r} (a make table or figure target, "
                     "or a module such as fedrepro.reports.grid with its arguments)")


class _PlanOnly(Exception):
    pass


def plan(module: str, argv: list[str], results_root: str, *, profile: str, seeds: int) -> tuple[list[dict], str]:
    """The runs `module.main(argv)` would compute: [{label, key, overrides}], and a note when
    planning stopped early (a target that trains outside the results store)."""
    import importlib

    import fedrepro.run
    import fedrepro.runner
    from fedrepro.reports import grid

    def refuse(*_a, **_k):
        raise _PlanOnly("this target trains outside the results store (its own loops)")

    saved = fedrepro.runner.run_experiment, fedrepro.run.build_federation
    fedrepro.runner.run_experiment = fedrepro.run.build_federation = refuse
    grid._PLAN = []
    note = ""
    root = Path(results_root).resolve()
    with tempfile.TemporaryDirectory(prefix="fedrepro-status-") as tmp:
        (root / "runs").mkdir(parents=True, exist_ok=True)
        os.symlink(root / "runs", Path(tmp) / "runs")  # lookups see the real store; outputs stay in tmp
        args = ["--results-root", tmp, "--profile", profile, "--seeds", str(seeds), "--jobs", "1",
                "--launcher", "local", *argv]  # first: a target's own `--` ends its options
        out = io.StringIO()
        silenced = logging.root.manager.disable
        logging.disable(logging.CRITICAL)  # the target's log is not the status listing either
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                importlib.import_module(module).main(args)
        except _PlanOnly as exc:
            note = str(exc)
        except SystemExit as exc:
            if exc.code not in (0, 1, None):
                note = f"the target stopped planning: exit {exc.code}: {out.getvalue().strip()[-300:]}"
        except Exception as exc:  # noqa: BLE001  (a target that needs runs to render: plan so far)
            if isinstance(exc, FedreproError) and not grid._PLAN:
                raise  # stopped before its first run (no reference folder, a bad option): not "0 runs"
            note = f"planning stopped at {type(exc).__name__}: {one_line(exc, 200)}"
        finally:
            logging.disable(silenced)
            fedrepro.runner.run_experiment, fedrepro.run.build_federation = saved
            planned, grid._PLAN = grid._PLAN, None
    seen, runs = set(), []
    for p in planned:
        if p["key"] not in seen:
            seen.add(p["key"])
            runs.append(p)
    return runs, note


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
    ap.add_argument("--profile", default=os.environ.get("PROFILE", "quick"), choices=["smoke", "quick", "paper"])
    ap.add_argument("--seeds", type=int, default=int(os.environ.get("SEEDS", 1)))
    ap.add_argument("--archive", type=Path, default=None, help="the run archive (default docs/measured/runs)")
    ap.add_argument("target", nargs="?", help="make target or module (with its arguments after it)")
    ap.add_argument("target_args", nargs=argparse.REMAINDER, help="the target's own arguments")
    args = ap.parse_args(argv)
    root = args.results_root
    if args.target:
        module, extra = target_command(args.target)
        runs, note = plan(module, [*extra, *args.target_args], root,
                          profile=args.profile, seeds=args.seeds)
        rows = [{**run_state(root, r["key"], args.archive), "label": r["label"], "key": r["key"]}
                for r in runs]
        title = f"{args.target} (profile {args.profile}, seeds {args.seeds}, {root})"
    else:
        runs_dir = Path(root) / "runs"
        keys = sorted(p.name for p in runs_dir.iterdir() if p.is_dir()) if runs_dir.exists() else []
        rows = [{**run_state(root, k), "label": _label_from_store(store.run_dir(root, k)), "key": k} for k in keys]
        note = ""
        title = f"results store {root}"
    print(report(rows, title))
    if args.target and not rows:
        print("note: this target plans no run through the results store here (its datasets may not "
              "be here: FEDREPRO_DATA_ROOT, or the target's --datasets)")
    if note:
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    from fedrepro.reports.cli import run_target

    sys.exit(run_target(main))
