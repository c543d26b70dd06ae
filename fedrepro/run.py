"""A federated run of one resolved config, resumed from what the results store holds (the store's
files, checkpoints and summary; fedrepro/runner.py decides to run it and draws its figure)."""
from __future__ import annotations

import functools
import logging
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from fedrepro import store
from fedrepro.algorithms import Federation, build_algorithm
from fedrepro.algorithms.registry import entry
from fedrepro.attacks.upload import upload_attack
from fedrepro.compression import build_channel
from fedrepro.config import check_machine, effective, resolved_executor, validate
from fedrepro.data.loaders import dataset_for
from fedrepro.data.partition import make_partition, partition_summary
from fedrepro.engine import sharded
from fedrepro.engine.batched import BatchedExecutor
from fedrepro.engine.local import SequentialExecutor
from fedrepro.engine.loop import EvalData, RoundLoop, Schedule
from fedrepro.engine.precision import DEFAULT_PRECISION
from fedrepro.errors import ConfigError, DivergenceError
from fedrepro.metrics.ledger import Ledger
from fedrepro.models.flat import model_for
from fedrepro.seeding import derive_seed, generator


logger = logging.getLogger(__name__)

# The run folder holds more than the CSV; metrics.csv itself is managed below (resume).
warnings.filterwarnings("ignore", message="Experiment logs directory .* exists and is not empty")


class Interrupted(Exception):
    """Raised by `interrupt_after` (tests): the process 'dies' right after that round."""


def _say(quiet: bool):
    """Where a run's own lines go: INFO, or DEBUG for a quiet run (one of a table's sweep, whose
    line per run says what matters; `hydra.verbose=fedrepro` or FEDREPRO_LOG_LEVEL=DEBUG shows them)."""
    return logger.debug if quiet else logger.info


def announce(cfg: DictConfig, key: str, folder: Path, quiet: bool, *, reused: bool = False) -> None:
    """Say that the run in `folder` is reused, or what is computed there and what its profile caps
    (federated and centralized runs alike: runner.run_experiment calls it)."""
    say = _say(quiet)
    if reused:
        say(f"reusing finished run {folder}")
        return
    say(f"run {key}: {cfg.algorithm.name} on {cfg.dataset.name}, {cfg.split.kind} split, seed {cfg.seed} "
        f"-> {folder}")
    say(profile_caps(cfg))


def profile_caps(cfg: DictConfig) -> str:
    """What the profile cuts from the run's paper setting (config.train against `effective`):
    'profile=quick: rounds 500 -> 100, local epochs 10 -> 1, evaluation every 1 -> 5 rounds', or
    'profile=paper: nothing capped'."""
    p, t, eff = cfg.profile, cfg.train, effective(cfg)
    caps = []
    if not entry(cfg.algorithm.name).federated:  # centralized: an epoch stands for a round (fedrepro/centralized.py)
        epochs = cfg.algorithm.epochs
        if p.max_rounds is not None and p.max_rounds < epochs:
            caps.append(f"epochs {epochs} -> {p.max_rounds}")
        if p.max_local_steps is not None:
            caps.append(f"at most {p.max_local_steps} batches an epoch")
    else:
        if eff.rounds != t.rounds:
            caps.append(f"rounds {t.rounds} -> {eff.rounds}")
        if t.local_steps is not None:
            if eff.max_local_steps is not None and eff.max_local_steps < t.local_steps:
                caps.append(f"local steps {t.local_steps} -> {eff.max_local_steps}")
        else:
            if eff.local_epochs != t.local_epochs:
                caps.append(f"local epochs {t.local_epochs} -> {eff.local_epochs}")
            if eff.max_local_steps is not None:
                caps.append(f"at most {eff.max_local_steps} local steps a round")
        if eff.eval_every != t.eval_every:
            caps.append(f"evaluation every {t.eval_every} -> {eff.eval_every} rounds")
    if eff.max_test_samples is not None:
        caps.append(f"test set at most {eff.max_test_samples} samples")
    if eff.max_train_eval_samples is not None:
        caps.append(f"training-loss set at most {eff.max_train_eval_samples} samples")
    return f"profile={p.name}: {', '.join(caps) or 'nothing capped'}"


def _subset(n: int, limit: Optional[int], seed: int, purpose: str) -> Optional[torch.Tensor]:
    if limit is None or limit >= n:
        return None
    return torch.randperm(n, generator=generator(seed, purpose))[:limit].sort().values


def partition_labels(data) -> np.ndarray:
    """Class labels for partitioning; regression targets count as one class (label skew is undefined)."""
    if data.task == "regression":
        return np.zeros(len(data.y_train), dtype=np.int64)
    return data.y_train.numpy()


