"""The command-line options every table and figure target shares (make: PROFILE, SEEDS, JOBS,
LAUNCHER, DONE_ONLY)."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Callable

LAUNCHER_CHOICES = ("local", "joblib", "submitit_local", "submitit_slurm", "ray")


class _TableParser(argparse.ArgumentParser):
    """Parses as usual, then makes --launcher and --done-only the defaults of every
    `measure_cells` of this process (the targets pass --jobs to it; the other two travel in
    FEDREPRO_LAUNCHER and FEDREPRO_DONE_ONLY, which each parse sets anew)."""

    def parse_known_args(self, args=None, namespace=None):
        ns, rest = super().parse_known_args(args, namespace)
        if hasattr(ns, "launcher"):
            if ns.launcher not in LAUNCHER_CHOICES:  # from LAUNCHER=, which argparse does not check
                self.error(f"LAUNCHER={ns.launcher!r} is unknown; choose one of {', '.join(LAUNCHER_CHOICES)}")
            os.environ["FEDREPRO_LAUNCHER"] = ns.launcher
        if os.environ.get("DONE_ONLY", "") not in ("", "0", "1"):
            self.error(f"DONE_ONLY={os.environ['DONE_ONLY']!r}: set DONE_ONLY=1 to render from finished runs "
                       "only, or leave it empty")
        if hasattr(ns, "done_only"):
            if ns.done_only:
                os.environ["FEDREPRO_DONE_ONLY"] = "1"
            else:
                os.environ.pop("FEDREPRO_DONE_ONLY", None)
        return ns, rest


def table_parser(description: str) -> argparse.ArgumentParser:
    ap = _TableParser(description=description)
    ap.add_argument("--profile", default=os.environ.get("PROFILE", "quick"), choices=["smoke", "quick", "paper"])
    ap.add_argument("--seeds", type=int, default=int(os.environ.get("SEEDS", 1)),
                    help="seeds 0..n-1 per cell; n > 1 shows mean and 95 %% interval")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("JOBS", 1)),
                    help="runs at once (processes), each with cores/jobs threads")
    ap.add_argument("--launcher", choices=LAUNCHER_CHOICES,
                    default=os.environ.get("LAUNCHER") or "local",  # not FEDREPRO_LAUNCHER: the last parse's
                    help="how runs are started: local (this process, or joblib processes when "
                         "--jobs > 1), joblib, submitit_local, submitit_slurm (FEDREPRO_SLURM="
                         "'partition=...,timeout_min=...'), ray (RAY_ADDRESS or a local Ray)")
    ap.add_argument("--results-root", default=os.environ.get("FEDREPRO_RESULTS", "results"))
    ap.add_argument("--data-root", default=os.environ.get("FEDREPRO_DATA_ROOT", "data"))
    ap.add_argument("--datasets", default=None,
                    help="comma-separated dataset keys, or 'all' (every paper row; rows that cannot "
                         "run here are listed as 'not run'); default: the datasets runnable here")
    ap.add_argument("--splits", default="all", help="comma-separated split keys (iid, dirichlet0.6, ...) or 'all'")
    ap.add_argument("--done-only", action="store_true", default=os.environ.get("DONE_ONLY") == "1",
                    help="train nothing: fill the table from the finished runs in the results store, "
                         "the others 'not run (not computed yet)' (make DONE_ONLY=1)")
    return ap


def run_target(main: Callable[[], int]) -> int:
    """A target's exit status: main()'s, or 2 after one line on stderr when it stops on a
    FedreproError (a missing reference folder, an unknown config choice, damaged data): that
    message already names the problem and the fix, and a traceback would bury it. Any other
    exception is a bug and keeps its traceback."""
    from fedrepro.errors import FedreproError

    try:
        return main()
    except FedreproError as exc:
        print(f"fedrepro: error: {exc}", file=sys.stderr)
        return 2
