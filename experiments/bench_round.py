"""`make bench`'s paper-setting rounds: fedrepro against a reference loop written like the papers' code.

    python -m experiments.bench --only rounds [--rounds 5] [--round-algorithms feddyn,fedavg]
                                              [--round-threads 1,2]

The setting (issue 30, FedDyn's MNIST setting, `PAPER`): MNIST (from FEDREPRO_DATA_ROOT; else
generated MNIST-shaped data, 60 000 x 784 training and 10 000 test samples, said in the row's
`data`), the MLP 784-200-200-10, 100 clients of a balanced Dirichlet 0.3 split, Bernoulli
participation at 10 %, batch 50, lr 0.1 x 0.998^t, weight decay 1e-3, clipping at norm 10;
FedDyn alpha 0.01 with 50 local epochs, FedAvg 10; every round evaluated on the full test
(10 000) and training (60 000) sets. For each (threads, algorithm), in one process, `rounds`
rounds a side from the same initial model, interleaved (reference round t, fedrepro round t,
reference round t + 1, ...) so that the machine's load, which varies, meets both sides alike;
seconds a round = wall time of a side's rounds / rounds, speed-up = their ratio. Each row also
says where its side's round went (`train_share`, `eval_share`, fedrepro's `aggregate_share`,
`other_share`: sampling, the ledger, uploads, the server step of the reference).

The reference loop (`ReferenceLoop`), as the FedDyn authors' public PyTorch code trains
(github.com/alpemreacar/FedDyn, utils_methods.py / utils_general.py), one client after another:
a fresh `nn.Module` (Linear/ReLU) loaded with the server model; one
`DataLoader(TensorDataset(x_k, y_k), batch_size=50)` per client, iterated once per epoch for
ceil(n_k / 50) batches; `torch.optim.SGD(lr, weight_decay)`; per step the mean cross-entropy,
for FedDyn the penalty over the concatenated parameter list, `backward`,
`clip_grad_norm_(max_norm=10)`, `step`, `loss.item()`. FedDyn in the paper's variables
(Alg. 1; alpha_k = alpha / (n_k / mean n), the authors' per-client alpha, = alpha here):

    local loss   CE(p) - <p, lambda_k> + alpha_k/2 ||p - theta||^2
                 written as the authors do: CE(p) - <p, lambda_k> - alpha_k <p, theta> in the
                 loss (summed over the parameter list each step) and alpha_k/2 ||p||^2 in SGD's
                 weight decay (so applied after clipping); `quadratic_in_loss=True` puts the
                 whole quadratic in the loss instead (then clipped with the rest)
    client       lambda_k <- lambda_k - alpha_k (theta_k - theta)       (the grad-state)
    server       h <- h - alpha (1/m) sum_{k active} (theta_k - theta);  theta <- mean_{active} theta_k - h / alpha

FedAvg: the selected clients' models averaged by data size. Evaluation each round as the
authors' `get_acc_loss`: a DataLoader over TensorDataset(x, y) in batches of min(6000, n),
`model.eval()`, `torch.no_grad()`, summed cross-entropy and argmax accuracy, for two models (the
server model and the mean of every client's latest model: uniform for FedDyn, by data size for
FedAvg) on the full test and training sets.

The same work on both sides: the same data, split, initial model and clients each round
(fedrepro's `sample_clients`); the same batches (the reference's sampler draws one permutation
per epoch from fedrepro's (seed, "batches", round, client) generator: shuffle=True's sampler
with its generator given), so the same local steps per client, epochs x ceil(n_k / B), and the
same numbers to float32 rounding (tests/test_bench_round.py); the same step (mean batch loss,
penalty, clipping of the global norm, weight decay after clipping). fedrepro's side is
`fedrepro.run.build_federation` (what `run_experiment` builds) with `profile=paper` and
`train.executor=auto`, timed over `RoundLoop.run_round` (sampling, ledger, local training,
aggregation, evaluation): `run_experiment`'s `seconds_per_round` times the same plus a CSV write
a round. Differences that remain, stated in the rows:
- evaluation volume: fedrepro scores three models a round for FedDyn (server, all clients'
  mean, the selected clients' mean), the reference two, as the authors' code does (FedDyn's code
  scores the active and all clients' means; we score the server model in place of the active
  mean, the same cost): fedrepro evaluates 1.5x the samples (`eval_samples_per_round`), so the
  ratio understates the speed-up on equal work (`eval_models=3` scores the third model too).
  For FedAvg the server model is the selected clients' mean (scored once, as the authors'
  code scores its avg_model once): two models on each side;
- the authors concatenate the parameter list one tensor at a time (`torch.cat` in a loop); the
  reference concatenates once, a little cheaper;
- excluded on both sides: loading and splitting the data, building the models; fedrepro's numba
  kernel is compiled once before timing (a per-process cost, not a per-round one).
"""
from __future__ import annotations

