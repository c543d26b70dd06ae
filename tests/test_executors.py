"""The batched executor against the sequential one, `executor=auto`, and client sharding across
processes (fedrepro/engine/batched.py, sharded.py). Speed is measured by `make bench`, not here."""
import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from conftest import torch_threads
from fedrepro.algorithms.base import LocalObjective, LocalRule
from fedrepro.config import compose_config, resolved_executor, run_key, validate
from fedrepro.engine import fused
from fedrepro.engine.batched import BatchedExecutor
from fedrepro.engine.local import ClientJob, SequentialExecutor, batch_schedule, schedule_rows
from fedrepro.engine.sharded import shares
from fedrepro.errors import ConfigError
from fedrepro.models.flat import FlatModel, build_model
from fedrepro.models.mlp import MLP
from fedrepro.runner import run_experiment
from fedrepro.seeding import generator

SMOKE = ["profile=smoke", "logger.progress=false"]
# The four algorithms of the equality goal.
ALGORITHMS = {"fedavg": [], "scaffold": ["algorithm=scaffold"], "feddyn": ["algorithm=feddyn"],
              "fen_alg3": ["algorithm=fen_alg3", "algorithm.lambda1=1e-4", "algorithm.epsilon=1e-4"]}


def executors(model, n_clients=6, n=23, features=12, classes=3, seed=0, **kw):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_clients * n, features, generator=g)
    y = torch.randint(0, classes, (n_clients * n,), generator=g)
    if model.loss_kind == "logistic":
        y = y % 2
    if model.loss_kind == "squared":
        y = torch.randn(n_clients * n, generator=g)
    idx = [torch.arange(k * n, (k + 1) * n) for k in range(n_clients)]
    args = dict(batch_size=kw.get("batch_size", 5), weight_decay=kw.get("weight_decay", 1e-3), clip_norm=kw.get("clip_norm", 1.0), seed=seed)
    return SequentialExecutor(model, x, y, idx, **args), BatchedExecutor(model, x, y, idx, **args)


def mixed_jobs(w0, d, seed=1):
    """Jobs with every term of LocalObjective and unequal step counts (23 samples, batch 5:
    partial last batches)."""
    g = torch.Generator().manual_seed(seed)
    jobs = []
    for k, steps in enumerate([7, 3, 0, 11, 5, 9]):
        start = w0 + 0.1 * torch.randn(d, generator=g) if k % 2 else None
        jobs.append(ClientJob(k, LocalObjective(anchor=w0, prox_mu=0.3, l1=0.01, extra_decay=0.02 * (k % 3),
                                                linear=0.05 * torch.randn(d, generator=g), start=start), steps))
    return jobs


@pytest.mark.parametrize("hidden,classes,loss", [([], 3, "cross_entropy"), ([], 1, "logistic"),
                                                 ([], 1, "squared"), ([16, 8], 3, "cross_entropy")])
def test_batched_steps_match_the_sequential_ones(hidden, classes, loss):
    """Every LocalObjective term, clipping (lr 0.5 makes it bind), weight decay, unequal step
    counts, partial batches and a client with no step: the same models and mean losses to
    float32 rounding (2e-5) for logistic regression and for a ReLU MLP on these seeds."""
    torch.manual_seed(0)
    model = FlatModel(MLP(12, hidden, classes), loss=loss)
    w0 = model.flatten_module()
    seq, fast = executors(model)
    jobs = mixed_jobs(w0, model.dim)
    a, la = seq.run(jobs, 0.5, round=3)
    b, lb = fast.run(jobs, 0.5, round=3)
    assert torch.allclose(a, b, atol=2e-5, rtol=0), float((a - b).abs().max())
    assert torch.allclose(la, lb, atol=2e-5), (la, lb)
    assert torch.equal(b[2], w0)  # no steps: the start point, untouched
    moved = (a - w0).abs().max()
    assert moved > 0.1  # the steps did something the comparison can see


