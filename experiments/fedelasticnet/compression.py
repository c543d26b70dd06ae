"""FedElasticNet against compressed baselines with error feedback at matched uplink bits, judged
on seeds with paired intervals (beyond the paper; review 2, items 7-8):

* REV-R2-7: the drift-robust baselines with Top-k + error feedback: acc(Alg. 3) >=
  acc(FedDyn + Top-k + EF) - 0.5 point and acc(Alg. 2) >= acc(SCAFFOLD + Top-k + EF) - 0.5 point.
* REV-R2-8: FedAvg + compressor + EF against Algorithm 1 (FedAvg + l1 + l2) for Top-k, scaled
  sign and QSGD: acc(Alg. 1) >= acc(FedAvg + C + EF) - 0.5 point for every C.

    python -m experiments fen compression --profile quick [--seeds 3]
    make fen-compression

Setting: MNIST, Dirichlet (.3), 10 %, FedElasticNet's MNIST setting (settings.yaml, Table 5's
values), every round evaluated, seeds 0..n-1 (default 3). CIFAR-10 is not run here (compute).
Bits are the ledger's wire bits (`cum_up_wire_bits`): the FedElasticNet runs go through
compressor=threshold, which prices a sparse upload (1 flag bit + a 32-bit count and
ceil(log2 d)-bit indices, or a d-bit mask, whichever is shorter, + 32 bits a value) and changes
no value (Alg. 1 and 3 at their own epsilon, which they already applied; Alg. 2 at 0, so its
dense control-variate message passes untouched). Alg. 3's run is compare-compression's.

Matching: Top-k's k makes a Top-k message, k (32 + ceil(log2 d)) bits, cost the FedElasticNet
run's mean message over the seeds (compare_compression.choose_k); QSGD's levels s are the s
whose message on a Gaussian vector of d coordinates costs that mean (`qsgd_levels`: a model,
so the match obtained is printed); sign costs d + 32 bits a message whatever is done, so it is
compared within a budget. Every pair is judged seed by seed at a budget B: where both runs'
total uplink bits agree within 5 %, B covers both whole runs (matched bits, the catalogue's
rule); else B = the smaller total. acc = the tail mean (last 10 % of the rounds) of the rounds
each run completed within B (1 % tolerance). The rates are known only once the FedElasticNet runs are in the results
store: the target declares the compressed runs then (the runner asks again). Writes
<results-root>/tables/fedelasticnet_compression.{md,csv}, _pairs.csv and _claims.md.
"""
from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import pandas as pd
import torch

from experiments.fedelasticnet.ablations import per_seed_text
from experiments.fedelasticnet.claims import CHECKS, at_least, interval_text, paired
from experiments.fedelasticnet.common import dataset_reason, tail_mean
from experiments.fedelasticnet.figures import report_claims
from experiments.l2gd import compare_compression as cc
from experiments.l2gd import settings
from fedrepro.compression import QSGD
from fedrepro.reports.claims import every
from fedrepro.reports.grid import Cell, why_no_numbers
from fedrepro.reports.tables import markdown_grid
from fedrepro.reports.target import stored

DATASET, SPLIT = settings.COMPARE.dataset, "dirichlet0.3"  # the claims' MNIST, Dir(.3), 10 % (COMPARE's p10)
MATCH = 0.05  # the catalogue's "matched within 5 %"
MARGIN = 0.5  # points: FedElasticNet may trail a compressed baseline by this much
QSGD_MAX = 65535  # the most levels QSGD's uint16 symbols hold
STEM = "fedelasticnet_compression"
CLAIMS = ("REV-R2-7", "REV-R2-8")
LABELS = {"fen_alg3": "FedElasticNet Alg. 3", "feddyn_topk_ef": "FedDyn + Top-k + EF",
          "fen_alg2": "FedElasticNet Alg. 2", "scaffold_topk_ef": "SCAFFOLD + Top-k + EF",
          "fen_alg1": "FedElasticNet Alg. 1", "fedavg_topk_ef": "FedAvg + Top-k + EF",
          "fedavg_sign_ef": "FedAvg + sign + EF", "fedavg_qsgd_ef": "FedAvg + QSGD + EF"}
# a compressed series: (the FedElasticNet run whose mean message sets its rate, rate kind)
RATED = {"feddyn_topk_ef": ("fen_alg3", "k"), "scaffold_topk_ef": ("fen_alg2", "k"),
         "fedavg_topk_ef": ("fen_alg1", "k"), "fedavg_qsgd_ef": ("fen_alg1", "levels")}
FIRST = ("fen_alg3", "fen_alg2", "fen_alg1", "fedavg_sign_ef")  # rates that need no other run
PAIRS = (("REV-R2-7", "fen_alg3", "feddyn_topk_ef"), ("REV-R2-7", "fen_alg2", "scaffold_topk_ef"),
         ("REV-R2-8", "fen_alg1", "fedavg_topk_ef"), ("REV-R2-8", "fen_alg1", "fedavg_sign_ef"),
         ("REV-R2-8", "fen_alg1", "fedavg_qsgd_ef"))
