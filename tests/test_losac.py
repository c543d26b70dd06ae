"""FedSaga, LoSAC, LoSAC-Prox, MimeSVRG and SCAFFOLD-Prox (LoSAC paper) against their update rules.

Problems: tests/convex.py's heterogeneous least squares (10 clients x 40 samples, d = 5,
||w*|| = 2.42), 20 local steps, lr 0.1, M = 5 blocks of 8 samples, float64 throughout.
"""
import pandas as pd
import pytest
import torch

from convex import least_squares_problem, run_convex
from fedrepro.algorithms import FedAvg
from fedrepro.algorithms.losac import SCALINGS, FedSaga, LoSAC, MimeSVRG
from fedrepro.algorithms.prox import PROX_KINDS, make_prox
from fedrepro.algorithms.scaffold import Scaffold
from fedrepro.algorithms.registry import entry
from fedrepro.config import compose_config, validate
from fedrepro.data.synthetic import load_lowrank
from fedrepro.engine.local import block_choices, block_partition
from fedrepro.errors import ConfigError
from fedrepro.run import Interrupted
from fedrepro.runner import run_experiment
from fedrepro.seeding import generator

STEPS, LR, M = 20, 0.1, 5
SMOKE = ["profile=smoke", "logger.progress=false", "model=logistic", "train.num_clients=20",
         "train.local_steps=5", "train.clip_norm=null", "train.weight_decay=0"]


@pytest.fixture(scope="module")
def problem():
    return least_squares_problem()


def grad_fn(x, y, idx):
    """b(k, positions, w): mean-loss gradient of client k's samples `positions` at w."""
    def b(k, positions, w):
        xb, yb = x[idx[k][positions]], y[idx[k][positions]]
        return xb.T @ (xb @ w - yb) / len(yb)
    return b


# -- convergence on the heterogeneous problem ------------------------------------------------
# 100 rounds, tolerance 1e-4; measured distances to w*: LoSAC 6e-14 (rate 1), 2.4e-6 (rate 0.5);
# FedSaga 2.19 / 4.04, FedAvg 1.80 / 3.73 (margin 0.5): they stall at the clients' drifted point.
ROUNDS = 100


@pytest.mark.parametrize("rate", [1.0, 0.5])
def test_losac_reaches_the_global_optimum(problem, rate):
    x, y, idx, optimum = problem
    w = run_convex(LoSAC(blocks=M), x, y, idx, rounds=ROUNDS, local_steps=STEPS, lr=LR, rate=rate)
    assert (w - optimum).norm() < 1e-4, float((w - optimum).norm())


@pytest.mark.parametrize("rate", [1.0, 0.5])
@pytest.mark.parametrize("make", [lambda: FedSaga(blocks=M), FedAvg], ids=["fedsaga", "fedavg"])
def test_fedsaga_and_fedavg_stall_at_a_biased_point(problem, make, rate):
    x, y, idx, optimum = problem
    w = run_convex(make(), x, y, idx, rounds=ROUNDS, local_steps=STEPS, lr=LR, rate=rate)
    assert (w - optimum).norm() > 0.5, float((w - optimum).norm())


def test_literal_losac_converges_with_a_fixed_cohort_and_stalls_under_bernoulli_sampling(problem):
    """Eqs. (11)/(13) as printed (block = component, n_i -> M): phi/N weighs the global term M^2
    times the mean gradient, so lr 0.002 (0.1 / M^2 diverges); 100 rounds. The server's
    phi += (N/|S|) sum_S Delta phi_i rescales phi; it does not extrapolate it. From the zero
    start only the sampled clients' tables change, so with a fixed cohort size |S| = S, phi is
    exactly (N/S) times the sum of all stored gradients. That is a constant factor, and literal
    LoSAC converges (measured below 1e-14 at full participation and 4e-11 with 5 of 10 clients a
    round). Under Bernoulli sampling |S| changes every round, so each round's changes get a
    different weight N/|S| and phi stops being proportional to the tables' sum. The iterates
    then settle where phi = 0, not where the tables' sum (N M^2 grad f) is 0. They stall 1.17
    from w* at rate 0.5, where |phi| is 5e-8 and |grad f| is 1.62. The random cohort size causes
    the stall; the N/S step does not."""
    x, y, idx, optimum = problem

    def literal(rate, sampling):
        w = run_convex(LoSAC(blocks=M, scaling="literal"), x, y, idx, rounds=ROUNDS, local_steps=STEPS,
                       lr=0.002, rate=rate, sampling=sampling)
        return float((w - optimum).norm())

    assert literal(1.0, "bernoulli") < 1e-8
    assert literal(0.5, "fixed") < 1e-8
    assert literal(0.5, "bernoulli") > 0.3



