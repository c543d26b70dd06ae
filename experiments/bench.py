"""`make bench`: local-training throughput of every path, side by side on this machine.

    python -m experiments.bench [--profile quick|paper] [--seconds 3] [--out results/bench]

Measured in one process, one after the other, each for about `--seconds`:

- matmul: a 2048 x 2048 float32 product (the machine's rate at this process's threads);
- dataloader: what users would otherwise run: an nn.Module, torch.optim.SGD, clip_grad_norm_
  and one torch DataLoader (shuffle, batch B) per client, clients one after another; the CIFAR
  CNN as FedDyn's code writes it (ReLU before each pool; ours pools first, the same numbers);
- sequential: our reference executor (engine/local.py; the CNN in the plain NCHW layout);
- fast: what a run gets (`executor=auto`'s pick: the batched executor for MLPs and logistic
  regression, the sequential one for the CNN, in channels-last, and for the LSTM; on the CPU the
  sequential one trains as many clients at once as torch has threads, `train.client_threads`);
- one_client_at_a_time (the CNN at 2+ threads): the fast path with `train.client_threads=1`,
  each client on all of torch's threads (the LSTM's is its sequential row);
- sharded2: the fast executor sharded over 2 processes (each with half the threads);
- products_only (batched workloads): the batched step's matrix products alone at their shapes,
  the ceiling of any executor built on them;
- aten_lstm, clients_batched (the LSTM): the sequential executor with torch's own LSTM kernels
  instead of oneDNN's, and the LSTM written out for all clients at once (per-client weights as
  batched matrix products, autograd): the alternatives to the oneDNN LSTM one client at a time.

Workloads: (a) MNIST's MLP 784-200-200-10, 100 clients of 600 samples, batch 50, at 10 % and
100 % participation; (b) the CIFAR CNN on generated CIFAR-shaped data (100 clients of 100
samples, 10 %); (c) the Shakespeare LSTM on generated character sequences (10 clients of 200
sequences); (d) logistic regression on LIBSVM a1a (from FEDREPRO_DATA_ROOT, generated a1a-shaped
data when absent), 10 clients, batch 50. One "round" gives each selected client one epoch.

Evaluation: `engine.evaluate.evaluate` (forward only, the server model on held-out samples) in
samples/s at eval batches of 100 to 10 000, per model, and the batch each model evaluates with
(`FlatModel.eval_batch`); written to <out>/bench_eval.csv.

FLOPs of one client step are counted by torch.utils.flop_counter on a sequential step (the
forward and backward matrix products the step computes; the LSTM's gate products, which it does
not see, are added as 3 x 2 x batch x length x gate weights), so GFLOP/s and the fraction of the
matmul rate compare like with like. Writes <out>/bench.csv and bench.md. With --profile paper
it also projects the wall time of FedElasticNet Table 2's MNIST rows on the fast path.

Paper-setting rounds (experiments/bench_round.py): `--rounds` rounds (default 5) of FedDyn's
MNIST setting for FedDyn and FedAvg at 1 and 2 threads, each time a reference loop written like
the papers' code (DataLoader over a TensorDataset, nn.Module, torch.optim.SGD with weight decay,
clipping, FedDyn's penalty over the parameter list each step, two models evaluated on the full
test and training sets a round) and fedrepro (`profile=paper`, `executor=auto`) on the same
data, split, clients and batches, their rounds interleaved: rows `round_reference` and
`round_fedrepro` of bench.csv (`seconds_per_round`, `speedup` = reference / fedrepro, the shares of
a round's time) and a table in bench.md.
`--only rounds` runs this part alone (`--only rounds,mnist_mlp_p10` with that workload).

On a GPU (`--device cuda`; experiments/bench_gpu.sh runs it on a lent machine): the same rows
with data, models and training on the GPU (the plain loop keeps its data on the host and moves
each batch, as the papers' code does), the clock read after a synchronization; no 2-process or
ledger rows. `--ratio-to docs/measured/bench.csv` adds a table of the run beside that machine's.

Client blocks (`--only blocks`): the batched executor at one thread on 100 clients of batch 10,
its clients in `client_block` blocks against all at once, in turns, on the scaled path and on the
per-step path (FedProx's prox term): `bench_blocks.csv`, a line in bench.md.

The ledger (`--only ledger`): `Ledger.record` on ten uploads of the MNIST MLP's size, its one-pass
numba count of bins and nonzeros against the torch path it replaced, in turns, the metrics
checked equal: bench_ledger.csv and a line of bench.md.
"""
from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
import torch
from omegaconf import OmegaConf

import fedrepro  # noqa: F401  (torchvision shim first)
from fedrepro.algorithms.base import LocalObjective
from fedrepro.config import BATCHED_MODELS
from fedrepro.engine.batched import BatchedExecutor
from fedrepro.engine.local import ClientJob, SequentialExecutor
from fedrepro.models.flat import build_model
from fedrepro.reports.tables import markdown_grid
from fedrepro.runner import keep_freed_memory

from experiments.bench_round import device_name, matmul_rate, synchronize

# run as __main__: a fixed name keeps its lines under the fedrepro loggers
log = logging.getLogger("fedrepro.experiments")