LATER = "needs {}'s runs (every seed) in the results store to choose its rate: the target runs them first"
CIFAR = "CIFAR-10: not run here (compute); the claim's CIFAR-10 half is not judged"


def overrides(series: str, profile: str, rate: int | None = None) -> list[str]:
    """A series' run; a rated series without its rate (not known yet) lacks only that override."""
    fedavg = [*cc.base(SPLIT), "algorithm=fedavg"]
    fixed = {"fen_alg3": lambda: cc.priced_fen_run("fen_alg3", SPLIT, profile),
             # epsilon 0: Alg. 2's dense control-variate message passes untouched, its update priced sparse
             "fen_alg2": lambda: cc.priced_fen_run("fen_alg2", SPLIT, profile, epsilon=0.0),
             "fen_alg1": lambda: cc.priced_fen_run("fen_alg1", SPLIT, profile),
             "fedavg_sign_ef": lambda: [*fedavg, "compressor=sign_ef"],
             "feddyn_topk_ef": lambda: cc.fen_run("feddyn_update", SPLIT, profile, "compressor=topk_ef"),
             "scaffold_topk_ef": lambda: cc.fen_run("scaffold", SPLIT, profile, "compressor=topk_ef"),
             "fedavg_topk_ef": lambda: [*fedavg, "compressor=topk_ef"],
             "fedavg_qsgd_ef": lambda: [*fedavg, "compressor=qsgd", "compressor.error_feedback=ef"]}[series]()
    if rate is None:
        return fixed
    return fixed + [f"compressor.{RATED[series][1]}={rate}"]


@lru_cache(maxsize=None)
def _qsgd_model_bits(s: int, d: int) -> int:
    x = torch.randn(d, generator=torch.Generator().manual_seed(0))
    return QSGD(s).compress(x, torch.Generator().manual_seed(1)).bits


def qsgd_levels(bits_per_message: float, d: int) -> tuple[int, int]:
    """(s, the model's bits a message at s): the QSGD levels whose message on a standard Gaussian
    vector of d coordinates (seeded) costs closest to `bits_per_message` (1 <= s <= QSGD_MAX)."""
    lo, hi = 1, QSGD_MAX
    if _qsgd_model_bits(hi, d) <= bits_per_message:
        return hi, _qsgd_model_bits(hi, d)
    while hi - lo > 1:  # the model's bits grow with s
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _qsgd_model_bits(mid, d) <= bits_per_message else (lo, mid)
    s = min((lo, hi), key=lambda v: abs(_qsgd_model_bits(v, d) - bits_per_message))
    return s, _qsgd_model_bits(s, d)


def rate_of(series: str, runs: list) -> tuple[int, float, int]:
    """(rate, the source's mean bits a message, d) of a rated series from its source's runs."""
    k, bits, d = cc.choose_k(runs)
    return (k if RATED[series][1] == "k" else qsgd_levels(bits, d)[0]), bits, d


def _key(series: str, rate="") -> dict:
    return {"dataset_key": DATASET, "split_key": SPLIT, "series_key": series, "rate": rate}


def compression_cells(args) -> list[Cell]:
    """The runs without a rate to choose, then each rated one whose source's runs are all stored."""
    reason = dataset_reason(DATASET, args.data_root)
    first = [Cell(_key(s), overrides(s, args.profile), not_run=reason) for s in FIRST]
    _, done = stored(first, args)
    cells = list(first)
    for series, (source, _) in RATED.items():
        runs = done.get(FIRST.index(source), [])
        if reason is None and len(runs) == args.seeds:
            rate = rate_of(series, runs)[0]
            cells.append(Cell(_key(series, rate), overrides(series, args.profile, rate)))
        else:
            cells.append(Cell(_key(series), overrides(series, args.profile), not_run=reason or LATER.format(source)))
    return cells


# ---------------------------------------------------------------------------------------------
# Measures and the checks


def acc_within(curve: pd.DataFrame, budget: float) -> float:
    """Tail mean accuracy (points, last 10 % of the rounds) of the rounds a run completed with
    its cumulative uplink bits <= budget (1 % tolerance): the whole run's tail when it fits."""
    under = curve[curve["up_bits"] <= budget * (1 + cc.TOLERANCE)]
    return tail_mean(under, "acc") if len(under) else math.nan


def budget(fen_total: float, base_total: float) -> float:
    """The bits both sides of a pair are judged within: both whole runs (the larger total) where
    the totals agree within MATCH, else the smaller total."""
    matched = abs(base_total / fen_total - 1) <= MATCH
    return max(fen_total, base_total) if matched else min(fen_total, base_total)