import logging
import math
import re
import time
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn
from torch.utils.data import DataLoader, Sampler, TensorDataset

import fedrepro  # noqa: F401  (torchvision shim first)

from fedrepro.engine.sampling import sample_clients
from fedrepro.seeding import generator

log = logging.getLogger("fedrepro.experiments")

ALGORITHMS = ("feddyn", "fedavg")


def device_name(device: str) -> str:
    """What `device` is, for a table (the GPU's name, or the CPU's): `cpu`, `cuda` or `cuda:N`
    on a machine that has it; anything else is a ConfigError that names the choices."""
    import platform

    from fedrepro.errors import ConfigError

    if device == "cpu":
        return platform.processor() or platform.machine()
    if not re.fullmatch(r"cuda(:\d+)?", device):
        raise ConfigError(f"--device {device!r}: choose cpu, cuda or cuda:N")
    if not torch.cuda.is_available():
        raise ConfigError(f"--device {device}: torch {torch.__version__} sees no CUDA GPU here; use --device cpu")
    return torch.cuda.get_device_name(torch.device(device))


def synchronize() -> None:
    """Wait for queued GPU work, so that a host clock read after it times the work (a no-op on the CPU)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def matmul_rate(seconds: float, device: str = "cpu") -> float:
    """FLOP/s of a 2048 x 2048 float32 product on `device` at this thread count (on a GPU, in the
    precision torch's defaults give float32 products: full float32 unless TF32 is switched on)."""
    a, b = torch.randn(2048, 2048, device=device), torch.randn(2048, 2048, device=device)
    a @ b
    synchronize()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        a @ b
        n += 1
        if n % 10 == 0:
            synchronize()
    synchronize()
    return 2 * 2048 ** 3 * n / (time.perf_counter() - t0)


def mlp_sample_flops(in_dim: int, hidden, num_classes: int, batch: int = 50) -> tuple[float, float]:
    """(FLOPs a training sample costs: forward + backward, FLOPs an evaluated sample costs: forward)
    of the MLP, as torch's FlopCounterMode counts its products (linear in the batch for an MLP)."""
    from torch.utils.flop_counter import FlopCounterMode

    model, x = mlp_module(in_dim, hidden, num_classes), torch.randn(batch, in_dim)
    with FlopCounterMode(display=False) as train:
        nn.functional.cross_entropy(model(x), torch.zeros(batch, dtype=torch.long)).backward()
    with FlopCounterMode(display=False) as forward, torch.no_grad():
        model(x)
    return train.get_total_flops() / batch, forward.get_total_flops() / batch


@dataclass(frozen=True)
class RoundSetting:
    """One federated setting, as fedrepro overrides and as the reference loop's parameters."""

    clients: int = 100
    participation: float = 0.1  # Bernoulli
    batch: int = 50
    lr: float = 0.1
    lr_decay: float = 0.998
    weight_decay: float = 1e-3
    clip: float = 10.0
    dirichlet: float = 0.3
    alpha: float = 0.01  # FedDyn
    feddyn_epochs: int = 50
    fedavg_epochs: int = 10
    hidden: tuple = (200, 200)
    seed: int = 0

    def epochs(self, algorithm: str) -> int:
        return {"feddyn": self.feddyn_epochs, "fedavg": self.fedavg_epochs}[algorithm]

    def overrides(self, algorithm: str, rounds: int) -> list[str]:
        """fedrepro's config for the setting (`python -m fedrepro <these>` runs it)."""
        extra = [f"algorithm.alpha={self.alpha}"] if algorithm == "feddyn" else []
        return ["dataset=mnist", "model=mlp_mnist", f"model.hidden=[{','.join(map(str, self.hidden))}]",
                "split=dirichlet", f"split.alpha={self.dirichlet}", "split.balance=balanced",
                "participation=p10", f"participation.rate={self.participation}",
                f"algorithm={algorithm}", *extra, "profile=paper", f"seed={self.seed}",
                f"train.num_clients={self.clients}", f"train.rounds={rounds}",
                f"train.local_epochs={self.epochs(algorithm)}", f"train.batch_size={self.batch}",
                f"train.lr={self.lr}", f"train.lr_decay={self.lr_decay}",
                f"train.weight_decay={self.weight_decay}", f"train.clip_norm={self.clip}",
                "train.eval_every=1", "train.executor=auto", "train.device=cpu"]


PAPER = RoundSetting()


# -- the reference loop ----------------------------------------------------------------------

class EpochShuffle(Sampler):
    """shuffle=True's sampler with its generator given: a fresh permutation of the n samples each
    time the loader is iterated (once per epoch), one torch.randperm(n) from `g` each, as
    fedrepro draws its batch schedule. (RandomSampler draws a second permutation when a partial
    last batch exhausts it, which would shift the next epoch's order.)"""

    def __init__(self, n: int, g: torch.Generator):
        self.n, self.g = n, g

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return iter(torch.randperm(self.n, generator=self.g).tolist())


def mlp_module(in_dim: int, hidden, num_classes: int) -> nn.Module:
    """The papers' MNIST MLP (FedDyn's 'mnist_2NN'): Linear and ReLU, parameters in fedrepro's
    flat order (each layer's weight, then bias)."""
    layers, width = [], in_dim
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, num_classes))
    return nn.Sequential(*layers)