@dataclass
class Workload:
    name: str
    model: dict  # a ModelConfig
    x: torch.Tensor
    y: torch.Tensor
    clients: int
    per_client: int
    batch: int
    participation: float
    data: str  # where the data came from
    device: str = "cpu"  # where the data, the models and the training live (--device)

    @property
    def selected(self) -> int:
        return max(1, round(self.participation * self.clients))

    @property
    def steps(self) -> int:  # one epoch
        return -(-self.per_client // self.batch)

    def build(self):
        model, w0 = build_model(OmegaConf.create(self.model), tuple(self.x.shape[1:]), int(self.y.max()) + 1
                                if self.model["name"] != "binary_logistic" else 2, seed=0,
                                token_inputs=not self.x.is_floating_point())
        model.module.to(self.device)  # as run.build_federation places a run's model
        model.buffers = model.buffers.to(self.device)
        idx = [torch.arange(k * self.per_client, (k + 1) * self.per_client, device=self.device)
               for k in range(self.clients)]
        return model, w0.to(self.device), idx

    def to(self, device: str) -> "Workload":
        return replace(self, x=self.x.to(device), y=self.y.to(device), device=device)


def step_flops(w: Workload) -> int:
    """FLOPs of one sequential local step (forward + backward), as torch's FlopCounterMode counts."""
    from torch.utils.flop_counter import FlopCounterMode

    model, w0, idx = w.build()
    ex = SequentialExecutor(model, w.x, w.y, idx, batch_size=w.batch, weight_decay=0.0, clip_norm=None, seed=0)
    with FlopCounterMode(display=False) as counter:
        ex.train_client(ClientJob(0, LocalObjective(anchor=w0), 1), 0.01, 0)
    flops = counter.get_total_flops()
    # the counter has no rule for the fused LSTM op: add its gate products, forward + 2x backward
    for m in model.module.modules():
        if isinstance(m, torch.nn.LSTM):
            gates = sum(p.numel() for n, p in m.named_parameters() if n.startswith("weight_"))
            flops += 3 * 2 * w.batch * w.x.shape[1] * gates
    return flops


def time_rounds(run_round, client_steps_per_round: int, seconds: float) -> float:
    """client-steps/s of `run_round(r)` over about `seconds` (after one warm-up round)."""
    run_round(0)
    synchronize()
    rounds, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds or rounds < 2:
        rounds += 1
        run_round(rounds)
        synchronize()
    return rounds * client_steps_per_round / (time.perf_counter() - t0)


def interleaved_rates(runners: dict, seconds: float, repeats: int = 5) -> dict[str, float]:
    """The median turn of each runner's `interleaved_turns`."""
    return {name: statistics.median(v) for name, v in interleaved_turns(runners, seconds, repeats).items()}


def interleaved_turns(runners: dict, seconds: float, repeats: int = 5) -> dict[str, list[float]]:
    """client-steps/s of each runner (name -> (run_round, client-steps a round)), measured in turns:
    `repeats` turns, each giving every runner about seconds / repeats; each runner's rate in each
    turn. The machine's load varies (it is shared): taken in turns, the ratios between runners
    see the same load, which one runner after the other would not, and turn i of two runners
    gives one ratio (`turn_ratios`), so a goal's verdict can see how much the ratio moved."""
    for run_round, _ in runners.values():
        run_round(0)  # warm-up
    synchronize()
    turns: dict[str, list[float]] = {name: [] for name in runners}
    counter = 0
    for _ in range(repeats):
        for name, (run_round, steps) in runners.items():
            rounds, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds / repeats or rounds < 1:
                counter += 1
                rounds += 1
                run_round(counter)
                synchronize()
            turns[name].append(rounds * steps / (time.perf_counter() - t0))
    return turns


def executor_and_jobs(w: Workload, kind: str, channels_last: bool = True, client_threads: int = 1):
    """Our `kind` executor on the workload, and one round's jobs (FedAvg's plain local objective)."""
    model, w0, idx = w.build()
    model.channels_last = model.channels_last and channels_last
    common = dict(batch_size=w.batch, weight_decay=1e-4, clip_norm=10.0, seed=0)
    ex = (BatchedExecutor(model, w.x, w.y, idx, **common) if kind == "batched"
          else SequentialExecutor(model, w.x, w.y, idx, **common, client_threads=client_threads))
    return ex, [ClientJob(k, LocalObjective(anchor=w0), w.steps) for k in range(w.selected)]


def round_runner(w: Workload, ex, jobs):
    """(run_round, client-steps a round) of an executor and its round's jobs."""
    return (lambda r: ex.run(jobs, 0.01, r)), w.selected * w.steps


def executor_runner(w: Workload, kind: str, channels_last: bool = True, client_threads: int = 1):
    """(run_round, client-steps a round) of our `kind` executor on the workload."""
    return round_runner(w, *executor_and_jobs(w, kind, channels_last, client_threads))


def executor_rate(w: Workload, kind: str, seconds: float, channels_last: bool = True) -> float:
    return time_rounds(*executor_runner(w, kind, channels_last), seconds)


def products_rate(w: Workload, seconds: float) -> float:
    return time_rounds(*products_runner(w), seconds)


def products_runner(w: Workload):
    """The batched step's matrix products alone, at their shapes (forward, weight gradients, input
    gradients past the first layer), in the executor's order: each block of `client_block` clients
    through the round's steps before the next. The ceiling of any executor built on these
    products, whatever it does between them. (run_round: the round's client-steps)"""
    from fedrepro.engine.batched import client_block, linear_stack

    model, _, _ = w.build()
    s, b = w.selected, w.batch
    layers = [(fan_in, fan_out) for _, _, fan_in, fan_out in linear_stack(model)]
    ws = [torch.randn(s, o, i, device=w.device) for i, o in layers]
    bs = [torch.randn(s, 1, o, device=w.device) for _, o in layers]
    hs = [torch.randn(s, b, i, device=w.device) for i, _ in layers]
    dzs = [torch.randn(s, b, o, device=w.device) for _, o in layers]
    width = client_block(model.dim, ws[0].element_size(), w.device, torch.get_num_threads()) or s
    blocks = [[(wk[i:i + width], bk[i:i + width], hk[i:i + width], dzk[i:i + width])
               for wk, bk, hk, dzk in zip(ws, bs, hs, dzs)] for i in range(0, s, width)]

    def step(_):
        for block in blocks:
            for _ in range(w.steps):
                for wk, bk, hk, _ in block:
                    torch.baddbmm(bk, hk, wk.transpose(1, 2))
                for k in range(len(block) - 1, -1, -1):
                    wk, _, hk, dzk = block[k]
                    torch.bmm(dzk.transpose(1, 2), hk)
                    if k:
                        torch.bmm(dzk, wk)
    return step, s * w.steps


def lstm_clients_batched_loss(model, stacked: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Summed batch-mean losses of S Shakespeare LSTMs, written out for all clients at once: each
    client's weights (`stacked`: FlatModel names -> (S, *shape)) on its batch x (S, B, T) as
    batched matrix products, the gates' elementwise work on (S, B, 4 H) tensors, backward by
    autograd. What a batched executor for the LSTM would compute (tested equal to nn.LSTM)."""
    lstm = model.module.lstm
    s, b, t_len = x.shape
    emb = stacked["embedding.weight"]
    h_in = emb.gather(1, x.reshape(s, -1, 1).expand(-1, -1, emb.shape[2])).reshape(s, b, t_len, -1)
    for layer in range(lstm.num_layers):
        w_ih, w_hh = (stacked[f"lstm.weight_{k}_l{layer}"].transpose(1, 2) for k in ("ih", "hh"))
        bias = (stacked[f"lstm.bias_ih_l{layer}"] + stacked[f"lstm.bias_hh_l{layer}"]).unsqueeze(1)
        pre = torch.baddbmm(bias, h_in.reshape(s, b * t_len, -1), w_ih).reshape(s, b, t_len, -1)
        h = c = pre.new_zeros(s, b, lstm.hidden_size)
        outs = []
        for t in range(t_len):
            i, f, g, o = torch.baddbmm(pre[:, :, t], h, w_hh).chunk(4, 2)  # nn.LSTM's gate order
            c = f.sigmoid() * c + i.sigmoid() * g.tanh()
            h = o.sigmoid() * c.tanh()
            outs.append(h)
        h_in = torch.stack(outs, 2)
    out = torch.baddbmm(stacked["fc.bias"].unsqueeze(1), h, stacked["fc.weight"].transpose(1, 2))
    return torch.nn.functional.cross_entropy(out.reshape(s * b, -1), y.reshape(-1)) * s


def lstm_clients_batched_runner(w: Workload):
    """The gradient of `lstm_clients_batched_loss` for the round's clients (one step each; no update,
    no clipping: a ceiling for such an executor)."""
    model, w0, _ = w.build()
    s, b = w.selected, w.batch
    stacked = {n: v.unsqueeze(0).repeat(s, *[1] * v.dim()).requires_grad_(True)
               for n, v in model.unflatten(w0).items()}
    x, y = w.x[: s * b].reshape(s, b, -1), w.y[: s * b].reshape(s, b)
    return (lambda _: torch.autograd.grad(lstm_clients_batched_loss(model, stacked, x, y),
                                          list(stacked.values()))), s


def without_onednn(runner):
    """`runner` with oneDNN off while it runs (torch's own LSTM kernels)."""
    run_round, steps = runner

    def run(r):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # setting the flags notes that TF32 is for Intel GPUs
            with torch.backends.mkldnn.flags(enabled=False):
                run_round(r)
    return run, steps


def dataloader_rate(w: Workload, seconds: float) -> float:
    return time_rounds(*dataloader_runner(w), seconds)


def dataloader_runner(w: Workload):
    """What users would otherwise run: nn.Module, torch.optim.SGD, clip_grad_norm_, one DataLoader
    per client; (run_round, client-steps a round)."""
    from torch.utils.data import DataLoader, TensorDataset

    model, w0, idx = w.build()
    module = authors_module(model.module)
    for p in module.parameters():
        p.requires_grad_(True)
    # the clients' data in host memory, each batch moved to the device, as the papers' code does
    loaders = [DataLoader(TensorDataset(w.x[i].cpu(), w.y[i].cpu()), batch_size=w.batch, shuffle=True)
               for i in idx[:w.selected]]
    loss_fn = torch.nn.functional.binary_cross_entropy_with_logits if model.loss_kind == "logistic" else \
        torch.nn.functional.cross_entropy

    def run_round(r):
        for loader in loaders:
            torch.nn.utils.vector_to_parameters(w0, module.parameters())
            opt = torch.optim.SGD(module.parameters(), lr=0.01, weight_decay=1e-4)
            for xb, yb in loader:
                xb, yb = xb.to(w.device, non_blocking=True), yb.to(w.device, non_blocking=True)
                opt.zero_grad(set_to_none=True)
                out = module(xb)
                loss = loss_fn(out.squeeze(1), yb.float()) if model.loss_kind == "logistic" else loss_fn(out, yb)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(module.parameters(), 10.0)
                opt.step()

    module.train()
    return run_round, w.selected * w.steps


def authors_module(module: torch.nn.Module) -> torch.nn.Module:
    """The module as the papers' code writes it: the CIFAR CNN with ReLU before each pool (ours pools
    first, the same function bit for bit: models/cnn.py); any other module as it is."""
    from fedrepro.models.cnn import AuthorsOrderCifarCNN, CifarCNN

    if type(module) is CifarCNN:
        authors = AuthorsOrderCifarCNN(module.fc3.out_features).to(module.fc3.weight.device)
        authors.load_state_dict(module.state_dict())
        return authors
    return module


def _sharded_rank(fabric, w: Workload, kind: str, seconds: float) -> float:
    from fedrepro.engine.sharded import ShardedExecutor

    inner, jobs = executor_and_jobs(w, kind)
    ex = ShardedExecutor(inner, fabric)
    # a fixed round count on every rank (the ranks must make the same collectives)
    ex.run(jobs, 0.01, 0)
    fabric.barrier()
    rounds, t0 = max(2, int(seconds * 2)), time.perf_counter()
    for r in range(rounds):
        ex.run(jobs, 0.01, r + 1)
    return rounds * w.selected * w.steps / (time.perf_counter() - t0)


def sharded_rate(w: Workload, kind: str, seconds: float) -> float:
    from fedrepro.engine import sharded

    # a first timing run picks a round count of about `seconds` per process
    per_round = w.selected * w.steps / executor_rate(w, kind, 1.0)
    return sharded.spawn(_sharded_rank, 2, "cpu", w, kind, seconds / max(per_round, 1e-3) / 2)


def workloads(data_root: str | None) -> list[Workload]:
    g = torch.Generator().manual_seed(0)
    mnist_x, mnist_y = torch.rand(100 * 600, 784, generator=g), torch.randint(0, 10, (100 * 600,), generator=g)
    cifar_x = torch.randn(100 * 100, 3, 32, 32, generator=g)
    cifar_y = torch.randint(0, 10, (100 * 100,), generator=g)
    text_x = torch.randint(0, 80, (10 * 200, 80), generator=g)
    text_y = torch.randint(0, 80, (10 * 200,), generator=g)
    a1a_x, a1a_y, a1a_clients, a1a_n, a1a_data = _a1a(data_root, g)
    mlp = {"name": "mlp", "hidden": [200, 200]}
    return [
        Workload("mnist_mlp_p10", mlp, mnist_x, mnist_y, 100, 600, 50, 0.1, "generated MNIST-shaped"),
        Workload("mnist_mlp_p100", mlp, mnist_x, mnist_y, 100, 600, 50, 1.0, "generated MNIST-shaped"),
        Workload("cifar_cnn_p10", {"name": "cnn_cifar", "hidden": []}, cifar_x, cifar_y, 100, 100, 50, 0.1,
                 "generated CIFAR-shaped"),
        Workload("shakespeare_lstm", {"name": "lstm", "hidden": []}, text_x, text_y, 10, 200, 50, 1.0,
                 "generated character sequences"),
        Workload("a1a_logistic", {"name": "binary_logistic", "hidden": []}, a1a_x, a1a_y, a1a_clients, a1a_n,
                 50, 1.0, a1a_data),
    ]


def _a1a(data_root, g):
    """a1a split into 10 clients (the first 1600 of its 1605 rows), or generated a1a-shaped data."""
    if data_root:
        try:
            from fedrepro.config import compose_config
            from fedrepro.data.loaders import dataset_for

            d = dataset_for(compose_config(["dataset=a1a", "model=binary_logistic", f"data_root={data_root}"]))
            n = len(d.y_train) // 10 * 10
            return d.x_train[:n].float(), d.y_train[:n], 10, n // 10, "LIBSVM a1a"
        except Exception as exc:  # a missing file: fall back, and say so
            why = f"generated a1a-shaped ({type(exc).__name__})"
    else:
        why = "generated a1a-shaped (FEDREPRO_DATA_ROOT unset)"
    x = (torch.rand(1600, 119, generator=g) < 0.12).float()
    return x, torch.randint(0, 2, (1600,), generator=g), 10, 160, why


EVAL_BATCHES = (100, 250, 1000, 2500, 10_000)


def eval_rates(w: Workload, seconds: float) -> tuple[dict[int, float], int]:
    """samples/s of evaluate() on the workload's first (up to 10 000) samples, per eval batch,
    and the batch the model evaluates with on the workload's device."""
    from fedrepro.engine.evaluate import evaluate

    model, w0, _ = w.build()
    x, y = w.x[:10_000], w.y[:10_000]
    rates = {}
    for batch in EVAL_BATCHES:
        evaluate(model, w0, x[:batch], y[:batch], batch_size=batch)  # warm-up
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds or n < 1:
            evaluate(model, w0, x, y, batch_size=batch)
            n += 1
        rates[batch] = n * len(y) / (time.perf_counter() - t0)
    return rates, model.eval_batch_on(w.x.device)


def fen_table2_projection(fast_rate_b10: float) -> dict:
    """FedElasticNet Table 2's MNIST rows at profile=paper: 6 algorithms x 3 splits, 100 rounds,
    10 of 100 clients a round, 10 epochs of 600 samples at batch 10."""
    runs, rounds, selected, steps = 18, 100, 10, 10 * 60
    client_steps = runs * rounds * selected * steps
    return {"runs": runs, "client_steps": client_steps, "projected_seconds": client_steps / fast_rate_b10}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=os.environ.get("PROFILE", "quick"), choices=["smoke", "quick", "paper"])
    ap.add_argument("--seconds", type=float, default=3.0, help="time per measurement")
    ap.add_argument("--out", default=os.path.join(os.environ.get("FEDREPRO_RESULTS", "results"), "bench"))
    ap.add_argument("--only", default=None,
                    help="comma-separated workload names, and/or 'rounds' (the paper-setting rounds), "
                         "'ledger', 'blocks' (client blocks)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="rounds a side of the paper-setting comparison (default 5; 1 with --profile smoke)")
    ap.add_argument("--round-algorithms", default="feddyn,fedavg", help="algorithms of the paper-setting rounds")
    ap.add_argument("--round-threads", default="1,2", help="thread counts of the paper-setting rounds")
    ap.add_argument("--reference-eval-models", type=int, default=2, choices=[2, 3],
                    help="models the reference loop evaluates a round (2: the papers' code; 3: as fedrepro)")
    ap.add_argument("--ratio-to", default=None, metavar="BENCH_CSV",
                    help="another machine's bench.csv (docs/measured/bench.csv): a table of this run's rates "
                         "beside it, with the ratios")
    ap.add_argument("--device", default="cpu",
                    help="where data, models and training live: cpu, or cuda on a GPU machine (docs/performance.md's "
                         "GPU rows); on cuda the 2-process and ledger rows are left out (one GPU; the ledger is host work)")
    args = ap.parse_args(argv)
    where = device_name(args.device)  # a bad or absent device fails here, before anything is timed
    device = torch.device(args.device).type
    seconds = 0.5 if args.profile == "smoke" else args.seconds
    rounds = args.rounds if args.rounds is not None else (1 if args.profile == "smoke" else 5)
    only = set(args.only.split(",")) if args.only else None
    threads = torch.get_num_threads()
    # glibc's thresholds, as runs set them: without them goal 2's baseline is slowed (docs/performance.md)
    malloc_ok = device != "cpu" or keep_freed_memory()
    peak = matmul_rate(seconds, args.device)
    log.info(f"{platform.node()} {where}, torch {torch.__version__}, "
             f"{threads} threads, GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '')!r}")
    log.info(f"matmul 2048^2 float32: {peak / 1e9:.1f} GFLOP/s")
    if not malloc_ok:
        log.warning("glibc's malloc thresholds could not be set (not glibc?): large tensors are mmap'd and "
                    "zeroed each step, which slows products_only most (goal 2 is not judged)")
    rows = []
    chosen = [w.to(args.device) for w in workloads(os.environ.get("FEDREPRO_DATA_ROOT"))]
    if only:
        unknown = only - {w.name for w in chosen} - {"rounds", "ledger", "blocks"}
        if unknown:  # a misspelt part would time nothing and say nothing
            ap.error(f"--only {','.join(sorted(unknown))}: not a part of the bench; choose from "
                     f"{', '.join([w.name for w in chosen] + ['rounds', 'ledger', 'blocks'])}")
        chosen = [w for w in chosen if w.name in only]
    for w in chosen:
        flops = step_flops(w)
        batched = w.model["name"] in BATCHED_MODELS
        conv = w.build()[0].channels_last  # a model with convolutions
        fast = "batched" if batched else "sequential"
        # what a run gets (executor=auto, train.client_threads unset: torch's threads); the
        # sequential executor says how many of the round's clients it trains at once (threads_for)
        ex, jobs = executor_and_jobs(w, fast, client_threads=1 if batched else threads)
        client_threads = 1 if batched else ex.threads_for(jobs)
        # the sequential reference runs one client at a time, the CNN in the plain NCHW layout; the
        # fast path is a run's; all in turns (interleaved_rates), the 2-process row on its own
        runners = {"dataloader": dataloader_runner(w),
                   "sequential": executor_runner(w, "sequential", channels_last=not conv)}
        if batched or conv or client_threads > 1:
            runners["fast"] = round_runner(w, ex, jobs)
        if client_threads > 1 and conv:  # what the clients at once add (the LSTM's: its sequential row)
            runners["one_client_at_a_time"] = executor_runner(w, fast)
        if batched:
            runners["products_only"] = products_runner(w)
        if w.model["name"] == "lstm" and device == "cpu":  # why the LSTM stays on the oneDNN LSTM
            runners["aten_lstm"] = without_onednn(executor_runner(w, "sequential"))
            runners["clients_batched"] = lstm_clients_batched_runner(w)
        turns = interleaved_turns(runners, seconds)
        measured = {name: statistics.median(v) for name, v in turns.items()}
        rates = {"dataloader": measured["dataloader"], "sequential": measured["sequential"]}
        rates["fast"] = measured.get("fast", rates["sequential"])
        if args.profile != "smoke" and device == "cpu":
            rates["sharded2"] = sharded_rate(w, fast, seconds)
        rates.update({k: v for k, v in measured.items() if k not in rates})
        how = [way for way, used in (("channels-last", conv), (f"{client_threads} clients at once",
                                                                 client_threads > 1)) if used]
        names = {"fast": fast + (f" ({', '.join(how)})" if how else ""), "sharded2": fast,
                 "products_only": "bmm alone", "aten_lstm": "sequential, LSTM without oneDNN",
                 "one_client_at_a_time": fast + " (channels-last, 1 client at a time)",
                 "clients_batched": "LSTM written out, clients as bmm"}
        for method, rate in rates.items():
            rows.append({"workload": w.name, "method": method, "executor": names.get(method, method),
                         "clients_per_round": w.selected, "batch": w.batch,
                         "client_steps_per_s": rate, "samples_per_s": rate * w.batch,
                         "gflops": rate * flops / 1e9, "matmul_fraction": rate * flops / peak,
                         "step_mflop": flops / 1e6, "data": w.data,
                         "turns": ";".join(f"{v:.1f}" for v in turns.get(method, []))})
        base = {r["method"]: r["client_steps_per_s"] for r in rows if r["workload"] == w.name}
        ratios = ", ".join(f"{m} {base[m] / base['dataloader']:.2f}x" for m in base if m != "dataloader")
        line = (f"{w.name}: " + ", ".join(f"{m} {v:.0f}" for m, v in base.items())
                + f" client-steps/s; vs dataloader: {ratios}; fast/sequential {base['fast'] / base['sequential']:.2f}x")
        if "products_only" in base:
            line += (f"; fast = {base['fast'] / base['products_only']:.0%} of its products alone "
                     f"({base['products_only'] * flops / peak:.0%} of the matmul rate)")
        log.info(line)
    eval_rows = []
    for w in chosen:
        if w.name.endswith("_p100"):  # the same model as its 10 % workload
            continue
        rates, used = eval_rates(w, seconds / 3)
        eval_rows += [{"workload": w.name, "eval_batch": b, "samples_per_s": r, "used": b == used}
                      for b, r in rates.items()]
        best = max(rates, key=rates.get)
        log.info(f"evaluation {w.name}: " + ", ".join(f"batch {b} {r:.0f}" for b, r in rates.items())
                 + f" samples/s; evaluates at batch {used} ({rates.get(used, float('nan')) / rates[best]:.0%} of "
                 f"the best, batch {best})")
    stacked = [stacked_eval_row(w, seconds) for w in chosen if stackable(w)]
    for r in stacked:
        log.info(f"evaluation {r['workload']}: {r['models']} models one at a time {r['one_at_a_time']:.0f}, "
                 f"together (evaluate_many) {r['stacked']:.0f} samples/s a model: {r['speedup']:.2f}x")
    ledger = None
    if (only is None or "ledger" in only) and device == "cpu":
        ledger = ledger_row(seconds)
        log.info(f"ledger: {ledger['one_pass']:.0f} messages/s in one pass, {ledger['torch_path']:.0f} on the torch "
                 f"path ({ledger['speedup']:.2f}x; {ledger['dim']} values a message, the same metrics)")
    blocks = None
    if (only is None or "blocks" in only) and device == "cpu":
        blocks = client_block_row(seconds)
        log.info(f"client blocks: {blocks['detail']}")
    round_rows = []
    if only is None or "rounds" in only:
        from experiments.bench_round import round_rows as paper_round_rows

        round_rows = paper_round_rows(os.environ.get("FEDREPRO_DATA_ROOT"), rounds,
                                      algorithms=tuple(args.round_algorithms.split(",")),
                                      threads=tuple(int(n) for n in args.round_threads.split(",")),
                                      eval_models=args.reference_eval_models, device=args.device,
                                      rate_seconds=min(seconds, 2.0))
    date = time.strftime("%Y-%m-%d")
    frame = pd.DataFrame(rows)
    frame["matmul_gflops"] = peak / 1e9
    frame["threads"] = threads
    frame["date"] = date
    frame["device"] = where
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # the round rows (carrying their own thread count) after the throughput rows, their extra columns last
    rounds_frame = (pd.DataFrame(round_rows).assign(matmul_gflops=peak / 1e9, date=date, device=where)
                    if round_rows else None)
    csv = frame if rounds_frame is None else rounds_frame if frame.empty else pd.concat(
        [frame, rounds_frame], ignore_index=True)
    columns = list(frame.columns) if not frame.empty else []
    csv[columns + [c for c in csv.columns if c not in columns]].to_csv(out / "bench.csv", index=False)
    pd.DataFrame(eval_rows).assign(threads=threads, date=date).to_csv(out / "bench_eval.csv", index=False)
    if stacked:
        pd.DataFrame(stacked).assign(threads=threads, date=date).to_csv(out / "bench_eval_stacked.csv", index=False)
    md = (markdown(frame, peak, threads, where) if rows else f"### make bench ({date}, {where})\n")
    md += eval_markdown(eval_rows)
    md += "".join(f"\n- evaluation of {r['models']} {r['workload']} models on {r['samples']} samples: together "
                  f"(`evaluate_many`, the same numbers) **{r['speedup']:.2f}x** one at a time\n" for r in stacked)
    if ledger:
        pd.DataFrame([ledger]).assign(threads=threads, date=date).to_csv(out / "bench_ledger.csv", index=False)
        md += (f"\n- the ledger's record of a {ledger['dim']}-value message (bins, nonzeros, bits): one pass "
               f"{ledger['one_pass']:.0f} messages/s, the torch path {ledger['torch_path']:.0f}: "
               f"**{ledger['speedup']:.2f}x**, the same metrics\n")
    if blocks:
        pd.DataFrame([{k: v for k, v in blocks.items() if k != "detail"}]).assign(date=date).to_csv(
            out / "bench_blocks.csv", index=False)
        md += f"\n- client blocks: {blocks['detail']}\n"
    if round_rows:
        from experiments.bench_round import rounds_markdown

        md += rounds_markdown(round_rows, rounds)
    md += goals_markdown(frame, round_rows, stacked, malloc_ok=malloc_ok)
    if args.ratio_to:
        md += ratio_markdown(csv, pd.read_csv(args.ratio_to))
    if args.profile == "paper":
        # the generated MNIST-shaped data (regenerated when --only chose no MNIST workload)
        mnist = next((w for w in chosen if w.name == "mnist_mlp_p10"), None) or workloads(None)[0]
        b10 = Workload("mnist_mlp_p10_b10", {"name": "mlp", "hidden": [200, 200]}, mnist.x, mnist.y,
                       100, 600, 10, 0.1, "generated MNIST-shaped")
        rate = executor_rate(b10, "batched", seconds)
        proj = fen_table2_projection(rate)
        line = (f"FedElasticNet Table 2, MNIST rows at profile=paper ({proj['runs']} runs, "
                f"{proj['client_steps'] / 1e6:.1f} M client-steps of batch 10): fast executor at {rate:.0f} "
                f"client-steps/s -> {proj['projected_seconds'] / 60:.0f} min of local training (evaluation extra)")
        log.info(line)
        md += f"\n- {line}\n"
    (out / "bench.md").write_text(md, encoding="utf-8")
    print(md)
    print(f"[bench] csv: {out / 'bench.csv'}")
    return 0


def stackable(w: Workload) -> bool:
    """A workload whose model evaluate_many scores together (linear stacks with a wide first layer)."""
    return w.model["name"] == "mlp" and not w.name.endswith("_p100") and bool(w.model.get("hidden"))


def stacked_eval_row(w: Workload, seconds: float, models: int = 3, repeats: int = 5) -> dict:
    """samples/s a model of evaluating `models` models (a round's server, all-clients and
    selected-clients models) one at a time and together, in turns, on up to 10 000 samples."""
    from fedrepro.engine.evaluate import evaluate, evaluate_many

    model, w0, _ = w.build()
    g = torch.Generator().manual_seed(0)
    ws = [w0 + 0.01 * torch.randn(w0.shape, generator=g).to(w0.device) for _ in range(models)]
    x, y = w.x[:10_000], w.y[:10_000]
    runners = {"one_at_a_time": lambda: [evaluate(model, v, x, y) for v in ws],
               "stacked": lambda: evaluate_many(model, ws, x, y)}
    # the same numbers bit for bit on the CPU (tested); a GPU's products may round otherwise: said
    same = runners["one_at_a_time"]() == runners["stacked"]()
    if not same and w.device == "cpu":
        raise AssertionError("evaluate_many and evaluate disagree")
    turns = {k: [] for k in runners}
    for _ in range(repeats):
        for name, run in runners.items():
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds / repeats or n < 1:
                run()
                n += 1
            turns[name].append(n * len(y) * models / (time.perf_counter() - t0))
    rate = {k: statistics.median(v) for k, v in turns.items()}
    return {"workload": w.name, "models": models, "samples": len(y), **rate,
            "speedup": rate["stacked"] / rate["one_at_a_time"], "same_numbers": same}


def client_block_row(seconds: float, repeats: int = 5) -> dict:
    """The batched executor at one thread on FedElasticNet Table 4's MNIST shape (100 clients a
    round, batch 10; 20 steps a client here), its clients in `client_block` blocks against all at
    once, in turns: FedAvg's objective (the scaled path) and FedProx's (the per-step path)."""
    import dataclasses

    x, y = torch.randn(20_000, 784), torch.randint(0, 10, (20_000,))
    w = Workload("mnist_mlp_p100_b10", {"name": "mlp", "hidden": [200, 200]}, x, y, 100, 200, 10, 1.0,
                 "generated MNIST-shaped")
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runners = {}
        for path, mu in (("scaled", 0.0), ("prox", 1e-4)):
            for label, block in (("blocks", None), ("all", w.selected)):
                ex, jobs = executor_and_jobs(w, "batched")
                ex.client_block = block
                if block is None:
                    blocked = ex  # the executor's own choice
                jobs = [dataclasses.replace(j, objective=dataclasses.replace(j.objective, prox_mu=mu)) for j in jobs]
                runners[f"{path}_{label}"] = round_runner(w, ex, jobs)
        turns = interleaved_turns(runners, seconds, repeats)
        width = blocked.block_size(w.selected)  # what the executor takes at one thread
    finally:
        torch.set_num_threads(previous)
    row = {"workload": w.name, "threads": 1, "block": width}
    parts = []
    for path in ("scaled", "prox"):
        ratios = [a / b for a, b in zip(turns[f"{path}_blocks"], turns[f"{path}_all"])]
        row[f"{path}_speedup"] = statistics.median(ratios)
        row[f"{path}_turns"] = " ".join(f"{r:.2f}" for r in ratios)
        parts.append(f"{path} path {row[f'{path}_speedup']:.2f}x (turns {min(ratios):.2f}-{max(ratios):.2f}x)")
    row["detail"] = (f"blocks of {width} / all {w.selected} clients at once, one thread, batch 10 (FedElasticNet "
                     f"Table 4's MNIST shape): " + ", ".join(parts) + "; the same numbers (tested)")
    return row


def ledger_row(seconds: float, dim: int = 199_210, clients: int = 10, repeats: int = 5) -> dict:
    """Messages/s of `Ledger.record` (bins, nonzeros, bits; no lossless coder) on uploads of the
    MNIST MLP's size, its one-pass numba kernel against the torch path it replaced, in turns;
    the two rounds' metrics must be equal."""
    from unittest import mock

    from fedrepro.metrics import ledger as lg

    g = torch.Generator().manual_seed(0)
    messages = [torch.randn(dim, generator=g) * 0.01 for _ in range(clients)]

    def runner(ledger):  # one ledger a run, a round of `clients` uploads a call, as in a run
        def run_round(_=None):
            for k, m in enumerate(messages):
                ledger.record("up", k, "delta", m)
            return {k: v for k, v in ledger.end_round().items() if not k.startswith("cum_")}
        return run_round

    run_round, torch_round = runner(lg.Ledger(dim, wire_bits=True)), runner(lg.Ledger(dim, wire_bits=True))

    def torch_path(_=None):
        with mock.patch.object(lg, "_count_bins", lambda values, width: None):
            return torch_round()

    if run_round() != torch_path():
        raise AssertionError("the ledger's kernel and torch paths disagree")
    rate = interleaved_rates({"one_pass": (run_round, clients), "torch_path": (torch_path, clients)},
                             seconds, repeats)
    return {"dim": dim, **rate, "speedup": rate["one_pass"] / rate["torch_path"]}


def turn_ratios(frame: pd.DataFrame, workload: str, num: str, den: str) -> list[float]:
    """num's rate over den's in each turn of `interleaved_turns` (the same turn: the same load), from
    the rows' `turns` column; [] where a row has none (a bench.csv from before it, or not in turns)."""
    def turns(method):
        hit = frame[(frame.workload == workload) & (frame.method == method)] if "turns" in frame else frame[:0]
        text = str(hit.turns.iloc[0]) if len(hit) and isinstance(hit.turns.iloc[0], str) else ""
        return [float(v) for v in text.split(";") if v]

    a, b = turns(num), turns(den)
    return [x / y for x, y in zip(a, b)] if len(a) == len(b) else []


def turn_verdict(ratios: list[float], median: float, goal: float, fmt: str) -> str:
    """'holds' when every turn's ratio meets the goal, 'not met' when none does, otherwise undecided:
    a verdict that one turn's load could flip is not given. Without turns, the medians' ratio decides."""
    if not ratios:
        return "holds" if median >= goal else "not met"
    met = sum(r >= goal for r in ratios)
    spread = f"turns {fmt.format(min(ratios))}-{fmt.format(max(ratios))}"
    if met == len(ratios):
        return f"holds ({spread})"
    if met == 0:
        return f"not met ({spread})"
    return f"undecided: {met} of {len(ratios)} turns meet it ({spread})"


def goals_markdown(frame: pd.DataFrame, round_rows: list[dict], stacked: list[dict],
                   malloc_ok: bool = True) -> str:
    """Issue 30's goals as this run measured them: each ratio, its goal, and whether it holds.
    malloc_ok False (a CPU run where `keep_freed_memory` failed): the products-alone ratios are not judged."""
    lines = []

    def rate(workload, method):
        hit = frame[(frame.workload == workload) & (frame.method == method)] if not frame.empty else frame
        return float(hit.client_steps_per_s.iloc[0]) if len(hit) else None

    for r in round_rows:
        if r["method"] == "round_fedrepro":
            verdict, most = "holds" if r["speedup"] >= 3 else "not met", r.get("attainable_speedup")
            if r["speedup"] < 3 and most is not None:  # what the round's products alone would allow
                verdict += (f" (products alone: {most:.2f}x)" if most >= 3 else
                            f"; out of reach at this matmul rate (products alone: {most:.2f}x)")
            lines.append([f"paper round, {r['workload'].split('_')[1]}, {r['threads']} thread(s): "
                          "reference s / fedrepro s", f"{r['speedup']:.2f}x", ">= 3x", verdict])
    for workload in ("mnist_mlp_p10", "mnist_mlp_p100"):
        fast, ceiling = rate(workload, "fast"), rate(workload, "products_only")
        if fast and ceiling:
            verdict = turn_verdict(turn_ratios(frame, workload, "fast", "products_only"), fast / ceiling, 0.85,
                                   "{:.0%}") if malloc_ok else "not judged: glibc's malloc thresholds could not be set"
            lines.append([f"{workload}: batched step / its products alone", f"{fast / ceiling:.0%}", ">= 85%",
                          verdict])
    for r in stacked:
        lines.append([f"{r['workload']}: {r['models']} models evaluated together / one at a time",
                      f"{r['speedup']:.2f}x", "same numbers",
                      "bit for bit (checked)" if r["same_numbers"] else "not bit for bit on this device"])
    fast, loader = rate("cifar_cnn_p10", "fast"), rate("cifar_cnn_p10", "dataloader")
    if fast and loader:
        lines.append(["cifar_cnn_p10: fastest path / plain PyTorch loop", f"{fast / loader:.2f}x", ">= 1.5x",
                      turn_verdict(turn_ratios(frame, "cifar_cnn_p10", "fast", "dataloader"), fast / loader, 1.5,
                                   "{:.2f}x")])
    if not lines:
        return ""
    return "\nIssue 30's goals in this run:\n\n" + markdown_grid(["ratio", "measured", "goal", ""], lines,
                                                                 right_align={1}) + "\n"


def markdown(frame: pd.DataFrame, peak: float, threads: int, where: str) -> str:
    lines = []
    for r in frame.to_dict("records"):
        base = frame[(frame.workload == r["workload"]) & (frame.method == "dataloader")].client_steps_per_s.iloc[0]
        seq = frame[(frame.workload == r["workload"]) & (frame.method == "sequential")].client_steps_per_s.iloc[0]
        lines.append([r["workload"], r["method"], r["executor"], f"{r['client_steps_per_s']:.0f}",
                      f"{r['samples_per_s']:.0f}", f"{r['gflops']:.1f}", f"{r['matmul_fraction']:.0%}",
                      f"{r['client_steps_per_s'] / base:.2f}x", f"{r['client_steps_per_s'] / seq:.2f}x"])
    headers = ["workload", "method", "executor", "client-steps/s", "samples/s", "GFLOP/s", "of matmul",
               "vs dataloader", "vs sequential"]
    return "\n".join([f"### make bench ({time.strftime('%Y-%m-%d')}, {where}, {threads} threads, "
                      f"matmul {peak / 1e9:.1f} GFLOP/s)", "",
                      markdown_grid(headers, lines, right_align={3, 4, 5, 6, 7, 8})]) + "\n"


def ratio_markdown(frame: pd.DataFrame, baseline: pd.DataFrame) -> str:
    """This run's rates beside another machine's bench.csv (`--ratio-to`): client-steps/s of each
    (workload, method) both measured, and seconds a paper-setting round (the baseline's row at
    the same thread count), with this run / the baseline (rounds: baseline s / this run's s)."""
    lines = []
    for r in frame.to_dict("records"):
        same = baseline[(baseline.workload == r["workload"]) & (baseline.method == r["method"])]
        if str(r["method"]).startswith("round_"):
            same = same[same.threads == r["threads"]]
            if len(same):
                b = float(same.seconds_per_round.iloc[0])
                lines.append([r["workload"], r["method"], f"{r['seconds_per_round']:.2f} s/round", f"{b:.2f} s/round",
                              f"{b / r['seconds_per_round']:.2f}x"])
        elif len(same):
            b = float(same.client_steps_per_s.iloc[0])
            lines.append([r["workload"], r["method"], f"{r['client_steps_per_s']:.0f}", f"{b:.0f}",
                          f"{r['client_steps_per_s'] / b:.2f}x"])
    if not lines:
        return ""
    where, there = frame.device.iloc[0] if "device" in frame else "this run", baseline.date.iloc[0]
    return ("\n" + markdown_grid(["workload", "method", where, f"baseline ({there}, {int(baseline.threads.iloc[0])} "
                                  "threads)", "ratio"], lines, right_align={2, 3, 4}) + "\n")


def eval_markdown(eval_rows: list[dict]) -> str:
    """One line per workload: evaluation samples/s at each eval batch, the used one in bold."""
    frame = pd.DataFrame(eval_rows)
    if frame.empty:
        return ""
    lines = []
    for name, g in frame.groupby("workload", sort=False):
        lines.append([name] + [f"**{r.samples_per_s:.0f}**" if r.used else f"{r.samples_per_s:.0f}"
                               for r in g.itertuples()])
    headers = ["evaluation (samples/s)"] + [f"batch {b}" for b in frame.eval_batch.unique()]
    return "\n" + markdown_grid(headers, lines, right_align=set(range(1, len(headers)))) + "\n"


if __name__ == "__main__":
    from fedrepro.reports.cli import run_target

    raise SystemExit(run_target(main))
