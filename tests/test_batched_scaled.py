"""The batched executor's scaled path (fedrepro/engine/batched.py, `_train_scaled`): steps without
anchor terms (FedAvg, FedDyn, SCAFFOLD without its prox) with the update folded into the
weight-gradient products, against the sequential executor and against the batched executor's
per-step path (`sgd_step`). Same models and losses to float32 rounding."""
import pytest
import torch

from fedrepro.algorithms.base import LocalObjective
from fedrepro.engine import batched
from fedrepro.engine.batched import BatchedExecutor
from fedrepro.engine.local import ClientJob
from fedrepro.models.flat import FlatModel
from fedrepro.models.mlp import MLP
from test_executors import executors as executor_pair


def executors(model, clip, weight_decay=1e-3, **data):
    """The sequential and batched executors over the same small random data (test_executors')."""
    return executor_pair(model, clip_norm=clip, weight_decay=weight_decay, **data)


def jobs_without_anchor_terms(w0, d, linear: bool, equal_decay: bool, steps=(7, 3, 0, 11, 5, 9), seed=1):
    """FedDyn-like jobs (linear term, extra decay, a start point) or FedAvg-like ones; unequal step
    counts (23 samples, batch 5: partial last batches) and a client with no step."""
    g = torch.Generator().manual_seed(seed)
    jobs = []
    for k, n in enumerate(steps):
        start = w0 + 0.1 * torch.randn(d, generator=g) if k % 2 else None
        jobs.append(ClientJob(k, LocalObjective(
            anchor=w0, linear=0.05 * torch.randn(d, generator=g) if linear else None,
            extra_decay=0.02 if equal_decay else 0.02 * (k % 3), start=start), n))
    return jobs


def calls_to(monkeypatch, method: str):
    """A list that grows by one at each call of BatchedExecutor.<method> (which still runs)."""
    calls = []
    original = getattr(BatchedExecutor, method)

    def spy(self, *args):
        calls.append(1)
        return original(self, *args)

    monkeypatch.setattr(BatchedExecutor, method, spy)
    return calls


def assert_alone_as_together(fast, jobs, lr=0.5, round=2):
    """Asserts each job's model and loss are the same bit for bit trained alone as with all of
    `jobs`; returns the models trained together."""
    together, losses = fast.run(jobs, lr, round=round)
    for i, job in enumerate(jobs):
        alone, loss = fast.run([job], lr, round=round)
        assert torch.equal(alone[0], together[i]) and float(loss[0]) == float(losses[i]), i
    return together


@pytest.mark.parametrize("hidden,classes,loss", [([], 3, "cross_entropy"), ([], 1, "logistic"),
                                                 ([], 1, "squared"), ([16, 8], 3, "cross_entropy")])
@pytest.mark.parametrize("linear", [False, True])
@pytest.mark.parametrize("clip", [None, 1.0, 100.0])  # 1.0 binds at lr 0.5; 100 never does
@pytest.mark.parametrize("equal_decay", [True, False])  # one decay for all clients, or one each
def test_scaled_path_matches_the_sequential_executor(monkeypatch, hidden, classes, loss, linear, clip, equal_decay):
    torch.manual_seed(0)
    model = FlatModel(MLP(12, hidden, classes), loss=loss)
    w0 = model.flatten_module()
    seq, fast = executors(model, clip)
    jobs = jobs_without_anchor_terms(w0, model.dim, linear, equal_decay)
    calls = calls_to(monkeypatch, "_train_scaled")
    a, la = seq.run(jobs, 0.5, round=3)
    b, lb = fast.run(jobs, 0.5, round=3)
    assert calls, "the scaled path did not run"
    assert torch.allclose(a, b, atol=2e-5, rtol=0), float((a - b).abs().max())
    assert torch.allclose(la, lb, atol=2e-5), (la, lb)
    assert torch.equal(b[2], w0)  # no steps: the start point, untouched
    assert (a - w0).abs().max() > 0.1  # the steps did something the comparison can see


@pytest.mark.parametrize("clip", [None, 0.3, 1e6])
def test_scaled_path_matches_the_per_step_path(monkeypatch, clip):
    """Against the batched executor's own per-step path (data gradient + sgd_step), which it
    replaces for these objectives: many steps, a scale folded back in (decay 0.4 at lr 0.5)."""
    torch.manual_seed(0)
    model = FlatModel(MLP(12, [16], 3))
    w0 = model.flatten_module()
    _, fast = executors(model, clip, weight_decay=0.4)
    jobs = jobs_without_anchor_terms(w0, model.dim, linear=True, equal_decay=False, steps=(20, 13, 17, 20))
    a, la = fast.run(jobs, 0.5, round=1)
    monkeypatch.setattr(BatchedExecutor, "_scaled_path_serves", lambda *args: False)
    b, lb = fast.run(jobs, 0.5, round=1)
    assert torch.allclose(a, b, atol=2e-5, rtol=1e-5), float((a - b).abs().max())
    assert torch.allclose(la, lb, atol=2e-5)


def test_the_clipping_bound_takes_the_exact_norm_only_when_needed(monkeypatch):
    """Far below the clip the steps never form the whole gradient; at a binding clip they do,
    and the result is the sequential executor's."""
    torch.manual_seed(0)
    model = FlatModel(MLP(12, [16], 3))
    w0 = model.flatten_module()
    exact = calls_to(monkeypatch, "_exact_scale")
    for clip, expect_exact in ((1e3, False), (0.05, True)):
        exact.clear()
        seq, fast = executors(model, clip)
        jobs = jobs_without_anchor_terms(w0, model.dim, linear=True, equal_decay=True)
        a, _ = seq.run(jobs, 0.1, round=0)
        b, _ = fast.run(jobs, 0.1, round=0)
        assert bool(exact) == expect_exact
        assert torch.allclose(a, b, atol=2e-5, rtol=0), float((a - b).abs().max())


