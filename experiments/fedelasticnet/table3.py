"""FedElasticNet Table 3: cumulative entropy of the uploaded values, 10 % participation.

    python -m experiments.fedelasticnet.table3 --profile quick --seeds 1 [--datasets all] [--splits iid]

Entropy as the ledger's `cum_up_entropy`: each round, every value the participating clients
upload pooled into one sample, binned at 0.01, Shannon entropy in bits; summed over rounds
(FIDELITY.md). FedDyn has two rows, transmitting the local model (feddyn_model, the Table 2
run) or the update (feddyn_update). Same runs as Table 2 otherwise.
"""
from __future__ import annotations

from experiments.fedelasticnet.common import TableSpec, run_table
from fedrepro.reports.claims import FEN_T2_UNIT
from fedrepro.reports.cli import run_target
from fedrepro.reports.grid import measure_target


def entropy(run) -> float:
    return run.summary["final"]["cum_up_entropy"]


def nonzeros(run) -> float:
    return run.summary["final"]["cum_up_nonzeros"] / FEN_T2_UNIT


def nonzero_claims(args, cells, ours):
    """FEN-T2-8 (FedDyn's nonzeros do not depend on transmit) on the same runs' nonzeros."""
    frame, _ = measure_target(cells, args, nonzeros, log=lambda line: None)
    return [(["FEN-T2-8"], frame)]


# What Tables 3 and 4 measure and how they label it (Table 4 reuses it at 100 %).
ENTROPY = dict(
    metric=entropy, value_name="cumulative entropy of uploaded values",
    unit_note="bits: pooled per-round Shannon entropy at 0.01 bins, summed over rounds",
    notes=["ours: ledger cum_up_entropy (per round: all uploaded values of the round pooled)"])

SPEC = TableSpec(number=3, participation="p10", claims=["FEN-T3-1", "FEN-T3-2", "FEN-T3-3"],
                 extra_claims=nonzero_claims, **ENTROPY)


def main(argv=None) -> int:
    return run_table(SPEC, argv)


if __name__ == "__main__":
    raise SystemExit(run_target(main))