def test_literal_phi_is_the_table_sum_rescaled_with_a_fixed_cohort(problem):
    """The server's phi += (N/S) sum_S Delta phi_i from the zero start: with S = 5 of N = 10
    clients every round, phi is exactly 2 x the sum of every client's stored gradients."""
    x, y, idx, _ = problem
    alg = LoSAC(blocks=M, scaling="literal")
    run_convex(alg, x, y, idx, rounds=3, local_steps=STEPS, lr=0.002, rate=0.5, sampling="fixed")
    torch.testing.assert_close(alg.phi, (len(idx) / 5) * alg.y.sum((0, 1)), rtol=0, atol=1e-9)

# -- FedSaga with one client is SAGA -----------------------------------------------------------
@pytest.mark.parametrize("scaling", SCALINGS)
def test_fedsaga_with_one_client_is_saga(problem, scaling):
    """One client, every round: FedSaga = SAGA over the M blocks, its table kept across rounds
    (the literal form's direction is M times the consistent one: run it with lr / M)."""
    x, y, idx, _ = problem
    idx, rounds, steps, seed = idx[:1], 6, 7, 3
    lr = LR if scaling == "consistent" else LR / M
    trace = []
    run_convex(FedSaga(blocks=M, scaling=scaling), x, y, idx, rounds=rounds, local_steps=steps, lr=lr,
               seed=seed, trace=trace)
    b = grad_fn(x, y, idx)
    blocks = block_partition(len(idx[0]), M, seed, 0)
    w, table = torch.zeros(x.shape[1], dtype=torch.float64), torch.zeros(M, x.shape[1], dtype=torch.float64)
    for r in range(rounds):
        for j in block_choices(M, steps, generator(seed, "batches", r, 0)):
            g = b(0, blocks[j], w)
            w = w - LR * (g - table[j] + table.mean(0))  # SAGA: g_j(w) - y_j + mean(y)
            table[j] = g
        torch.testing.assert_close(trace[r], w, rtol=0, atol=1e-10)


# -- MimeSVRG ----------------------------------------------------------------------------------
def test_mimesvrg_direction_is_svrg_with_the_selected_clients_mean_gradient(problem):
    """One round, full participation, 3 local steps, by hand: c = mean_k grad f_k(x) and
    d = b_kj(w) - b_kj(x) + c on client k's fixed blocks."""
    x, y, idx, _ = problem
    steps, seed = 3, 1
    trace = []
    run_convex(MimeSVRG(blocks=M), x, y, idx, rounds=1, local_steps=steps, lr=LR, seed=seed, trace=trace)
    b = grad_fn(x, y, idx)
    x0 = torch.zeros(x.shape[1], dtype=torch.float64)
    full = [b(k, torch.arange(len(idx[k])), x0) for k in range(len(idx))]
    c = torch.stack(full).mean(0)
    models = []
    for k in range(len(idx)):
        blocks, w = block_partition(len(idx[k]), M, seed, k), x0.clone()
        for j in block_choices(M, steps, generator(seed, "batches", 0, k)):
            w = w - LR * (b(k, blocks[j], w) - b(k, blocks[j], x0) + c)
        models.append(w)
    torch.testing.assert_close(trace[0], torch.stack(models).mean(0), rtol=0, atol=1e-12)


