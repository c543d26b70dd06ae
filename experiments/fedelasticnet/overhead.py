"""FEN-S4-3, "FedElasticNet adds no extra training cost", timed (beyond its tables):

    python -m experiments fen overhead --profile quick [--datasets mnist] [--rounds 20]

For each (base, variant) pair (FedProx / Algorithm 1, SCAFFOLD / Algorithm 2, FedDyn /
Algorithm 3) on a dataset's Table 2 run (Dirichlet (.3), 10 %, seed 0, at the profile), both
federations are built in this process from the same config as the stored runs
(`fedrepro.run.build_federation`), warmed up one round, then run round by round, interleaved
(base t, variant t, then variant t + 1, base t + 1, ...) so the machine's load meets both sides
alike. What is timed is each round's local training (`executor.run`: every participant's local
steps), the claim's "client compute"; both sides train the same clients on the same batches, so
the difference is the variant's l1 / l2 terms. Stored runs' seconds_per_round are not used:
they were timed beside other work.

The verdict reads the per-round ratio variant / base: its median with a distribution-free 95 %
interval (order statistics of the binomial), over at least 20 rounds (the catalogue's minimum).
Writes <results-root>/tables/fedelasticnet_overhead.{md,csv} and its claims file.
"""
from __future__ import annotations

import math
import platform
import time
from pathlib import Path

import pandas as pd
import torch

from experiments.fedelasticnet.ablations import datasets_of
from experiments.fedelasticnet.common import LABELS, cell
from experiments.fedelasticnet.figures import report_claims
from fedrepro.reports.grid import refuse_done_only
from fedrepro.reports.tables import markdown_grid

PAIRS = (("fedprox", "fen_alg1"), ("scaffold", "fen_alg2"), ("feddyn", "fen_alg3"))
SPLIT, PARTICIPATION = "dirichlet0.3", "p10"


def median_interval(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """(median, low, high): the distribution-free interval of the median, the order statistics
    x_(j) and x_(n+1-j) with j the largest rank whose binomial(n, 1/2) coverage is >= level
    (low = high = median below 6 values: too few for a 95 % interval)."""
    xs, n = sorted(values), len(values)
    mid = float(pd.Series(xs).median())
    j = 0
    for k in range(1, n // 2 + 1):
        outside = 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n
        if 1 - outside >= level:
            j = k
    return (mid, xs[j - 1], xs[n - j]) if j else (mid, mid, mid)


def federation(overrides: list[str], args):
    from fedrepro.config import compose_config
    from fedrepro.run import federation_for

    return federation_for(compose_config([f"data_root={args.data_root}", *overrides, f"profile={args.profile}",
                                          "seed=0", f"results_root={args.results_root}"]))


def training_clock(fed) -> list[float]:
    """Seconds of each call of the federation's local training (`executor.run`: every participant's
    local steps of a round), appended as the rounds run: the claim's client compute."""
    seconds, train = [], fed.loop.executor.run

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        out = train(*args, **kwargs)
        seconds.append(time.perf_counter() - t0)
        return out

    fed.loop.executor.run = timed  # this instance only: a measurement of this process
    return seconds


def time_pair(base_overrides: list[str], variant_overrides: list[str], args) -> tuple[list[float], list[float]]:
    """Local-training seconds of each of args.rounds rounds of the base and of the variant,
    interleaved (after one warm-up round each)."""
    sides = [federation(base_overrides, args), federation(variant_overrides, args)]
    for fed in sides:
        fed.loop.run_round(0)  # warm-up: first-call allocations, kernel choices
    clocks = [training_clock(fed) for fed in sides]
    for t in range(1, args.rounds + 1):
        for side in ((0, 1) if t % 2 else (1, 0)):
            sides[side].loop.run_round(t)
    return clocks[0], clocks[1]


def overhead_frame(args) -> pd.DataFrame:
    rows = []
    for d in datasets_of(args):
        for base, variant in PAIRS:
            cells = [cell({"dataset_key": d, "split_key": SPLIT, "algorithm_key": a}, PARTICIPATION, args.profile,
                          data_root=args.data_root) for a in (base, variant)]
            keys = {"dataset_key": d, "base": base, "variant": variant}
            if cells[0].not_run or cells[1].not_run:
                rows.append({**keys, "status": "not run", "reason": cells[0].not_run or cells[1].not_run})
                continue
            b, v = time_pair(cells[0].overrides, cells[1].overrides, args)
            ratio = median_interval([y / x for x, y in zip(b, v)])
            rows.append({**keys, "status": "ok", "reason": "", "rounds": len(b),
                         "base_median_s": float(pd.Series(b).median()),
                         "variant_median_s": float(pd.Series(v).median()),
                         "ratio": ratio[0], "ratio_lo": ratio[1], "ratio_hi": ratio[2]})
    return pd.DataFrame(rows)


def render(results) -> int:
    args = results.options
    refuse_done_only("fen-overhead (a timing, measured now)", args.done_only)
    ours = overhead_frame(args)
    out = Path(args.results_root) / "tables"
    out.mkdir(parents=True, exist_ok=True)
    ours.to_csv(out / "fedelasticnet_overhead.csv", index=False)
    where = f"{platform.machine()}, {torch.get_num_threads()} thread(s), {time.strftime('%Y-%m-%d')}"
    lines = [[LABELS.get(r.dataset_key, r.dataset_key), f"{r.variant} / {r.base}"]
             + ([r.rounds, f"{r.base_median_s:.3f}", f"{r.variant_median_s:.3f}",
                 f"{r.ratio:.3f} [{r.ratio_lo:.3f}, {r.ratio_hi:.3f}]"] if r.status == "ok"
                else [f"{r.status}: {r.reason}", "", "", ""]) for r in ours.itertuples()]
    text = (f"# FedElasticNet's training cost against its base (beyond its tables), profile={args.profile}\n\n"
            f"Dirichlet (.3), 10 %, seed 0, each dataset's Table 2 run; seconds of a round's local training (every "
            f"participant's local steps), base and variant interleaved in one process ({where}); "
            "ratio = median of the per-round ratios variant / base with its distribution-free 95 % interval.\n\n"
            + markdown_grid(["dataset", "variant / base", "rounds", "base s of training (median)",
                             "variant s of training (median)", "ratio [95 %]"], lines, right_align={2, 3, 4, 5}) + "\n")
    (out / "fedelasticnet_overhead.md").write_text(text)
    print(text)
    report_claims(["FEN-S4-3"], ours, out / "fedelasticnet_overhead_claims.md", args.profile)
    return 0
