"""Compressed L2GD (docs/l2gd.md): the engine's iterates against Algorithm 1 transcribed, the
aggregation step as averaging, communication only on local-to-aggregation switches, the personalized
optimum of problem (1) on a quadratic, personalized metrics, and the optimal p of Theorems 3 and 4."""
import math

import pandas as pd
import pytest
import torch
from torch import nn

from convex import run_convex
from fedrepro.algorithms import Federation, build_algorithm
from fedrepro.algorithms.fedavg import FedAvg
from fedrepro.algorithms.l2gd import (L2GD, WEIGHTINGS, bits_per_client, communication_cost, compare_with_sweep, compression_alpha,
                                      empirical_optimum, gamma, logistic_constants, main, optimal_p, p_A_communication,
                                      p_A_rate, p_e)
from fedrepro.compression import Channel, Natural
from fedrepro.algorithms.registry import entry
from fedrepro.config import Effective, compose_config, validate
from fedrepro.engine.evaluate import Personalized, personalized_metrics
from fedrepro.engine.local import SequentialExecutor
from fedrepro.engine.loop import EvalData, RoundLoop, Schedule
from fedrepro.errors import ConfigError
from fedrepro.metrics.ledger import Ledger
from fedrepro.models.flat import FlatModel
from fedrepro.runner import run_experiment
from fedrepro.seeding import generator

FULL_BATCH = 10 ** 6  # larger than any client: local steps use the full gradient (section 7.1's GD)


def quadratic_problem(n=4, m=6, d=3, seed=0):
    """n clients, f_i(x) = (1/2m) ||A_i x - y_i||^2 with Hessian eigenvalues 1, 1.5, 2 (L = 2, mu_i = 1)
    and far-apart local optima. Returns features, targets, client index lists."""
    g = torch.Generator().manual_seed(seed)
    xs, ys = [], []
    target = torch.linspace(1.0, 2.0, d, dtype=torch.float64)
    for i in range(n):
        a = torch.randn(m, d, generator=g, dtype=torch.float64)
        evals, evecs = torch.linalg.eigh(a.T @ a / m)
        a = a @ evecs @ torch.diag((target / evals).sqrt()) @ evecs.T  # A^T A / m = V diag(target) V^T
        w = 2.0 * torch.randn(d, generator=g, dtype=torch.float64) + (i - n / 2)
        xs.append(a)
        ys.append(a @ w + 0.1 * torch.randn(m, generator=g, dtype=torch.float64))
    return torch.cat(xs), torch.cat(ys), [torch.arange(i * m, (i + 1) * m) for i in range(n)]


def hessians(x, y, idx):
    return (torch.stack([x[i].T @ x[i] / len(i) for i in idx]), torch.stack([x[i].T @ y[i] / len(i) for i in idx]))


def personalized_optimum(x, y, idx, lam):
    """x* of problem (1) for quadratics: grad_i F = (1/n)(H_i x_i - b_i) + (lam/n)(x_i - xbar) = 0, i.e.
    (H_i + lam I) x_i - (lam/n) sum_j x_j = b_i: one (nd x nd) linear system."""
    H, b = hessians(x, y, idx)
    n, d = b.shape
    eye = torch.eye(d, dtype=torch.float64)
    M = torch.block_diag(*(H[i] + lam * eye for i in range(n))) - lam / n * torch.ones(n, n, dtype=torch.float64).kron(eye)
    return torch.linalg.solve(M, b.reshape(-1)).view(n, d)


