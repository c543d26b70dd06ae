"""Running configs, over the results store (store.py: persistence only, it runs nothing).

`run_experiment` runs one config end to end: it reuses the run when the store holds it done,
else computes it (federated: run.py; the centralized baseline: centralized.py) and draws its
accuracy.png. `execute` does that under the run's lock (a second process asking for the same
run waits, then reuses it) and records a failure in the store instead of losing it
(`record_failure`). `stop_with_parent` ends a sweep's worker with its driver.
"""
from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from omegaconf import DictConfig, OmegaConf

from fedrepro import run, store
from fedrepro.algorithms.registry import entry
from fedrepro.config import check_machine, run_key, validate
from fedrepro.errors import DataError, FedreproError, one_line
from fedrepro.metrics.ledger import Ledger

SECRET_ENV = ("WANDB_API_KEY", "WANDB_ENTITY")
log = logging.getLogger(__name__)


@dataclass
class RunResult:
    key: str
    folder: Path
    summary: dict
    reused: bool


def keep_freed_memory(threshold: int = 256 << 20) -> bool:
    """glibc's malloc: serve blocks under `threshold` bytes from the heap and keep freed memory
    there (its mmap and trim thresholds), in this process (`mallopt`) and in the processes it
    starts (`GLIBC_TUNABLES`, read at their start: `train.devices` ranks). Otherwise each large
    per-step temporary (a CNN's 10 MB pooling gradient, the batched executor's weight gradients)
    lands on fresh pages that are zeroed every step: 9 % of a CIFAR CNN step, about a third of the
    100-client MNIST products (docs/performance.md). False where the C library is not glibc;
    numbers do not change."""
    import ctypes

    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # malloc.h
    if not (mallopt(M_MMAP_THRESHOLD, threshold) and mallopt(M_TRIM_THRESHOLD, threshold)):
        return False
    tunables = [t for t in os.environ.get("GLIBC_TUNABLES", "").split(":")
                if t and not t.startswith(("glibc.malloc.mmap_threshold=", "glibc.malloc.trim_threshold="))]
    os.environ["GLIBC_TUNABLES"] = ":".join(tunables + [f"glibc.malloc.mmap_threshold={threshold}",
                                                        f"glibc.malloc.trim_threshold={threshold}"])
    return True


def run_experiment(cfg: DictConfig, *, interrupt_after: Optional[int] = None,
                   quiet: bool = False, ledger_class: type = Ledger) -> RunResult:
    """Run `cfg` (or reuse its finished run). `ledger_class` lets a figure record what crossed
    the network (a Ledger subclass); it never changes the numbers. `interrupt_after` (tests)
    stops a federated run after that round (run.Interrupted)."""
    validate(cfg)
    key = run_key(cfg)
    folder = store.run_dir(cfg.results_root, key)
    done = store.done_summary(folder)
    if done is not None:
        run.announce(cfg, key, folder, quiet, reused=True)
        return RunResult(key, folder, done, reused=True)
    check_machine(cfg)  # an accelerator or precision this machine lacks: refused before any folder
    keep_freed_memory()
    run.announce(cfg, key, folder, quiet)
    if not entry(cfg.algorithm.name).federated:
        from fedrepro.centralized import run_centralized  # Lightning's Trainer: loaded when needed

        summary = run_centralized(cfg, key, folder, quiet=quiet, figure=_centralized_figure)
    else:
        summary = run.run_federated(cfg, key, folder, interrupt_after=interrupt_after, quiet=quiet,
                                    ledger_class=ledger_class, figure=_federated_figure)
    return RunResult(key, folder, summary, reused=False)


def _federated_figure(cfg: DictConfig, folder: Path, history: list[dict]) -> None:
    import pandas as pd

    from fedrepro.reports.figures import accuracy_figure

    title = (f"{cfg.algorithm.name} on {cfg.dataset.name}, {cfg.split.kind} split, "
             f"{cfg.profile.name} profile, seed {cfg.seed}")
    frame = pd.DataFrame(history)
    labels = {"server": "server model", "all": "mean of all clients' models",
              "selected": "mean of the round's selected clients"}
    curves = {label: frame.rename(columns={f"{m}_test_acc": "acc"})
              for m, label in labels.items() if f"{m}_test_acc" in frame}
    accuracy_figure(curves, folder / "accuracy.png", y="acc", title=title)


def _centralized_figure(cfg: DictConfig, folder: Path, history: list[dict]) -> None:
    import pandas as pd

    from fedrepro.reports.figures import metric_figure

    title = f"centralized on {cfg.dataset.name}, {cfg.profile.name} profile, seed {cfg.seed}"
    frame = pd.DataFrame(history).rename(columns={"server_test_acc": "acc"})
    metric_figure({"centralized model": frame}, folder / "accuracy.png", y="acc",
                  xlabel="epoch", ylabel="test accuracy", title=title)


