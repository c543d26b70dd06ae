"""LoSAC's claims (claims.csv, LSC-T2-*, LSC-F6-*, LSC-F7-*) checked on the frames of
experiments/losac, each rule implemented as claims.csv writes it.

Table II frame: one row per (dataset_key, algorithm_key in {scaffold, losac}, M, T) with
`status`, `reason`, `rounds` (rounds to 85 %, seed mean), `censored` (the target was not
reached by some seed: `rounds` is the cap, a lower bound), `loss` (training loss), `acc`
(test accuracy, %) and `acc_round` (the round both were read at).
Figure 6 frame: one row per (dataset_key, algorithm_key) with `initial_distance`,
`final_distance` (||D_hat - D||_F before the attack and after its last iteration),
`iterations` and `attack_round`.
Figure 7 frame: one row per (rank, algorithm_key) with `final_error`, `final_rank`,
`rounds_run` and `rounds_planned`.

How the runs we have decide a rule:
* censoring (rounds to the target): a censored count is larger than any finite one; two
  censored counts cannot be compared; a speed-up with a censored side is a bound;
* a rule stated at round 500 (Table II's loss and accuracy) is decided only by runs read at
  round 500; runs stopped earlier (profile quick) leave it undecided, and the detail says
  what the rule would say at the round we have;
* a rule about every cell is judged on the cells we ran, the others are listed with the
  reason; a rule that counts cells out of 9 treats the cells not run as undecided (they
  could change the count);
* Figures 6 and 7 are decided only by runs of the stated length (attack in round 5 after 100
  iterations; Figure 7's final round = the rounds the recipe plans, not a profile's cap).
Undecided and nothing failing: "not evaluated", the detail starting with "undetermined".
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import pandas as pd

from fedrepro.metrics.targets import Count, fewer, gain
from fedrepro.reports.claims import register, verdict_of

DATASETS = ("mnist", "har", "esr")
MS, TS = (2, 3, 5), (2, 4, 6)
ACC_ROUND = 500
Result = tuple  # (label, True | False | None, text)


# ---------------------------------------------------------------------------------------------
# Verdict helpers


def _missing(expected: int, got: int, reasons: str) -> str:
    if got >= expected:
        return ""
    line = f"{expected - got} of {expected} scope items not evaluated"
    return line + (f": {reasons}" if reasons else ": their runs are not in this frame (a narrower selection "
                   "was run: drop --datasets / --cells / --ranks)")


def every(results: list, statement: str, *, expected: int, reasons: str = "", extra: str = "") -> tuple[str, str]:
    """All results must hold; None = undecided."""
    missing = _missing(expected, len(results), reasons)
    if not results:
        return "not evaluated", "nothing in the scope was run" + (f" ({missing})" if missing else "")
    return verdict_of(results, statement, notes=(extra, missing))


def at_least(results: list, k: int, n: int, statement: str, *, reasons: str = "") -> tuple[str, str]:
    """At least k of the n scope items hold; items missing from `results` are undecided."""
    yes = sum(out is True for _, out, _ in results)
    maybe = sum(out is None for _, out, _ in results) + max(n - len(results), 0)
    verdict = "holds" if yes >= k else "fails" if yes + maybe < k else "not evaluated"
    head = f"{statement}: {yes} of {n} hold" + (f", {maybe} undecided" if maybe else "")
    if verdict == "not evaluated":
        head = "undetermined: " + head
    body = "; ".join(f"{lab}: {text}{'' if out is None else (' yes' if out else ' no')}"
                     for lab, out, text in results)
    missing = f"{n - len(results)} not evaluated: {reasons}" if len(results) < n and reasons else ""
    return verdict, "\n".join(x for x in (head, body, missing) if x)


def combine(*parts: tuple[str, str]) -> tuple[str, str]:
    verdicts = [v for v, _ in parts]
    verdict = "fails" if "fails" in verdicts else "not evaluated" if "not evaluated" in verdicts else "holds"
    return verdict, "\n".join(d for _, d in parts)


def bounds(scaffold: Count, losac: Count) -> tuple[float, float]:
    """The speed-up rounds(scaffold) / rounds(losac) as (low, high) bounds under censoring."""
    g = gain(scaffold, losac)
    return g.lo, g.hi


def fmt_bounds(lo: float, hi: float, shift: float = 0.0, digits: int = 2) -> str:
    """Bounds of a speed-up (0 / inf: unknown side), printed after subtracting `shift`."""
    a, b = lo - shift, hi - shift
    if lo == hi:
        return f"{a:.{digits}f}"
    if hi == math.inf:
        return "?" if lo == 0 else f">{a:.{digits}f}"
    return f"<{b:.{digits}f}" if lo == 0 else f"[{a:.{digits}f}, {b:.{digits}f}]"


def mean_bounds(values: list[tuple[float, float]]) -> tuple[float, float]:
    """Bounds of the mean of bounded speed-ups; an unknown side in one cell makes it unknown."""
    lows, highs = [v[0] for v in values], [v[1] for v in values]
    lo = 0.0 if 0 in lows else sum(lows) / len(lows)
    hi = math.inf if math.inf in highs else sum(highs) / len(highs)
    return lo, hi


def reduction_text(values: list[tuple[float, float]]) -> str:
    """mean(1 - 1/speedup) under the speed-ups' bounds."""
    lows, highs = [v[0] for v in values], [v[1] for v in values]
    lo = None if 0 in lows else sum(1 - 1 / x for x in lows) / len(lows)
    hi = None if math.inf in highs else sum(1 - 1 / x for x in highs) / len(highs)
    if lo is not None and hi is not None:
        return f"{lo:.2f}" if math.isclose(lo, hi) else f"[{lo:.2f}, {hi:.2f}]"
    return "?" if lo is None and hi is None else (f"<{hi:.2f}" if lo is None else f">{lo:.2f}")


