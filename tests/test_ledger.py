"""The communication ledger against hand-computed values."""

import io
import math

import numpy as np
import pytest
import torch

from fedrepro.errors import DivergenceError
from fedrepro.metrics.ledger import Ledger, shannon_entropy


def t64(*values):
    return torch.tensor(values, dtype=torch.float64)


def reference_entropy(values: np.ndarray, bin_width: float = 0.01) -> float:
    """Independent reference: numpy floor + unique counts."""
    _, counts = np.unique(np.floor(values.astype(np.float64) / bin_width), return_counts=True)
    p = counts / counts.sum()
    return float(-(p * np.log2(p)).sum())


# --- shannon_entropy -------------------------------------------------------------------


def test_four_equiprobable_bins_is_two_bits():
    assert shannon_entropy(t64(0.005, 0.015, 0.025, 0.035).repeat(7)) == pytest.approx(2.0)


def test_constant_and_empty_are_zero():
    assert shannon_entropy(torch.full((100,), 0.37)) == 0.0
    assert shannon_entropy(torch.zeros(0)) == 0.0


def test_bins_are_floor_of_value_over_width():
    assert shannon_entropy(t64(0.001, 0.009)) == 0.0  # both in bin 0
    assert shannon_entropy(t64(0.001, 0.011)) == pytest.approx(1.0)  # bins 0 and 1
    # floor, not truncation: -0.001 is in bin -1, apart from 0.001 in bin 0
    assert shannon_entropy(t64(-0.001, 0.001)) == pytest.approx(1.0)
    assert shannon_entropy(t64(-0.001, -0.009)) == 0.0
    assert shannon_entropy(t64(-0.001, -0.011)) == pytest.approx(1.0)


def test_bin_width_argument():
    assert shannon_entropy(t64(0.001, 0.011), bin_width=0.1) == 0.0
    assert shannon_entropy(t64(0.001, 0.011), bin_width=0.001) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        shannon_entropy(t64(1.0), bin_width=0.0)


def test_matches_numpy_reference_dense_and_huge_range():
    gen = torch.Generator().manual_seed(0)
    narrow = torch.randn(50_000, generator=gen) * 0.05
    wide = torch.randn(50_000, generator=gen, dtype=torch.float64) * 1e6  # sparse path
    for values in (narrow, wide):
        assert shannon_entropy(values) == pytest.approx(reference_entropy(values.numpy()), abs=1e-9)


# --- Ledger: counts and bits -------------------------------------------------------------


def sparse_vector(d, nonzero_at):
    v = torch.zeros(d)
    v[nonzero_at] = 0.5
    return v


def test_nonzeros_dense_and_sparse_bits():
    ledger = Ledger(dim=1000)
    ledger.record("up", 0, "delta", sparse_vector(1000, [1, 5, 9, 400, 999]))
    ledger.record("up", 1, "delta", sparse_vector(1000, [2, 3]))
    out = ledger.end_round()
    assert out["up_messages"] == 2
    assert out["up_nonzeros"] == 7
    assert out["up_dense_bits"] == 2 * 32 * 1000
    # d = 1000 -> ceil(log2 1000) = 10 index bits + 32 value bits per nonzero
    assert out["up_sparse_bits"] == 7 * (32 + 10)
    assert out["down_messages"] == 0 and out["down_nonzeros"] == 0


def test_index_bits_are_ceil_log2_numel():
    for numel, index_bits in [(1, 0), (2, 1), (1024, 10), (1025, 11)]:
        ledger = Ledger(dim=numel, value_bits=16)
        ledger.record("down", 0, "model", torch.ones(numel))
        assert ledger.end_round()["down_sparse_bits"] == numel * (16 + index_bits)


def test_keys_and_types():
    ledger = Ledger(dim=4)
    ledger.record("up", 0, "delta", torch.ones(4))
    out = ledger.end_round()
    fields = ["messages", "nonzeros", "entropy", "dense_bits", "sparse_bits"]
    expected = {f"{p}{d}_{f}" for p in ("", "cum_") for d in ("up", "down") for f in fields}
    assert set(out) == expected
    assert all(type(v) in (int, float) for v in out.values())
    assert type(out["up_nonzeros"]) is int and type(out["up_entropy"]) is float


def test_directions_are_separate():
    ledger = Ledger(dim=4)
    ledger.record("down", 0, "model", t64(0.005, 0.015, 0.025, 0.035))
    ledger.record("up", 0, "delta", torch.zeros(4))
    out = ledger.end_round()
    assert out["down_entropy"] == pytest.approx(2.0)
    assert out["up_entropy"] == 0.0
    assert out["up_nonzeros"] == 0 and out["down_nonzeros"] == 4


# --- Ledger: entropy modes -------------------------------------------------------------


