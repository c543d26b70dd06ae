"""Client sharding: the round's clients split across processes (or GPUs) through Lightning Fabric.

Every rank runs the whole round loop on the same seeds (sampling, server step, ledger and
evaluation are cheap and deterministic), so every rank holds the same server state; only the
local training is split. Rank r trains the r-th contiguous share of the round's clients with
its own executor (sequential or batched) and `all_gather` hands every rank every client's
model, mean loss and BatchNorm statistics, in the round's client order. Each client's batches
come from its own (seed, round, client) generator, so the numbers do not depend on which rank
trains it: bit for bit those of one process with the sequential executor, to float rounding
with the batched one (its matrix products group the clients differently), as a different
thread count would. Hence `train.devices` (older name `train.processes`) is not part of the
run key. CPU ranks talk over gloo, GPU ranks over NCCL (Fabric's ddp strategy); every rank's
Fabric has the run's accelerator and precision.
"""
from __future__ import annotations

import torch

from fedrepro.engine.precision import DEFAULT_PRECISION


def shares(n: int, ranks: int) -> list[range]:
    """Contiguous shares of n jobs over `ranks` ranks, sizes differing by at most one."""
    base, extra = divmod(n, ranks)
    out, start = [], 0
    for r in range(ranks):
        size = base + (r < extra)
        out.append(range(start, start + size))
        start += size
    return out


class ShardedExecutor:
    """`inner` (any executor) on this rank's share of each round's clients; gathers the rest."""

    def __init__(self, inner, fabric):
        self.inner, self.fabric = inner, fabric
        self.last_buffers = None

    def __getattr__(self, name):  # full_gradient, x, y, client_indices, ... of the inner executor
        return getattr(self.inner, name)

    def run(self, jobs, lr: float, round: int):
        world, rank = self.fabric.world_size, self.fabric.global_rank
        parts = shares(len(jobs), world)
        mine = [jobs[i] for i in parts[rank]]
        anchor = jobs[0].objective.anchor
        width = max(len(p) for p in parts)
        models = torch.zeros(width, anchor.numel(), dtype=anchor.dtype, device=anchor.device)
        losses = torch.zeros(width, dtype=torch.float64, device=anchor.device)
        buffer_dim = self.inner.model.buffer_dim
        buffers = torch.zeros(width, buffer_dim, dtype=anchor.dtype, device=anchor.device)
        if mine:
            m, l = self.inner.run(mine, lr, round)
            models[:len(mine)], losses[:len(mine)] = m, l.to(losses.device)
            if buffer_dim:
                buffers[:len(mine)] = self.inner.last_buffers
        # one collective per tensor per round, (world, width, ...) on every rank; the shares are
        # contiguous, so the round's order is rank-major without the padding rows
        order = torch.tensor([r * width + i for r, p in enumerate(parts) for i in range(len(p))],
                             device=anchor.device)

        def gathered(t: torch.Tensor) -> torch.Tensor:
            return self.fabric.all_gather(t).flatten(0, 1).index_select(0, order)

        if buffer_dim:
            self.last_buffers = gathered(buffers)
        return gathered(models), gathered(losses).cpu()


def spawn(train, processes: int, accelerator: str, *args, precision: str = DEFAULT_PRECISION):
    """Run `train(fabric, *args)` on `processes` ranks (Fabric's `devices`, one process each,
    spawned here; each rank's Fabric with `accelerator` and `precision`) and return rank 0's result.
    The ranks are started with torch.multiprocessing rather than Fabric's own launcher so that each
    child imports fedrepro (and its torchvision shim) before Lightning; Fabric then joins the
    already-started processes (its "launched externally" mode)."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:  # a free port for the process group's rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    threads = max(1, torch.get_num_threads() // processes)  # the ranks share the cores
    results = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_rank_main, args=(processes, port, threads, accelerator, precision, results, train, args),
             nprocs=processes)
    return results.get()


def _rank_main(rank: int, processes: int, port: int, threads: int, accelerator: str, precision: str, results,
               train, args):
    import os

    from lightning.fabric import Fabric

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(processes),
                       "RANK": str(rank), "LOCAL_RANK": str(rank), "NODE_RANK": "0"})
    torch.set_num_threads(threads)
    fabric = Fabric(accelerator=accelerator, devices=processes, strategy="ddp", precision=precision)
    fabric.launch()
    result = train(fabric, *args)
    if rank == 0:
        results.put(result)
    # tear the process group down before the interpreter exits: left to exit, gloo's threads
    # sometimes end the rank with std::terminate (SIGABRT), seen under `make bench`
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