def client_partition(cfg: DictConfig, data) -> list:
    """The clients' training indices: the dataset's own clients (split=natural) or a
    seeded partition of the pooled training set."""
    s = cfg.split
    if s.kind == "natural":
        if data.natural_clients is None:
            raise ConfigError(f"split=natural: dataset {cfg.dataset.name} has no clients of its own "
                              f"(only shakespeare, synthetic_feddyn, har do); choose split=iid or dirichlet")
        if len(data.natural_clients) != cfg.train.num_clients:
            raise ConfigError(f"split=natural: dataset {cfg.dataset.name} has {len(data.natural_clients)} "
                              f"clients; set train.num_clients={len(data.natural_clients)}")
        return [np.asarray(p) for p in data.natural_clients]
    return make_partition(partition_labels(data), cfg.train.num_clients, kind=s.kind,
                          seed=derive_seed(cfg.seed, "partition"), alpha=s.alpha, balance=s.balance,
                          sigma=s.sigma, shards_per_client=s.shards_per_client,
                          sorted_fraction=s.sorted_fraction)


def evaluation_sets(cfg: DictConfig, data) -> EvalData:
    """The test set and the training-loss set a run evaluates on: the profile's seeded subsets
    (federated runs, the centralized baseline and experiment loops share them)."""
    eff = effective(cfg)
    test_idx = _subset(len(data.y_test), eff.max_test_samples, cfg.seed, "test-subset")
    train_idx = _subset(len(data.y_train), eff.max_train_eval_samples, cfg.seed, "train-subset")
    return EvalData(data.x_test if test_idx is None else data.x_test[test_idx],
                    data.y_test if test_idx is None else data.y_test[test_idx],
                    data.x_train if train_idx is None else data.x_train[train_idx],
                    data.y_train if train_idx is None else data.y_train[train_idx])


def run_loggers(cfg: DictConfig, folder: Path, key: str) -> list:
    """The run's loggers: CSV always, plus W&B with logger=wandb (`RunWandbLogger`)."""
    from lightning.fabric.loggers import CSVLogger

    loggers = [CSVLogger(root_dir=str(folder), name="", version="")]
    if cfg.logger.name == "wandb":
        loggers.append(wandb_logger(cfg, folder, key))
    return loggers


def wandb_fields(cfg: DictConfig, key: str) -> dict:
    """How the run shows in W&B: id = run key (a rerun or resume continues the same W&B run), a
    readable name algorithm-dataset-split-seed, the group (logger.group: a target or a sweep)
    and tags (the paper where a target names it, profile, dataset, split)."""
    tags = [cfg.logger.paper, cfg.profile.name, cfg.dataset.name, cfg.split.kind]
    return {"id": key, "name": f"{cfg.algorithm.name}-{cfg.dataset.name}-{cfg.split.kind}-{cfg.seed}",
            "group": cfg.logger.group, "tags": list(dict.fromkeys(str(t) for t in tags if t))}


def wandb_logger(cfg: DictConfig, folder: Path, key: str):
    """Lightning's WandbLogger for the run in `folder`, offline unless logger.wandb_mode says otherwise."""
    # Offline unless the user asks otherwise: a run must never wait on the network.
    # The API key and entity are read by wandb from the environment only.
    os.environ.setdefault("WANDB_MODE", cfg.logger.wandb_mode)
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    if wandb.run is not None:
        # left open by a run of this process that raised (an earlier job of a multirun): Lightning
        # would log into it instead of starting this run's own
        wandb.run.finish(exit_code=1)
    # W&B already holds the rounds before a checkpoint if an earlier attempt logged to W&B here
    sent_before = any((folder / "wandb").glob(f"*run-*-{key}"))
    return wandb_logger_class()(folder, sent_before, project=cfg.logger.wandb_project, save_dir=str(folder),
                                mode=cfg.logger.wandb_mode, resume="allow", **wandb_fields(cfg, key),
                                config=OmegaConf.to_container(cfg, resolve=True))