def make_loop(alg, x, y, idx, rounds, lr, decay=1.0, channel=None, seed=0):
    d = x.shape[1]
    model = FlatModel(nn.Linear(d, 1, bias=False).double(), loss="squared")
    theta0 = torch.zeros(d, dtype=torch.float64)
    sizes = torch.tensor([float(len(i)) for i in idx])
    alg.setup(Federation(len(idx), d, sizes), theta0)
    executor = SequentialExecutor(model, x, y, idx, batch_size=FULL_BATCH, weight_decay=0.0, clip_norm=None, seed=seed)
    eff = Effective(rounds=rounds, local_epochs=1, local_steps=None, max_local_steps=None, eval_every=rounds,
                    max_test_samples=None, max_train_eval_samples=None)
    return RoundLoop(model=model, algorithm=alg, executor=executor, ledger=Ledger(d, wire_bits=True),
                     client_sizes=sizes, theta0=theta0, eff=eff, channel=channel,
                     schedule=Schedule(lr, decay, FULL_BATCH, "bernoulli", 1.0, None, seed),
                     eval_data=EvalData(x, y, x, y))


def run(alg, x, y, idx, rounds, lr, decay=1.0, channel=None):
    """Rows and per-round snapshots (x_i, the clients' kept average) of an engine run."""
    loop = make_loop(alg, x, y, idx, rounds, lr, decay, channel)
    rows, xs, xbars = [], [alg.x.clone()], [alg.xbar]
    def on_row(row):
        rows.append(row)
        xs.append(alg.x.clone())
        xbars.append(alg.xbar)
    loop.run(0, on_row, lambda r: None, 10 ** 9)
    return rows, xs, xbars


def coins(seed, p, K):
    """xi_0 .. xi_{K-1} drawn as the server does (independently of L2GD.coin)."""
    return [int(float(torch.rand(1, generator=generator(seed, "l2gd-coin", k), dtype=torch.float64)) < p)
            for k in range(K)]


@pytest.mark.parametrize("weighting", ["uniform", "data"])
def test_engine_iterates_are_algorithm_1(weighting):
    """Uncompressed, full gradients: every iterate of the engine run equals Algorithm 1 transcribed
    (local step eta/(n(1-p)) c_i grad L_i, aggregation eta lam/(n p) (x_i - xbar), xbar refreshed only on
    a local-to-aggregation switch), on the same coins. Clients of 6, 3, 6, 5 samples; c_i = 1
    (uniform) or n_i / N (data, section 7.2)."""
    x, y, idx = quadratic_problem()
    idx = [idx[0], idx[1][:3], idx[2], idx[3][:5]]
    sizes = torch.tensor([float(len(i)) for i in idx], dtype=torch.float64)
    c = torch.ones(4, dtype=torch.float64) if weighting == "uniform" else sizes / sizes.sum()
    n, p, lam, lr, K = len(idx), 0.4, 2.0, 0.8, 120
    H, b = hessians(x, y, idx)
    rows, xs, _ = run(L2GD(p=p, lam=lam, coin_seed=5, weighting=weighting), x, y, idx, K, lr)
    X = torch.zeros(n, 3, dtype=torch.float64)
    xbar, prev = X.mean(0), 1
    for k, xi in enumerate(coins(5, p, K)):
        if xi == 0:
            X = X - lr / (n * (1 - p)) * c[:, None] * (torch.einsum("nij,nj->ni", H, X) - b)
        else:
            if prev == 0:
                xbar = X.mean(0)
            X = X - lr * lam / (n * p) * (X - xbar)
        prev = xi
        assert torch.allclose(xs[k + 1], X, rtol=0, atol=1e-12), k
    f = sum(c[k] * 0.5 * (x[i] @ X[k] - y[i]).pow(2).mean() for k, i in enumerate(idx)) / n
    assert rows[-1]["personal_loss"] == pytest.approx(float(f), rel=1e-12)


def test_aggregation_with_unit_weight_is_the_average():
    """eta lam / (n p) = 1, identity compressors: a communicating aggregation step sets every x_i to the
    average of the x_i exactly; a second aggregation step changes nothing."""
    x, y, idx = quadratic_problem()
    n, p = len(idx), 0.25
    lam = n * p / 1.0  # eta = 1
    rows, xs, _ = run(L2GD(p=p, lam=lam, coin_seed=1), x, y, idx, 40, lr=1.0)
    xi = coins(1, p, 40)
    switches = repeats = 0
    for k in range(40):
        if k > 0 and xi[k] and not xi[k - 1]:
            assert all(torch.equal(row, xs[k].mean(0)) for row in xs[k + 1])
            switches += 1
        elif xi[k] and k > 0:
            assert torch.equal(xs[k + 1], xs[k])
            repeats += 1
    assert switches >= 3 and repeats >= 1


