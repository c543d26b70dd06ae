"""FedElasticNet Table 2: cumulative nonzero elements uploaded (x 1e7), 10 % participation.

    python -m experiments.fedelasticnet.table2 --profile quick --seeds 1 [--datasets all] [--splits iid]

The paper's setting per dataset and Table 5's hyperparameters come from settings.yaml (see
common.py). FedDyn is one row: its nonzeros do not depend on what it transmits, so the row is
the transmit=model run, the same run as Table 3's feddyn_model. Rows that cannot run here are
printed as "not run" with the reason.
"""
from __future__ import annotations

from experiments.fedelasticnet.common import TableSpec, run_table
from fedrepro.reports.claims import FEN_T2_UNIT
from fedrepro.reports.cli import run_target

SPEC = TableSpec(
    number=2, participation="p10",
    metric=lambda run: run.summary["final"]["cum_up_nonzeros"] / FEN_T2_UNIT,
    value_name="cumulative nonzeros uploaded", unit_note="x 1e7 elements, summed over rounds and clients",
    claims=[f"FEN-T2-{i}" for i in range(1, 8)],
    notes=["ours: uplink nonzeros of every participating client, summed over all rounds (ledger)"])


def main(argv=None) -> int:
    return run_table(SPEC, argv)


if __name__ == "__main__":
    raise SystemExit(run_target(main))