@functools.cache
def wandb_logger_class() -> type:
    """`RunWandbLogger`, defined on first use: lightning.pytorch is slow to import."""
    from lightning.pytorch.loggers import WandbLogger

    class RunWandbLogger(WandbLogger):
        """Lightning's WandbLogger that ends its W&B run with the run's summary and files.

        `finalize` (called once summary.json is written) puts the final metrics in the W&B run's
        summary, logs metrics.csv, config.yaml and summary.json as an artifact and finishes the
        W&B run (Lightning leaves it open until the process exits, so the next run of a
        multirun would log into it)."""

        def __init__(self, folder: Path, sent_before: bool, **kwargs):
            super().__init__(**kwargs)
            self._wandb_init.pop("anonymous", None)  # deprecated in wandb: it only warns
            self.folder = folder
            self.sent_before = sent_before  # a resumed run sends only the rounds after its checkpoint

        def finalize(self, status: str) -> None:
            super().finalize(status)
            if self._experiment is None:
                return
            summary = store.read_summary(self.folder) or {}
            self._experiment.summary.update({**summary.get("final", {}), "status": summary.get("status"),
                                             "rounds_completed": summary.get("rounds_completed")})
            self._experiment.log_artifact(run_artifact(self.folder, self._id))
            self._experiment.finish(exit_code=0 if status == "finished" else 1)

    return RunWandbLogger


def run_artifact(folder: Path, key: str):
    """The run's record as a W&B artifact: metrics.csv, config.yaml and summary.json."""
    import wandb

    artifact = wandb.Artifact(f"run-{key}", type="fedrepro-run")
    for name in ("metrics.csv", "config.yaml", "summary.json"):
        if (folder / name).exists():
            artifact.add_file(str(folder / name), name=name)
    return artifact


def replay_history(loggers: list, history: list[dict]) -> None:
    """A resumed run's rounds up to its checkpoint: metrics.csv is rewritten with them; W&B got
    them from the attempt that wrote the checkpoint, so its resumed run continues after them."""
    for lg in loggers:
        if getattr(lg, "sent_before", False):
            continue
        for row in history:
            lg.log_metrics(row, step=row["round"])


@dataclass
class Federated:
    """One federation ready to run round by round: the loop and the pieces around it."""

    eff: object  # Effective: the profile's caps applied
    data: object  # DatasetTensors
    model: object  # FlatModel
    algorithm: object  # Algorithm
    loop: RoundLoop
    client_indices: list  # per client: its rows of the training tensors


def check_memory(cfg: DictConfig, state_bytes: int, clients: int, dim: int, quiet: bool) -> int:
    """The run's per-client state before it starts: the algorithm's (clients, d) tensors (LoSAC's
    M stored block gradients per client, FedDyn's gradients...) plus every client's latest model,
    kept by the loop; said when above 256 MiB, refused with what to set when above the memory
    this machine has free (a checkpoint holds the same again, written every
    train.checkpoint_every rounds or train.checkpoint_minutes)."""
    total = state_bytes + clients * dim * 4
    available = _available_memory()
    if available is not None and total > 0.9 * available:
        raise ConfigError(
            f"{cfg.algorithm.name} with {clients} clients of a {dim}-parameter model needs {total / 2 ** 30:.1f} GiB "
            f"of client state; {available / 2 ** 30:.1f} GiB is free: lower train.num_clients, use a smaller "
            f"model, or (LoSAC / FedSaga) fewer algorithm.blocks")
    if total > 1 << 28:
        _say(quiet)(f"{cfg.algorithm.name} holds {total / 2 ** 30:.2f} GiB of server and client state "
                    f"({clients} clients x {dim} parameters; also in each checkpoint)")
    return total