class _ScheduledFedAvg(FedAvg):
    def __init__(self, steps):
        self.steps = steps

    def local_steps(self, k, own_steps, equal_steps):
        return self.steps[self.round]


def test_unit_weight_l2gd_is_fedavg_with_random_local_steps():
    """Section 7.2 / FIDELITY: with eta lam / (n p) = 1, L2GD is FedAvg whose round j runs the local
    steps L2GD took since its previous communication (step eta / (n (1 - p)))."""
    x, y, idx = quadratic_problem()
    n, p, K = len(idx), 0.5, 60
    rows, xs, _ = run(L2GD(p=p, lam=n * p, coin_seed=2), x, y, idx, K, lr=1.0)
    xi = coins(2, p, K)
    steps, since, after = [], 0, []
    for k in range(K):
        if xi[k] == 0:
            since += 1
        elif k > 0 and xi[k - 1] == 0:
            steps.append(since)
            after.append(xs[k + 1][0])
            since = 0
    trace = []
    run_convex(_ScheduledFedAvg(steps), x, y, idx, rounds=len(steps), local_steps=1, lr=1.0 / (n * (1 - p)),
               batch_size=FULL_BATCH, trace=trace)
    assert len(steps) >= 8 and max(steps) >= 2
    for theta, x_l2gd in zip(trace, after):
        assert torch.allclose(theta, x_l2gd, rtol=0, atol=1e-12)


def test_communication_only_on_local_to_aggregation_switches():
    """Natural compression both ways: the ledger records n uplink and n downlink messages (9 bits a
    coordinate each) exactly in the iterations where a local step is followed by an aggregation step,
    nothing otherwise; a repeated aggregation step uses the kept C_M(ybar), not the true average."""
    x, y, idx = quadratic_problem()
    n, d, p, lam, lr, K = len(idx), 3, 0.5, 1.0, 0.5, 80
    channel = Channel(Natural(), Natural(), num_clients=n, seed=0)
    rows, xs, xbars = run(L2GD(p=p, lam=lam, coin_seed=3), x, y, idx, K, lr, channel=channel)
    xi = coins(3, p, K)
    talk = [int(xi[k] == 1 and (k > 0 and xi[k - 1] == 0)) for k in range(K)]
    assert [r["up_messages"] for r in rows] == [n * s for s in talk]
    assert [r["down_messages"] for r in rows] == [n * s for s in talk]
    assert [r["up_wire_bits"] for r in rows] == [9 * d * n * s for s in talk]
    assert rows[-1]["cum_up_messages"] == n * sum(talk) and 10 <= sum(talk) <= 30
    a = lr * lam / (n * p)
    repeats = 0
    for k in range(1, K):
        if xi[k] and xi[k - 1]:
            assert xbars[k + 1] is xbars[k]  # no new average
            assert torch.allclose(xs[k + 1], torch.lerp(xs[k], xbars[k], a), rtol=0, atol=1e-14)
            assert not torch.allclose(xbars[k], xs[k].mean(0))  # compressed: not the exact mean
            repeats += 1
    assert repeats >= 5


