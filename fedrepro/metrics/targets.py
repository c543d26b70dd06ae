"""Rounds and models transmitted to reach a target (FedDyn Tables 1, 2, 4, 5 and 6).

FedDyn's tables count "models transmitted relative to one round of FedAvg" until the
reported model (the mean of all clients' models, column `all_test_acc`) first reaches a
target test accuracy: rounds x the uplink vectors a participating client sends per round
(FedDyn, FedAvg, FedProx: 1; SCAFFOLD: 2, model and control variate). The factor is read
from the run's ledger (cum_up_messages / client-rounds), never from the algorithm's name.

A run that never reaches the target is censored: its count is the cap (rounds run x factor)
and a lower bound, printed "1000+" as the paper does. Gains are baseline / method, printed
"(2.9x)", "(>1.6x)" when the baseline is censored (a lower bound), "(<0.5x)" when the method
is and "(?)" when both are.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import pandas as pd

# Accuracies are correct / n; targets come from the paper as percentages / 100, which can
# land one float ulp above an equal accuracy (47.6 / 100 > 4760 / 10000).
TOLERANCE = 1e-9


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


@dataclass(frozen=True)
class Count:
    """Rounds or models to a target; `censored`: never reached, `value` is the cap."""

    value: float
    censored: bool = False

    @property
    def lo(self) -> float:
        return self.value

    @property
    def hi(self) -> float:
        """The largest the count can be: unbounded when censored (`value` is then a lower bound)."""
        return math.inf if self.censored else self.value

    def __str__(self) -> str:
        return _number(self.value) + ("+" if self.censored else "")


@dataclass(frozen=True)
class Gain:
    """baseline count / method count; `bound`: "" exact, ">" lower bound, "<" upper, "?" unknown."""

    value: float
    bound: str = ""

    @property
    def lo(self) -> float:
        return self.value if self.bound in ("", ">") else 0.0

    @property
    def hi(self) -> float:
        return self.value if self.bound in ("", "<") else math.inf

    def __str__(self) -> str:
        return "(?)" if self.bound == "?" else f"({self.bound}{self.value:.1f}x)"


def rounds_to_target(metrics: pd.DataFrame, target: float, column: str = "all_test_acc", *,
                     lower_is_better: bool = False) -> Count:
    """The first evaluated round whose `column` is >= target (<= for a loss), else censored.

    A run evaluates every `eval_every` rounds (and at round 0 and its last round); the rows
    between evaluations hold NaN in `column` and are skipped, so the answer is the first
    *evaluated* round at or past the target: exact to within the evaluation interval. When
    no evaluated round reaches it, the count is censored at the rounds run (the last round).
    """
    missing = [c for c in ("round", column) if c not in metrics.columns]
    if missing:
        raise ValueError(f"metrics lack columns {missing}; they have {list(metrics.columns)}")
    curve = metrics[["round", column]].apply(pd.to_numeric, errors="coerce")
    rounds_run = int(curve["round"].max())
    curve = curve.dropna().sort_values("round")
    reached = (curve[column] <= target + TOLERANCE) if lower_is_better else (curve[column] >= target - TOLERANCE)
    if reached.any():
        return Count(int(curve.loc[reached, "round"].iloc[0]))
    return Count(rounds_run, censored=True)


def uplink_factor(metrics: pd.DataFrame) -> float:
    """Uplink vectors per participating client per round, from the ledger columns."""
    rows = metrics.dropna(subset=["cum_up_messages"])
    if rows.empty:
        raise ValueError("metrics have no ledger rows (cum_up_messages): no round was run")
    last = rows.loc[pd.to_numeric(rows["round"]).idxmax()]
    client_rounds = pd.to_numeric(metrics.loc[metrics["round"] <= last["round"], "clients"]).sum()
    return float(last["cum_up_messages"]) / float(client_rounds)


def models_to_target(metrics: pd.DataFrame, target: float, column: str = "all_test_acc", *,
                     lower_is_better: bool = False) -> Count:
    """Rounds to the target x uplink_factor: models transmitted relative to one FedAvg round."""
    rounds = rounds_to_target(metrics, target, column, lower_is_better=lower_is_better)
    return Count(rounds.value * uplink_factor(metrics), rounds.censored)


def mean_count(counts: list[Count]) -> Count:
    """Mean over seeds; censored (a lower bound) when any seed is."""
    return Count(sum(c.value for c in counts) / len(counts), any(c.censored for c in counts))


def fewer(a: Count, b: Count, scale: float = 1.0, strict: bool = True) -> Optional[bool]:
    """a < scale * b (<= when not strict), decided on what censoring leaves open; None: open.

    A censored count is more than its cap (not reached by that round), so "100+" is fewer
    than nothing finite under 100 but may still be fewer than 150: that comparison is open."""
    b_least = scale * b.value  # scale * b is above this when b is censored, equal to it otherwise
    if a.hi < b_least or (a.hi == b_least and (b.censored or not strict)):
        return True
    a_least, b_most = a.value, scale * b.hi
    if a_least > b_most or (a_least == b_most and (a.censored or strict)):
        return False
    return None


def gain(baseline: Count, method: Count) -> Gain:
    """How many times fewer models `method` needs than `baseline`, with censoring as a bound."""
    value = baseline.value / method.value if method.value else math.inf
    bound = {(False, False): "", (True, False): ">", (False, True): "<", (True, True): "?"}[
        (baseline.censored, method.censored)]
    return Gain(value, bound)


def with_gain(count: Count, baseline_gain: Gain | None = None, spread: str = "") -> str:
    """A table cell as the paper prints it: "1852 (2.9x)", "1000+ (>1.6x)", "637"; `spread`
    (the ± half-width over seeds) goes right after the count."""
    text = str(count) + (f" ± {spread}" if spread else "")
    return text if baseline_gain is None else f"{text} {baseline_gain}"