def test_scaled_path_keeps_a_divergence_visible():
    """A step size that blows the model up ends in non-finite values, as the sequential one."""
    torch.manual_seed(0)
    model = FlatModel(MLP(12, [16], 3))
    w0 = model.flatten_module() * 1e18
    _, fast = executors(model, None)
    jobs = [ClientJob(k, LocalObjective(anchor=w0), 9) for k in range(3)]
    models, losses = fast.run(jobs, 1e18, round=0)
    assert not (torch.isfinite(models).all() and torch.isfinite(losses).all())


def test_rescale_threshold_is_sane():
    assert 0 < batched._RESCALE_BELOW < 1


@pytest.mark.parametrize("seed", range(6))
def test_a_client_s_numbers_do_not_depend_on_the_clients_beside_it(seed):
    """Each client's model is the same bit for bit trained alone or beside others (as client
    sharding across processes needs), with unequal decays and step counts, a clip that binds for
    some clients only and scales folded back in."""
    torch.manual_seed(0)
    model = FlatModel(MLP(12, [16], 3))
    w0 = model.flatten_module()
    _, fast = executors(model, 0.4, weight_decay=0.4)
    jobs = jobs_without_anchor_terms(w0, model.dim, linear=True, equal_decay=False, steps=(20, 13, 0, 17, 20, 6),
                                     seed=seed)
    assert_alone_as_together(fast, jobs)


@pytest.mark.parametrize("clip", [None, 0.4])
def test_clients_smaller_than_a_batch_get_the_same_numbers_alone_or_beside_larger_ones(monkeypatch, clip):
    """Unequal clients (3 and 7 samples under batch 10, beside 40 and 25): each client's model and
    loss are the same bit for bit trained alone or with the others (the steps' rows are as many
    whatever the block). Shown on the scaled path: on this tiny model the per-step path's
    products differ with their output's alignment, which a client's place in the block changes
    (docs/performance.md, client sharding)."""
    torch.manual_seed(0)
    model = FlatModel(MLP(12, [16], 3))
    w0 = model.flatten_module()
    sizes = [3, 40, 7, 25]
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(sum(sizes), 12, generator=g), torch.randint(0, 3, (sum(sizes),), generator=g)
    ends = torch.tensor(sizes).cumsum(0).tolist()
    idx = [torch.arange(end - n, end) for n, end in zip(sizes, ends)]
    fast = BatchedExecutor(model, x, y, idx, batch_size=10, weight_decay=0.01, clip_norm=clip, seed=0)
    jobs = jobs_without_anchor_terms(w0, model.dim, linear=True, equal_decay=False, steps=(9, 12, 5, 8))
    calls = calls_to(monkeypatch, "_train_scaled")
    together = assert_alone_as_together(fast, jobs)
    assert calls, "the scaled path did not run"
    assert (together - w0).abs().max() > 0.1


@pytest.mark.parametrize("anchor_terms", [False, True])  # the scaled path; the per-step path (prox, l1)
def test_clients_in_blocks_give_the_same_numbers_bit_for_bit(anchor_terms):
    """`client_block`: the round's 6 clients (unequal steps, one with none) trained 1, 2 or 4 at a
    time (4: a last block of 2) give the models and losses of all 6 at once, bit for bit at one
    thread: each client's products and step are its own."""
    import dataclasses

    torch.manual_seed(0)
    model = FlatModel(MLP(12, [16, 8], 3))
    w0 = model.flatten_module()
    _, fast = executors(model, 1.0)
    jobs = jobs_without_anchor_terms(w0, model.dim, linear=True, equal_decay=False)
    if anchor_terms:
        jobs = [ClientJob(j.client, dataclasses.replace(j.objective, prox_mu=0.1, l1=1e-3), j.steps) for j in jobs]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fast.client_block = len(jobs)
        a, la = fast.run(jobs, 0.5, round=3)
        assert (a - w0).abs().max() > 0.1
        for block in (1, 2, 4):
            fast.client_block = block
            b, lb = fast.run(jobs, 0.5, round=3)
            assert torch.equal(a, b) and torch.equal(la, lb), (block, float((a - b).abs().max()))
    finally:
        torch.set_num_threads(threads)


def test_client_blocks_keep_two_mnist_mlps_at_one_cpu_thread_and_all_clients_otherwise(monkeypatch):
    mnist_mlp = FlatModel(MLP(784, [200, 200], 10)).dim  # 199 210 parameters, 0.8 MB in float32
    assert batched.client_block(mnist_mlp, 4, "cpu", threads=1) == 2
    assert batched.client_block(mnist_mlp, 4, "cpu", threads=2) is None
    assert batched.client_block(mnist_mlp, 4, "cuda", threads=1) is None
    assert batched.client_block(10 * mnist_mlp, 4, "cpu", threads=1) == 1  # never none
    assert batched.client_block(124, 4, "cpu", threads=1) > 1000  # logistic regression: a round at once
    # the executor asks at the threads it runs at: 2 MNIST MLPs a block at one thread
    model = FlatModel(MLP(784, [200, 200], 10))
    _, fast = executors(model, 1.0, n_clients=5, features=784, classes=10)
    widths = []
    monkeypatch.setattr(BatchedExecutor, "_train_block",
                        lambda self, jobs, lr, round: (widths.append(len(jobs)) or
                                                       (torch.zeros(len(jobs), model.dim), torch.zeros(len(jobs)))))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        w0 = model.flatten_module()
        fast.run([ClientJob(k, LocalObjective(anchor=w0), 3) for k in range(5)], 0.1, round=0)
    finally:
        torch.set_num_threads(threads)
    assert widths == [2, 2, 1]