@pytest.mark.parametrize("terms", ["none", "anchors", "linear", "all"])
@pytest.mark.parametrize("clip", [None, "binding"])
def test_fused_step_is_the_torch_step(terms, clip):
    """The numba kernel (2 passes, chunked norm) against the torch form of the same step, on
    d spanning several chunks, a client with coef 0 (past its last step: w untouched) and a
    clip that binds for some clients only."""
    assert fused._kernels() is not None  # numba is a dependency: the CPU path must be the kernel
    g = torch.Generator().manual_seed(0)
    s, d = 5, 2 * fused._CHUNK + 123
    w = torch.randn(s, d, generator=g)
    grad = torch.randn(s, d, generator=g) * torch.tensor([0.001, 0.01, 1.0, 0.02, 5.0])[:, None]
    anchors = w + 0.1 * torch.randn(s, d, generator=g) if terms in ("anchors", "all") else None
    linear = 0.05 * torch.randn(s, d, generator=g) if terms in ("linear", "all") else None
    per = dict(coef=torch.tensor([0.1, 0.0, 0.2, 0.3, 0.1]), decay=torch.tensor([1e-3, 1e-3, 0.0, 0.5, 2e-2]),
               mu=torch.tensor([0.3, 0.0, 0.1, 1.0, 0.0]), l1=torch.tensor([0.01, 0.0, 0.0, 1e-4, 0.02]))
    if clip is not None:  # a clip between the clients' total-gradient norms: it binds for some only
        total = grad.clone()
        fused.torch_sgd_step(w.clone(), total, anchors=anchors, linear=linear, clip=None, **per)
        norms = total.norm(dim=1)
        clip = float((norms.min() * norms.max()).sqrt())
        assert bool((norms > clip).any() and (norms < clip).any()), norms
    w_ref, grad_ref = w.clone(), grad.clone()
    fused.torch_sgd_step(w_ref, grad_ref, anchors=anchors, linear=linear, clip=clip, **per)
    fused.sgd_step(w, grad, anchors=anchors, linear=linear, clip=clip, **per)
    assert torch.allclose(w, w_ref, atol=1e-6, rtol=1e-6), float((w - w_ref).abs().max())
    assert torch.equal(w[1], w_ref[1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])  # the numba kernel; the torch form
def test_layer_bound_is_its_definition(dtype):
    """add_layer_bound adds (sum_b ||dz_b|| sqrt(||h_b||^2 + 1))^2 per client, from h or from the
    given row norms, on a transposed (non-contiguous) dz as the last layer's is; and it bounds the
    norm of the layer's [weight | bias] gradient dz^T [h | 1]."""
    g = torch.Generator().manual_seed(0)
    dz = (torch.randn(4, 10, 7, generator=g, dtype=dtype) * torch.tensor([1e-3, 1.0, 0.0, 30.0], dtype=dtype)[:, None, None])
    dz = dz.transpose(1, 2)  # (clients 4, batch 7, out 10), stored as its transpose
    h = torch.rand(4, 7, 5, generator=g, dtype=dtype)
    h_norms = torch.sqrt(h.square().sum(2) + 1)
    expected = ((dz.square().sum(2).sqrt() * h_norms).sum(1) ** 2).to(torch.float64)
    start = np.array([0.5, 0.0, 2.0, 1.0])
    for kwargs in (dict(h=h), dict(h_norms=h_norms)):
        acc = start.copy()
        fused.add_layer_bound(acc, dz, **kwargs)
        assert np.allclose(acc - start, expected.numpy(), rtol=1e-5, atol=0), (acc - start, expected)
    gradient = torch.cat([dz.transpose(1, 2) @ h, dz.sum(1).unsqueeze(2)], dim=2)  # dz^T [h | 1]
    assert bool((gradient.square().sum((1, 2)) <= expected * (1 + 1e-5)).all())


