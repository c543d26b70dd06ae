"""Every dataset config either loads or stops with an error naming the missing files.

Without FEDREPRO_DATA_ROOT the generators and mnist_5k load from nothing and every file-based
dataset fails clearly; with it (CI: ../shared/data) what the folder holds must load."""
import os
from pathlib import Path

import pytest

from fedrepro.config import CONF_DIR, compose_config
from fedrepro.data.loaders import LOADERS, dataset_options, load_dataset, unavailable
from fedrepro.errors import DataError

DATA = os.environ.get("FEDREPRO_DATA_ROOT")
NAMES = sorted(p.stem for p in (CONF_DIR / "dataset").glob("*.yaml"))
# What ../shared/data holds (SOURCES.md): these must load when the real-data tier is on.
HERE = {"mnist", "mnist_5k", "emnist_l", "cifar10", "shakespeare", "esr", "a1a", "synthetic_feddyn", "lowrank"}
GENERATED = {"mnist_5k", "synthetic_feddyn", "lowrank"}  # need no data folder


def test_every_registered_dataset_has_a_config_and_back():
    assert set(NAMES) == set(LOADERS)


@pytest.mark.parametrize("name", NAMES)
def test_loads_or_names_the_missing_files(name, tmp_path):
    root = DATA or str(tmp_path / "empty")
    cfg = compose_config([f"dataset={name}", f"data_root={root}", "dataset.download=false"])
    options = dataset_options(cfg.dataset)
    reason = unavailable(name, root, options)
    if reason is None:
        data = load_dataset(name, root, download=False, options=options)
        assert len(data.x_train) == len(data.y_train) > 0 and len(data.x_test) == len(data.y_test) > 0
        assert data.source
    else:
        with pytest.raises(DataError) as e:
            load_dataset(name, root, download=False, options=options)
        first_missing = Path(reason.split(" lacks ", 1)[1].split(", ")[0]).name
        assert first_missing in str(e.value), (reason, str(e.value))
    if DATA:
        assert (reason is None) == (name in HERE), (name, reason)
    else:
        assert (reason is None) == (name in GENERATED), (name, reason)
