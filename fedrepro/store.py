"""The results store: one folder per run, keyed by the hash of its resolved config.

    <results_root>/runs/<key>/
        config.yaml        the resolved config (what made this run)
        partition.json     client sizes and label counts
        metrics.csv        one row per round (Lightning's CSVLogger)
        checkpoint.pt      the last checkpoint while the run is unfinished (`save_checkpoint`
        checkpoint.prev.pt keeps the one before beside it: a damaged newest one falls back to it)
        progress.json      beside the checkpoint: its round, the run's rounds and the training
                           seconds so far (`fedrepro.status` tells the pace from it)
        summary.json       written last: status "finished" or "diverged" marks a done run,
                           "failed" a run that raised (the error and the round it reached)
        error.txt          failed runs only: the traceback
        model.pt           the final server model (flat vector)
        accuracy.png       test accuracy against the round
        attack.json        attack=dlg only: the attack's record (+ attack_curve.csv)
    <results_root>/.locks/<key>.lock, <key>.json
                           the run lock (flock) held while a process computes the run, and who
                           holds it (pid, host, start): `fedrepro.status` reads both

Every file is written atomically (temporary file + fsync + rename), so a killed process never
leaves a half-written summary or checkpoint behind; two processes finishing the same file at
once leave one complete version. Checkpoints carry a SHA-256 of their payload, so a truncated
or corrupted one is detected on load. This module only keeps files: fedrepro/runner.py runs a
config under the run lock (`execute`) and records its failure here.

Fault injection for the tests: FEDREPRO_TEST_FAULT=kill:<file name>[:n] makes the n-th write
(default 1st) of that file in this process write half of its temporary file and SIGKILL the
process; raise:<file name>[:n] raises OSError (disk full) there instead. Several entries are
separated by commas.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import signal
import socket
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Optional

import torch

CHECKPOINT = "checkpoint.pt"
PREVIOUS_CHECKPOINT = "checkpoint.prev.pt"
PROGRESS = "progress.json"
_CKPT_MAGIC = b"FEDREPRO-CHECKPOINT-1\n"  # + 32 bytes SHA-256 of the payload + torch.save payload
FAULT_ENV = "FEDREPRO_TEST_FAULT"
DONE = ("finished", "diverged")
# the run archive (fedrepro/archive.py): finished runs kept in the repository; `status` reads it too
ARCHIVE = Path(__file__).resolve().parent.parent / "docs" / "measured" / "runs"


def run_dir(results_root: str | Path, key: str) -> Path:
    return Path(results_root) / "runs" / key


# -- atomic writes -----------------------------------------------------------------------------
_writes: dict[str, int] = {}


def _fault_for(name: str) -> Optional[str]:
    """The test fault planned for this write of `name` ("kill" / "raise"), or None."""
    spec = os.environ.get(FAULT_ENV, "")
    entries = [e.split(":") for e in spec.split(",") if e.strip()]
    mine = [e for e in entries if len(e) >= 2 and e[1] == name]
    if not mine:
        return None
    _writes[name] = count = _writes.get(name, 0) + 1
    for action, _, *nth in mine:
        if count == (int(nth[0]) if nth else 1):
            return action
    return None


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _file_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


_MODE = _file_mode()  # what open() would give (mkstemp makes 0600 files)


def _atomic(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fault = _fault_for(path.name)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with contextlib.suppress(OSError):
            os.fchmod(fd, _MODE)
        with os.fdopen(fd, "wb") as f:
            if fault is not None:
                buf = io.BytesIO()
                write(buf)
                data = buf.getvalue()
                f.write(data[: len(data) // 2])
                f.flush()
                os.fsync(f.fileno())
                if fault == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                raise OSError(errno.ENOSPC, f"No space left on device (simulated by {FAULT_ENV}) "
                                            f"writing {path.name}")
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text(path: Path, text: str) -> None:
    _atomic(path, lambda f: f.write(text.encode()))


def write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def save_torch(path: Path, obj: Any) -> None:
    _atomic(path, lambda f: torch.save(obj, f))


def clean_temporaries(folder: Path) -> list[Path]:
    """Remove the temporary files a killed writer left in `folder` (only while holding the run
    lock: nobody else writes there then)."""
    removed = []
    if folder.is_dir():
        for p in folder.glob(".*.tmp"):
            with contextlib.suppress(OSError):
                p.unlink()
                removed.append(p)
    return removed


def read_summary(folder: Path) -> Optional[dict]:
    path = folder / "summary.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        warnings.warn(f"{path} is unreadable (damaged); the run will be computed again")
        return None


def done_summary(folder: Path) -> Optional[dict]:
    """The run's summary when the run is done (finished or diverged: reused, never recomputed),
    else None."""
    s = read_summary(folder)
    return s if s is not None and s.get("status") in DONE else None


# -- checkpoints -------------------------------------------------------------------------------
class _HashingWriter:
    def __init__(self, f, h):
        self.f, self.h = f, h

    def write(self, b) -> int:
        self.h.update(b)
        return self.f.write(b)

    def flush(self) -> None:
        self.f.flush()


def _write_checkpoint(f, state: dict) -> None:
    h = hashlib.sha256()
    start = f.tell()
    f.write(_CKPT_MAGIC + bytes(32))
    torch.save(state, _HashingWriter(f, h))
    end = f.tell()
    f.seek(start + len(_CKPT_MAGIC))
    f.write(h.digest())
    f.seek(end)


def save_checkpoint(folder: Path, state: dict) -> None:
    """Write the run's checkpoint (with a checksum), keeping the previous one as
    checkpoint.prev.pt: a newest checkpoint found damaged falls back to it."""
    path, prev = folder / CHECKPOINT, folder / PREVIOUS_CHECKPOINT
    if path.exists():
        os.replace(path, prev)  # atomic: at every moment one complete checkpoint exists
    _atomic(path, lambda f: _write_checkpoint(f, state))


class CheckpointDamaged(Exception):
    pass


def _read_checkpoint(path: Path) -> Any:
    data = path.read_bytes()
    if data.startswith(_CKPT_MAGIC):
        n = len(_CKPT_MAGIC)
        digest, payload = data[n:n + 32], memoryview(data)[n + 32:]
        if hashlib.sha256(payload).digest() != digest:
            raise CheckpointDamaged(f"checksum mismatch: truncated or corrupted ({len(data)} bytes)")
        return torch.load(io.BytesIO(payload), weights_only=False)
    return torch.load(io.BytesIO(data), weights_only=False)  # written by save_torch (no checksum)


def load_checkpoint(folder: Path, key: str) -> Optional[dict]:
    """The run's last good checkpoint, or None (none, all damaged, or from another config).

    checkpoint.pt first, then checkpoint.prev.pt; a damaged file is renamed to *.damaged (so it
    is never rotated over the good one) and named in a warning."""
    problems: list[str] = []
    for path in (folder / CHECKPOINT, folder / PREVIOUS_CHECKPOINT):
        if not path.exists():
            continue
        try:
            state = _read_checkpoint(path)
        except Exception as exc:  # truncated or corrupted file
            problems.append(f"{path} is damaged ({type(exc).__name__}: {exc})")
            with contextlib.suppress(OSError):
                os.replace(path, path.with_name(path.name + ".damaged"))
            continue
        if not isinstance(state, dict) or state.get("key") != key:
            problems.append(f"checkpoint {path} belongs to another config")
            continue
        if problems:
            warnings.warn(f"checkpoint {'; '.join(problems)}; resuming from the previous good "
                          f"checkpoint {path.name} (round {state.get('round')})")
        return state
    if problems:
        warnings.warn(f"{'; '.join(problems)}; restarting the run from round 0")
    return None


def clear_checkpoints(folder: Path) -> None:
    """Remove the checkpoints of a run that is done (summary written)."""
    for name in (CHECKPOINT, PREVIOUS_CHECKPOINT, CHECKPOINT + ".damaged", PREVIOUS_CHECKPOINT + ".damaged",
                 PROGRESS):
        (folder / name).unlink(missing_ok=True)


# -- what a run reached ------------------------------------------------------------------------
def last_round(folder: Path, *, checkpoints: bool = False) -> int:
    """The last round a run logged (metrics.csv; with `checkpoints`, also its checkpoints: a
    killed process never flushed its CSV), 0 when it logged none."""
    import csv

    path = folder / "metrics.csv"
    best = 0
    if checkpoints:
        for name in (CHECKPOINT, PREVIOUS_CHECKPOINT):
            with contextlib.suppress(Exception):
                best = max(best, int(_read_checkpoint(folder / name)["round"]))
    if path.exists():
        with contextlib.suppress(Exception):
            with open(path, newline="") as f:
                for row in csv.DictReader(f):
                    with contextlib.suppress(TypeError, ValueError):
                        best = max(best, int(float(row.get("round") or row.get("step") or 0)))
    return best


# -- the run lock ------------------------------------------------------------------------------
def _lock_paths(results_root: str | Path, key: str) -> tuple[Path, Path]:
    d = Path(results_root) / ".locks"
    return d / f"{key}.lock", d / f"{key}.json"


@contextlib.contextmanager
def run_lock(results_root: str | Path, key: str, on_wait=None):
    """Hold the run's lock (flock) while computing it; another process asking for the same run
    waits (`on_wait()` is called first) and then finds it done. Lock files are never removed
    (removing a lock file others wait on would break the lock)."""
    import fcntl

    lock, marker = _lock_paths(results_root, key)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(fd, fcntl.LOCK_EX)
        write_json(marker, {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
                            "argv": " ".join(sys.argv[:3])})
        try:
            yield
        finally:
            marker.unlink(missing_ok=True)
    finally:
        os.close(fd)  # releases the lock


def running(results_root: str | Path, key: str) -> Optional[dict]:
    """Who computes the run now ({"pid", "host", "started"}), or None when nobody holds its lock.
    A marker left by a killed process (lock free) means "interrupted", not running."""
    import fcntl

    lock, marker = _lock_paths(results_root, key)
    if not lock.exists():
        return None
    fd = os.open(lock, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                return json.loads(marker.read_text())
            except (OSError, json.JSONDecodeError):
                return {}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