def test_fused_step_keeps_a_divergence_visible():
    """No fast-math assumption of finite values: a NaN or inf gradient leaves NaN / inf in w."""
    w, grad = torch.zeros(2, 1000), torch.ones(2, 1000)
    grad[0, 7], grad[1, 3] = float("nan"), float("inf")
    z = torch.zeros(2)
    fused.sgd_step(w, grad, torch.full((2,), 0.1), decay=z, mu=z, l1=z, anchors=None, linear=None, clip=None)
    assert torch.isnan(w[0, 7]) and torch.isinf(w[1, 3])


def test_fused_step_leaves_torch_threads_alone():
    """numba's OpenMP layer shares torch's runtime, and starting its threads sets OpenMP's count
    to all cores: torch's thread count must come back (sharded processes and joblib workers run
    with fewer threads than cores). In a fresh interpreter, where the threads start."""
    import subprocess
    import sys

    code = ("import torch; torch.set_num_threads(1); from fedrepro.engine import fused; z = torch.zeros(2)\n"
            "for _ in range(2):\n"
            "    fused.sgd_step(torch.zeros(2, 5000), torch.ones(2, 5000), torch.full((2,), 0.1), decay=z, mu=z,"
            " l1=z, anchors=None, linear=None, clip=1.0); print(torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "1"], out.stdout


def test_batch_schedule_is_the_sequential_one():
    idx = torch.arange(100, 147)
    for steps in (0, 1, 9, 10, 23):
        rows = schedule_rows(idx, 5, steps, generator(3, "batches", 2, 7))
        ref = batch_schedule(len(idx), 5, steps, generator(3, "batches", 2, 7), "cpu")
        assert rows.shape == (steps, 5)
        for r, positions in zip(rows, ref):
            assert torch.equal(r[r >= 0], idx[positions])


def test_a_batch_larger_than_the_data_is_the_data_unpadded():
    """Full-batch steps (L2GD's batch_size = 1e6): each step is the client's n rows, one
    permutation per epoch, no padding to B, and the batched executor's steps are the sequential
    ones (its rows once padded to B: GBs and minutes a run)."""
    idx = torch.arange(100, 123)
    rows = schedule_rows(idx, 10**6, 4, generator(3, "batches", 2, 7))
    assert rows.shape == (4, 23) and all(torch.equal(r.sort().values, idx) for r in rows)
    torch.manual_seed(0)
    model = FlatModel(MLP(12, [], 1), loss="logistic")
    w0 = model.flatten_module()
    seq, fast = executors(model, batch_size=10**6)
    jobs = mixed_jobs(w0, model.dim)
    a, la = seq.run(jobs, 0.5, round=3)
    b, lb = fast.run(jobs, 0.5, round=3)
    assert torch.allclose(a, b, atol=2e-5, rtol=0) and torch.allclose(la, lb, atol=2e-5)
    assert (a - w0).abs().max() > 0.1


class Doubling(LocalRule):
    def direction(self, step, block, w, g, grad_at):
        return 2 * g


def test_jobs_with_a_rule_take_the_sequential_path_bit_for_bit():
    model = FlatModel(MLP(12, [8], 3))
    w0 = model.flatten_module()
    seq, fast = executors(model)
    jobs = [ClientJob(k, LocalObjective(anchor=w0, rule=Doubling() if k % 2 else None), 4) for k in range(4)]
    a, _ = seq.run(jobs, 0.1, 0)
    b, _ = fast.run(jobs, 0.1, 0)
    assert torch.equal(a[1], b[1]) and torch.equal(a[3], b[3])
    assert torch.allclose(a, b, atol=1e-6)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_batched_and_sequential_runs_end_alike(name, tmp_path):
    """The run-level equality goal (smoke profile, MNIST MLP, seed 0): final server accuracy
    within 0.5 point and losses within 1e-3 relative. Not bit for bit: a ReLU whose input is
    within float rounding of 0 can switch (docs/performance.md)."""
    finals = {}
    for ex in ("sequential", "batched"):
        r = run_experiment(compose_config([*SMOKE, *ALGORITHMS[name], f"train.executor={ex}",
                                           f"results_root={tmp_path}"]), quiet=True)
        assert r.summary["executor"] == {"sequential": "SequentialExecutor", "batched": "BatchedExecutor"}[ex]
        finals[ex] = r.summary["final"]
    s, b = finals["sequential"], finals["batched"]
    assert abs(s["server_test_acc"] - b["server_test_acc"]) <= 0.005
    for key in ("server_test_loss", "all_train_loss", "local_loss"):
        assert b[key] == pytest.approx(s[key], rel=1e-3), key


def test_logistic_runs_agree_to_float_rounding(tmp_path):
    finals = [run_experiment(compose_config([*SMOKE, "model=logistic", "algorithm=scaffold",
                                             f"train.executor={ex}", f"results_root={tmp_path}"]),
                             quiet=True).summary["final"] for ex in ("sequential", "batched")]
    for key in ("server_test_loss", "server_train_loss", "local_loss"):
        assert finals[1][key] == pytest.approx(finals[0][key], rel=1e-5), key
    assert finals[1]["server_test_acc"] == finals[0]["server_test_acc"]


def test_auto_picks_batched_only_where_it_serves():
    assert resolved_executor(compose_config([])) == "batched"  # MNIST MLP
    assert resolved_executor(compose_config(["model=logistic"])) == "batched"
    assert resolved_executor(compose_config(["algorithm=losac"])) == "sequential"  # a LocalRule per step
    assert resolved_executor(compose_config(["dataset=cifar10", "model=cnn_cifar"])) == "sequential"
    # auto's sequential runs keep their key; batched runs get their own
    assert run_key(compose_config(["algorithm=losac"])) == run_key(
        compose_config(["algorithm=losac", "train.executor=sequential"]))
    assert run_key(compose_config([])) != run_key(compose_config(["train.executor=sequential"]))
    with pytest.raises(ConfigError, match="train.executor=batched trains"):
        validate(compose_config(["dataset=cifar10", "model=cnn_cifar", "train.executor=batched"]))
    with pytest.raises(ConfigError, match="ReLU MLPs"):
        cnn, _ = build_model(OmegaConf.create({"name": "cnn_cifar", "hidden": []}), (3, 32, 32), 10, seed=0)
        BatchedExecutor(cnn, torch.zeros(2, 3, 32, 32), torch.zeros(2, dtype=torch.long), [torch.arange(2)],
                        batch_size=2, weight_decay=0, clip_norm=None, seed=0)


def test_shares_cover_every_job_once():
    for n, ranks in [(10, 2), (7, 3), (1, 2), (0, 2)]:
        parts = shares(n, ranks)
        assert [i for p in parts for i in p] == list(range(n))
        assert max(map(len, parts)) - min(map(len, parts)) <= 1


@pytest.mark.parametrize("executor", ["sequential", "batched"])
def test_two_processes_give_the_one_process_numbers_bit_for_bit(executor, tmp_path):
    """train.processes=2 (Fabric ddp_spawn, gloo): the round's clients split across two ranks,
    the models gathered; every logged number equals the one-process run at the same threads
    per process (1), and the run key does not change."""
    with torch_threads(1):
        frames, keys = [], []
        for p in (1, 2):
            cfg = compose_config([*SMOKE, "algorithm=scaffold", f"train.executor={executor}",
                                  f"train.processes={p}", f"results_root={tmp_path / str(p)}"])
            r = run_experiment(cfg, quiet=True)
            assert r.summary["processes"] == p and r.summary["status"] == "finished"
            frames.append(pd.read_csv(r.folder / "metrics.csv"))
            keys.append(r.key)
    assert keys[0] == keys[1]
    pd.testing.assert_frame_equal(frames[0], frames[1], check_exact=True)


def test_client_state_is_stated_and_refused_beyond_free_memory(monkeypatch, caplog):
    import fedrepro.run as run

    caplog.set_level("INFO", logger="fedrepro")

    cfg = compose_config(["algorithm=losac"])
    # LoSAC's 1 000-client MNIST, M = 5: 5 stored block gradients + the latest model per client
    need = run.check_memory(cfg, 1000 * 5 * 199210 * 4, 1000, 199210, quiet=False)
    assert need == 1000 * 6 * 199210 * 4
    assert "losac holds 4.45 GiB" in caplog.text
    monkeypatch.setattr(run, "_available_memory", lambda: 2 ** 32)  # 4 GiB free
    with pytest.raises(ConfigError, match="fewer algorithm.blocks"):
        run.check_memory(cfg, 1000 * 5 * 199210 * 4, 1000, 199210, quiet=True)


def test_free_memory_counts_the_page_cache_the_kernel_gives_back(tmp_path):
    """MemAvailable, not MemFree: cached files do not refuse a run."""
    import fedrepro.run as run

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24683904 kB\nMemFree:         2726304 kB\n"
                       "MemAvailable:   20420000 kB\nBuffers:          102400 kB\n")
    assert run._available_memory(str(meminfo)) == 20420000 * 1024
    assert run._available_memory(str(tmp_path / "absent")) is not None  # free pages instead


