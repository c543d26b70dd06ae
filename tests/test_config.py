"""Bad configs fail at start with a message that names the problem and the valid choices."""
import subprocess
import sys

import pytest
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from fedrepro.config import compose_config, effective, run_key, validate
from fedrepro.errors import ConfigError


def test_default_config_composes_and_validates():
    cfg = compose_config()
    validate(cfg)
    assert cfg.dataset.name == "mnist_5k" and cfg.algorithm.name == "fedavg"
    assert cfg.profile.name == "quick"


def test_unknown_choice_lists_valid_options():
    with pytest.raises(HydraException) as err:
        compose_config(["algorithm=fedpro"])
    assert "Available options in 'algorithm'" in str(err.value)
    assert "fedprox" in str(err.value)


def test_misspelled_key_is_rejected():
    with pytest.raises((HydraException, OmegaConfBaseException)) as err:
        compose_config(["algorithm=fedprox", "algorithm.mux=0.1"])
    assert "mux" in str(err.value)


def test_wrong_type_is_rejected():
    with pytest.raises((HydraException, OmegaConfBaseException)):
        compose_config(["train.lr=fast"])


@pytest.mark.parametrize("override, words", [
    ("train.lr=-0.1", "train.lr=-0.1"),
    ("participation.rate=1.5", "outside (0, 1]"),
    ("participation.rate=0", "outside (0, 1]"),
    ("split.kind=random", "iid, dirichlet, shards, mixed"),
    ("train.lr_decay=1.5", "(0, 1]"),
    ("algorithm=fedprox", None),
    ("algorithm=feddyn algorithm.transmit=gradient", "model, update"),
    ("algorithm=feddyn algorithm.alpha=0", "algorithm.alpha=0"),
    ("algorithm=centralized algorithm.epochs=0", "algorithm.epochs=0"),
])
def test_invalid_values(override, words):
    cfg = compose_config(override.split() + (["algorithm.mu=-1"] if words is None else []))
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert (words or "algorithm.mu") in str(err.value)


def test_profiles_cap_the_paper_setting():
    paper = effective(compose_config(["profile=paper"]))
    quick = effective(compose_config(["profile=quick"]))
    smoke = effective(compose_config(["profile=smoke"]))
    assert (paper.rounds, paper.local_epochs) == (100, 10)
    assert (quick.rounds, quick.local_epochs, quick.eval_every) == (100, 1, 5)
    assert smoke.rounds == 3 and smoke.steps_for(600, 50) == 5
    assert paper.steps_for(600, 50) == 120 and paper.steps_for(601, 50) == 130  # ceil(n/B) per epoch


def test_run_key_ignores_where_results_go_but_not_what_is_computed():
    a = compose_config(["results_root=/x", "logger=wandb"])
    b = compose_config(["results_root=/y"])
    c = compose_config(["seed=1"])
    assert run_key(a) == run_key(b) != run_key(c)


def test_cli_reports_unknown_choice_and_invalid_value(tmp_path):
    out = subprocess.run([sys.executable, "-m", "fedrepro", "algorithm=fedpro"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "Available options in 'algorithm'" in out.stderr
    out = subprocess.run([sys.executable, "-m", "fedrepro", "train.lr=-1", f"results_root={tmp_path}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "train.lr=-1" in out.stderr and "must be > 0" in out.stderr


def test_centralized_run_key_ignores_the_federation():
    base = ["algorithm=centralized"]
    a = compose_config([*base, "split=iid", "participation=p10"])
    b = compose_config([*base, "split=dirichlet", "participation=p100", "train.num_clients=10"])
    c = compose_config([*base, "train.lr=0.05"])
    assert run_key(a) == run_key(b) != run_key(c)
    fed = [compose_config(["split=iid"]), compose_config(["split=dirichlet"])]
    assert run_key(fed[0]) != run_key(fed[1])  # federated runs keep the split in their key