def _total(curve: pd.DataFrame) -> float:
    """A run's total uplink wire bits (its curve is evaluated every round, the last one included)."""
    return float(curve["up_bits"].max())


def pairs_frame(series_curves: dict, reasons: dict) -> pd.DataFrame:
    """One row per judged pair: per seed (in seed order) each side's total uplink bits, the
    budget B (`budget`) and each side's accuracy within B. `series_curves`: {series: [its runs'
    `compare_compression.read` curves, in seed order]}."""
    rows = []
    for claim, fen, base in PAIRS:
        row = {"claim": claim, "fen": fen, "base": base, "status": "ok", "reason": ""}
        lacking = [s for s in (fen, base) if not series_curves.get(s)]
        if lacking:
            rows.append({**row, "status": "not run", "reason": "; ".join(f"{s}: {reasons[s]}" for s in lacking)})
            continue
        a, b = series_curves[fen], series_curves[base]
        n = min(len(a), len(b))
        fb, bb = [_total(c) for c in a[:n]], [_total(c) for c in b[:n]]
        budgets = [budget(x, y) for x, y in zip(fb, bb)]
        rows.append({**row, "fen_bits": fb, "base_bits": bb, "budget": budgets,
                     "fen_acc": [acc_within(c, B) for c, B in zip(a, budgets)],
                     "base_acc": [acc_within(c, B) for c, B in zip(b, budgets)]})
    return pd.DataFrame(rows)


def _ratios(r) -> list[float]:
    return [y / x for x, y in zip(r.fen_bits, r.base_bits)]


def _judge(ours: pd.DataFrame, claim: str, statement: str) -> tuple[str, str]:
    if not {"claim", "fen", "base", "fen_acc", "base_acc"} <= set(ours.columns):
        return "not evaluated", "these results are not the compression runs' (make fen-compression)"
    results, why = [], []
    for r in ours[ours["claim"] == claim].itertuples():
        if r.status != "ok":
            why.append(f"{r.fen} vs {r.base} ({r.status}: {r.reason})")
            continue
        d = paired(list(r.fen_acc), list(r.base_acc))
        held = at_least(d, -MARGIN)
        ratios = _ratios(r)
        matched = all(abs(x - 1) <= MATCH for x in ratios)
        results.append((f"{DATASET} {r.fen} vs {r.base}", held,
                        f"acc({r.fen}) - acc({r.base}) = {interval_text(d)}"
                        + (f"; within noise: the interval straddles -{MARGIN}" if held is None else "")
                        + ("; one seed: no interval" if d[3] == 1 else "")
                        + f"; uplink bits {r.base} / {r.fen} = {', '.join(f'{x:.3f}' for x in ratios)} per seed ("
                        + ("matched within 5 %" if matched else "not matched within 5 %: judged within the smaller "
                           "total, B") + ")"))
    return every(results, statement, expected=len([p for p in PAIRS if p[0] == claim]), reasons="; ".join(why),
                 strict=True, undecided_why=f"noise (the seeds' interval straddles -{MARGIN} point)", extra=CIFAR)


@CHECKS.register("REV-R2-7")
def rev_r2_7(ours):
    """acc(fen_alg3) >= acc(feddyn + Top-k + EF) - 0.5 and acc(fen_alg2) >= acc(scaffold + Top-k +
    EF) - 0.5 at matched uplink bits, paired by seed (the interval decides)."""
    return _judge(ours, "REV-R2-7", "at matched uplink bits acc(fen_alg3) >= acc(feddyn + Top-k + EF) - 0.5 and "
                                    "acc(fen_alg2) >= acc(scaffold + Top-k + EF) - 0.5 point (the seeds' 95 % interval)")


@CHECKS.register("REV-R2-8")
def rev_r2_8(ours):
    """acc(fen_alg1) >= acc(fedavg + C + EF) - 0.5 for C in Top-k, sign, QSGD at matched uplink
    bits (sign, a fixed rate: within the smaller total), paired by seed."""
    return _judge(ours, "REV-R2-8", "at matched uplink bits acc(fen_alg1) >= acc(fedavg + C + EF) - 0.5 point for C "
                                    "in Top-k, sign, QSGD (the seeds' 95 % interval)")


# ---------------------------------------------------------------------------------------------
# The table


def _rate_note(series: str, rate, runs: dict) -> str:
    source = RATED[series][0]
    k, bits, d = cc.choose_k(runs[source])
    if RATED[series][1] == "k":
        return (f"{LABELS[series]}: k = round({bits:.4g} / (32 + {settings.index_bits(d)})) = {rate} "
                f"({rate / d:.2%} of d = {d}), {source}'s mean bits a message over the seeds")
    s, model = qsgd_levels(bits, d)
    return (f"{LABELS[series]}: s = {rate} levels, whose message on a Gaussian vector of d = {d} costs {model:.4g} "
            f"bits against {source}'s mean {bits:.4g} (model match {model / bits:.3f}); the match obtained is "
            "the bits ratio of the pairs below")