# -- failures ----------------------------------------------------------------------------------
def record_failure(folder: Path, cfg, error: BaseException | str, *, tb: Optional[str] = None,
                   wall_seconds: Optional[float] = None, attempts: Optional[int] = None) -> dict:
    """Write a failed run's summary.json (status "failed", the error, the round reached), its
    config.yaml if it has none yet and error.txt (the traceback); returns the summary."""
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "config.yaml").exists():
        with contextlib.suppress(Exception):
            store.write_text(folder / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    before = store.read_summary(folder) or {}
    rnd = store.last_round(folder, checkpoints=True)

    def get(path: str):
        with contextlib.suppress(Exception):
            return OmegaConf.select(cfg, path)
        return None

    summary = {
        "key": folder.name, "status": "failed", "error": one_line(error),
        "error_type": error.__class__.__name__ if isinstance(error, BaseException) else "Error",
        "round": rnd, "rounds_completed": rnd,
        "profile": get("profile.name"), "seed": get("seed"), "dataset": get("dataset.name"),
        "algorithm": get("algorithm.name"),
        "attempts": attempts if attempts is not None else
        (int(before.get("attempts", 0)) + 1 if before.get("status") == "failed" else 1),
        "failed_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "host": socket.gethostname(),
        "wall_seconds": None if wall_seconds is None else round(wall_seconds, 3),
    }
    store.write_text(folder / "error.txt", (tb or summary["error"]) + "\n")
    store.write_json(folder / "summary.json", summary)
    return summary


# -- one run, guarded --------------------------------------------------------------------------
@dataclass
class Failure:
    """A run that did not produce a summary: kind "failed" (recorded in the store) or "not run"
    (its data is not here: DataError, nothing recorded)."""

    message: str  # "ErrorType: first line"
    kind: str = "failed"
    key: Optional[str] = None
    folder: Optional[Path] = None
    round: Optional[int] = None
    detail: str = ""  # the whole message (several lines possibly)

    def __str__(self) -> str:
        return self.message


@contextlib.contextmanager
def secrets_hidden(cfg):
    """W&B's key and entity stay in the environment only: an offline (or disabled) W&B run does
    not need them, and wandb writes the entity into the run's offline log inside the results
    folder, so they are removed from the environment while such a run executes."""
    hide = False
    with contextlib.suppress(Exception):
        hide = cfg.logger.name == "wandb" and cfg.logger.wandb_mode != "online"
    saved = {k: os.environ.pop(k) for k in SECRET_ENV if hide and k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def execute(cfg, *, quiet: bool = True):
    """Run `cfg` through `run_experiment` under its run lock: a RunResult, or a `Failure`.

    A run that raises (anything but missing data) is recorded in the store (`record_failure`) and
    comes back as a Failure; the next attempt recomputes it (run_experiment reuses only finished
    and diverged runs). KeyboardInterrupt / SIGKILL leave the run resumable from its checkpoint."""
    t0 = time.perf_counter()
    try:  # an invalid config is refused before it gets a folder: there is no run to record
        validate(cfg)
        key = run_key(cfg)
    except Exception as exc:  # noqa: BLE001
        return Failure(one_line(exc), detail=str(exc))
    folder = store.run_dir(cfg.results_root, key)
    if store.done_summary(folder) is not None:
        return run_experiment(cfg, quiet=quiet)  # reuse: no lock needed
    try:  # what this machine cannot run is refused before the run gets a folder or a failure record
        check_machine(cfg)
    except FedreproError as exc:
        return Failure(one_line(exc), detail=str(exc))

    def waiting():
        log.info(f"{folder} is being computed by another process; waiting for it")

    with store.run_lock(cfg.results_root, key, on_wait=waiting):
        store.clean_temporaries(folder)
        s = store.read_summary(folder) or {}
        attempt = int(s.get("attempts", 0)) + 1 if s.get("status") == "failed" else 1
        if s.get("status") == "failed":
            # a new attempt: status is "running" until it ends, and the old traceback is not its own
            (folder / "summary.json").unlink()
            (folder / "error.txt").unlink(missing_ok=True)
        try:
            with secrets_hidden(cfg):
                result = run_experiment(cfg, quiet=quiet)
        except DataError as exc:
            # the whole message: it names the missing files (tables show it as the reason)
            return Failure(f"{type(exc).__name__}: {exc}", "not run", key, folder, detail=str(exc))
        except Exception as exc:  # noqa: BLE001  (record every failure, keep the sweep going)
            summary = record_failure(folder, cfg, exc, tb=traceback.format_exc(),
                                     wall_seconds=time.perf_counter() - t0, attempts=attempt)
            detail = str(exc) if isinstance(exc, FedreproError) else f"{type(exc).__name__}: {exc}"
            return Failure(summary["error"], "failed", key, folder, summary["round"], detail)
        if result.summary.get("status") in store.DONE:
            store.clear_checkpoints(folder)
        return result


# -- sweep workers -----------------------------------------------------------------------------
_WATCHING_PARENT = False


def stop_with_parent(poll_seconds: float = 1.0) -> None:
    """In a worker process (joblib/loky; nothing in a main process): SIGKILL this process once
    its parent is gone.

    loky workers outlive a driver killed with SIGTERM or SIGKILL (they are re-parented to
    init) and would train on for hours holding the run lock, so that a new sweep reports the
    run as running and waits for it. Killed instead, the run is interrupted like any other
    killed run and resumes from its checkpoint."""
    global _WATCHING_PARENT
    # joblib runs n_jobs=1 in the driver itself, whose parent (a shell) is not ours to follow;
    # loky reuses a worker for many runs, and one watcher is enough
    if multiprocessing.parent_process() is None or _WATCHING_PARENT:
        return
    _WATCHING_PARENT = True
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="fedrepro-stop-with-parent", daemon=True).start()
