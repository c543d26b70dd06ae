"""One name per hyperparameter: lambda1, lambda2, epsilon, p on every algorithm; FedProx's mu and
FedDyn's alpha stay as aliases of lambda2 (fedrepro.algorithms.base.alias), and no run key moves."""
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from fedrepro.algorithms import registry
from fedrepro.config import CONF_DIR, compose_config, identity, register_configs, run_key, validate
from fedrepro.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
ARCHIVED = sorted((ROOT / "docs" / "measured" / "runs").glob("*/config.yaml"))
ALIASED = {"fedprox": "mu", "fen_alg1": "mu", "feddyn": "alpha", "fen_alg3": "alpha"}


def test_every_archived_run_keeps_its_key():
    assert ARCHIVED
    configs = {path: OmegaConf.load(path) for path in ARCHIVED}  # each parsed once: 1 100+ files
    for path, cfg in configs.items():
        assert run_key(cfg) == path.parent.name, path
    # they were stored under the old names, and load as they are
    names = {cfg.algorithm.name: set(cfg.algorithm) for cfg in configs.values()}
    assert "mu" in names["fen_alg1"] and "alpha" in names["fen_alg3"]


def test_a_run_stored_now_reloads_to_its_key_and_answers_under_both_names():
    for overrides in (["algorithm=fen_alg1", "algorithm.mu=1e-4"], ["algorithm=fen_alg3", "algorithm.lambda2=0.02"],
                      ["algorithm=fen_alg2"], ["+experiment=fen/mnist_iid_p10", "algorithm=feddyn"]):
        cfg = compose_config(overrides)
        key = run_key(cfg)
        validate(cfg)  # what the runner does before it stores config.yaml
        stored = OmegaConf.create(OmegaConf.to_yaml(cfg, resolve=True))
        assert run_key(stored) == run_key(cfg) == key, overrides
        alias = ALIASED.get(stored.algorithm.name)
        if alias:  # Table 5 reads a stored run's mu / alpha (experiments/fedelasticnet/tables.py)
            assert stored.algorithm[alias] == stored.algorithm.lambda2, overrides


@pytest.mark.parametrize("algorithm, alias", sorted(ALIASED.items()))
def test_lambda2_and_its_alias_ask_for_the_same_run(algorithm, alias):
    canonical = compose_config([f"algorithm={algorithm}", "algorithm.lambda2=0.02"])
    old = compose_config([f"algorithm={algorithm}", f"algorithm.{alias}=0.02"])
    validate(canonical), validate(old)
    assert run_key(canonical) == run_key(old) != run_key(compose_config([f"algorithm={algorithm}"]))
    assert canonical.algorithm.lambda2 == old.algorithm.lambda2 == 0.02
    # the key hashes the value under the old name, as every run stored before the rename
    assert identity(canonical)["algorithm"][alias] == 0.02 and "lambda2" not in identity(canonical)["algorithm"]
    # the value reaches the algorithm (its class keeps the paper's name)
    for cfg in (canonical, old):
        assert getattr(registry.build_algorithm(cfg.algorithm), alias) == 0.02


def test_lambda2_lambda1_epsilon_on_every_fedelasticnet_algorithm():
    for algorithm in ("fen_alg1", "fen_alg2", "fen_alg3"):
        default = compose_config([f"algorithm={algorithm}"])
        for key in ("lambda1", "lambda2", "epsilon"):
            cfg = compose_config([f"algorithm={algorithm}", f"algorithm.{key}=0.02"])
            validate(cfg)
            assert cfg.algorithm[key] == 0.02 and run_key(cfg) != run_key(default), (algorithm, key)


def test_the_old_key_of_fen_alg1_mu():
    # the brief's example: algorithm.lambda2=X is the run algorithm.mu=X always was
    assert run_key(compose_config(["algorithm=fen_alg1", "algorithm.lambda2=3e-5"])) == \
        run_key(compose_config(["algorithm=fen_alg1", "algorithm.mu=3e-5"]))


def test_an_alias_and_its_field_set_apart_are_refused():
    cfg = compose_config(["algorithm=fen_alg1", "algorithm.mu=1e-4", "algorithm.lambda2=1e-5"])
    message = "algorithm.mu=0.0001 and algorithm.lambda2=1e-05 disagree: mu is fen_alg1's other name of " \
              "lambda2; set only algorithm.lambda2"
    with pytest.raises(ConfigError, match="disagree") as err:
        validate(cfg)
    assert str(err.value) == message
    with pytest.raises(ConfigError, match="disagree"):
        run_key(cfg)
    # the same value twice is no conflict
    same = compose_config(["algorithm=feddyn", "algorithm.alpha=0.03", "algorithm.lambda2=0.03"])
    validate(same)
    assert run_key(same) == run_key(compose_config(["algorithm=feddyn", "algorithm.lambda2=0.03"]))


def test_an_alias_given_over_an_experiment_setting_wins():
    # the experiment's Table 5 value is a default, not a second setting: no conflict
    cfg = compose_config(["+experiment=fen/cifar10_iid_p10", "algorithm=fen_alg1", "algorithm.mu=0.5"])
    validate(cfg)
    assert cfg.algorithm.lambda2 == 0.5


def test_a_config_hydra_composed_without_compose_config_keys_the_same():
    # what a Hydra callback sees (fedrepro/sweep.py keys the job's config): the alias not applied yet
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        raw = compose(config_name="config", overrides=["algorithm=fedprox", "algorithm.mu=0.02"])
    assert raw.algorithm.lambda2 != 0.02  # not applied
    assert run_key(raw) == run_key(compose_config(["algorithm=fedprox", "algorithm.lambda2=0.02"]))


def test_the_command_line_refuses_a_conflict_before_training(tmp_path):
    out = subprocess.run([sys.executable, "-m", "fedrepro", "algorithm=fedprox", "algorithm.mu=1e-2",
                          "algorithm.lambda2=1e-3", f"results_root={tmp_path}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "algorithm.mu=0.01 and algorithm.lambda2=0.001 disagree" in out.stderr


def test_aliases_name_a_field_with_its_range_and_no_yaml_sets_one():
    for name, entry in registry.entries().items():
        for alias, field in entry.aliases().items():
            assert field in entry.params() and entry.ranges[alias] == entry.ranges[field], (name, alias)
    assert {n: next(iter(e.aliases())) for n, e in registry.entries().items() if e.aliases()} == ALIASED
    # YAML files use the one name: the aliases are for command lines and old runs
    for path in [*(CONF_DIR / "algorithm").glob("*.yaml"), *(CONF_DIR / "experiment").rglob("*.yaml")]:
        text = OmegaConf.load(path)
        node = text.get("per_algorithm", {}) if "experiment" in path.parts else {text.name: text}
        for algorithm, values in node.items():
            aliases = registry.entry(algorithm).aliases()
            assert not set(values) & set(aliases), (path, algorithm)
