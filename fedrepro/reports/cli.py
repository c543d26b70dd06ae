"""The command-line options every table and figure target shares (make: PROFILE, SEEDS, JOBS)."""
from __future__ import annotations

import argparse
import os


def table_parser(description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--profile", default=os.environ.get("PROFILE", "quick"), choices=["smoke", "quick", "paper"])
    ap.add_argument("--seeds", type=int, default=int(os.environ.get("SEEDS", 1)),
                    help="seeds 0..n-1 per cell; n > 1 shows mean and 95 %% interval")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("JOBS", 1)),
                    help="runs at once (processes), each with cores/jobs threads")
    ap.add_argument("--results-root", default=os.environ.get("FEDREPRO_RESULTS", "results"))
    ap.add_argument("--data-root", default=os.environ.get("FEDREPRO_DATA_ROOT", "data"))
    ap.add_argument("--datasets", default=None,
                    help="comma-separated dataset keys, or 'all' (every paper row; rows that cannot "
                         "run here are listed as 'not run'); default: the datasets runnable here")
    ap.add_argument("--splits", default="all", help="comma-separated split keys (iid, dirichlet0.6, ...) or 'all'")
    return ap