def test_mimesvrg_is_exact_with_full_participation_and_fluctuates_without(problem):
    """60 rounds. Full participation: c is the exact global gradient at x, measured 1.6e-15.
    Rate 0.5: c is the sampled clients' mean, not zero at w*, 20 steps of lr 0.1 amplify it:
    measured 12.2 after 60 rounds, 2.4 .. 9.3 over rounds 146-150 (the paper's "large fluctuations")."""
    x, y, idx, optimum = problem
    full = run_convex(MimeSVRG(blocks=M), x, y, idx, rounds=60, local_steps=STEPS, lr=LR, rate=1.0)
    assert (full - optimum).norm() < 1e-8
    half = run_convex(MimeSVRG(blocks=M), x, y, idx, rounds=60, local_steps=STEPS, lr=LR, rate=0.5)
    assert (half - optimum).norm() > 0.5


def test_mimesvrg_sends_its_full_gradient_and_receives_the_correction(results):
    r = run_experiment(compose_config([*SMOKE, "algorithm=mimesvrg", f"results_root={results}"]), quiet=True)
    s = r.summary
    assert s["status"] == "finished"
    assert s["final"]["cum_up_messages"] == 2 * s["client_rounds"]  # full gradient, then the update
    assert s["final"]["cum_down_messages"] == 2 * s["client_rounds"]  # model, then c


# -- proximal variants -------------------------------------------------------------------------
def proximal_gradient(x, y, prox, lr, iters):
    """Centralized proximal gradient (ISTA) on (1/N) sum_k f_k + Psi, f_k the client's mean loss
    (equal client sizes here, so the objective is the pooled mean loss)."""
    hessian, rhs = x.T @ x / len(y), x.T @ y / len(y)
    w = torch.zeros(x.shape[1], dtype=torch.float64)
    for _ in range(iters):
        w = prox(w - lr * (hessian @ w - rhs), lr)
    return w


def test_losac_prox_l1_reaches_the_lasso_solution(problem):
    """LASSO with lambda = 1 (the ISTA solution, 3000 iterations, has 2 of 5 coordinates at 0).
    LoSAC-Prox, rate 0.5, 150 rounds: measured distance 1.2e-10 (tolerance 1e-6), the same support."""
    x, y, idx, _ = problem
    lam = 1.0
    solution = proximal_gradient(x, y, make_prox("l1", lam), 0.1, 3000)
    assert (solution == 0).sum() >= 1  # the regularizer is active
    w = run_convex(LoSAC(blocks=M, prox="l1", prox_weight=lam), x, y, idx, rounds=150, local_steps=STEPS,
                   lr=LR, rate=0.5)
    assert (w - solution).norm() < 1e-6, float((w - solution).norm())
    assert torch.equal(w == 0, solution == 0)


def test_losac_prox_nuclear_keeps_the_rank_low():
    """Matrix sensing (load_lowrank d = 8, rank 2, 10 clients x 30 samples: fewer samples than the
    64 unknowns per client). Nuclear prox, lambda = 0.5, rate 0.5, 150 rounds, lr 0.01: LoSAC-Prox
    reaches the centralized proximal-gradient solution (measured 2e-14, tolerance 1e-6) with its rank, 2
    (singular values > 1e-3, the paper's count); without the prox (30 rounds) the rank is 8."""
    data = load_lowrank(None, False, d=8, rank=2, num_clients=10, samples_per_client=30, test_samples=10)
    x, y = data.x_train.double(), data.y_train.double()
    idx = [torch.arange(k * 30, (k + 1) * 30) for k in range(10)]
    lam, lr, shape = 0.5, 0.01, (8, 8)
    solution = proximal_gradient(x, y, make_prox("nuclear", lam, shape), lr, 20000)

    def rank(w):
        return int((torch.linalg.svdvals(w.reshape(shape)) > 1e-3).sum())

    w = run_convex(LoSAC(blocks=M, prox="nuclear", prox_weight=lam, prox_shape=shape), x, y, idx,
                   rounds=150, local_steps=STEPS, lr=lr, rate=0.5)
    plain = run_convex(LoSAC(blocks=M), x, y, idx, rounds=30, local_steps=STEPS, lr=lr, rate=0.5)
    assert rank(solution) == 2 and rank(w) == 2 and rank(plain) == 8
    assert (w - solution).norm() < 1e-6, float((w - solution).norm())


