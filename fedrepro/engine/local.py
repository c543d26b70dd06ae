"""Client executors: run the selected clients' local training for one round.

The sequential executor is the reference: one client after another, plain SGD on the flat
vector exactly as FedDyn's code trains (mean loss over the batch, clipping of the global
gradient norm, weight decay added after clipping, ceil(n / B) steps per epoch with a last
partial batch). A faster executor (issue 7) keeps the same contract.

Training augmentation (CIFAR's flip / crop) is applied per batch with its own seeded
generator per (round, client); BatchNorm models train on a copy of the server's running
statistics per client, returned in `last_buffers` for the round loop to aggregate.

With a `LocalRule` in the objective (LoSAC's family, base.py) the step's batch is one of
the client's M fixed blocks drawn uniformly, and the rule's direction replaces the data
gradient; `LocalObjective.prox` is applied after every step. `full_gradient` serves the
first phase of two-phase rounds (MimeSVRG).

`precision` (train.precision, engine/precision.py): the forward pass of every gradient runs under
Fabric's autocast context for it; the backward, the flat parameters and the step stay as they are
(autograd returns the float32 gradient of the float32 vector).

`client_threads` (train.client_threads): on the CPU, that many clients train at once, each on
its own Python thread with one torch thread and its own copy of the module (`functional_call`
swaps a module's tensors, so threads cannot share one). A client's numbers are then exactly those
of the one-thread sequential executor (tested): its batches come from its own (seed, round,
client) generator and nothing is shared between clients while they train. Two clients at once
keep two cores busier than one client's kernels on two threads: the CIFAR CNN's step rate 1.08x
at 2 threads here (`make bench`, docs/performance.md), more where one client's kernels scale
worse. Clients with a `LocalRule`, models that draw from torch's global generator (dropout) and
other devices stay one at a time.
"""
from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

import torch

from fedrepro.algorithms.base import LocalObjective
from fedrepro.data.augment import augment_batch
from fedrepro.engine.precision import DEFAULT_PRECISION, autocast
from fedrepro.errors import ConfigError
from fedrepro.models.flat import FlatModel
from fedrepro.seeding import generator


@dataclass
class ClientJob:
    client: int
    objective: LocalObjective
    steps: int