def test_iterates_approach_the_personalized_optimum():
    """Strongly convex quadratic, uncompressed, full gradients: x* from the (nd x nd) linear system of
    problem (1). L2GD is SGD whose noise is the coin (its iterates at a constant step wander ~sqrt(eta)
    around x*), so eta decays as 0.996^k: after 1200 iterations ||x - x*|| <= 5 % of ||x*|| (measured
    0.4 % at coin seed 0, at most 5.4 % over seeds 0-5), while x* lies > 30 % of ||x*|| from both the
    consensus solution (lam -> inf) and the local solutions (lam = 0). personal_loss is f(x)."""
    x, y, idx = quadratic_problem()
    n, lam, p = len(idx), 1.0, 0.3
    opt = personalized_optimum(x, y, idx, lam)
    rows, xs, _ = run(L2GD(p=p, lam=lam, coin_seed=0), x, y, idx, 1200, lr=1.0, decay=0.996)
    scale = float(opt.norm())
    assert float((xs[-1] - opt).norm()) <= 0.05 * scale
    assert float((xs[0] - opt).norm()) == pytest.approx(scale)
    consensus, local = personalized_optimum(x, y, idx, 1e8), personalized_optimum(x, y, idx, 0.0)
    assert float((consensus - opt).norm()) > 0.3 * scale and float((local - opt).norm()) > 0.3 * scale
    H, b = hessians(x, y, idx)
    f = sum(0.5 * (x[i] @ xs[-1][k] - y[i]).pow(2).mean() for k, i in enumerate(idx)) / n
    assert rows[-1]["personal_loss"] == pytest.approx(float(f), rel=1e-12)


def test_checkpoint_resume_is_exact():
    """x, the kept average and the channel's memories are the state; the coins are a function of k."""
    x, y, idx = quadratic_problem()
    straight = L2GD(p=0.5, lam=1.0, coin_seed=4)
    make_loop(straight, x, y, idx, 40, 0.5).run(0, lambda r: None, lambda r: None, 10 ** 9)
    first = L2GD(p=0.5, lam=1.0, coin_seed=4)
    loop = make_loop(first, x, y, idx, 40, 0.5)
    for t in range(17):
        loop.run_round(t)
    state = loop.state_dict()
    second = L2GD(p=0.5, lam=1.0, coin_seed=4)
    resumed = make_loop(second, x, y, idx, 40, 0.5)
    resumed.load_state_dict(state)
    resumed.run(17, lambda r: None, lambda r: None, 10 ** 9)
    assert torch.equal(second.x, straight.x) and torch.equal(second.xbar, straight.xbar)


def test_personalized_metrics_by_hand():
    """Two clients, a logistic model: client 0 holds only class 0, client 1 half and half; the zero model
    predicts 0, so on its own test distribution client 0 scores 1, client 1 scores 1/2; the loss is log 2
    everywhere; f weights c_i and adds weight_decay/2 ||x_i||^2."""
    model = FlatModel(nn.Linear(2, 1), loss="logistic")
    x = torch.randn(8, 2)
    y = torch.tensor([0, 0, 0, 0, 0, 1, 0, 1])
    idx = [torch.arange(0, 4), torch.arange(4, 8)]
    x_test, y_test = torch.randn(10, 2), torch.tensor([0] * 7 + [1] * 3)
    models = torch.zeros(2, 3)  # (weight, weight, bias) of each client
    row = personalized_metrics(model, Personalized(models), x, y, idx, x_test, y_test)
    assert row["personal_test_acc"] == pytest.approx(0.75)
    assert row["personal_train_acc"] == pytest.approx((1.0 + 0.5) / 2)
    assert row["personal_loss"] == pytest.approx(math.log(2)) and row["personal_test_loss"] == pytest.approx(math.log(2))
    weights = torch.tensor([0.25, 0.75])
    row = personalized_metrics(model, Personalized(torch.zeros(2, 3), weights), x, y, idx, x_test, y_test,
                               weight_decay=0.5)
    assert row["personal_loss"] == pytest.approx((0.25 + 0.75) * math.log(2) / 2)
    w = torch.zeros(2, 3)
    w[:, 2] = 2.0  # the bias: logit 2 everywhere, predicts 1; ||x_i||^2 = 4
    row = personalized_metrics(model, Personalized(w), x, y, idx, x_test, y_test, weight_decay=0.5)
    assert row["personal_test_acc"] == pytest.approx((0.0 + 0.5) / 2)
    own = [torch.nn.functional.binary_cross_entropy_with_logits(torch.full((4,), 2.0), y[i].float()) for i in idx]
    assert row["personal_loss"] == pytest.approx(float(sum(own)) / 2 + 0.5 * 0.5 * 4)


