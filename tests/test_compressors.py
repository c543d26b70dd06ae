"""Compressors, error feedback, the channel in the round loop and the ledger's wire columns.

Statistical tolerance (unbiasedness and variance): N seeded draws; a coordinate's mean must
lie within 5 standard errors of x_i (its empirical sd / sqrt(N)), and the mean squared error
E||C(x) - x||^2 within 5 standard errors above omega ||x||^2. With the seeds fixed the
tests are deterministic; at 5 sigma a fresh seed fails with probability < 1e-5 per check.
"""
import math

import pandas as pd
import pytest
import torch
from torch import nn

from fedrepro import store
from fedrepro.algorithms import Federation
from fedrepro.algorithms.fedavg import FedAvg
from fedrepro.algorithms.feddyn import FedDyn
from fedrepro.algorithms.scaffold import Scaffold
from fedrepro.compression import (KINDS, QSGD, Bernoulli, Channel, Identity, Natural, RandK, TernGrad, Threshold,
                                  TopK, build_channel, index_bits)
from fedrepro.compression.compressors import elias_gamma_bits
from fedrepro.config import COMPRESSOR_CHOICES, Effective, compose_config, run_key, validate
from fedrepro.engine.local import SequentialExecutor
from fedrepro.engine.loop import EvalData, RoundLoop, Schedule
from fedrepro.errors import ConfigError
from fedrepro.metrics.ledger import Ledger
from fedrepro.models.flat import FlatModel
from fedrepro.run import Interrupted
from fedrepro.runner import run_experiment

SMOKE = ["profile=smoke", "logger.progress=false", "train.eval_every=100"]  # evaluated at the start and end
N_DRAWS = 4000


def sample_vector():
    """12 values: zero, an exact power of two, natural's worst case 4/3 * 2^e, negatives, mixed scales."""
    return torch.tensor([0.0, 0.5, -4 / 3 * 0.125, 0.3, -1.7, 2.2, -0.01, 0.07, 5.0, -3.3, 0.9, 1e-3],
                        dtype=torch.float64)


UNBIASED = {
    "identity": Identity(),
    "natural": Natural(),
    "qsgd_s1": QSGD(1),
    "qsgd_s4": QSGD(4),
    "terngrad": TernGrad(),
    "bernoulli_vector": Bernoulli(0.3, "vector"),
    "bernoulli_coordinate": Bernoulli(0.3, "coordinate"),
    "randk": RandK(k=3),
}