def test_scaffold_prox_applies_the_prox_after_each_step_and_none_is_scaffold(problem):
    """prox=none is SCAFFOLD bit for bit; with l1 (lambda 1) and one client the server model is
    the client's last prox output, hence sparse. (On the LASSO above, 150 rounds: SCAFFOLD-Prox
    measured 5e-8 from the solution at rate 1, 1.6e-4 at rate 0.5, LoSAC-Prox 1e-9.)"""
    x, y, idx, _ = problem
    base = run_convex(Scaffold(), x, y, idx, rounds=5, local_steps=STEPS, lr=LR, rate=0.5)
    none = run_convex(Scaffold(prox=make_prox("none", 0.0)), x, y, idx, rounds=5, local_steps=STEPS, lr=LR, rate=0.5)
    assert torch.equal(base, none)
    sparse = run_convex(Scaffold(prox=make_prox("l1", 1.0)), x, y, idx[:1], rounds=2, local_steps=STEPS, lr=LR)
    assert (sparse == 0).any()


# -- state, checkpoints, config ----------------------------------------------------------------
def test_state_dict_holds_the_block_table_and_phi(problem):
    x, y, idx, _ = problem
    alg = LoSAC(blocks=M)
    run_convex(alg, x, y, idx, rounds=3, local_steps=STEPS, lr=LR, rate=0.5)
    state = alg.state_dict()
    assert set(state) == {"theta", "phi", "y"} and state["y"].shape == (10, M, 5)
    # phi is exactly the mean of every stored block gradient (the consistent reading's invariant)
    torch.testing.assert_close(state["phi"], state["y"].mean((0, 1)), rtol=0, atol=1e-12)
    assert alg.memory_bytes() == (10 * M * 5 + 2 * 5) * 8
    copy = LoSAC(blocks=M)
    copy.load_state_dict(state)
    assert all(torch.equal(copy.state_dict()[k], v) for k, v in state.items())
    assert copy.y.data_ptr() != alg.y.data_ptr()  # loaded state is not shared


@pytest.mark.parametrize("algorithm", ["losac", "fedsaga"])
def test_resume_from_a_checkpoint_equals_an_uninterrupted_run(tmp_path, algorithm):
    overrides = [*SMOKE, f"algorithm={algorithm}", "profile.max_rounds=5", "train.checkpoint_every=2",
                 "participation=p10"]
    clean = run_experiment(compose_config([*overrides, f"results_root={tmp_path / 'a'}"]), quiet=True)
    cfg = compose_config([*overrides, f"results_root={tmp_path / 'b'}"])
    with pytest.raises(Interrupted):
        run_experiment(cfg, interrupt_after=3, quiet=True)  # checkpoint of round 2: y and phi mid-run
    resumed = run_experiment(cfg, quiet=True)
    assert resumed.summary["resumed_from"] == 2
    assert torch.equal(torch.load(resumed.folder / "model.pt"), torch.load(clean.folder / "model.pt"))
    pd.testing.assert_frame_equal(pd.read_csv(resumed.folder / "metrics.csv"),
                                  pd.read_csv(clean.folder / "metrics.csv"))


def test_config_choices_and_validation():
    assert entry("losac").choices == {"scaling": SCALINGS, "prox": PROX_KINDS}
    for name in ("fedsaga", "losac", "losac_prox", "mimesvrg", "scaffold_prox"):
        validate(compose_config([f"algorithm={name}"]))
    assert "prox" not in compose_config(["algorithm=scaffold"]).algorithm  # SCAFFOLD's run keys unchanged
    for bad, match in ((["algorithm=losac", "algorithm.scaling=sum"], "scaling"),
                       (["algorithm=losac", "algorithm.prox=l2"], "prox"),
                       (["algorithm=losac", "algorithm.prox=nuclear"], "prox_shape"),
                       (["algorithm=fedsaga", "algorithm.blocks=0"], "blocks"),
                       (["algorithm=losac_prox", "algorithm.prox_weight=-1"], "prox_weight")):
        with pytest.raises(ConfigError, match=match):
            validate(compose_config(bad))
    with pytest.raises(ConfigError, match="blocks"):
        block_partition(3, 5, 0, 0)  # more blocks than samples