def test_a_run_through_the_cli_config_records_personal_metrics(results):
    over = ["profile=smoke", "logger.progress=false", "algorithm=l2gd", "participation=p100", "train.num_clients=5",
            "model=logistic", "profile.max_rounds=8", "train.eval_every=4", "train.lr_decay=1", "compressor=natural",
            "compressor.downlink=natural", f"results_root={results}"]
    cfg = compose_config(over)
    r = run_experiment(cfg, quiet=True)
    frame = pd.read_csv(r.folder / "metrics.csv")
    last = frame.iloc[-1]
    assert r.summary["status"] == "finished"
    for col in ("personal_loss", "personal_test_acc", "personal_train_acc", "all_test_acc", "cum_up_wire_bits"):
        assert col in frame and math.isfinite(last[col])
    xi = coins(0, 0.65, 8)
    talk = sum(int(xi[k] == 1 and k > 0 and xi[k - 1] == 0) for k in range(8))
    assert talk >= 1  # seed 0: xi = 1 1 1 1 1 0 1 1, one communication (iteration 6)
    assert last["cum_up_messages"] == last["cum_down_messages"] == 5 * talk
    assert last["cum_up_wire_bits"] == 9 * r.summary["dim"] * 5 * talk
    assert bits_per_client(frame, 5).iloc[-1] == (9 + 9) * r.summary["dim"] * talk  # natural both ways
    assert build_algorithm(compose_config([*over, "seed=7"]).algorithm).coin_seed == 7


@pytest.mark.parametrize("override, words", [
    (["algorithm.p=0"], "algorithm.p=0"), (["algorithm.p=1.0"], "(0, 1)"), (["algorithm.lam=-1"], "lam"),
    (["algorithm.weighting=pooled"], "uniform, data"),
])
def test_config_errors(override, words):
    cfg = compose_config(["algorithm=l2gd", "participation=p100", *override])
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        validate(cfg)


def test_l2gd_needs_every_client():
    with pytest.raises(ConfigError, match="participation=p100"):
        validate(compose_config(["algorithm=l2gd", "participation=p10"]))
    validate(compose_config(["algorithm=l2gd", "participation=fixed10", "participation.cohort_size=100"]))
    assert entry("l2gd").choices["weighting"] == WEIGHTINGS


# -- optimal p ------------------------------------------------------------------------------------------

def test_optimal_p_on_hand_computed_values():
    # lam = 1, L = 6: lam^2 + 14 lam L + L^2 = 121, p_e = (7 + 6 - 11) / 6 = 1/3; there
    # L / (n (1 - p)) = 9 / n = (lam / n)(1 + 4 (1 - p) / p), the two branches of gamma meet.
    assert p_e(6, 1) == pytest.approx(1 / 3)
    assert p_e(1, 1) == pytest.approx(2 / 3)  # 1 + 14 + 1 = 16
    assert p_e(6, 1, "gamma_u") == pytest.approx(0.4) and p_e(6, 1, "uncompressed") == pytest.approx(1 / 7)
    # Theorem 3, n = 2, alpha = 96: a = alpha lam^2 / (2 n^2) = 12, b = L / n = 3, p_A = sqrt(12) / (sqrt(12) + sqrt(3)) = 2/3
    assert p_A_rate(6, 1, 2, 96) == pytest.approx(2 / 3)
    assert optimal_p(6, 1, 2, 96, "rate") == pytest.approx(2 / 3)
    assert optimal_p(6, 1, 2, 0.0, "rate") == pytest.approx(1 / 3)  # no compression: p_A = 0, p* = p_e
    # Theorem 4: p_A = 1 - L n / (alpha lam^2)
    assert p_A_communication(6, 1, 2, 96) == pytest.approx(7 / 8)
    assert optimal_p(6, 1, 2, 96, "communication") == pytest.approx(7 / 8)
    assert optimal_p(6, 1, 2, 24, "communication") == pytest.approx(1 / 2)
    assert optimal_p(6, 1, 2, 12, "communication") == pytest.approx(1 / 3)  # p_A = 0 < p_e
    assert optimal_p(6, 1, 2, 0.0, "communication") == pytest.approx(1 / 3)
    assert optimal_p(6, 1, 2, bound="uncompressed") == pytest.approx(1 / 7)
    # Lemma 5: alpha = 4 (4 omega + 4 omega_M (1 + omega)) / mu; natural at the clients only: 4 * 0.5 / mu
    assert compression_alpha(1 / 8, 0.0, 0.2) == pytest.approx(10.0)
    assert compression_alpha(1 / 8, 1 / 8, 1.0) == pytest.approx(4 * (0.5 + 0.5 * 9 / 8))
    assert optimal_p(1.0, 0.0, 5, 10.0) == 0.0  # lam -> 0: no communication (section 6)