def _available_memory(meminfo: str = "/proc/meminfo") -> Optional[int]:
    """Bytes a new allocation can get: Linux's MemAvailable, which counts the page cache the
    kernel gives back (free pages alone refused LoSAC runs on a machine with 16 of 24 GB
    available, most of it cached files); free pages where there is no /proc/meminfo."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def federation_for(cfg: DictConfig, device="cpu", data=None, **kwargs) -> Federated:
    """The federation `run_experiment` would build for `cfg` (validated), on its dataset or on
    `data` when given (a relabelled view): for code that drives the rounds itself (figures,
    timings). `kwargs` go to `build_federation` (a ledger class, ...)."""
    validate(cfg)
    data = data if data is not None else dataset_for(cfg)
    return build_federation(cfg, data, client_partition(cfg, data), device, **kwargs)


def build_federation(cfg: DictConfig, data, parts: list, device="cpu", *, ledger_class: type = Ledger,
                     quiet: bool = True, fabric=None, **ledger_kw) -> Federated:
    """Model, algorithm, executor, ledger, compression channel and RoundLoop of `cfg` on `data`
    split into `parts`, on `device`: what `run_federated` runs, and what a figure that drives
    the rounds itself (LoSAC Figs. 6-7) builds, with the same seeds. `ledger_class(d, ...,
    **ledger_kw)` may be a Ledger subclass that keeps messages."""
    eff = effective(cfg)
    x_train, y_train = data.x_train.to(device), data.y_train.to(device)
    eval_data = evaluation_sets(cfg, data).to(device)
    model, theta0 = model_for(cfg, data)
    model.module.to(device)
    model.buffers = model.buffers.to(device)
    theta0 = theta0.to(device)
    client_indices = [torch.as_tensor(p, dtype=torch.long, device=device) for p in parts]
    sizes = torch.tensor([len(p) for p in parts], dtype=torch.float32)
    algorithm = build_algorithm(cfg.algorithm)
    algorithm.setup(Federation(len(parts), model.dim, sizes), theta0)
    check_memory(cfg, algorithm.memory_bytes(), len(parts), model.dim, quiet)
    ledger = ledger_class(model.dim, entropy=cfg.metrics.entropy, bin_width=cfg.metrics.bin_width,
                          wire_bits=True, lossless=cfg.metrics.lossless, **ledger_kw)
    channel = build_channel(cfg.compressor, num_clients=len(parts), seed=cfg.seed)
    t, p = cfg.train, cfg.participation
    # train.precision: the executors and the evaluation enter Fabric's autocast context themselves
    # (engine/precision.py), so a federation built without Fabric computes the same numbers
    precision = t.get("precision", DEFAULT_PRECISION)
    common = dict(batch_size=t.batch_size, weight_decay=t.weight_decay, clip_norm=t.clip_norm, seed=cfg.seed,
                  augment=data.augment, precision=precision)
    if resolved_executor(cfg) == "batched":  # trains the round's clients together: no client threads
        executor = BatchedExecutor(model, x_train, y_train, client_indices, **common)
    else:
        executor = SequentialExecutor(model, x_train, y_train, client_indices, **common,
                                      client_threads=t.get("client_threads") or torch.get_num_threads())
    if fabric is not None and fabric.world_size > 1:
        executor = sharded.ShardedExecutor(executor, fabric)
    loop = RoundLoop(model=model, algorithm=algorithm, executor=executor, ledger=ledger,
                     client_sizes=sizes, theta0=theta0, eff=eff, eval_data=eval_data,
                     schedule=Schedule(t.lr, t.lr_decay, t.batch_size, p.mode, p.rate,
                                       p.cohort_size, cfg.seed), channel=channel, precision=precision)
    return Federated(eff, data, model, algorithm, loop, client_indices)


def run_federated(cfg: DictConfig, key: str, folder: Path, *, interrupt_after: Optional[int] = None,
                  quiet: bool = False, ledger_class: type = Ledger, figure: Optional[Callable] = None) -> dict:
    """Compute the federated run of `cfg` (validated, keyed `key`) in `folder`, resuming from its
    checkpoint; returns its summary. `figure(cfg, folder, history)` draws the run's figure before
    the summary is written (runner.run_experiment passes accuracy.png's)."""
    from lightning.fabric import Fabric

    # Lightning's knobs as the config resolved them (train.device / train.processes are older
    # names of accelerator / devices); refused here, before Fabric, if this machine cannot run them
    check_machine(cfg)
    t = cfg.train
    if t.devices == 1:
        fabric = Fabric(accelerator=t.accelerator, devices=1, precision=t.precision)
        return _train(fabric, cfg, key, folder, interrupt_after, quiet, ledger_class, figure)
    # client sharding: every rank runs the whole round loop (the server step is cheap and
    # deterministic), trains its share of the round's clients, and gathers everyone's models
    # (engine/sharded.py); rank 0 alone writes the run folder and logs
    return sharded.spawn(_train, t.devices, t.accelerator, cfg, key, folder, interrupt_after, quiet, ledger_class,
                         figure, precision=t.precision)


def _train(fabric, cfg: DictConfig, key: str, folder: Path, interrupt_after: Optional[int], quiet: bool,
           ledger_class: type, figure: Optional[Callable]) -> dict:
    """The run on `fabric`'s rank (one process, or one of train.devices); rank 0 writes."""
    leader = fabric.global_rank == 0
    quiet = quiet or not leader
    eff = effective(cfg)
    t0 = time.perf_counter()
    data = dataset_for(cfg)
    parts = client_partition(cfg, data)
    if leader:
        folder.mkdir(parents=True, exist_ok=True)
        store.write_text(folder / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
        store.write_json(folder / "partition.json",
                         partition_summary(partition_labels(data), parts, data.num_classes))
        loggers = run_loggers(cfg, folder, key)
    else:
        loggers = []
    fabric.seed_everything(cfg.seed, verbose=False)
    device = fabric.device

    def log(row: dict) -> None:
        for lg in loggers:
            lg.log_metrics(row, step=row["round"])

    attack = upload_attack(cfg, folder, eff.rounds) if leader else None
    ledger_kw = {}
    if attack is not None:
        ledger_class, ledger_kw = attack.ledger_class(ledger_class), attack.ledger_kw()
    fed = build_federation(cfg, data, parts, device, ledger_class=ledger_class, quiet=quiet, fabric=fabric,
                           **ledger_kw)
    loop, model, algorithm = fed.loop, fed.model, fed.algorithm
    t = cfg.train
    setup_s = time.perf_counter() - t0

    history: list[dict] = []
    start_round, elapsed_before = 0, 0.0
    checkpoint = store.load_checkpoint(folder, key)
    metrics_csv = folder / "metrics.csv"
    if leader and metrics_csv.exists():
        metrics_csv.unlink()  # rewritten below from the checkpoint's history (or from scratch)
    if checkpoint is not None:
        loop.load_state_dict(checkpoint["loop"])
        history, start_round = checkpoint["history"], checkpoint["round"]
        elapsed_before = checkpoint["train_seconds"]
        replay_history(loggers, history)
        _say(quiet)(f"resuming {folder} from round {start_round}")
    else:
        row = {"round": 0, "clients": 0, "lr": t.lr, "local_loss": float("nan")}
        row.update(loop.evaluate(0))
        history.append(row)
        log(row)

    t_train = time.perf_counter()
    progress = _progress(cfg, eff.rounds, start_round, quiet)

    def on_row(row: dict) -> None:
        history.append(row)
        log(row)
        if attack is not None:  # before the checkpoint of this round: a resume never skips it
            attack.after_round(fed, row)
        if progress is not None:
            progress.update(1)
            acc = next((r["all_test_acc"] for r in reversed(history) if "all_test_acc" in r), float("nan"))
            progress.set_postfix(acc=f"{acc:.4f}", up_Mbit=f"{row['cum_up_dense_bits'] / 1e6:.1f}")
        if interrupt_after is not None and row["round"] == interrupt_after:
            raise Interrupted(f"interrupted after round {interrupt_after}")

    def on_checkpoint(round_done: int) -> None:
        if not leader:
            return
        for lg in loggers:  # the CSV logger buffers 100 rows: flushed, `make status` sees the progress
            lg.save()
        train_seconds = elapsed_before + time.perf_counter() - t_train
        store.save_checkpoint(folder, {
            "key": key, "round": round_done, "loop": loop.state_dict(), "history": list(history),
            "train_seconds": train_seconds})
        # a small file beside the (large) checkpoint: `fedrepro.status` reads the pace from it
        store.write_json(folder / store.PROGRESS, {"round": round_done, "rounds": eff.rounds,
                                                   "train_seconds": round(train_seconds, 1)})

    status, error = "finished", None
    try:
        loop.run(start_round, on_row, on_checkpoint, cfg.train.checkpoint_every, cfg.train.checkpoint_minutes)
    except DivergenceError as exc:
        status, error = "diverged", f"{exc} (round {exc.round})"
    finally:
        if progress is not None:
            progress.close()
        for lg in loggers:
            lg.save()
    train_s = elapsed_before + time.perf_counter() - t_train
    rounds_done = history[-1]["round"]
    final = next((r for r in reversed(history) if "server_test_acc" in r), {})
    summary = {
        "key": key, "status": status, "error": error,
        "profile": cfg.profile.name, "seed": cfg.seed, "dataset": cfg.dataset.name,
        "data_source": data.source, "algorithm": cfg.algorithm.name, "dim": model.dim,
        "rounds": eff.rounds, "rounds_completed": rounds_done,
        "client_rounds": sum(r["clients"] for r in history),
        "final": {**history[-1], **final}, "setup_seconds": round(setup_s, 3),
        "train_seconds": round(train_s, 3),
        "seconds_per_round": round(train_s / max(rounds_done, 1), 4),
        "resumed_from": start_round or None,
        "device": str(device), "torch": torch.__version__,
    }
    if attack is not None:
        summary["attack"] = attack.finish(status, error)
    summary["processes"] = fabric.world_size
    summary["executor"] = type(getattr(loop.executor, "inner", loop.executor)).__name__
    if not leader:
        return summary
    store.save_torch(folder / "model.pt", algorithm.server_model().cpu())
    if figure is not None:
        figure(cfg, folder, history)
    store.write_json(folder / "summary.json", summary)
    store.clear_checkpoints(folder)
    for lg in loggers:
        lg.finalize(status if status == "finished" else "failed")
    return summary


def _progress(cfg, total: int, start: int, quiet: bool):
    if quiet or not cfg.logger.progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=start, desc="round", unit="rd", leave=False, disable=None)
