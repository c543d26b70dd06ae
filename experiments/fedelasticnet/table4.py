"""FedElasticNet Table 4: cumulative entropy of the uploaded values, 100 % participation.

    python -m experiments.fedelasticnet.table4 --profile quick --seeds 1 [--datasets all] [--splits iid]

As Table 3 with every client in every round. At profile=quick a 100 % run would cost 10 times
a 10 % run, so this table (and Figs. 8-9, the same runs) adds the caps of settings.yaml's
`full_participation_quick_caps` (profile.max_local_steps=6: 100 clients x 6 steps ~ the 600
local steps of a 10 % round); the table notes print them. FEN-S4-1 reads the Table 2 and 3
CSVs in <results-root>/tables/ made with the same profile and seeds.
"""
from __future__ import annotations

import logging

import pandas as pd

from experiments.fedelasticnet.common import TableSpec, previous_table, run_table
from experiments.fedelasticnet.table3 import ENTROPY, nonzero_claims
from fedrepro.reports.cli import run_target

# the targets run as __main__: a fixed name keeps their lines under the fedrepro loggers
log = logging.getLogger("fedrepro.experiments")


def extra_claims(args, cells, ours):
    frames, missing = [ours.assign(table="4")], []
    for number in (2, 3):
        frame, why = previous_table(args, number)
        frames.append(frame.assign(table=str(number)) if why == "" else frame)
        missing += [why] if why else []
    if missing:
        log.warning("FEN-S4-1 lacks: " + "; ".join(missing))
    return nonzero_claims(args, cells, ours) + [(["FEN-S4-1"], pd.concat(frames, ignore_index=True))]


SPEC = TableSpec(number=4, participation="p100", claims=["FEN-T4-1", "FEN-T4-2", "FEN-T4-3"],
                 extra_claims=extra_claims, **ENTROPY)


def main(argv=None) -> int:
    return run_table(SPEC, argv)


if __name__ == "__main__":
    raise SystemExit(run_target(main))