def mean_rule(values: list[tuple[float, float]], threshold: float, statement: str, shift: float,
              paper: str, *, strict: bool = True, missing: str = "", extra: str = "") -> tuple[str, str]:
    """mean(speedup) - shift > threshold (>= when not strict), the speed-ups given as (low,
    high) bounds: holds when the low mean passes, fails when the high mean does not."""
    if not values:
        return "not evaluated", "no cell has ok runs of both methods" + (f" ({missing})" if missing else "")
    lo, hi = mean_bounds(values)

    def passes(x):
        return x - shift > threshold if strict else x - shift >= threshold

    verdict = "holds" if passes(lo) else "fails" if not passes(hi) else "not evaluated"
    what = "mean(speedup - 1)" if shift == 1 else "mean speedup"
    head = f"{statement}: {what} = {fmt_bounds(lo, hi, shift)} over {len(values)} cells (paper: {paper})"
    if verdict == "not evaluated":
        head = "undetermined by censoring: " + head
    return verdict, "\n".join(x for x in (head, extra, missing) if x)


# ---------------------------------------------------------------------------------------------
# Table II: reading the frame


def _ok(ours: pd.DataFrame) -> pd.DataFrame:
    return ours[ours["status"].astype(str) == "ok"]


MEASURED = ("ok", "diverged")  # a diverged Table II run is a result (worst), not a gap


def t2_cells(ours: pd.DataFrame) -> dict:
    """{(dataset, M, T): {method: row}} of the ok and diverged runs."""
    cells: dict = {}
    for r in ours[ours["status"].astype(str).isin(MEASURED)].itertuples(index=False):
        cells.setdefault((str(r.dataset_key), int(r.M), int(r.T)), {})[str(r.algorithm_key)] = r
    return cells


def rounds_of(r) -> Count:
    return Count(float(r.rounds), bool(r.censored))


def acc_of(r) -> float:
    """Test accuracy (%); a run that diverged before the read round has none: the worst."""
    a = float(r.acc)
    return a if math.isfinite(a) else -math.inf


def loss_of(r) -> float:
    a = float(r.loss)
    return a if not math.isnan(a) else math.inf


def why(ours: pd.DataFrame, **eq) -> str:
    """The reasons the scope's runs gave no value, grouped: 'har: not run: data not here ... (18 runs)'."""
    bad = ours[~ours["status"].astype(str).isin(MEASURED)]
    for col, value in eq.items():
        bad = bad[bad[col].isin(value if isinstance(value, tuple) else (value,))]
    if bad.empty:
        return ""
    groups = bad.groupby(["dataset_key", "status", "reason"], sort=False).size()
    return "; ".join(f"{d}: {s}" + (f": {r}" if r else "") + f" ({n} runs)" for (d, s, r), n in groups.items())


def label(key) -> str:
    d, m, t = key
    return f"{d} M={m} T={t}"


def both(cells: dict, **fixed) -> dict:
    """Cells with ok runs of both methods, optionally restricted (dataset=, M=, T=)."""
    out = {}
    for key, c in cells.items():
        d, m, t = key
        if fixed.get("dataset", d) != d or fixed.get("M", m) != m or fixed.get("T", t) != t:
            continue
        if "losac" in c and "scaffold" in c:
            out[key] = c
    return out


