"""The command-line options every table and figure target shares (make: PROFILE, SEEDS, JOBS,
LAUNCHER, DONE_ONLY), and what every entry point outside Hydra shares: its logging
(`setup_logging`, through `run_target`) and how it writes durations (`fmt_wall`, `fmt_duration`).

The package logs through the `fedrepro` logger and its children (the targets in experiments/
through `fedrepro.experiments`); a table's markdown, its claims check and the files it wrote are
its product and go to stdout, the story of its runs goes to stderr through the log.
FEDREPRO_LOG_LEVEL=DEBUG (or WARNING, ...) sets the level of those loggers (default INFO).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Callable, Optional

LAUNCHER_CHOICES = ("local", "joblib", "submitit_local", "submitit_slurm", "ray")


class _TableParser(argparse.ArgumentParser):
    """Parses as usual, then checks what argparse does not: a LAUNCHER= or DONE_ONLY= from the
    environment that is not a choice. The parse touches nothing else: --launcher, --done-only
    and --data-root reach the runs and the "data not here" checks as the parsed options
    (`reports.target.run` hands them to `cells(options, scale)` and to the sweep; a run's config
    carries data_root= explicitly), never through os.environ. The environment variables are
    inputs only: PROFILE, SEEDS, JOBS, LAUNCHER, DONE_ONLY, FEDREPRO_DATA_ROOT, ... are read here,
    as defaults, when the parser is built."""

    def parse_known_args(self, args=None, namespace=None):
        ns, rest = super().parse_known_args(args, namespace)
        if hasattr(ns, "launcher") and ns.launcher not in LAUNCHER_CHOICES:  # from LAUNCHER=, unchecked
            self.error(f"LAUNCHER={ns.launcher!r} is unknown; choose one of {', '.join(LAUNCHER_CHOICES)}")
        if os.environ.get("DONE_ONLY", "") not in ("", "0", "1"):
            self.error(f"DONE_ONLY={os.environ['DONE_ONLY']!r}: set DONE_ONLY=1 to render from finished runs "
                       "only, or leave it empty")
        return ns, rest


def count(text: str) -> int:
    """An argparse type for a count (seeds, jobs, rounds): an integer of 1 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: give 1 or more")
    return value


def table_parser(description: str) -> argparse.ArgumentParser:
    ap = _TableParser(description=description)
    ap.add_argument("--profile", default=os.environ.get("PROFILE", "quick"), choices=["smoke", "quick", "paper"])
    ap.add_argument("--seeds", type=count, default=os.environ.get("SEEDS", "1"),
                    help="seeds 0..n-1 per cell; n > 1 shows mean and 95 %% interval")
    ap.add_argument("--jobs", type=count, default=os.environ.get("JOBS", "1"),
                    help="runs at once (processes), each with cores/jobs threads")
    ap.add_argument("--launcher", choices=LAUNCHER_CHOICES,
                    default=os.environ.get("LAUNCHER") or "local",
                    help="how runs are started: local (this process, or joblib processes when "
                         "--jobs > 1), joblib, submitit_local, submitit_slurm (its settings: "
                         "--launcher-config), ray (RAY_ADDRESS or a local Ray)")
    ap.add_argument("--launcher-config", default=os.environ.get("LAUNCHER_CONFIG") or "slurm",
                    help="submitit_slurm's partition, time, memory, requeues: a file of conf/hydra/launcher/ "
                         "(the one Hydra sweeps use with hydra/launcher=NAME) or a YAML path (default slurm; "
                         "make LAUNCHER_CONFIG=...)")
    ap.add_argument("--results-root", default=os.environ.get("FEDREPRO_RESULTS", "results"))
    ap.add_argument("--data-root", default=os.environ.get("FEDREPRO_DATA_ROOT", "data"),
                    help="the data folder: what every run reads (its config's data_root) and where the "
                         "target looks for each dataset (default $FEDREPRO_DATA_ROOT, else ./data)")
    ap.add_argument("--datasets", default=None,
                    help="comma-separated dataset keys, or 'all' (every paper row; rows that cannot "
                         "run here are listed as 'not run'); default: the datasets runnable here")
    ap.add_argument("--splits", default="all", help="comma-separated split keys (iid, dirichlet0.6, ...) or 'all'")
    ap.add_argument("--override", action="append", default=os.environ.get("OVERRIDES", "").split(),
                    metavar="KEY=VALUE", help="a config override for every run of the target, after the "
                    "target's own (repeatable; make OVERRIDES=\"logger=wandb train.accelerator=cuda\")")
    ap.add_argument("--done-only", action="store_true", default=os.environ.get("DONE_ONLY") == "1",
                    help="train nothing: fill the table from the finished runs in the results store, "
                         "the others 'not run (not computed yet)' (make DONE_ONLY=1)")
    return ap


LOG_LEVEL_ENV = "FEDREPRO_LOG_LEVEL"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def setup_logging() -> None:
    """For an entry point outside Hydra (table and figure targets, status, archive, bench): the
    `fedrepro` loggers at INFO ($FEDREPRO_LOG_LEVEL) on a short stderr handler, unless logging is
    configured already (the root logger has a handler: Hydra's job logging, pytest, an
    embedding application), which is then left as it is. The root logger stays at WARNING, so
    other libraries' INFO lines stay out."""
    from fedrepro.errors import ConfigError

    level = os.environ.get(LOG_LEVEL_ENV, "INFO").upper()
    if level not in LOG_LEVELS:
        raise ConfigError(f"{LOG_LEVEL_ENV}={os.environ[LOG_LEVEL_ENV]} is invalid: choose one of "
                          f"{', '.join(LOG_LEVELS)}")
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", datefmt="%H:%M:%S"))
    root.addHandler(handler)
    logging.getLogger("fedrepro").setLevel(level)


def fmt_wall(seconds: Optional[float]) -> str:
    """'12.3 s', '4.9 min' (from 2 min on), '' for None."""
    if seconds is None:
        return ""
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def fmt_duration(seconds: float) -> str:
    """fmt_wall, in hours from 2 h on ('5.7 h'): a time left or a pace."""
    return fmt_wall(seconds) if seconds < 7200 else f"{seconds / 3600:.1f} h"


def run_target(main: Callable[[], int]) -> int:
    """A target's exit status: main()'s, or 2 after one line on stderr when it stops on a
    FedreproError (a missing reference folder, an unknown config choice, damaged data): that
    message already names the problem and the fix, and a traceback would bury it. Any other
    exception is a bug and keeps its traceback. Logging is set up first (`setup_logging`)."""
    from fedrepro.errors import FedreproError

    try:
        setup_logging()  # inside: a bad FEDREPRO_LOG_LEVEL is one line too
        return main()
    except FedreproError as exc:
        print(f"fedrepro: error: {exc}", file=sys.stderr)
        return 2
