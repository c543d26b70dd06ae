"""FedOpt's server optimizers (Reddi et al., Algorithm 2; FedAvgM): FedAvg as the special case, the
update rules on hand-computed steps, checkpoints, configuration."""
import pandas as pd
import pytest
import torch

from convex import least_squares_problem, run_convex
from fedrepro.algorithms import Federation, build_algorithm
from fedrepro.algorithms.fedavg import FedAvg
from fedrepro.algorithms.fedopt import SERVER_OPTIMIZERS, FedOpt
from fedrepro.algorithms.registry import entries
from fedrepro.config import compose_config, validate
from fedrepro.errors import ConfigError
from fedrepro.runner import run_experiment


def test_fedavgm_without_momentum_is_fedavg_bit_for_bit():
    """Half the clients a round, 5 local steps: every server model of 30 rounds is identical."""
    x, y, idx, _ = least_squares_problem()
    traces = []
    for alg in (FedAvg(), FedOpt("sgd", server_lr=1.0, momentum=0.0)):
        trace = []
        run_convex(alg, x, y, idx, rounds=30, local_steps=5, lr=0.05, rate=0.5, trace=trace)
        traces.append(trace)
    assert all(torch.equal(a, b) for a, b in zip(*traces))
    moved = []
    run_convex(FedOpt("sgd", server_lr=1.0, momentum=0.5), x, y, idx, rounds=30, local_steps=5, lr=0.05,
               rate=0.5, trace=moved)
    assert not torch.equal(moved[-1], traces[0][-1])


def test_fedavgm_config_special_case_is_the_fedavg_run(results):
    """Through the configuration (a small MNIST run): algorithm=fedavgm with momentum 0 gives FedAvg's
    model and metrics; only the run key differs."""
    base = ["profile=smoke", "logger.progress=false", "profile.max_rounds=2", "train.num_clients=20",
            "model=logistic", f"results_root={results}"]
    runs = [run_experiment(compose_config([*base, *alg]), quiet=True)
            for alg in (["algorithm=fedavg"], ["algorithm=fedavgm", "algorithm.momentum=0"])]
    a, b = runs
    assert a.key != b.key
    assert torch.equal(torch.load(a.folder / "model.pt"), torch.load(b.folder / "model.pt"))
    pd.testing.assert_frame_equal(pd.read_csv(a.folder / "metrics.csv"), pd.read_csv(b.folder / "metrics.csv"))


def _server(optimizer, **kw):
    alg = FedOpt(optimizer, **kw)
    alg.setup(Federation(2, 2, torch.tensor([1.0, 3.0])), torch.zeros(2, dtype=torch.float64))
    return alg


def _step(alg, deltas):
    alg.aggregate(torch.tensor([0, 1]), {"delta": torch.tensor(deltas, dtype=torch.float64)})


def test_server_optimizers_by_hand():
    """Two clients of sizes 1 and 3, so Delta = (Delta_0 + 3 Delta_1) / 4; two rounds each."""
    d1 = [[4.0, 0.0], [0.0, 4.0 / 3]]  # Delta = (1, 1)
    d2 = [[-4.0, 2.0], [0.0, 2.0 / 3]]  # Delta = (-1, 1)
    lr, b1, b2, tau = 0.1, 0.9, 0.99, 1e-3

    m = _server("sgd", server_lr=0.5, momentum=0.9)
    _step(m, d1)
    assert torch.allclose(m.theta, torch.tensor([0.5, 0.5], dtype=torch.float64))
    _step(m, d2)  # m = 0.9 (1, 1) + (-1, 1) = (-0.1, 1.9); x += 0.5 m
    assert torch.allclose(m.theta, torch.tensor([0.5 - 0.05, 0.5 + 0.95], dtype=torch.float64))

    def expected(update):
        mom, v, x = torch.zeros(2, dtype=torch.float64), torch.full((2,), tau ** 2, dtype=torch.float64), 0
        for delta in (torch.tensor([1.0, 1.0], dtype=torch.float64), torch.tensor([-1.0, 1.0], dtype=torch.float64)):
            mom = b1 * mom + (1 - b1) * delta
            v = update(v, delta * delta)
            x = x + lr * mom / (v.sqrt() + tau)
        return x

    rules = {"adam": lambda v, s: b2 * v + (1 - b2) * s, "adagrad": lambda v, s: v + s,
             "yogi": lambda v, s: v - (1 - b2) * s * torch.sign(v - s)}
    for name, rule in rules.items():
        alg = _server(name, server_lr=lr, beta1=b1, beta2=b2, tau=tau)
        _step(alg, d1)
        _step(alg, d2)
        assert torch.allclose(alg.theta, expected(rule), rtol=1e-12), name
    # first Adam step by hand: m = 0.1, v = 0.99e-6 + 0.01; x = 0.1 * 0.1 / (sqrt(v) + 1e-3)
    adam = _server("adam", server_lr=lr, beta1=b1, beta2=b2, tau=tau)
    _step(adam, d1)
    assert float(adam.theta[0]) == pytest.approx(0.01 / ((0.99e-6 + 0.01) ** 0.5 + 1e-3), rel=1e-12)
    # Yogi grows v additively: v = tau^2 + (1 - beta2) Delta^2 while Delta^2 > v
    yogi = _server("yogi", server_lr=lr, beta1=b1, beta2=b2, tau=tau)
    _step(yogi, d1)
    assert torch.allclose(yogi.v, torch.full((2,), tau ** 2 + 0.01, dtype=torch.float64))


def test_state_dict_round_trip():
    a = _server("adam", server_lr=0.1)
    _step(a, [[4.0, 0.0], [0.0, 4.0 / 3]])
    b = _server("adam", server_lr=0.1)
    b.load_state_dict(a.state_dict())
    for alg in (a, b):
        _step(alg, [[1.0, 2.0], [3.0, 4.0]])
    assert torch.equal(a.theta, b.theta) and torch.equal(a.v, b.v) and torch.equal(a.m, b.m)


def test_presets_build_their_optimizer():
    assert set(SERVER_OPTIMIZERS) == {name for name, e in entries().items() if e.server_optimizer}
    for name, optimizer in SERVER_OPTIMIZERS.items():
        cfg = compose_config([f"algorithm={name}"])
        validate(cfg)
        alg = build_algorithm(cfg.algorithm)
        assert alg.optimizer == optimizer and alg.name == name
    alg = build_algorithm(compose_config(["algorithm=fedyogi", "algorithm.tau=0.01", "algorithm.server_lr=0.3"]).algorithm)
    assert (alg.tau, alg.server_lr, alg.beta1, alg.beta2) == (0.01, 0.3, 0.9, 0.99)


@pytest.mark.parametrize("override, words", [
    (["algorithm=fedavgm", "algorithm.momentum=1.0"], "momentum=1.0 is invalid: it must be in"),
    (["algorithm=fedavgm", "algorithm.server_lr=0"], "server_lr=0"),
    (["algorithm=fedadam", "algorithm.beta1=-0.1"], "beta1=-0.1"),
    (["algorithm=fedyogi", "algorithm.beta2=1"], "beta2=1"),
    (["algorithm=fedadagrad", "algorithm.tau=0"], "tau=0"),
])
def test_config_errors(override, words):
    with pytest.raises(ConfigError, match=words):
        validate(compose_config(override))
    with pytest.raises(ConfigError):
        FedOpt("rmsprop")