def test_bench_writes_its_table(tmp_path, monkeypatch):
    """`make bench`'s script end to end on the smallest workload (speed is not asserted here)."""
    from experiments import bench

    monkeypatch.delenv("FEDREPRO_DATA_ROOT", raising=False)  # generated a1a-shaped data
    assert bench.main(["--profile", "smoke", "--only", "a1a_logistic", "--out", str(tmp_path)]) == 0
    frame = pd.read_csv(tmp_path / "bench.csv")
    assert list(frame.method) == ["dataloader", "sequential", "fast", "products_only"]
    assert list(frame.executor) == ["dataloader", "sequential", "batched", "bmm alone"]
    assert (frame.client_steps_per_s > 0).all() and (frame.step_mflop > 0).all()
    assert "vs sequential" in (tmp_path / "bench.md").read_text()
    evals = pd.read_csv(tmp_path / "bench_eval.csv")
    assert list(evals.eval_batch) == list(bench.EVAL_BATCHES) and (evals.samples_per_s > 0).all()
    assert evals.used.sum() == 1  # the model's own eval batch is among those timed
    # --ratio-to: this run beside another machine's bench.csv (here, itself: every ratio 1.00x)
    assert bench.main(["--profile", "smoke", "--only", "a1a_logistic", "--out", str(tmp_path / "again"),
                       "--ratio-to", str(tmp_path / "bench.csv")]) == 0
    table = (tmp_path / "again" / "bench.md").read_text().split("baseline (")[1]
    assert table.count("x |") == 4 and "a1a_logistic | fast" in table