def _lemma7_as_printed(L, lam, n, alpha):
    s = 2 * n * L - alpha * lam ** 2
    if s == 0:
        return 0.5
    sign = 1 if s > 0 else -1
    return (-2 * alpha * lam ** 2 + sign * 2 * lam * math.sqrt(2 * alpha * n * L)) / (2 * s)


@pytest.mark.parametrize("L, lam, n, alpha", [(6, 1, 2, 96), (6, 1, 2, 6), (2.5, 10, 5, 10), (8, 0.3, 10, 40),
                                              (1, 5, 3, 0.5), (3, 2, 4, 0.0), (6, 1, 2, 48)])
def test_optimal_p_minimizes_gamma_and_communication_on_a_grid(L, lam, n, alpha):
    """The theorems against their definitions: p* is the argmin of Lemma 6's gamma (Theorem 3) and of
    p (1 - p) gamma (Theorem 4) over a grid of 40 000 points, for each bound."""
    grid = [(i + 0.5) / 40_000 for i in range(40_000)]
    for bound in ("gamma", "gamma_u"):
        for criterion, cost in (("rate", gamma), ("communication", communication_cost)):
            best = min(grid, key=lambda q: cost(q, L, lam, n, alpha, bound))
            assert optimal_p(L, lam, n, alpha, criterion, bound) == pytest.approx(best, abs=5e-5), (criterion, bound)
    # Lemma 7 as printed: right when 2nL >= alpha lam^2; its third case is the root above 1
    printed = _lemma7_as_printed(L, lam, n, alpha) if alpha else 0.0
    if 2 * n * L >= alpha * lam ** 2:
        assert printed == pytest.approx(p_A_rate(L, lam, n, alpha))
    else:
        assert printed > 1


def test_optimal_p_beside_a_sweep(tmp_path, capsys):
    frame = pd.DataFrame({"lam": [1.0] * 3 + [10.0] * 3, "p": [0.2, 0.5, 0.8] * 2,
                          "personal_loss": [0.5, 0.4, 0.45, 0.6, 0.7, 0.3]})
    best = empirical_optimum(frame)
    assert best["empirical_p"].tolist() == [0.5, 0.8]
    table = compare_with_sweep(frame, L=6.0, n=2, alpha=96.0)
    assert table["lam"].tolist() == [1.0, 10.0]
    assert table["p_rate"][0] == pytest.approx(2 / 3) and table["p_communication"][0] == pytest.approx(7 / 8)
    path = tmp_path / "sweep.csv"
    frame.to_csv(path, index=False)
    main(["--L", "6", "--n", "2", "--alpha", "96", "--sweep", str(path)])
    out = capsys.readouterr().out
    assert "empirical_p" in out and "p_rate" in out and "0.6667" in out
    main(["--L", "6", "--lam", "1", "--n", "2", "--omega", "0.125", "--mu", "0.2"])
    assert "p*_rate=" in capsys.readouterr().out


def test_logistic_constants():
    a = [torch.eye(3), 2 * torch.eye(3)]  # lambda_max(A^T A) / (4 n_i) = 1/12, 4/12
    L, mu = logistic_constants(a, l2=1.0)
    assert L == pytest.approx(1 + 4 / 12) and mu == pytest.approx(0.5)