def feddyn_server_update(h: torch.Tensor, server_prev: torch.Tensor, active_models: torch.Tensor,
                         num_clients: int, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """FedDyn's server step (paper Alg. 1) with the round's active clients' models (S, d):
    h <- h - alpha (1/m) sum_k (theta_k - theta_prev); theta <- mean_k theta_k - h / alpha."""
    h = h - alpha / num_clients * (active_models - server_prev).sum(0)
    return h, active_models.mean(0) - h / alpha


@torch.no_grad()
def evaluate_module(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
    """(mean loss, accuracy) as the authors' `get_acc_loss`: DataLoader, batches of min(6000, n),
    each moved to the model's device."""
    loss_fn = nn.CrossEntropyLoss(reduction="sum")
    loader = DataLoader(TensorDataset(x, y), batch_size=min(6000, len(y)), shuffle=False)
    device = next(model.parameters()).device
    model.eval()
    loss, correct = 0.0, 0
    for xb, yb in loader:
        xb, yb = xb.to(device), yb.to(device)
        out = model(xb)
        loss += loss_fn(out, yb.reshape(-1).long()).item()
        correct += int((out.argmax(1) == yb).sum())
    model.train()
    return loss / len(y), correct / len(y)


class ReferenceLoop:
    """FedAvg or FedDyn rounds written as the papers' code (see the module doc)."""

    def __init__(self, algorithm: str, setting: RoundSetting, x_train: torch.Tensor, y_train: torch.Tensor,
                 x_test: torch.Tensor, y_test: torch.Tensor, parts, w0: torch.Tensor, *,
                 num_classes: int = 10, eval_models: int = 2, quadratic_in_loss: bool = False,
                 device: str = "cpu"):
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm={algorithm!r}; the reference loop has {ALGORITHMS}")
        if eval_models not in (2, 3):
            raise ValueError(f"eval_models={eval_models}: 2 (server, all clients) or 3 (and the selected clients)")
        self.algorithm, self.s, self.device = algorithm, setting, device
        # the data stays in host memory and each batch is moved to `device`, as the authors' code does
        self.x_train, self.y_train, self.x_test, self.y_test = x_train, y_train, x_test, y_test
        self.client_x = [x_train[torch.as_tensor(p, dtype=torch.long)] for p in parts]
        self.client_y = [y_train[torch.as_tensor(p, dtype=torch.long)] for p in parts]
        self.num_clients = len(parts)
        self.in_dim, self.num_classes = int(x_train[0].numel()), num_classes
        self.eval_models, self.quadratic_in_loss = eval_models, quadratic_in_loss
        n = torch.tensor([len(p) for p in parts], dtype=torch.float32)
        self.sizes = n.to(device)
        self.alpha_k = (setting.alpha * n.mean() / n).tolist()  # the authors' per-client alpha
        self.server = w0.detach().clone().to(device)
        self.client_models = self.server.expand(self.num_clients, -1).clone()  # latest, initial until sampled
        if algorithm == "feddyn":
            self.lam = torch.zeros(self.num_clients, self.server.numel(), device=device)  # grad-states lambda_k
            self.h = torch.zeros(self.server.numel(), device=device)
        self.round_steps: dict[int, int] = {}

    # the authors' model_func() + set_client_from_params
    def module_with(self, w: torch.Tensor) -> nn.Module:
        model = mlp_module(self.in_dim, self.s.hidden, self.num_classes).to(self.device)
        with torch.no_grad():  # copies (vector_to_parameters would make the parameters views of w)
            for p, v in zip(model.parameters(), w.split([p.numel() for p in model.parameters()])):
                p.copy_(v.view_as(p))
        return model

    def train_client(self, k: int, lr: float, round: int) -> tuple[torch.Tensor, int]:
        """Client k's local training from the server model: (its model, the steps it took)."""
        s, feddyn = self.s, self.algorithm == "feddyn"
        model = self.module_with(self.server)
        for p in model.parameters():
            p.requires_grad = True
        x, y = self.client_x[k], self.client_y[k]
        n = len(y)
        loader = DataLoader(TensorDataset(x, y), batch_size=s.batch,
                            sampler=EpochShuffle(n, generator(s.seed, "batches", round, k)))
        loss_fn = nn.CrossEntropyLoss(reduction="sum")
        alpha_k = self.alpha_k[k]
        decay = s.weight_decay + (alpha_k if feddyn and not self.quadratic_in_loss else 0.0)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, weight_decay=decay)
        model.train()
        if feddyn:
            lam, server = self.lam[k], self.server
        steps, epoch_loss = 0, 0.0
        for _ in range(self.s.epochs(self.algorithm)):
            batches = iter(loader)
            for _ in range(math.ceil(n / s.batch)):
                xb, yb = next(batches)
                xb, yb = xb.to(self.device), yb.to(self.device)
                out = model(xb)
                loss = loss_fn(out, yb.reshape(-1).long()) / yb.size(0)
                if feddyn:  # the penalty over the parameter list, every step
                    flat = torch.cat([p.reshape(-1) for p in model.parameters()])
                    if self.quadratic_in_loss:
                        loss = loss - torch.sum(flat * lam) + alpha_k / 2 * torch.sum((flat - server) ** 2)
                    else:
                        loss = loss - torch.sum(flat * lam) - alpha_k * torch.sum(flat * server)
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(parameters=model.parameters(), max_norm=s.clip)
                optimizer.step()
                epoch_loss += loss.item() * yb.size(0)  # the authors' per-step loss read-out
                steps += 1
        for p in model.parameters():
            p.requires_grad = False
        return torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone(), steps

    def evaluate(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> tuple[float, float]:
        return evaluate_module(model, x, y)

    def run_round(self, t: int) -> dict:
        """Round t (0-based): local training, the server step, the evaluation; the round's row."""
        s = self.s
        selected = sample_clients("bernoulli", s.participation, None, self.num_clients, s.seed, t).to(self.device)
        lr = s.lr * s.lr_decay ** t
        server_prev = self.server
        self.round_steps = {}
        for k in selected.tolist():
            theta_k, self.round_steps[k] = self.train_client(k, lr, t)
            self.client_models[k] = theta_k
            if self.algorithm == "feddyn":
                self.lam[k] -= self.alpha_k[k] * (theta_k - server_prev)
        active = self.client_models[selected]
        if self.algorithm == "feddyn":
            self.h, self.server = feddyn_server_update(self.h, server_prev, active, self.num_clients, s.alpha)
            all_weights = torch.full((self.num_clients,), 1.0 / self.num_clients, device=self.device)
            sel_weights = torch.full((len(selected),), 1.0 / len(selected), device=self.device)
        else:
            sel_weights = self.sizes[selected] / self.sizes[selected].sum()
            self.server = sel_weights @ active
            all_weights = self.sizes / self.sizes.sum()
        models = {"server": self.server, "all": all_weights @ self.client_models}
        if self.eval_models == 3:
            models["selected"] = sel_weights @ active
        row = {"round": t + 1, "clients": len(selected), "steps": sum(self.round_steps.values()),
               "train_samples": s.epochs(self.algorithm) * int(self.sizes[selected].sum()),
               "eval_samples": len(models) * (len(self.y_test) + len(self.y_train))}
        for label, w in models.items():
            model = self.module_with(w)
            row[f"{label}_test_loss"], row[f"{label}_test_acc"] = self.evaluate(model, self.x_test, self.y_test)
            row[f"{label}_train_loss"], _ = self.evaluate(model, self.x_train, self.y_train)
        return row


# -- fedrepro's side ---------------------------------------------------------------------------

def fedrepro_federation(algorithm: str, setting: RoundSetting, data, rounds: int, parts=None, device: str = "cpu"):
    """(config, client split, `fedrepro.run.Federated`) of the setting on `data` (DatasetTensors):
    what `run_experiment` builds for these overrides, on this data."""
    from fedrepro.config import compose_config, validate
    from fedrepro.run import build_federation, client_partition

    cfg = compose_config(setting.overrides(algorithm, rounds))
    validate(cfg)
    if parts is None:
        parts = client_partition(cfg, data)
    return cfg, parts, build_federation(cfg, data, parts, device)


def fedrepro_eval_samples(loop) -> int:
    """Samples the loop's last evaluation scored: its distinct models x (test + training-loss set)."""
    return loop.scored_models * (len(loop.eval_data.y_test) + len(loop.eval_data.y_train))


def _compile_fused_step() -> None:
    """fedrepro's numba step compiles on its first call (once per process): do it before timing."""
    try:
        from fedrepro.engine.fused import sgd_step

        w, g = torch.zeros(2, 8), torch.zeros(2, 8)
        v = torch.zeros(2)
        sgd_step(w, g, v, decay=v, mu=v, l1=v, anchors=None, linear=torch.zeros(2, 8), clip=1.0)
    except Exception as exc:  # a moved or changed kernel: timed with whatever it costs
        log.debug(f"fused step not compiled ahead ({type(exc).__name__}: {exc})")


# -- data ----------------------------------------------------------------------------------------

def mnist_data(data_root: Optional[str]):
    """(DatasetTensors, where it came from): MNIST from `data_root`, or generated MNIST-shaped data
    (60 000 x 784 training and 10 000 test samples, 10 random labels) when it is not there."""
    from fedrepro.data.common import DatasetTensors
    from fedrepro.data.loaders import load_dataset

    if data_root:
        try:
            return load_dataset("mnist", data_root, download=False), "MNIST"
        except Exception as exc:  # a missing file: fall back, and say so
            why = f"generated MNIST-shaped ({type(exc).__name__})"
    else:
        why = "generated MNIST-shaped (FEDREPRO_DATA_ROOT unset)"
    g = torch.Generator().manual_seed(0)
    data = DatasetTensors("mnist", torch.randn(60_000, 784, generator=g), torch.randint(0, 10, (60_000,), generator=g),
                          torch.randn(10_000, 784, generator=g), torch.randint(0, 10, (10_000,), generator=g), 10,
                          source=why)
    return data, why


# -- the bench rows --------------------------------------------------------------------------------

class PartTimer:
    """Seconds spent in some methods of some objects (wrapped on the instances), by part name."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    def wrap(self, obj, method: str, part: str) -> None:
        inner = getattr(obj, method)

        def timed(*args, **kwargs):
            synchronize()
            t0 = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                synchronize()
                self.seconds[part] = self.seconds.get(part, 0.0) + time.perf_counter() - t0

        setattr(obj, method, timed)

    def shares(self, total: float, parts) -> dict[str, float]:
        """Each part's share of `total` seconds, and `other_share` for the rest."""
        out = {f"{p}_share": self.seconds.get(p, 0.0) / total for p in parts}
        out["other_share"] = 1.0 - sum(out.values())
        return out


def measure_pair(algorithm: str, threads: int, data, source: str, setting: RoundSetting, rounds: int,
                 parts=None, eval_models: int = 2, device: str = "cpu", rate_seconds: float = 2.0) -> list[dict]:
    """The reference loop and fedrepro at `threads` threads, their rounds interleaved (round t of the
    reference, then round t of fedrepro, ...), so that a change of the machine's load meets both
    sides alike; two rows, with where each side's time went (`*_share`).

    fedrepro's row also gives its round's products alone at the matmul rate of these threads
    (`products_seconds`: trained samples x forward-and-backward FLOPs + evaluated samples x forward
    FLOPs, over `matmul_rate`), and `attainable_speedup` = the reference's seconds / that: no
    executor doing these products reaches more, whatever it saves around them."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    ref_timer, fed_timer = PartTimer(), PartTimer()
    try:
        rate = matmul_rate(rate_seconds, device)
        cfg, parts, fed = fedrepro_federation(algorithm, setting, data, rounds, parts, device)
        w0 = fed.algorithm.server_model().clone()
        ref = ReferenceLoop(algorithm, setting, data.x_train, data.y_train, data.x_test, data.y_test, parts, w0,
                            num_classes=data.num_classes, eval_models=eval_models, device=device)
        _compile_fused_step()
        ref_timer.wrap(ref, "train_client", "train")
        ref_timer.wrap(ref, "evaluate", "eval")
        fed_timer.wrap(fed.loop.executor, "run", "train")
        fed_timer.wrap(fed.loop, "evaluate", "eval")
        fed_timer.wrap(fed.algorithm, "aggregate", "aggregate")
        ref_s = fed_s = 0.0
        ref_rows, fed_rows, fed_steps = [], [], []
        for t in range(rounds):
            synchronize()
            t0 = time.perf_counter()
            ref_rows.append(ref.run_round(t))
            synchronize()
            t1 = time.perf_counter()
            fed_rows.append(fed.loop.run_round(t))
            synchronize()
            t2 = time.perf_counter()
            ref_s, fed_s = ref_s + t1 - t0, fed_s + t2 - t1
            fed_steps.append(sum(getattr(fed.loop, "round_steps", {}).values()))
    finally:
        torch.set_num_threads(previous)
    executor = type(getattr(fed.loop.executor, "inner", fed.loop.executor)).__name__
    common = {"workload": f"mnist_{algorithm}_round", "batch": setting.batch, "threads": threads, "device": device,
              "rounds": rounds, "data": source,
              "clients_per_round": sum(r["clients"] for r in ref_rows) / rounds,
              "local_steps_per_round": sum(r["steps"] for r in ref_rows) / rounds}
    ref_row = {**common, "method": "round_reference", "executor": "DataLoader + nn.Module + SGD (papers' code)",
               "seconds_per_round": ref_s / rounds,
               "client_steps_per_s": common["local_steps_per_round"] * rounds / ref_s,
               "eval_models": eval_models, "eval_samples_per_round": ref_rows[-1]["eval_samples"],
               "speedup": 1.0, "server_test_acc": ref_rows[-1]["server_test_acc"],
               **ref_timer.shares(ref_s, ("train", "eval"))}
    fed_eval = fedrepro_eval_samples(fed.loop)
    train_flops, eval_flops = mlp_sample_flops(ref.in_dim, setting.hidden, ref.num_classes, setting.batch)
    products_s = (sum(r["train_samples"] for r in ref_rows) / rounds * train_flops + fed_eval * eval_flops) / rate
    fed_row = {**common, "method": "round_fedrepro",
               "executor": f"fedrepro {executor} (profile=paper, executor=auto)",
               "seconds_per_round": fed_s / rounds, "client_steps_per_s": sum(fed_steps) / fed_s,
               "eval_models": fed_eval // (len(fed.loop.eval_data.y_test) + len(fed.loop.eval_data.y_train)),
               "eval_samples_per_round": fed_eval, "speedup": ref_s / fed_s,
               "server_test_acc": fed_rows[-1]["server_test_acc"],
               "threads_matmul_gflops": rate / 1e9, "products_seconds": products_s,
               "attainable_speedup": ref_s / rounds / products_s,
               **fed_timer.shares(fed_s, ("train", "eval", "aggregate"))}
    if fed_steps and sum(fed_steps) / rounds != common["local_steps_per_round"]:
        log.warning(f"{algorithm}: local steps differ (reference {common['local_steps_per_round']:.0f}, "
                    f"fedrepro {sum(fed_steps) / rounds:.0f} a round)")
    return [ref_row, fed_row]


def round_rows(data_root: Optional[str], rounds: int, algorithms=ALGORITHMS, threads=(1, 2),
               setting: RoundSetting = PAPER, eval_models: int = 2, data=None, device: str = "cpu",
               rate_seconds: float = 2.0) -> list[dict]:
    """Every (threads, algorithm) pair's two rows (`measure_pair`), one pair after the other in this process."""
    if data is None:
        data, source = mnist_data(data_root)
    else:
        source = data.source
    from fedrepro.config import compose_config
    from fedrepro.run import client_partition

    parts = client_partition(compose_config(setting.overrides(algorithms[0], rounds)), data)  # the same split for all
    rows = []
    for n in threads:
        for algorithm in algorithms:
            pair = measure_pair(algorithm, n, data, source, setting, rounds, parts, eval_models, device,
                                rate_seconds)
            ref, ours = pair
            log.info(f"paper-setting round, {algorithm}, {device}, {n} thread{'s' if n > 1 else ''}: reference "
                     f"{ref['seconds_per_round']:.2f} s, fedrepro {ours['seconds_per_round']:.2f} s "
                     f"({ours['speedup']:.2f}x, at most {ours['attainable_speedup']:.2f}x at the matmul rate; "
                     f"{ref['local_steps_per_round']:.0f} client-steps a round, evaluated "
                     f"{ref['eval_samples_per_round']} / {ours['eval_samples_per_round']} samples; {source})")
            rows += pair
    return rows


def rounds_markdown(rows: list[dict], rounds: int) -> str:
    """One line per (algorithm, threads): both sides' seconds a round, the ratio, and where each
    side's round went (local training / evaluation / aggregation / the rest)."""
    from fedrepro.reports.tables import markdown_grid

    if not rows:
        return ""
    by = {(r["workload"], r["threads"], r["method"]): r for r in rows}
    pct = lambda r, part: f"{r.get(part + '_share', float('nan')):.0%}"  # noqa: E731
    lines = []
    for (workload, threads, method), ref in by.items():
        if method != "round_reference":
            continue
        ours = by[(workload, threads, "round_fedrepro")]
        lines.append([workload.removeprefix("mnist_").removesuffix("_round"), threads,
                      f"{ref['clients_per_round']:.1f}", f"{ref['local_steps_per_round']:.0f}",
                      f"{ref['seconds_per_round']:.2f}", f"{ours['seconds_per_round']:.2f}",
                      f"**{ours['speedup']:.2f}x**", f"{ours['attainable_speedup']:.2f}x",
                      f"{ref['eval_samples_per_round']} / {ours['eval_samples_per_round']}",
                      " / ".join(pct(ref, p) for p in ("train", "eval", "other")),
                      " / ".join(pct(ours, p) for p in ("train", "eval", "aggregate", "other"))])
    headers = ["paper-setting round", "threads", "clients", "client-steps", "reference s/round",
               "fedrepro s/round", "speed-up", "at most (products alone)", "evaluated samples (ref / fedrepro)",
               "reference: train / eval / other", "fedrepro: train / eval / aggregate / other"]
    first = rows[0]
    return (f"\n{rounds} round{'s' if rounds > 1 else ''} of FedDyn's MNIST setting a side, interleaved "
            f"({first['data']}; reference: DataLoader + nn.Module + SGD as the papers' code, "
            f"{first['eval_models']} models evaluated a round; fedrepro: profile=paper, executor=auto):\n\n"
            + markdown_grid(headers, lines, right_align={1, 2, 3, 4, 5, 6, 7}) + "\n"
            + "\n(at most: the reference's seconds over fedrepro's round's products alone at the matmul rate "
              "of those threads, the speed-up no executor doing these products can pass)\n")