def test_bench_ratio_table_divides_rates_and_inverts_seconds():
    """The GPU rows' ratio to this machine (`--ratio-to`): rates over the baseline's, seconds a
    round the other way round, rounds matched at equal threads, rows the baseline lacks left out."""
    from experiments.bench import ratio_markdown

    ours = pd.DataFrame([{"workload": "w", "method": "fast", "client_steps_per_s": 300.0, "device": "GPU"},
                         {"workload": "w", "method": "only_here", "client_steps_per_s": 1.0, "device": "GPU"},
                         {"workload": "r", "method": "round_fedrepro", "threads": 1, "seconds_per_round": 0.5,
                          "device": "GPU"}])
    base = pd.DataFrame([{"workload": "w", "method": "fast", "client_steps_per_s": 100.0, "threads": 2,
                          "date": "d", "seconds_per_round": None},
                         {"workload": "r", "method": "round_fedrepro", "client_steps_per_s": 1.0, "threads": 2,
                          "date": "d", "seconds_per_round": 9.0},
                         {"workload": "r", "method": "round_fedrepro", "client_steps_per_s": 1.0, "threads": 1,
                          "date": "d", "seconds_per_round": 2.0}])
    table = ratio_markdown(ours, base)
    assert "3.00x" in table and "4.00x" in table and "only_here" not in table and "18.00x" not in table


