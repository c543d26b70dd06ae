"""The results store: one folder per run, keyed by the hash of its resolved config.

    <results_root>/runs/<key>/
        config.yaml      the resolved config (what made this run)
        partition.json   client sizes and label counts
        metrics.csv      one row per round (Lightning's CSVLogger)
        checkpoint.pt    the last checkpoint while the run is unfinished
        summary.json     written last: its presence with status "finished" marks a done run
        model.pt         the final server model (flat vector)
        accuracy.png     test accuracy against the round
        attack.json      attack=dlg only: the attack's record (+ attack_curve.csv)

Every file is written atomically (temporary file + rename), so a killed process never
leaves a half-written summary or checkpoint behind.
"""
from __future__ import annotations

import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Optional

import torch


def run_dir(results_root: str | Path, key: str) -> Path:
    return Path(results_root) / "runs" / key


def _atomic(path: Path, write) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
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


def read_summary(folder: Path) -> Optional[dict]:
    path = folder / "summary.json"
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        warnings.warn(f"{path} is unreadable (damaged); the run will be computed again")
        return None


def load_checkpoint(folder: Path, key: str) -> Optional[dict]:
    """The run's last checkpoint, or None (missing, damaged or from another config)."""
    path = folder / "checkpoint.pt"
    if not path.exists():
        return None
    try:
        state = torch.load(path, weights_only=False)
    except Exception as exc:  # truncated or corrupted file
        warnings.warn(f"checkpoint {path} is damaged ({type(exc).__name__}); restarting the run from round 0")
        return None
    if state.get("key") != key:
        warnings.warn(f"checkpoint {path} belongs to another config; restarting the run from round 0")
        return None
    return state
