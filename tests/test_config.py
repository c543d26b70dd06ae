"""Bad configs fail at start with a message that names the problem and the valid choices."""
import subprocess
import sys
import typing

import pytest
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from fedrepro.algorithms import registry
from fedrepro.config import CONF_DIR, RANGES, SCHEMAS, Config, compose_config, effective, run_key, validate
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


# nan passes every comparison (nan <= 0 is False): it once reached training. Some cases (a
# negative penalty, a probability > 1) were refused before too and guard their ranges.
@pytest.mark.parametrize("override, words", [
    ("train.lr=nan", "train.lr=nan is invalid: it must be a finite number > 0"),
    ("train.lr=inf", "train.lr=inf is invalid: it must be a finite number > 0"),
    ("train.lr=-inf", "train.lr=-inf is invalid: it must be a finite number > 0"),
    ("train.clip_norm=inf", "train.clip_norm=inf is invalid: it must be a finite number > 0, or null"),
    ("train.checkpoint_minutes=inf", "or null (no timed checkpoints)"),
    ("metrics.bin_width=nan", "metrics.bin_width=nan"),
    ("participation.rate=nan", "participation.rate=nan is invalid: it must be a finite number in (0, 1]"),
    ("algorithm=fen_alg1 algorithm.lambda1=nan",
     "algorithm.lambda1=nan is invalid: it must be a finite number >= 0"),
    ("algorithm=fen_alg3 algorithm.alpha=inf", "algorithm.alpha=inf"),
    ("algorithm=fedadam algorithm.beta2=nan", "algorithm.beta2=nan is invalid: it must be a finite number in [0, 1)"),
    ("algorithm=l2gd participation=p100 algorithm.lam=inf", "algorithm.lam=inf"),
    ("compressor=threshold compressor.epsilon=nan",
     "compressor.epsilon=nan is invalid: it must be a finite number >= 0"),
    ("compressor=randk compressor.k_fraction=nan", "compressor.k_fraction=nan is invalid: it must be a finite"),
    ("dataset=lowrank dataset.mean=nan", "dataset.mean=nan is invalid: it must be a finite number"),
    ("attack=dlg attack.lr=nan", "attack.lr=nan"),
    # negative penalties
    ("algorithm=fen_alg2 algorithm.lambda2=-1e-4", "algorithm.lambda2=-0.0001"),
    ("train.weight_decay=-1e-4", "train.weight_decay=-0.0001 is invalid: it must be >= 0"),
    ("dataset=synthetic_feddyn dataset.gamma1=-1", "dataset.gamma1=-1.0 is invalid: it must be >= 0"),
    ("dataset=lowrank dataset.noise=-0.1", "dataset.noise=-0.1"),
    # probabilities > 1
    ("compressor=bernoulli compressor.keep_prob=1.5", "compressor.keep_prob=1.5"),
    ("split=mixed split.sorted_fraction=1.5", "split.sorted_fraction=1.5"),
    ("algorithm=fedavgm algorithm.momentum=1.5", "algorithm.momentum=1.5"),
    # ranges not checked before
    ("algorithm=centralized algorithm.lr_step_factor=1.5",
     "algorithm.lr_step_factor=1.5 is invalid: it must be in (0, 1]"),
    ("split=shards split.shards_per_client=0", "split.shards_per_client=0 is invalid: it must be >= 1"),
    ("split=iid split.alpha=-1", "split.alpha=-1.0 is invalid: it must be > 0"),
    ("attack.lr=-1", "attack.lr=-1.0 is invalid: it must be > 0"),
    ("dataset=shakespeare dataset.seq_len=0", "dataset.seq_len=0"),
    ("dataset=synthetic_feddyn dataset.num_classes=1", "dataset.num_classes=1 is invalid: it must be >= 2"),
    ("dataset=har dataset.seed=-1", "dataset.seed=-1"),
    ("profile.max_rounds=0", "profile.max_rounds=0 is invalid: it must be >= 1, or null (no cap)"),
])
def test_non_finite_and_out_of_range_numbers(override, words):
    with pytest.raises(ConfigError) as err:
        validate(compose_config(override.split()))
    assert words in str(err.value) and "\n" not in str(err.value)