def test_bench_times_the_ledger_s_two_paths_on_equal_metrics():
    """`make bench`'s ledger line: both paths timed (speed not asserted); it refuses to time paths
    whose metrics differ."""
    from unittest import mock

    from experiments import bench
    from fedrepro.metrics import ledger as lg

    row = bench.ledger_row(0.05, dim=2_000, clients=3, repeats=1)
    assert row["one_pass"] > 0 and row["torch_path"] > 0 and row["speedup"] > 0
    count = lg._count_bins
    with mock.patch.object(lg, "_count_bins", lambda v, w: (lambda c: (c[0], c[1], c[2], c[3] + 1) if c else c)(count(v, w))):
        with pytest.raises(AssertionError, match="disagree"):
            bench.ledger_row(0.05, dim=2_000, clients=3, repeats=1)


@pytest.mark.parametrize("name", ["cnn_cifar", "resnet18_gn"])
def test_channels_last_is_the_same_function(name):
    """Conv models take 4-D inputs in channels-last layout on the CPU (the fast sequential path):
    loss and flat gradient equal the NCHW ones to float rounding."""
    model, w0 = build_model(OmegaConf.create({"name": name, "hidden": []}), (3, 32, 32), 10, seed=0)
    assert model.channels_last
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(8, 3, 32, 32, generator=g), torch.randint(0, 10, (8,), generator=g)
    conv = next(m for m in model.module.modules() if isinstance(m, torch.nn.Conv2d))
    seen = []
    conv.register_forward_pre_hook(lambda m, args: seen.append(
        args[0].is_contiguous(memory_format=torch.channels_last)))
    grads = {}
    for layout in (True, False):
        model.channels_last = layout
        w = w0.clone().requires_grad_(True)
        loss = model.loss(w, x, y)
        grads[layout] = (loss.detach(), torch.autograd.grad(loss, w)[0])
    assert seen == [True, False]  # the first convolution saw each layout
    assert torch.allclose(grads[True][0], grads[False][0], rtol=1e-5)
    assert torch.allclose(grads[True][1], grads[False][1], atol=1e-5, rtol=1e-4), \
        float((grads[True][1] - grads[False][1]).abs().max())
    assert not build_model(OmegaConf.create({"name": "mlp", "hidden": [8]}), (4,), 3, seed=0)[0].channels_last


def test_the_bench_s_lstm_written_out_for_all_clients_is_nn_lstm():
    """The LSTM `make bench` times against the oneDNN one (clients as batched matrix products)
    computes each client's nn.LSTM loss and gradient, so the two rates compare like with like."""
    from experiments import bench

    g = torch.Generator().manual_seed(0)
    s, b, t_len = 3, 4, 7
    x, y = torch.randint(0, 80, (s * b, t_len), generator=g), torch.randint(0, 80, (s * b,), generator=g)
    y[-1] = 79  # the model's vocabulary is the number of classes seen
    w = bench.Workload("lstm", {"name": "lstm", "hidden": []}, x, y, s, b, b, 1.0, "generated")
    model, w0, _ = w.build()
    clients = [w0 + 0.1 * torch.randn(w0.shape, generator=g) for _ in range(s)]
    stacked = {n: torch.stack([model.unflatten(c)[n] for c in clients]).requires_grad_(True) for n in model.names}
    loss = bench.lstm_clients_batched_loss(model, stacked, x.reshape(s, b, t_len), y.reshape(s, b))
    grads = dict(zip(stacked, torch.autograd.grad(loss, list(stacked.values()))))
    for k, c in enumerate(clients):
        c = c.clone().requires_grad_(True)
        own = model.loss(c, x[k * b:(k + 1) * b], y[k * b:(k + 1) * b])
        (own_grad,) = torch.autograd.grad(own, c)
        ours = torch.cat([grads[n][k].reshape(-1) for n in model.names])
        torch.testing.assert_close(ours, own_grad, rtol=1e-4, atol=1e-6)
    per_client = [model.loss(c, x[k * b:(k + 1) * b], y[k * b:(k + 1) * b]) for k, c in enumerate(clients)]
    torch.testing.assert_close(loss, torch.stack(per_client).sum(), rtol=1e-5, atol=1e-6)