def render(results) -> int:
    args = results.options
    cells = results.cells
    status, runs = results.measure(cells)
    series_runs, series_curves, reasons, rows = {}, {}, {}, []
    for i, c in enumerate(cells):
        st, s = status.iloc[i], c.keys["series_key"]
        done = [r for r in runs.get(i, []) if r.summary["status"] == "finished"] if st["status"] == "ok" else []
        series_runs[s], reasons[s] = done, why_no_numbers(status, i)
        series_curves[s] = curves = [cc.read(r) for r in done]  # each run's metrics read once
        rows.append({**c.keys, "label": LABELS[s], "status": st["status"], "reason": reasons[s] if not done else "",
                     "bits_per_message": cc.alg3_bits(done)[0] if done else math.nan,
                     "up_bits_1e8": [_total(c) / 1e8 for c in curves],
                     "acc": [acc_within(c, math.inf) for c in curves]})
    table, pairs = pd.DataFrame(rows), pairs_frame(series_curves, reasons)
    out = Path(args.results_root) / "tables"
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / f"{STEM}.csv", index=False)
    pairs.to_csv(out / f"{STEM}_pairs.csv", index=False)

    series_rows = [[LABELS[r["series_key"]], str(r["rate"]), f"{r['bits_per_message']:.4g}", per_seed_text(r["up_bits_1e8"]),
                    per_seed_text(r["acc"]), r["status"] + (f": {r['reason']}" if r["reason"] else "")] for r in rows]
    series_rows.append(["CIFAR-10 (every series)", "", "", "", "", "not run here (compute)"])
    pair_rows = []
    for r in pairs.itertuples():
        if r.status != "ok":
            pair_rows.append([r.claim, f"{LABELS[r.fen]} vs {LABELS[r.base]}", "", "", "", "", f"not run ({r.reason})"])
            continue
        d = paired(list(r.fen_acc), list(r.base_acc))
        pair_rows.append([r.claim, f"{LABELS[r.fen]} vs {LABELS[r.base]}", "; ".join(f"{x:.3f}" for x in _ratios(r)),
                          per_seed_text([b / 1e8 for b in r.budget]), per_seed_text(r.fen_acc), per_seed_text(r.base_acc), interval_text(d)])
    notes = [_rate_note(c.keys["series_key"], c.keys["rate"], series_runs) for c in cells
             if c.keys["series_key"] in RATED and c.keys["rate"] != "" and series_runs.get(RATED[c.keys["series_key"]][0])]
    notes += ["FedAvg + sign + EF: compressor=sign_ef, (||p||_1 / d) sign(p) of p = e + Delta, d + 32 bits a message: "
              "a fixed rate no parameter matches to Alg. 1, so it is compared within the smaller total (its own)",
              "bits: cumulative uplink wire bits (the ledger's `cum_up_wire_bits`); FedElasticNet's sparse uploads "
              "are charged by compressor=threshold's encoding: 32 bits a value + positions as ceil(log2 d)-bit "
              "indices after a 32-bit count, or a d-bit mask when shorter (+ 1 flag bit), not the entropy bound; "
              "Top-k: k (32 + ceil(log2 d)); QSGD: 32 + Elias-gamma levels and signs (docs/compression.md)",
              "acc: tail mean test accuracy (all clients' models, points) over the last 10 % of the rounds a run "
              "completed within the budget B, seed by seed: both whole runs where the pair's totals agree within "
              "5 %, else the smaller total (1 % tolerance); "
              "difference: fen - baseline, paired by seed, mean [95 % t-interval]",
              CIFAR]
    md = "\n".join([
        f"# FedElasticNet against compressors with error feedback at matched uplink bits (beyond the paper; review "
        f"2), profile={args.profile}, seeds 0..{args.seeds - 1}", "",
        "MNIST, Dirichlet (.3), 10 %, FedElasticNet's MNIST setting (Table 5's values), every round evaluated.", "",
        markdown_grid(["series", "rate (k / s)", "bits / message", "uplink bits per seed (x 1e8)",
                       "acc per seed (whole run)", "status"], series_rows, right_align={2}), "",
        markdown_grid(["claim", "pair", "bits ratio base / fen per seed", "budget B per seed (x 1e8)",
                       "acc fen within B", "acc base within B", "fen - base (points)"], pair_rows), "",
        *(f"- {n}" for n in notes)]) + "\n"
    (out / f"{STEM}.md").write_text(md, encoding="utf-8")
    print(md)
    report_claims(list(CLAIMS), pairs, out / f"{STEM}_claims.md", args.profile)
    return 0