def test_null_stays_the_way_to_say_off():
    validate(compose_config(["train.clip_norm=null", "train.checkpoint_minutes=null", "train.local_steps=5",
                             "profile=paper", "profile.max_rounds=null"]))
    validate(compose_config(["algorithm=mimesvrg", "algorithm.blocks=null"]))
    validate(compose_config(["algorithm=centralized", "algorithm.lr_step_every=null"]))
    validate(compose_config(["compressor=topk", "compressor.k=10"]))


def _numeric(tp) -> bool:
    return tp in (int, float) or (typing.get_origin(tp) is typing.Union
                                  and any(a in (int, float) for a in typing.get_args(tp)))


# Numbers any finite value suits: run seeds go through a hash (fedrepro/seeding.py).
_ANY_FINITE = {"seed", "algorithm.coin_seed", "dataset.mean"}


def test_every_numeric_field_has_a_range():
    """A numeric field added to a schema needs its RANGES entry (or a reason to take any value)."""
    top = typing.get_type_hints(Config)
    schemas = [(group, cls) for group, named in SCHEMAS.items() for cls in named.values()]
    schemas += [("train", top["train"]), ("metrics", top["metrics"])]
    keys = {f"{group}.{name}" for group, cls in schemas
            for name, tp in typing.get_type_hints(cls).items() if _numeric(tp)}
    keys |= {name for name, tp in top.items() if _numeric(tp)}
    assert keys - _ANY_FINITE <= set(RANGES), sorted(keys - _ANY_FINITE - set(RANGES))
    assert set(RANGES) <= keys, sorted(set(RANGES) - keys)
    # the algorithms' fields declare theirs (`param(range=...)`, fedrepro/algorithms/base.py)
    for name, entry in registry.entries().items():
        hints = typing.get_type_hints(entry.config)
        lacking = [f"algorithm.{key}" for key in entry.params() if _numeric(hints[key]) and key not in entry.ranges]
        assert set(lacking) <= _ANY_FINITE, (name, lacking)


def test_every_conf_option_validates():
    """Range checks refuse nothing a conf/ YAML ships."""
    needs = {"l2gd": ["participation=p100"]}  # Algorithm 1 takes every client
    for group in sorted(p for p in CONF_DIR.iterdir() if p.is_dir() and p.name != "hydra"):
        for option in sorted(group.glob("*.yaml")):
            validate(compose_config([f"{group.name}={option.stem}", *needs.get(option.stem, [])]))


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


def test_cli_refuses_a_non_finite_value_before_training(tmp_path):
    out = subprocess.run([sys.executable, "-m", "fedrepro", "train.lr=nan", f"results_root={tmp_path}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    said = [line for line in out.stderr.splitlines() if "train.lr" in line]  # one line, whatever else warns
    assert said == ["fedrepro: error: train.lr=nan is invalid: it must be a finite number > 0"]
    # nothing trained: only Hydra's own log folder, no run folder
    assert all(p.relative_to(tmp_path).parts[0] == "hydra" for p in tmp_path.rglob("*") if p.is_file())
    assert "[fedrepro]" not in out.stdout


def test_centralized_run_key_ignores_the_federation():
    base = ["algorithm=centralized"]
    a = compose_config([*base, "split=iid", "participation=p10"])
    b = compose_config([*base, "split=dirichlet", "participation=p100", "train.num_clients=10"])
    c = compose_config([*base, "train.lr=0.05"])
    assert run_key(a) == run_key(b) != run_key(c)
    fed = [compose_config(["split=iid"]), compose_config(["split=dirichlet"])]
    assert run_key(fed[0]) != run_key(fed[1])  # federated runs keep the split in their key