def schedule_rows(idx: torch.Tensor, batch_size: int, steps: int, g: torch.Generator) -> torch.Tensor:
    """(steps, min(batch_size, n)) entries of `idx`, -1 for padding: a fresh permutation of idx per
    epoch drawn from g, cut into ceil(n / B) batches with the last one partial (FedDyn's epochs).
    A batch larger than the data (full-batch gradient descent, L2GD's B = 1e6) is the n rows: no
    padding to B."""
    n = len(idx)
    width = min(batch_size, n)
    per_epoch = -(-n // width) if n else 1
    epochs = -(-steps // per_epoch) if steps else 0
    out = torch.full((epochs, per_epoch * width), -1, dtype=torch.long, device=idx.device)
    for e in range(epochs):
        out[e, :n] = idx[torch.randperm(n, generator=g).to(idx.device)]
    return out.view(epochs * per_epoch, width)[:steps]


def batch_schedule(n: int, batch_size: int, steps: int, g: torch.Generator, device) -> list[torch.Tensor]:
    """`steps` batches of positions 0..n-1 (`schedule_rows` without the padding)."""
    return [r[r >= 0] for r in schedule_rows(torch.arange(n, device=device), batch_size, steps, g)]


def block_partition(n: int, num_blocks: int, seed: int, client: int) -> list[torch.Tensor]:
    """Client `client`'s positions 0..n-1 cut into `num_blocks` fixed blocks (sizes differ by at
    most one): seeded by (seed, client) only, so block j holds the same samples every round."""
    if not 1 <= num_blocks <= n:
        raise ConfigError(f"algorithm.blocks={num_blocks} needs 1 <= blocks <= the client's sample count ({n})")
    perm = torch.randperm(n, generator=generator(seed, "blocks", client))
    return list(perm.tensor_split(num_blocks))


def block_choices(num_blocks: int, steps: int, g: torch.Generator) -> list[int]:
    """The block of each local step, uniform with replacement (SAGA's sampling)."""
    return torch.randint(num_blocks, (steps,), generator=g).tolist()


class SequentialExecutor:
    def __init__(self, model: FlatModel, x: torch.Tensor, y: torch.Tensor,
                 client_indices: list[torch.Tensor], *, batch_size: int, weight_decay: float,
                 clip_norm: float | None, seed: int, augment: str | None = None,
                 precision: str = DEFAULT_PRECISION, client_threads: int = 1):
        if client_threads < 1:
            raise ConfigError(f"train.client_threads={client_threads}: give 1 or more (1: one client at a time)")
        self.model, self.x, self.y = model, x, y
        self.client_indices = client_indices
        self.batch_size, self.weight_decay, self.clip_norm = batch_size, weight_decay, clip_norm
        self.seed, self.augment = seed, augment
        self.precision = precision
        autocast(precision, x.device)  # an unknown name fails here, not in the first round
        self.last_buffers: torch.Tensor | None = None  # (jobs, buffer_dim) after run()
        self._blocks: dict[tuple[int, int], list[torch.Tensor]] = {}  # (client, M) -> fixed blocks
        self.client_threads = client_threads
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0
        self._modules: list[torch.nn.Module] = []  # one module per client thread past the first

    def run(self, jobs: list[ClientJob], lr: float, round: int):
        """Train each job's client; returns ((len(jobs), d) final models, (len(jobs),) mean losses)."""
        anchor = jobs[0].objective.anchor
        models = torch.empty(len(jobs), anchor.numel(), dtype=anchor.dtype, device=anchor.device)
        losses = torch.empty(len(jobs), dtype=torch.float64)
        buffers = self.model.buffers.expand(len(jobs), -1).clone()

        def train(i: int, model: FlatModel) -> None:
            models[i], losses[i] = self.train_client(jobs[i], lr, round, buffers[i], model)

        threads = self.threads_for(jobs)
        if threads > 1:
            self._concurrently(train, len(jobs), threads)
        else:
            for i in range(len(jobs)):
                train(i, self.model)
        self.last_buffers = buffers if self.model.buffer_dim else None
        return models, losses

    def threads_for(self, jobs: list[ClientJob]) -> int:
        """How many of these clients train at once (module docstring)."""
        if (self.client_threads < 2 or len(jobs) < 2 or self.x.device.type != "cpu"
                or self.model.draws_random or any(job.objective.rule is not None for job in jobs)):
            return 1
        return min(self.client_threads, len(jobs))

    def _concurrently(self, train, n: int, threads: int) -> None:
        """train(i, model) for i < n on `threads` threads, each with one torch thread and its own
        module; a thread takes the next client when it is done (clients' step counts differ)."""
        while len(self._modules) < threads - 1:
            self._modules.append(self.model.replica_module())
        if self._pool_size < threads:
            if self._pool is not None:
                self._pool.shutdown(wait=False)  # idle between rounds: its threads just end
            self._pool = ThreadPoolExecutor(threads, thread_name_prefix="fedrepro-client")
            self._pool_size = threads
        replicas = [self.model] + [self.model.with_module(m) for m in self._modules[:threads - 1]]
        pending, lock, stop = iter(range(n)), threading.Lock(), threading.Event()

        def worker(model: FlatModel) -> None:
            # per thread (OpenMP's count is a thread's own) and again each round: the main
            # thread's restore below resets the count that MKL shares between threads
            torch.set_num_threads(1)
            try:
                while not stop.is_set():
                    with lock:
                        i = next(pending, None)
                    if i is None:
                        return
                    train(i, model)
            except BaseException:
                stop.set()  # the other threads end after their current client
                raise

        before = torch.get_num_threads()
        futures = [self._pool.submit(worker, model) for model in replicas]
        try:
            wait(futures)
        finally:  # also on an interrupt: no thread starts another client, the count comes back
            stop.set()
            wait(futures)
            torch.set_num_threads(before)
        for future in futures:
            future.result()  # a client's error, raised here

    def blocks(self, client: int, num_blocks: int) -> list[torch.Tensor]:
        key = (client, num_blocks)
        if key not in self._blocks:
            self._blocks[key] = block_partition(len(self.client_indices[client]), num_blocks, self.seed, client)
        return self._blocks[key]

    def full_gradient(self, client: int, w: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
        """Mean data gradient over all of `client`'s samples at w (no augmentation; BatchNorm
        in train mode on a scratch copy of the server's statistics)."""
        idx = self.client_indices[client]
        total = torch.zeros_like(w)
        for rows in idx.split(chunk):
            _, grad = self._gradient(w, self.x[rows], self.y[rows], self.model.buffers.clone())
            total += grad * (len(rows) / len(idx))
        return total

    def _gradient(self, w: torch.Tensor, xb, yb, buffers, model: FlatModel | None = None):
        w = w.detach().requires_grad_(True)
        with autocast(self.precision, w.device):  # the forward only, as under Fabric
            loss = (model or self.model).loss(w, xb, yb, buffers)
        (grad,) = torch.autograd.grad(loss, w)
        return loss, grad

    def train_client(self, job: ClientJob, lr: float, round: int, buffers: torch.Tensor | None = None,
                     model: FlatModel | None = None):
        """Train one client; `buffers` (its copy of the BatchNorm statistics) is updated in place;
        `model`: the FlatModel to compute with (a client thread's own; default the executor's)."""
        idx = self.client_indices[job.client]
        g = generator(self.seed, "batches", round, job.client, device="cpu")
        obj = job.objective
        rule = obj.rule
        if rule is not None and rule.num_blocks:
            blocks = self.blocks(job.client, rule.num_blocks)
            choices = block_choices(rule.num_blocks, job.steps, g)
            schedule = [blocks[j] for j in choices]
        else:
            schedule = batch_schedule(len(idx), self.batch_size, job.steps, g, "cpu")
            choices = [None] * len(schedule)
        g_aug = generator(self.seed, "augment", round, job.client, device="cpu") if self.augment else None
        decay = self.weight_decay + obj.extra_decay
        w = (obj.anchor if obj.start is None else obj.start).clone()
        total = 0.0
        for step, positions in enumerate(schedule):
            rows = idx[positions.to(idx.device)]
            xb, yb = self.x[rows], self.y[rows]
            if g_aug is not None:
                xb = augment_batch(self.augment, xb, g_aug)
            loss, grad = self._gradient(w, xb, yb, buffers, model)
            if rule is not None:
                # the same batch at another point, on a scratch copy of the BatchNorm statistics
                # (updated once per step); only rules that call grad_at pay for it
                grad = rule.direction(step, choices[step], w, grad, lambda v: self._gradient(
                    v, xb, yb, None if buffers is None else buffers.clone())[1])
            penalty = obj.gradient(w)
            if penalty is not None:
                grad += penalty
            if self.clip_norm is not None:
                # torch.nn.utils.clip_grad_norm_'s rule: scale by max_norm / (norm + 1e-6) when above
                norm = grad.norm()
                grad *= torch.clamp(self.clip_norm / (norm + 1e-6), max=1.0)
            if decay:
                grad += decay * w
            w -= lr * grad
            if obj.prox is not None:
                w = obj.prox(w, lr)
            total += loss.item()
        mean_loss = total / max(len(schedule), 1)
        return w, (mean_loss if math.isfinite(mean_loss) else float("nan"))