def draws(compressor, x, n=N_DRAWS, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.stack([compressor.compress(x, g).values for _ in range(n)])


@pytest.mark.parametrize("name", list(UNBIASED))
def test_unbiased_mean_and_variance_within_omega(name):
    c, x = UNBIASED[name], sample_vector()
    d = x.numel()
    samples = draws(c, x)
    n = samples.shape[0]
    mean, sd = samples.mean(0), samples.std(0)
    assert torch.all((mean - x).abs() <= 5 * sd / math.sqrt(n) + 1e-12), (mean - x)
    err = ((samples - x) ** 2).sum(1)  # ||C(x) - x||^2 per draw
    bound = c.omega(d) * float(x.square().sum())
    assert float(err.mean()) <= bound + 5 * float(err.std()) / math.sqrt(n) + 1e-12, (float(err.mean()), bound)
    if name != "identity":
        assert float(err.mean()) > 0  # a compressor that returns its input unchanged would pass above


def test_natural_omega_is_attained_and_values_are_powers_of_two():
    x = torch.full((2000,), 4 / 3 * 0.25, dtype=torch.float64)  # |x| = 4/3 2^e: the worst case of 1/8
    out = Natural().compress(x, torch.Generator().manual_seed(0)).values
    assert set(out.unique().tolist()) <= {0.25, 0.5}
    ratio = float(((out - x) ** 2).sum() / x.square().sum())
    assert ratio == pytest.approx(1 / 8, rel=0.1)  # 2000 coordinates: relative sd ~ 2.2 %
    mixed = Natural().compress(sample_vector().float(), torch.Generator().manual_seed(1)).values
    nonzero = mixed[mixed != 0].abs()
    assert torch.equal(nonzero.log2(), nonzero.log2().round())  # every value a power of two
    assert float(mixed[1]) == 0.5 and float(mixed[0]) == 0.0  # powers of two and zero stay exact


def test_natural_float32_bit_path_equals_the_generic_path():
    g = torch.Generator().manual_seed(5)
    x = torch.cat([torch.randn(5000, generator=g) * 10.0 ** torch.randint(-30, 30, (5000,), generator=g),
                   torch.tensor([0.0, -0.0, 1e-40, -3e-39, 2.0 ** -126, 1.0, -0.75])])
    fast = Natural._float32(x, torch.Generator().manual_seed(1))
    slow = Natural._generic(x, torch.Generator().manual_seed(1))
    assert torch.equal(fast, slow)


def test_exact_omega_of_bernoulli_and_randk():
    """For these two E||C(x) - x||^2 = omega ||x||^2 exactly: the bound is tight."""
    x = sample_vector()
    for c in (Bernoulli(0.3, "coordinate"), Bernoulli(0.3, "vector"), RandK(k=3)):
        err = ((draws(c, x) - x) ** 2).sum(1)
        expected = c.omega(x.numel()) * float(x.square().sum())
        assert float(err.mean()) == pytest.approx(expected, abs=5 * float(err.std()) / math.sqrt(N_DRAWS))


def test_topk_keeps_exactly_the_k_largest_unscaled():
    x = torch.randn(100, generator=torch.Generator().manual_seed(3))
    out = TopK(k=7).compress(x).values
    kept = torch.nonzero(out).reshape(-1)
    assert len(kept) == 7
    assert set(kept.tolist()) == set(x.abs().argsort(descending=True)[:7].tolist())
    assert torch.equal(out[kept], x[kept])  # unscaled
    assert float((out - x).square().sum()) <= (1 - 7 / 100) * float(x.square().sum())  # contraction
    assert not TopK(k=7).unbiased and TopK(k=7).omega(100) == math.inf
    assert TopK(fraction=0.01).k_for(199_210) == 1993 and TopK(fraction=1.0).k_for(10) == 10


def test_bits_on_hand_computed_examples():
    assert index_bits(1000) == 10 and index_bits(1024) == 10 and index_bits(1025) == 11 and index_bits(1) == 0
    assert elias_gamma_bits(torch.tensor([1, 2, 3, 4, 5, 8, 255, 256])).tolist() == [1, 3, 3, 5, 5, 7, 15, 17]
    x4 = torch.tensor([3.0, 0.0, -4.0, 0.0])  # ||x|| = 5
    assert Identity().compress(x4).bits == 4 * 32
    assert Natural().compress(x4).bits == 4 * 9 == Natural().bits(4)
    # s = 5: levels 5|x_i|/||x|| = [3, 0, 4, 0] exactly (no randomness); 32-bit norm +
    # gamma(4) + sign + gamma(1) + gamma(5) + sign + gamma(1) = 32 + 6 + 1 + 6 + 1
    q = QSGD(5).compress(x4)
    assert torch.equal(q.values, x4) and q.bits == 46
    # s = 1 has s + 1 = 2 levels: a nonzero level costs gamma(2) = 3 bits + sign, not ceil(log2 1) = 0
    assert QSGD(1).compress(torch.tensor([2.0, 0.0])).bits == 32 + 3 + 1 + 1
    assert TernGrad().compress(x4).bits == 32 + 2 * 4
    x = torch.zeros(1000)
    x[[3, 50, 600, 700, 999]] = torch.tensor([0.5, -0.2, 0.3, 1.0, -2.0])
    assert TopK(k=2).compress(x).bits == 2 * (32 + 10)
    assert RandK(k=3).compress(x, torch.Generator().manual_seed(0)).bits == 3 * 32
    # threshold: 5 nonzeros of 1000: 1 flag + 32-bit count + 5 x 10-bit indices (< a 1000-bit mask) + 5 x 32
    assert Threshold(0.1).compress(x).bits == 1 + (32 + 50) + 160
    assert Threshold(0.0).compress(torch.ones(8)).bits == 1 + 8 + 8 * 32  # the 8-bit mask is shorter
    coord = Bernoulli(0.5, "coordinate").compress(torch.ones(64), torch.Generator().manual_seed(0))
    assert coord.bits == 32 * int(torch.count_nonzero(coord.values))
    vec = [Bernoulli(0.5).compress(torch.ones(64), torch.Generator().manual_seed(s)) for s in range(8)]
    assert {v.bits for v in vec} == {0, 64 * 32}  # the whole vector or nothing
    assert all(v.coded_size("zstd") == 0 for v in vec if v.bits == 0)


def test_omegas():
    assert QSGD(16).omega(100) == 100 / 256 and QSGD(16).omega(10_000) == 100 / 16
    assert Natural().omega(10) == 1 / 8 and TernGrad().omega(100) == 9.0
    assert Bernoulli(0.25).omega(7) == 3.0 and RandK(k=10).omega(1000) == 99.0
    assert Threshold(0.1).omega(5) == math.inf and not Threshold(0.1).unbiased


def test_randomness_only_from_the_generator():
    x = sample_vector()
    for c in UNBIASED.values():
        a = c.compress(x, torch.Generator().manual_seed(7)).values
        torch.manual_seed(123)  # the global generator must not matter
        b = c.compress(x, torch.Generator().manual_seed(7)).values
        assert torch.equal(a, b)


def test_zero_and_tiny_inputs():
    z = torch.zeros(5)
    for c in (Natural(), QSGD(4), TernGrad(), Bernoulli(0.5, "coordinate"), TopK(k=2), RandK(k=2), Threshold(0.1)):
        assert torch.equal(c.compress(z, torch.Generator().manual_seed(0)).values, z)
    tiny = torch.full((20_000,), 2.0 ** -130)  # below float32's smallest normal: 0 or 2^-126
    out = Natural().compress(tiny, torch.Generator().manual_seed(0)).values
    assert set(out.unique().tolist()) <= {0.0, 2.0 ** -126}
    assert float(out.double().mean()) == pytest.approx(2.0 ** -130, rel=0.2)


# --- error feedback -------------------------------------------------------------------------


def test_ef_error_stays_bounded_and_telescopes():
    """EF with Top-k (a contraction, 1 - k/d = 0.9): ||e|| <= sqrt(0.9) / (1 - sqrt(0.9)) max ||x||,
    and what was sent plus the final error equals everything that was to be sent."""
    d, k = 20, 2
    channel = Channel(TopK(k=k), uplink_feedback="ef", num_clients=1)
    g = torch.Generator().manual_seed(0)
    total_x, total_sent, worst = torch.zeros(d, dtype=torch.float64), torch.zeros(d, dtype=torch.float64), 0.0
    for t in range(500):
        x = torch.randn(d, generator=g, dtype=torch.float64)
        x /= x.norm()
        s = channel.upload(t, 0, "g", x)
        total_x += x
        total_sent += s.used
        worst = max(worst, float(channel.streams["up/g"].memory[0].norm()))
    root = math.sqrt(1 - k / d)
    assert worst <= root / (1 - root)
    assert torch.allclose(total_sent + channel.streams["up/g"].memory[0], total_x, atol=1e-9)


def heterogeneous_least_squares(n=4, m=30, d=10, seed=0):
    g = torch.Generator().manual_seed(seed)
    scale = torch.linspace(0.5, 1.5, d, dtype=torch.float64)
    a = [torch.randn(m, d, generator=g, dtype=torch.float64) * scale for _ in range(n)]
    b = [ai @ (3 * torch.randn(d, generator=g, dtype=torch.float64)) for ai in a]
    hessian = sum(ai.T @ ai / m for ai in a) / n
    optimum = torch.linalg.solve(hessian, sum(ai.T @ bi / m for ai, bi in zip(a, b)) / n)
    return a, b, optimum


def compressed_gd(feedback, rounds, lr, k=2):
    """Distributed GD: each of 4 clients sends its gradient through a Top-k channel."""
    a, b, optimum = heterogeneous_least_squares()
    channel = Channel(TopK(k=k), uplink_feedback=feedback, num_clients=len(a))
    x = torch.zeros(a[0].shape[1], dtype=torch.float64)
    for t in range(rounds):
        grads = [ai.T @ (ai @ x - bi) / ai.shape[0] for ai, bi in zip(a, b)]
        x = x - lr * torch.stack([channel.upload(t, i, "g", gi).used for i, gi in enumerate(grads)]).mean(0)
    return float((x - optimum).norm()), float(optimum.norm())


def test_error_feedback_converges_where_plain_topk_stalls():
    """Heterogeneous least squares, 4 clients, Top-2 of 10 coordinates. Measured: plain Top-k
    stalls 2.43 from the optimum (||x*|| = 3.56); EF reaches 0.25 at lr 0.05 and 0.13 at lr 0.02
    (EF's constant-step error is O(lr)); EF21 converges linearly (7e-5 after 800 rounds)."""
    plain, norm = compressed_gd("none", 800, 0.05)
    ef, _ = compressed_gd("ef", 800, 0.05)
    ef_small_step, _ = compressed_gd("ef", 1600, 0.02)
    ef21, _ = compressed_gd("ef21", 800, 0.05)
    assert plain > 0.5 * norm
    assert ef < 0.15 * plain and ef_small_step < 0.6 * ef
    assert ef21 < 1e-2


# --- the channel and the round loop ---------------------------------------------------------


def test_identity_channel_passes_tensors_through():
    ch = Channel()
    x = torch.randn(5)
    up, down = ch.upload(0, 3, "delta", x), ch.broadcast(0, "model", x)
    assert up.used is x and up.message is x and up.compressed is None and down.used is x
    assert ch.state_dict() == {}
    assert tuple(KINDS) == tuple(COMPRESSOR_CHOICES)


def test_ef21_receiver_keeps_the_same_estimate():
    ch = Channel(TopK(k=1), uplink_feedback="ef21", num_clients=3)
    g_server = torch.zeros(4)
    for t in range(5):
        x = torch.tensor([1.0, -2.0, 3.0, 0.5]) * (t + 1)
        s = ch.upload(t, 2, "delta", x)
        g_server += s.message  # the server adds each message it decoded
        assert torch.equal(s.used, g_server) and int(torch.count_nonzero(s.message)) <= 1
    assert torch.equal(ch.streams["up/delta"].memory[0], torch.zeros(4))  # other clients untouched


def tiny_problem(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(120, 6, generator=g, dtype=torch.float64)
    y = x @ torch.randn(6, generator=g, dtype=torch.float64)
    return x, y, [torch.arange(k * 20, (k + 1) * 20) for k in range(6)]


def tiny_loop(algorithm, channel, rounds=4):
    x, y, idx = tiny_problem()
    model = FlatModel(nn.Linear(6, 1, bias=False).double(), loss="squared")
    theta0 = torch.zeros(6, dtype=torch.float64)
    sizes = torch.tensor([20.0] * 6)
    algorithm.setup(Federation(6, 6, sizes), theta0)
    eff = Effective(rounds=rounds, local_epochs=1, local_steps=3, max_local_steps=None, eval_every=rounds,
                    max_test_samples=None, max_train_eval_samples=None)
    loop = RoundLoop(model=model, algorithm=algorithm,
                     executor=SequentialExecutor(model, x, y, idx, batch_size=20, weight_decay=0.0,
                                                 clip_norm=None, seed=0),
                     ledger=Ledger(6, wire_bits=True), client_sizes=sizes, theta0=theta0, eff=eff,
                     schedule=Schedule(0.1, 1.0, 20, "bernoulli", 0.5, None, 0),
                     eval_data=EvalData(x, y, x, y), channel=channel)
    rows = [loop.run_round(t) for t in range(rounds)]
    return loop, rows


def test_client_state_follows_what_was_sent():
    """SCAFFOLD: c = (1/m) sum_k c_k holds on the server with compressed control deltas
    (c_k moved by what the server decoded); FedDyn: lambda_k = sum of the updates as decoded."""
    alg = Scaffold()
    tiny_loop(alg, Channel(Natural(), num_clients=6, seed=1))
    assert torch.allclose(alg.c, alg.c_clients.mean(0), atol=1e-12)
    # without the hook the invariant would break: the natural compressor moved the messages
    dyn = FedDyn(alpha=0.1, transmit="update")
    sent = []
    original = dyn.sent

    def spy(k, name, message, used):
        sent.append((k, used.clone()))
        original(k, name, message, used)

    dyn.sent = spy
    tiny_loop(dyn, Channel(QSGD(2), num_clients=6, seed=2))
    expected = torch.zeros(6, 6, dtype=torch.float64)
    for k, used in sent:
        expected[k] += used
    assert sent and torch.allclose(dyn.memory, expected, atol=1e-12)


def test_downlink_is_compressed_once_for_every_client():
    alg = FedAvg()
    loop, rows = tiny_loop(alg, Channel(None, TopK(k=2), num_clients=6, seed=3), rounds=2)
    for r in rows:
        assert r["down_wire_bits"] == r["clients"] * 2 * (32 + index_bits(6))
        assert r["up_wire_bits"] == r["up_dense_bits"] and r["down_nonzeros"] <= 2 * r["clients"]


# --- the ledger's wire columns --------------------------------------------------------------


def test_ledger_wire_bits_and_lossless_bytes():
    from fedrepro.compression.codec import float32_bytes, lossless_size

    model = torch.randn(3000, generator=torch.Generator().manual_seed(0))
    delta = torch.zeros(3000)
    delta[:30] = 0.25
    packed = Natural().compress(model, torch.Generator().manual_seed(0))
    for codec in ("zstd", "lzma"):
        ledger = Ledger(3000, wire_bits=True, lossless=codec)
        for k in range(4):
            ledger.record("down", k, "model", model)  # one broadcast, four receivers
            ledger.record("up", k, "delta", packed.values, wire=packed)
        ledger.record("up", 9, "delta", delta)
        out = ledger.end_round()
        assert out["down_wire_bits"] == 4 * 32 * 3000 and out["up_wire_bits"] == 4 * 9 * 3000 + 32 * 3000
        assert out[f"down_{codec}_bytes"] == 4 * lossless_size(float32_bytes(model), codec)
        assert out[f"up_{codec}_bytes"] == 4 * lossless_size(packed.symbols(), codec) + lossless_size(
            float32_bytes(delta), codec)
        assert lossless_size(float32_bytes(delta), codec) < 200 < 12_000  # sparse: far below 4 d bytes
    assert set(Ledger(3, wire_bits=True).end_round()) >= {"up_wire_bits", "cum_down_wire_bits"}


def test_ledger_resumes_a_state_saved_before_wire_columns():
    old = Ledger(200)
    old.record("up", 0, "delta", torch.ones(200))
    old.end_round()
    state = old.state_dict()
    for key in ("wire_bits", "lossless"):
        state.pop(key)  # as saved by the ledger before compression
    new = Ledger(200, wire_bits=True, lossless="zstd")
    new.load_state_dict(state)
    new.record("up", 0, "delta", torch.ones(200))
    out = new.end_round()
    assert out["cum_up_wire_bits"] == 2 * 32 * 200 and math.isnan(out["cum_up_zstd_bytes"])


# --- configuration, run key, the real run path ---------------------------------------------


def test_config_choices_and_errors():
    cfg = compose_config(["compressor=topk_ef", "compressor.downlink=qsgd"])
    assert (cfg.compressor.name, cfg.compressor.error_feedback, cfg.compressor.downlink) == ("topk", "ef", "qsgd")
    ch = build_channel(cfg.compressor, num_clients=3, seed=0)
    assert isinstance(ch.compressors["up"], TopK) and isinstance(ch.compressors["down"], QSGD)
    with pytest.raises(ConfigError, match="natural, qsgd, terngrad"):
        validate(compose_config(["compressor.name=zip"]))
    with pytest.raises(ConfigError, match="ef21"):
        validate(compose_config(["compressor.error_feedback=ef22"]))
    with pytest.raises(ConfigError, match="keep_prob"):
        validate(compose_config(["compressor=bernoulli", "compressor.keep_prob=0"]))
    with pytest.raises(ConfigError, match="full participation|p100"):
        validate(compose_config(["compressor.downlink=natural", "compressor.downlink_error_feedback=ef21"]))
    validate(compose_config(["compressor.downlink=natural", "compressor.downlink_error_feedback=ef21",
                             "participation=p100"]))


def test_run_key_of_uncompressed_runs_is_unchanged():
    """f7eb3f4e26c7875e is the default config's key before compressors existed (with the
    sequential executor, the only one then)."""
    seq = "train.executor=sequential"
    assert run_key(compose_config([seq])) == "f7eb3f4e26c7875e"
    assert run_key(compose_config([seq, "compressor.levels=3", "compressor.error_feedback=ef"])) == "f7eb3f4e26c7875e"
    assert run_key(compose_config([seq, "metrics.lossless=none"])) != "f7eb3f4e26c7875e"
    assert run_key(compose_config(["compressor=natural"])) != run_key(compose_config(["compressor.downlink=natural"]))


def test_natural_run_records_fewer_wire_bits_and_changes_the_result(results):
    base = [*SMOKE, "algorithm=feddyn", "profile.max_rounds=2", f"results_root={results}"]
    plain = run_experiment(compose_config(base), quiet=True)
    nat = run_experiment(compose_config([*base, "compressor=natural"]), quiet=True)
    d = nat.summary["dim"]
    f, p = nat.summary["final"], plain.summary["final"]
    assert nat.summary["status"] == "finished" and nat.key != plain.key
    assert f["cum_up_wire_bits"] == 9 * d * f["cum_up_messages"] < f["cum_up_dense_bits"] == 32 * d * f["cum_up_messages"]
    assert f["cum_down_wire_bits"] == f["cum_down_dense_bits"]  # broadcasts uncompressed
    assert p["cum_up_wire_bits"] == p["cum_up_dense_bits"]
    assert 0 < f["cum_up_zstd_bytes"] < p["cum_up_zstd_bytes"] < 4 * d * p["cum_up_messages"]
    assert f["cum_up_entropy"] < p["cum_up_entropy"]  # powers of two: fewer distinct values
    assert not torch.equal(torch.load(nat.folder / "model.pt"), torch.load(plain.folder / "model.pt"))


def test_nothing_compressed_is_bit_for_bit_the_uncompressed_run(results):
    a = run_experiment(compose_config([*SMOKE, "algorithm=scaffold", f"results_root={results}/a"]), quiet=True)
    b = run_experiment(compose_config([*SMOKE, "algorithm=scaffold", "compressor.error_feedback=ef21",
                                       f"results_root={results}/b"]), quiet=True)
    assert a.key == b.key
    assert torch.equal(torch.load(a.folder / "model.pt"), torch.load(b.folder / "model.pt"))
    pd.testing.assert_frame_equal(pd.read_csv(a.folder / "metrics.csv"), pd.read_csv(b.folder / "metrics.csv"))


def test_resume_with_error_feedback_state_is_exact(tmp_path):
    overrides = [*SMOKE, "profile.max_rounds=4", "train.checkpoint_every=2", "compressor=topk_ef",
                 "compressor.downlink=qsgd", "compressor.downlink_error_feedback=ef"]
    clean = run_experiment(compose_config([*overrides, f"results_root={tmp_path / 'a'}"]), quiet=True)
    cfg = compose_config([*overrides, f"results_root={tmp_path / 'b'}"])
    with pytest.raises(Interrupted):
        run_experiment(cfg, interrupt_after=3, quiet=True)  # last checkpoint: round 2
    state = store.load_checkpoint(tmp_path / "b" / "runs" / clean.key, clean.key)
    assert set(state["loop"]["channel"]) == {"up/delta", "down/model"}
    assert state["loop"]["channel"]["up/delta"].shape == (100, clean.summary["dim"])
    resumed = run_experiment(cfg, quiet=True)
    assert resumed.summary["resumed_from"] == 2
    assert torch.equal(torch.load(resumed.folder / "model.pt"), torch.load(clean.folder / "model.pt"))
    pd.testing.assert_frame_equal(pd.read_csv(resumed.folder / "metrics.csv"),
                                  pd.read_csv(clean.folder / "metrics.csv"))