def test_pooled_and_per_client_differ():
    # two clients, each constant, different constants
    results = {}
    for mode in ("pooled", "per_client"):
        ledger = Ledger(dim=10, entropy=mode)
        ledger.record("up", 0, "delta", torch.full((10,), 0.005))
        ledger.record("up", 1, "delta", torch.full((10,), 0.505))
        results[mode] = ledger.end_round()["up_entropy"]
    assert results["pooled"] == pytest.approx(1.0)
    assert results["per_client"] == 0.0


def test_per_client_pools_a_clients_messages_and_averages_clients():
    ledger = Ledger(dim=4, entropy="per_client")
    # client 0: two named messages (SCAFFOLD-like), constant each, different -> 1 bit
    ledger.record("up", 0, "delta", torch.full((4,), 0.005))
    ledger.record("up", 0, "control", torch.full((4,), 0.105))
    ledger.record("up", 1, "delta", torch.full((4,), 0.005))  # client 1: 0 bits
    out = ledger.end_round()
    assert out["up_entropy"] == pytest.approx(0.5)
    assert out["up_messages"] == 3


def test_pooled_over_messages_equals_entropy_of_concatenation():
    # messages whose ranges shift make the dense histogram grow both ways; the last one
    # spans a huge range and moves it to the sparse representation
    gen = torch.Generator().manual_seed(1)
    msgs = [torch.randn(3000, generator=gen) * 0.1 + shift for shift in (0.0, 5.0, -7.0, 2.0)]
    ledger = Ledger(dim=3000)
    for k, m in enumerate(msgs):
        ledger.record("up", k, "delta", m)
    assert ledger.end_round()["up_entropy"] == pytest.approx(
        reference_entropy(torch.cat(msgs).numpy()), abs=1e-9
    )
    # two narrow messages 1e7 bins apart: sparse histogram fed by bincount
    far = [torch.randn(3000, generator=gen, dtype=torch.float64) * 0.1 + s for s in (0, 1e5)]
    for k, m in enumerate(far):
        ledger.record("up", k, "delta", m)
    assert ledger.end_round()["up_entropy"] == pytest.approx(
        reference_entropy(torch.cat(far).numpy()), abs=1e-9
    )
    msgs.append(torch.randn(3000, generator=gen, dtype=torch.float64) * 1e6)
    for k, m in enumerate(msgs):
        ledger.record("up", k, "delta", m)
    assert ledger.end_round()["up_entropy"] == pytest.approx(
        reference_entropy(torch.cat([m.double() for m in msgs]).numpy()), abs=1e-9
    )


def test_record_keeps_no_alias_of_the_callers_tensor():
    ledger = Ledger(dim=4)
    message = t64(0.005, 0.015, 0.025, 0.035)
    ledger.record("up", 0, "delta", message)
    message.zero_()  # the caller reuses its buffer
    assert ledger.end_round()["up_entropy"] == pytest.approx(2.0)


def test_accepts_tensors_that_require_grad():
    ledger = Ledger(dim=3)
    ledger.record("up", 0, "delta", torch.ones(3, requires_grad=True))
    assert ledger.end_round()["up_nonzeros"] == 3


# --- Ledger: rounds, cumulative sums, resume ------------------------------------------------


def play_round(ledger, r):
    """A deterministic round r: 3 clients up, the server model down to each."""
    gen = torch.Generator().manual_seed(r)
    for k in range(3):
        ledger.record("down", k, "model", torch.randn(200, generator=gen))
        delta = torch.randn(200, generator=gen) * 0.02
        delta[delta.abs() < 0.01] = 0.0
        ledger.record("up", k, "delta", delta)
    return ledger.end_round()


def test_cumulative_sums_across_rounds():
    ledger = Ledger(dim=200)
    rounds = [play_round(ledger, r) for r in range(3)]
    for key in ("up_nonzeros", "up_sparse_bits", "down_dense_bits", "up_messages"):
        assert rounds[-1][f"cum_{key}"] == sum(r[key] for r in rounds)
    assert rounds[-1]["cum_up_entropy"] == pytest.approx(sum(r["up_entropy"] for r in rounds))
    assert rounds[0]["cum_up_entropy"] == rounds[0]["up_entropy"] > 0
    assert ledger.rounds_closed == 3


def test_empty_round_is_all_zero_and_keeps_cumulative():
    ledger = Ledger(dim=200)
    first = play_round(ledger, 0)
    empty = ledger.end_round()
    for d in ("up", "down"):
        for f in ("messages", "nonzeros", "entropy", "dense_bits", "sparse_bits"):
            assert empty[f"{d}_{f}"] == 0
            assert empty[f"cum_{d}_{f}"] == first[f"cum_{d}_{f}"]


def test_state_dict_round_trip_continues_sums_exactly():
    straight = Ledger(dim=200)
    for r in range(2):
        play_round(straight, r)
    buffer = io.BytesIO()
    torch.save(straight.state_dict(), buffer)
    expected = play_round(straight, 2)

    resumed = Ledger(dim=200)
    buffer.seek(0)
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert resumed.rounds_closed == 2
    assert play_round(resumed, 2) == expected  # exact, floats included