def at_round(rows, holds: bool, text: str) -> tuple[Optional[bool], str]:
    """A round-500 comparison: decided only when every row was read at round 500."""
    def known_at(r) -> int:  # a run that diverged before round 500 has its (worst) value there too
        d = float(getattr(r, "diverged_at", math.nan))
        return ACC_ROUND if math.isfinite(d) and d <= ACC_ROUND else int(r.acc_round)

    read = {known_at(r) for r in rows}
    if read == {ACC_ROUND}:
        return holds, text
    where = ", ".join(str(x) for x in sorted(read - {ACC_ROUND}))
    return None, f"{text}; read at round {where}, not {ACC_ROUND}: would {'hold' if holds else 'fail'}"


def round_note(results: list) -> str:
    """'at the round we have, the rule would hold in k of n' for rules left undecided by the round."""
    texts = [t for _, out, t in results if out is None and "would" in t]
    if not texts:
        return ""
    would = sum("would hold" in t for t in texts)
    return (f"the runs stop before round {ACC_ROUND} (profile cap): at the round they reach, the "
            f"comparison would hold in {would} of {len(texts)}")


def speedups(cells: dict) -> list[tuple[float, float]]:
    return [bounds(rounds_of(c["scaffold"]), rounds_of(c["losac"])) for c in cells.values()]


def speedup_list(cells: dict) -> str:
    return "; ".join(f"{label(k)}: {fmt_bounds(*bounds(rounds_of(c['scaffold']), rounds_of(c['losac'])))}x "
                     f"({rounds_of(c['scaffold'])} / {rounds_of(c['losac'])})" for k, c in cells.items())


# ---------------------------------------------------------------------------------------------
# Table II claims


@register("LSC-T2-1")
def lsc_t2_1(ours):
    cells = both(t2_cells(ours))
    results = []
    for key, c in cells.items():
        a, b = rounds_of(c["losac"]), rounds_of(c["scaffold"])
        results.append((label(key), fewer(a, b), f"losac {a} vs scaffold {b}"))
    return every(results, "rounds(losac) < rounds(scaffold) (censored = larger)", expected=27, reasons=why(ours))


@register("LSC-T2-2")
def lsc_t2_2(ours):
    cells = both(t2_cells(ours))
    return mean_rule(speedups(cells), 1.0, "mean over cells of (speedup - 1) > 1.0", 1.0,
                     "1.37 over 27 cells, 1.11 over MNIST and ESR", missing=why(ours),
                     extra="speed-ups: " + speedup_list(cells) if cells else "")


@register("LSC-T2-3")
def lsc_t2_3(ours):
    cells = both(t2_cells(ours), dataset="esr")
    if not cells:
        return "not evaluated", "no ESR cell has ok runs of both methods" + (
            f": {why(ours, dataset_key='esr')}" if why(ours, dataset_key="esr") else "")
    b = speedups(cells)
    lo, hi = max(x[0] for x in b) - 1, max(x[1] for x in b) - 1
    verdict = "holds" if lo > 3.0 else "fails" if hi <= 3.0 else "not evaluated"
    best = fmt_bounds(max(x[0] for x in b), max(x[1] for x in b), 1.0)
    head = f"max over ESR cells of (speedup - 1) > 3.0: {best} (paper 3.70, M=5 T=4)"
    if verdict == "not evaluated":
        head = "undetermined by censoring: " + head
    return verdict, head + "\nESR speed-ups: " + speedup_list(cells)


@register("LSC-T2-4")
def lsc_t2_4(ours):
    cells = t2_cells(ours)
    results = []
    for d in DATASETS:
        fast = cells.get((d, 3, 2), {}).get("losac")
        if fast is None:
            continue
        for m in MS:
            slow = cells.get((d, m, 6), {}).get("scaffold")
            if slow is None:
                continue
            a, b = rounds_of(fast), rounds_of(slow)
            ratio = "" if a.censored or b.censored else f", ratio {a.value / b.value:.2f}"
            results.append((f"{d} vs scaffold M={m} T=6", fewer(a, b, scale=1.25, strict=False),
                            f"losac M=3 T=2 {a} vs scaffold {b}{ratio}"))
    return every(results, "rounds(losac, M=3, T=2) <= 1.25 * rounds(scaffold, M, T=6)", expected=9,
                 reasons=why(ours))


def _losac_by_m(cells: dict) -> dict:
    """{(dataset, T): {M: losac row}}."""
    out: dict = {}
    for (d, m, t), c in cells.items():
        if "losac" in c:
            out.setdefault((d, t), {})[m] = c["losac"]
    return out


