import os
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # experiments/ is a top-level package, not installed

import fedrepro  # noqa: E402,F401  (torchvision shim first)

os.environ.setdefault("WANDB_MODE", "offline")


@pytest.fixture
def results(tmp_path):
    return str(tmp_path / "results")


@contextmanager
def torch_threads(n: int):
    """torch's thread count set to n inside, the caller's put back after (also on failure)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def real_data_root():
    """The real-data folder, or None when the real-data tier is off (FEDREPRO_DATA_ROOT unset)."""
    return os.environ.get("FEDREPRO_DATA_ROOT")


def data_root_with(folder: Path, *names: str) -> Path:
    """A data root holding only these folders of the real one (links), so a target's default
    datasets do not grow as data arrives; empty when the real-data tier is off."""
    folder.mkdir(parents=True, exist_ok=True)
    real = real_data_root()
    for name in names:
        if real and (Path(real) / name).is_dir():
            (folder / name).symlink_to(Path(real).resolve() / name, target_is_directory=True)
    return folder
