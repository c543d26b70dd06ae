"""Rounds / models to a target on hand-made curves: evaluation gaps, censoring, the ledger's
uplink factor (SCAFFOLD counts double) and the paper's gain formatting."""
import math

import pandas as pd
import pytest

from fedrepro.metrics.targets import (Count, fewer, gain, mean_count, models_to_target, rounds_to_target,
                                      uplink_factor, with_gain)

NAN = math.nan


def curve(acc, clients=10, vectors=1, eval_every=1):
    """metrics.csv-like rows: round 0 evaluated without traffic, then `clients` a round."""
    rows = [{"round": 0, "clients": 0, "all_test_acc": acc[0], "cum_up_messages": NAN}]
    sent = 0
    for r in range(1, len(acc)):
        n = clients[r - 1] if isinstance(clients, list) else clients
        sent += n * vectors
        evaluated = r % eval_every == 0 or r == len(acc) - 1
        rows.append({"round": r, "clients": n, "cum_up_messages": sent,
                     "all_test_acc": acc[r] if evaluated else NAN})
    return pd.DataFrame(rows)


def test_first_evaluated_round_at_or_above_target():
    df = curve([0.1, 0.5, 0.8, 0.9, 0.95, 0.97, 0.99])
    assert rounds_to_target(df, 0.9) == Count(3)
    assert rounds_to_target(df, 0.91) == Count(4)


def test_nan_rows_between_evaluations_are_skipped():
    # Evaluated at 0, 5, 10: reached exactly at the evaluated round 5; the unevaluated
    # rounds 1-4 (NaN) never count, so the answer is rounded up to the evaluation grid.
    acc = [0.1, 0.99, 0.99, 0.99, 0.99, 0.97, 0.99, 0.99, 0.99, 0.99, 0.985]
    df = curve(acc, eval_every=5)
    assert df["all_test_acc"].isna().sum() == 8
    assert rounds_to_target(df, 0.97) == Count(5)
    assert rounds_to_target(df, 0.98) == Count(10)


def test_never_reached_is_censored_at_rounds_run():
    df = curve([0.1, 0.5, 0.6, 0.7], eval_every=2)
    got = rounds_to_target(df, 0.98)
    assert got == Count(3, censored=True) and str(got) == "3+"


def test_target_from_percent_matches_equal_accuracy():
    # 47.6 / 100 is one ulp above 0.476 (= 4760 / 10000 correct): still reached.
    assert 47.6 / 100 > 4760 / 10000
    assert rounds_to_target(curve([0.1, 4760 / 10000]), 47.6 / 100) == Count(1)


def test_loss_target_and_other_column():
    df = pd.DataFrame({"round": [0, 1, 2, 3], "all_train_loss": [2.0, 0.5, 0.1, 0.05]})
    assert rounds_to_target(df, 0.1205, "all_train_loss", lower_is_better=True) == Count(2)
    assert rounds_to_target(df, 0.01, "all_train_loss", lower_is_better=True) == Count(3, True)
    with pytest.raises(ValueError, match="all_test_acc"):
        rounds_to_target(df, 0.5)


def test_uplink_factor_from_the_ledger():
    # Bernoulli cohorts vary in size; the factor is still vectors per client and round.
    assert uplink_factor(curve([0.1, 0.2, 0.3, 0.4], clients=[7, 12, 9])) == 1.0
    assert uplink_factor(curve([0.1, 0.2, 0.3], clients=[7, 12], vectors=2)) == 2.0


def test_scaffold_counts_double():
    acc = [0.1, 0.5, 0.9, 0.95]
    assert models_to_target(curve(acc), 0.9) == Count(2)
    assert models_to_target(curve(acc, vectors=2), 0.9) == Count(4)
    assert str(models_to_target(curve(acc, vectors=2), 0.99)) == "6+"


def test_gain_formatting_as_printed():
    dyn = Count(637)
    assert with_gain(Count(1852), gain(Count(1852), dyn)) == "1852 (2.9x)"
    assert with_gain(Count(1000, True), gain(Count(1000, True), dyn)) == "1000+ (>1.6x)"
    assert str(gain(Count(300), Count(1000, True))) == "(<0.3x)"
    assert str(gain(Count(200, True), Count(100, True))) == "(?)"
    assert with_gain(dyn) == "637"
    assert with_gain(Count(72), gain(Count(72), Count(38)), spread="4.2") == "72 ± 4.2 (1.9x)"
    g = gain(Count(1000, True), dyn)
    assert g.lo == pytest.approx(1000 / 637) and g.hi == math.inf


def test_mean_count_censored_if_any_seed_is():
    assert mean_count([Count(10), Count(20)]) == Count(15)
    assert mean_count([Count(10), Count(100, True)]) == Count(55, True)
    assert str(Count(37.5)) == "37.5"


@pytest.mark.parametrize("a, b, scale, strict, expected", [
    (Count(30), Count(100, True), 1, True, True),  # reached before the other's cap
    (Count(100), Count(100, True), 1, True, True),  # reached at the cap: the other needs more
    (Count(100, True), Count(50), 1, True, False),
    (Count(100, True), Count(100), 1, False, False),  # "100+" is more than 100
    (Count(100, True), Count(200, True), 1, True, None),
    (Count(100, True), Count(150), 1, True, None),  # 100+ may be under 150: open, not "not fewer"
    (Count(150), Count(100, True), 1, True, None),  # 150 may be under the other's 100+
    (Count(100, True), Count(90), 1.25, False, None),  # 100+ against 112.5
    (Count(100, True), Count(80), 1.25, False, False),  # 100+ against 100
    (Count(50), Count(40), 1.25, False, True),
    (Count(50), Count(40), 1.25, True, False),
    (Count(30), Count(30), 1, True, False),
    (Count(30), Count(30), 1, False, True),
])
def test_fewer_decides_only_what_censoring_leaves_closed(a, b, scale, strict, expected):
    assert fewer(a, b, scale, strict) is expected