@register("LSC-T2-5")
def lsc_t2_5(ours):
    by = _losac_by_m(t2_cells(ours))
    loss, rounds, acc = [], [], []
    for (d, t), rows in sorted(by.items()):
        lab = f"{d} T={t}"
        if all(m in rows for m in MS):
            vals = [loss_of(rows[m]) for m in MS]
            out, text = at_round([rows[m] for m in MS], vals[0] > vals[1] > vals[2],
                                 "loss M=2,3,5: " + ", ".join(f"{v:.4f}" for v in vals))
            loss.append((lab, out, text))
        if 2 in rows and 5 in rows:
            a, b = rounds_of(rows[5]), rounds_of(rows[2])
            rounds.append((lab, fewer(a, b), f"rounds M=5 {a} vs M=2 {b}"))
            hi, lo = acc_of(rows[5]), acc_of(rows[2])
            acc.append((lab, *at_round([rows[5], rows[2]], hi > lo, f"acc M=5 {hi:.2f} vs M=2 {lo:.2f}")))
    reasons = why(ours, algorithm_key="losac")
    return combine(
        every(loss, "loss(losac) strictly decreases over M = 2, 3, 5", expected=9, reasons=reasons,
              extra=round_note(loss)),
        at_least(rounds, 7, 9, "rounds(losac, M=5) < rounds(losac, M=2) in >= 7 of 9", reasons=reasons),
        at_least(acc, 7, 9, "acc(losac, M=5) > acc(losac, M=2) in >= 7 of 9 (at round 500)", reasons=reasons))


@register("LSC-T2-6")
def lsc_t2_6(ours):
    cells = both(t2_cells(ours), M=2)
    b = speedups(cells)
    extra = []
    if b:
        extra.append(f"round-reduction reading mean(1 - 1/speedup) = {reduction_text(b)} (paper 0.42)")
        losses = [1 - loss_of(c["losac"]) / loss_of(c["scaffold"]) for c in cells.values()]
        read = sorted({int(c[a].acc_round) for c in cells.values() for a in ("losac", "scaffold")})
        extra.append(f"loss reduction mean(1 - loss(losac)/loss(scaffold)) = {sum(losses) / len(losses):.2f} "
                     f"at round {', '.join(map(str, read))} (paper ~0.22)")
        extra.append("M=2 speed-ups: " + speedup_list(cells))
    return mean_rule(b, 0.4, "mean over M=2 cells of (speedup - 1) > 0.4", 1.0, "0.96",
                     missing=why(ours), extra="\n".join(extra))


@register("LSC-T2-7")
def lsc_t2_7(ours):
    cells = both(t2_cells(ours))
    results = []
    for key, c in cells.items():
        lo, sc = c["losac"], c["scaffold"]
        ok = loss_of(lo) < loss_of(sc) and acc_of(lo) > acc_of(sc)
        text = (f"loss {loss_of(lo):.4f} vs {loss_of(sc):.4f}, acc {acc_of(lo):.2f} vs "
                f"{acc_of(sc):.2f} (losac vs scaffold)")
        results.append((label(key), *at_round([lo, sc], ok, text)))
    return every(results, "loss(losac) < loss(scaffold) and acc(losac) > acc(scaffold) at round 500",
                 expected=27, reasons=why(ours), extra=round_note(results))


@register("LSC-T2-8")
def lsc_t2_8(ours):
    cells = both(t2_cells(ours))
    b = speedups(cells)
    extra = f"mean per-cell round reduction mean(1 - 1/speedup) = {reduction_text(b)} (paper 0.48)" if b else ""
    return mean_rule(b, 2.0, "mean speedup over cells >= 2.0", 0.0, "2.37", strict=False,
                     missing=why(ours), extra=extra)


@register("LSC-T2-9")
def lsc_t2_9(ours):
    cells = t2_cells(ours)
    loss, parts = [], []
    for method in ("scaffold", "losac"):
        rounds = []
        for d in DATASETS:
            for m in MS:
                r2, r6 = cells.get((d, m, 2), {}).get(method), cells.get((d, m, 6), {}).get(method)
                if r2 is None or r6 is None:
                    continue
                lab = f"{method} {d} M={m}"
                a, b = loss_of(r6), loss_of(r2)
                loss.append((lab, *at_round([r2, r6], a < b, f"loss T=6 {a:.4f} vs T=2 {b:.4f}")))
                c6, c2 = rounds_of(r6), rounds_of(r2)
                rounds.append((lab, fewer(c6, c2), f"rounds T=6 {c6} vs T=2 {c2}"))
        parts.append(at_least(rounds, 8, 9, f"{method}: rounds(T=6) < rounds(T=2) in >= 8 of 9",
                              reasons=why(ours, algorithm_key=method)))
    return combine(every(loss, "loss(T=6) < loss(T=2) for every (dataset, method, M)", expected=18,
                         reasons=why(ours), extra=round_note(loss)), *parts)