def test_load_state_dict_refuses_other_settings_or_an_open_round():
    state = Ledger(dim=200, entropy="pooled").state_dict()
    with pytest.raises(ValueError, match="entropy"):
        Ledger(dim=200, entropy="per_client").load_state_dict(state)
    with pytest.raises(ValueError, match="dim"):
        Ledger(dim=201).load_state_dict(state)
    busy = Ledger(dim=200)
    busy.record("up", 0, "delta", torch.ones(200))
    with pytest.raises(RuntimeError):
        busy.load_state_dict(state)


# --- Ledger: errors ------------------------------------------------------------------------


def test_invalid_direction_and_mode():
    ledger = Ledger(dim=3)
    with pytest.raises(ValueError, match="direction"):
        ledger.record("sideways", 0, "delta", torch.ones(3))
    with pytest.raises(ValueError, match="pooled.*per_client"):
        Ledger(dim=3, entropy="mean")


def test_message_must_be_flat():
    with pytest.raises(ValueError, match="1-D"):
        Ledger(dim=4).record("up", 0, "delta", torch.ones(2, 2))


def test_non_finite_message_is_divergence():
    ledger = Ledger(dim=3)
    play_round(ledger, 0)
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(DivergenceError) as info:
            ledger.record("up", 0, "delta", t64(0.0, bad, 1.0))
        assert info.value.round == 1


# --- scale ---------------------------------------------------------------------------------


def test_a_round_of_20_million_values():
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(200_000, generator=gen) * 0.05
    ledger = Ledger(dim=200_000)
    for k in range(100):
        ledger.record("up", k, "delta", base.roll(k))  # distinct messages, same values
    out = ledger.end_round()
    assert out["up_messages"] == 100
    assert out["up_dense_bits"] == 100 * 200_000 * 32
    # pooling 100 copies of one multiset leaves its entropy; N(0, 0.05^2) in 0.01 bins
    # has about log2(0.05 / 0.01 * sqrt(2 pi e)) = 4.37 bits
    assert out["up_entropy"] == pytest.approx(shannon_entropy(base), abs=1e-9)
    assert out["up_entropy"] == pytest.approx(4.37, abs=0.02)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_one_pass_kernel_counts_what_the_torch_path_counts(dtype):
    """The numba kernel (`_count_bins`) and the torch path (`_Binner` + bincount) give the same
    bins and nonzeros, value for value: on bin edges (multiples of the width and their float
    neighbours, where a reciprocal multiply or float32 arithmetic would move a value), zeros of
    both signs, negatives, a wide spread, and a message whose range is too wide for the kernel."""
    from fedrepro.metrics import ledger as lg

    w = 0.01
    edges = torch.arange(-300, 301, dtype=torch.float64) * w
    near = torch.cat([edges, torch.nextafter(edges, torch.full_like(edges, math.inf)),
                      torch.nextafter(edges, torch.full_like(edges, -math.inf))])
    g = torch.Generator().manual_seed(0)
    messages = [near.to(dtype), torch.tensor([0.0, -0.0, 0.0, 1e-9, -1e-9], dtype=dtype),
                (torch.randn(50_000, generator=g, dtype=torch.float64) * 0.05).to(dtype),
                torch.tensor([-3e4, 0.0, 5e4], dtype=dtype)]  # 8e6 bins: wider than the kernel counts
    for m in messages:
        counted = lg._count_bins(m, w)
        binned = lg._Binner(w)(m)
        reference = lg._Histogram()
        reference.add((binned[0].clone(), binned[1], binned[2]))
        if m.numel() == 3:
            assert counted is None  # the torch path's sparse histogram serves it
            continue
        ours = lg._Histogram()
        ours.add_counts(*counted[:3])
        assert (ours.offset, ours.dense.tolist()) == (reference.offset, reference.dense.tolist())
        assert counted[3] == int(torch.count_nonzero(m))


def test_a_broadcast_is_counted_once_and_again_after_it_changes(monkeypatch):
    """One downlink tensor recorded for several clients is binned once a round (its counts reused,
    the totals those of separate copies); changed in place, or uploaded, it is binned again."""
    from fedrepro.metrics import ledger as lg

    calls = []
    count = lg._count_bins
    monkeypatch.setattr(lg, "_count_bins", lambda v, w: calls.append(1) or count(v, w))
    model = torch.randn(5_000, generator=torch.Generator().manual_seed(1)) * 0.05
    shared, copies = Ledger(5_000), Ledger(5_000)
    for k in range(4):
        shared.record("down", k, "model", model)
        copies.record("down", k, "model", model.clone())
    assert len(calls) == 1 + 4
    assert shared.end_round() == copies.end_round()
    calls.clear()
    shared.record("down", 0, "model", model)
    model.mul_(2.0)
    shared.record("down", 1, "model", model)
    shared.record("up", 1, "delta", model)
    shared.record("up", 2, "delta", model)
    assert len(calls) == 4
