"""Judge the papers' claims (reference/claims.csv) on our measured numbers: the vocabulary
every paper's checks share.

A check takes `ours` (the long frame of a target's runs, `reports.grid.cell_frame`, or a frame
the target builds from it) and returns (verdict, detail). Each paper files its checks in a
`Checks` of its own, `experiments/<paper>/claims.py`, and its targets pass it to
`evaluate_claims`. Verdicts: "holds", "holds (tie)", "fails", "not evaluated" (the detail says
why: which runs are missing, censored, or inside the seeds' interval).

The vocabulary: a scope item's `Result` (label, True | False | None, text); `every` (all items
hold), `at_least` (k of n), `tally` (a rule on the count, undecided items counted both ways),
`combine` (several checks of one claim), `verdict_of` (the text every one of them prints),
`missing_line` (the items a scope lacks, and why), and `beyond` / `paired_beyond` (a comparison
decided only outside the seeds' noise).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Sequence

import pandas as pd

from fedrepro.reports.grid import mean_interval
from fedrepro.reports.reference import read_reference_csv

VERDICTS = ("holds", "holds (tie)", "fails", "not evaluated")

# Points: the seed-to-seed spread of a tail-mean test accuracy, the band a one-seed accuracy
# comparison is decided beyond (5 seeds of MNIST at quick spread 0.05-0.25 point:
# docs/measured/fedelasticnet_ablations.md). Where several seeds ran, their interval decides.
TAIL_ACC_SPREAD = 0.25


def beyond(x: float, bound: float, band: float) -> Optional[bool]:
    """x >= bound, decided only outside a noise band: True when x clears `bound` by more than
    `band`, False when it falls short by more, None (within noise) in between."""
    return True if x - bound > band else False if bound - x > band else None


def paired_beyond(diffs: Sequence[float], bound: float, band: float) -> tuple[Optional[bool], str]:
    """mean(diffs) >= bound, where `diffs` are per-seed differences of two measurements made on
    the same seeds: with two seeds or more, decided by the mean's 95 % t-interval (True when it
    lies above `bound`, False when below, None when it straddles it); with one, by `beyond` with
    `band`. Returns (outcome, 'mean +- half-width (n seeds)', or the one difference)."""
    if not diffs:
        raise ValueError("paired_beyond needs at least one seed's difference")
    mean, lo, hi = mean_interval(list(diffs))
    if len(diffs) == 1:
        return beyond(mean, bound, band), f"{mean:+.2f}"
    outcome = True if lo > bound else False if hi < bound else None
    return outcome, f"{mean:+.2f} +- {(hi - lo) / 2:.2f} ({len(diffs)} seeds)"


class Checks(dict):
    """One paper's claim checks, {claim id: check(ours) -> (verdict, detail)}, filed explicitly:

        CHECKS = Checks()

        @CHECKS.register("FDY-T1-1")
        def fdy_t1_1(ours): ...
    """

    def register(self, claim_id: str):
        def wrap(fn):
            if claim_id in self:
                raise ValueError(f"claim {claim_id} has two checks: {self[claim_id].__name__} and {fn.__name__}")
            self[claim_id] = fn
            return fn
        return wrap


def load_claims() -> pd.DataFrame:
    return read_reference_csv("claims")


def verdict_of(results: list, statement: str, *, undecided_why: str = "", undecided_name: str = "undecided",
          notes: tuple = ()) -> tuple[str, str]:
    """The verdict over per-item results (label, True | False | None, text): any False fails,
    else any None leaves the claim "not evaluated", else it holds. The text leads with the
    count and lists the items of each group, then the non-empty `notes`."""
    groups = {key: [f"{lab} ({text})" for lab, out, text in results if out is key] for key in (True, False, None)}
    verdict = "fails" if groups[False] else "not evaluated" if groups[None] else "holds"
    head = f"{statement}: holds in {len(groups[True])} of {len(results)} evaluated"
    if groups[None]:
        head += f", {undecided_why + ' leaves ' if undecided_why else ''}{len(groups[None])} undecided"
    if verdict == "not evaluated":
        head = "undetermined: " + head
    lines = [head] + [f"{name}: " + "; ".join(groups[key])
                      for name, key in (("fails", False), (undecided_name, None), ("holds", True)) if groups[key]]
    return verdict, "\n".join(lines + [n for n in notes if n])


# A scope item's result: (label, True | False | None, text); None: undecided (censored, or a
# difference inside the seeds' interval).
Result = tuple

ABSENT = "their runs are not in this frame"


def missing_line(expected: int, got: int, reasons: str = "", *, need: str = "", absent: str = ABSENT) -> str:
    """'2 of 6 scope items not evaluated (they lack NEED): REASONS' ('' when none is missing);
    `absent` explains the gap when no reason is known."""
    if got >= expected:
        return ""
    line = f"{expected - got} of {expected} scope items not evaluated" + (f" (they lack {need})" if need else "")
    return line + f": {reasons or absent}"


def every(results: list, statement: str, *, expected: int, reasons: str = "", need: str = "",
          absent: str = ABSENT, extra: str = "", strict: bool = False, nothing: str = "",
          undecided_why: str = "", undecided_name: str = "undecided") -> tuple[str, str]:
    """The claim holds when every scope item holds (`verdict_of`): any False fails, any None
    leaves it undecided ("not evaluated"). `expected` items make the scope; the missing ones are
    named with `reasons`. strict: while items are missing, it does not hold (not evaluated).
    With no result at all: "not evaluated" with `nothing` (default: 'nothing in the scope was
    run (the missing line)')."""
    missing = missing_line(expected, len(results), reasons, need=need, absent=absent)
    if not results:
        return "not evaluated", (missing or nothing) if nothing else \
            "nothing in the scope was run" + (f" ({missing})" if missing else "")
    verdict, detail = verdict_of(results, statement, undecided_why=undecided_why, undecided_name=undecided_name,
                                 notes=(extra, missing))
    if strict and verdict == "holds" and len(results) < expected:
        return "not evaluated", "undetermined: " + detail
    return verdict, detail


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


def tally(results: list, statement: str, rule: Callable[[int, int], bool], *, expected: int, need: str,
          reasons: str, absent: str = ABSENT, counted: str = "holds",
          undecided_why: str = "censoring") -> tuple[str, str]:
    """rule(k, n) on the number k of True results out of n; undecided results may go either way,
    so the claim is decided only when both ways agree."""
    missing = missing_line(expected, len(results), reasons, need=need, absent=absent)
    if not results:
        return "not evaluated", missing or f"nothing in the scope ({need})"
    n = len(results)
    yes = sum(out is True for _, out, _ in results)
    maybe = sum(out is None for _, out, _ in results)
    low, high = rule(yes, n), rule(yes + maybe, n)
    verdict = "holds" if low and high else "fails" if not (low or high) else "not evaluated"
    head = f"{statement}: {counted} in {yes} of {n}" + (f" ({maybe} undecided by {undecided_why})" if maybe else "")
    if verdict == "not evaluated":
        head = "undetermined: " + head
    lines = [head, "; ".join(f"{lab}: {text}{'' if out is None else (' yes' if out else ' no')}"
                             for lab, out, text in results)]
    return verdict, "\n".join(lines + ([missing] if missing else []))


def combine(*parts: tuple[str, str]) -> tuple[str, str]:
    """Several checks of one claim: any fails, it fails; any undecided, it is not evaluated."""
    verdicts = [v for v, _ in parts]
    verdict = "fails" if "fails" in verdicts else "not evaluated" if "not evaluated" in verdicts else "holds"
    return verdict, "\n".join(d for _, d in parts)


def evaluate_claims(claim_ids: list[str], ours: pd.DataFrame, checks: "Checks") -> pd.DataFrame:
    """One row per claim: claim_id, claim, verdict, detail (lines separated by newlines); each
    claim judged by its check in `checks` (a paper's `Checks`)."""
    claims = load_claims().set_index("claim_id")
    unknown = [c for c in claim_ids if c not in claims.index]
    if unknown:
        raise ValueError(f"unknown claim ids {unknown}; see claims.csv in the reference folder")
    out = []
    for cid in claim_ids:
        check = checks.get(cid)
        try:
            verdict, detail = check(ours) if check else ("not evaluated", "no check implemented for this claim yet")
        except KeyError as exc:  # a frame from another table lacks the columns this check reads
            verdict, detail = "not evaluated", f"these results lack the column {exc} this claim is checked on"
        assert verdict in VERDICTS, (cid, verdict)
        out.append({"claim_id": cid, "claim": claims.loc[cid, "claim"], "verdict": verdict, "detail": detail})
    return pd.DataFrame(out, columns=["claim_id", "claim", "verdict", "detail"])


def claims_markdown(df: pd.DataFrame) -> str:
    """A bullet per claim (id, verdict, paraphrase), its detail lines as sub-bullets."""
    lines = []
    for _, r in df.iterrows():
        lines.append(f"- **{r['claim_id']}** {r['verdict']}: {r['claim']}")
        lines += [f"  - {ln}" for ln in str(r["detail"]).splitlines() if ln.strip()]
    return "\n".join(lines) + "\n"


def write_claims(path: Path, claims: pd.DataFrame, header: str) -> str:
    """`header`, a blank line and the claims' bullets, written to `path`; the text, to print."""
    text = f"{header}\n\n{claims_markdown(claims)}"
    path.write_text(text, encoding="utf-8")
    return text