# ---------------------------------------------------------------------------------------------
# Figure 6: DLG


def _f6(ours, algorithms, grows: bool, statement: str):
    results = []
    for r in _ok(ours).itertuples(index=False):
        if r.algorithm_key not in algorithms:
            continue
        a, b = float(r.initial_distance), float(r.final_distance)
        holds = b > a if grows else b < a
        text = f"{a:.6g} -> {b:.6g} ({(b - a) / a:+.3g} relative)"
        if int(r.iterations) != 100 or int(r.attack_round) != 5:
            out, text = None, (f"{text}; attack after {int(r.iterations)} iterations in round "
                               f"{int(r.attack_round)}, not 100 in round 5: would {'hold' if holds else 'fail'}")
        else:
            out = holds
        results.append((f"{r.dataset_key} {r.algorithm_key}", out, text))
    bad = ours[(ours["status"].astype(str) != "ok") & ours["algorithm_key"].isin(algorithms)]
    reasons = "; ".join(f"{d}: {s}: {why_}" for (d, s, why_) in
                        bad[["dataset_key", "status", "reason"]].drop_duplicates().itertuples(index=False))
    return every(results, statement, expected=3 * len(algorithms), reasons=reasons)


@register("LSC-F6-1")
def lsc_f6_1(ours):
    return _f6(ours, ("dsgd", "mimesvrg"), False, "||D_hat - D||_F at iteration 100 < at iteration 0")


@register("LSC-F6-2")
def lsc_f6_2(ours):
    return _f6(ours, ("fedavg", "scaffold", "losac"), True, "||D_hat - D||_F at iteration 100 > at iteration 0")


# ---------------------------------------------------------------------------------------------
# Figure 7: low-rank matrix estimation


def _f7(ours, test: Callable, statement: str, algorithms=("losac_prox", "scaffold_prox")):
    ok = _ok(ours)
    by: dict = {}
    for r in ok.itertuples(index=False):
        by.setdefault(int(r.rank), {})[str(r.algorithm_key)] = r
    results = []
    for rank in sorted(by, reverse=True):
        rows = by[rank]
        if not all(a in rows for a in algorithms):
            continue
        holds, text = test(rank, rows)
        capped = [r for r in rows.values() if int(r.rounds_run) < int(r.rounds_planned)]
        if capped:
            r = capped[0]
            results.append((f"rank {rank}", None, f"{text}; stopped at round {int(r.rounds_run)} of "
                            f"{int(r.rounds_planned)} (profile cap): would {'hold' if holds else 'fail'}"))
        else:
            results.append((f"rank {rank}", holds, text))
    bad = ours[ours["status"].astype(str) != "ok"]
    reasons = "; ".join(sorted({f"rank {int(r.rank)} {r.algorithm_key}: {r.status} {r.reason}".strip()
                                for r in bad.itertuples(index=False)}))
    return every(results, statement, expected=5, reasons=reasons)


@register("LSC-F7-1")
def lsc_f7_1(ours):
    def test(rank, rows):
        got = int(rows["losac_prox"].final_rank)
        return got == rank, f"losac_prox rank {got} vs {rank}"
    return _f7(ours, test, "rank(X_est, losac_prox) == rank(X_G) at the final round", ("losac_prox",))


@register("LSC-F7-2")
def lsc_f7_2(ours):
    def test(rank, rows):
        got = int(rows["scaffold_prox"].final_rank)
        return got != rank, f"scaffold_prox rank {got} vs {rank} (|difference| {abs(got - rank)})"
    return _f7(ours, test, "rank(X_est, scaffold_prox) != rank(X_G) at the final round", ("scaffold_prox",))


@register("LSC-F7-3")
def lsc_f7_3(ours):
    def test(rank, rows):
        a, b = float(rows["losac_prox"].final_error), float(rows["scaffold_prox"].final_error)
        return a < b, f"error losac_prox {a:.4g} vs scaffold_prox {b:.4g}"
    return _f7(ours, test, "||X_est - X_G||_F (losac_prox) < (scaffold_prox) at the final round")
