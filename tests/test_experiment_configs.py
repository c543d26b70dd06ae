"""conf/experiment/<paper>/<setting>.yaml: each paper setting as one `+experiment=` choice, the same
runs the paper targets ask for. FedElasticNet's tables read their settings from these files;
the other papers' files are written from their settings modules (experiments/experiment_configs.py)
and checked against them here."""
import math
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from experiments import experiment_configs as generator
from experiments import registry
from experiments.__main__ import parser_for
from experiments.fedelasticnet import common as fen
from fedrepro.config import CONF_DIR, compose_config, run_key, validate

EXPERIMENTS = CONF_DIR / "experiment"
FILES = sorted(EXPERIMENTS.rglob("*.yaml"))


def _choice(path: Path) -> str:
    return path.relative_to(EXPERIMENTS).with_suffix("").as_posix()


def _key(overrides) -> str:
    return run_key(compose_config(list(overrides)))


def test_fen_mnist_dir03_p10_is_table2s_cell():
    _, table2 = registry.find("fen-table2")
    options = parser_for("fen", table2, "fen-table2").parse_args(["--profile", "smoke", "--datasets", "all"])
    cells = {(c.keys["dataset_key"], c.keys["split_key"], c.keys["algorithm_key"]): c
             for c in table2.cells(options, {})}
    for algorithm in ("fen_alg3", "fen_alg1", "fen_alg2", "fedprox", "scaffold", "feddyn"):
        cell = cells[("mnist", "dirichlet0.3", algorithm)]
        assert _key(["+experiment=fen/mnist_dir0.3_p10", f"algorithm={algorithm}"]) == _key(cell.overrides), algorithm


def test_every_fen_file_is_its_tables_run():
    """Each fen/<dataset>_<split>_<participation> file is the run common.cell builds (one algorithm
    per file, in turn: the algorithms' values come from the same files)."""
    splits = {v: k for k, v in generator.SPLIT_NAMES.items()}
    files = [p for p in FILES if p.parent.name == "fen" and p.stem.count("_") >= 2]
    assert len(files) == sum(2 * len(d["splits"]) for d in fen.SETTINGS["datasets"].values())
    for i, path in enumerate(files):
        dataset, split, participation = path.stem.rsplit("_", 2)
        algorithm = fen.SIX[i % len(fen.SIX)]
        cell = fen.cell({"dataset_key": dataset, "split_key": splits[split], "algorithm_key": algorithm},
                        participation, "smoke", data_root="data")
        assert _key([f"+experiment={_choice(path)}", f"algorithm={algorithm}"]) == _key(cell.overrides), path


def test_fen_settings_come_from_the_experiment_files():
    mnist = OmegaConf.load(EXPERIMENTS / "fen" / "mnist.yaml")
    assert fen.SETTINGS["datasets"]["mnist"]["table5"]["fen_alg3"] == OmegaConf.to_container(mnist.per_algorithm.fen_alg3)
    assert fen.SETTINGS["datasets"]["mnist"]["run"][:2] == ["dataset=mnist", "model=mlp_mnist"]
    assert "train.batch_size=10" in fen.SETTINGS["datasets"]["mnist"]["run"]


def test_the_generated_files_are_what_the_settings_modules_give():
    settings = generator.all_settings()
    expected = generator.expected_files(settings)
    stale = [str(p.relative_to(CONF_DIR)) for p, text in expected.items() if not p.exists() or p.read_text() != text]
    assert not stale, f"run `python -m experiments.experiment_configs`: {stale}"
    written = {p for p in FILES if p.parent.name in ("feddyn", "losac", "l2gd")}
    # a logistic dataset absent here keeps its committed file (its eta comes from the data)
    assert set(expected) <= written and all(p.parent.name == "l2gd" for p in written - set(expected))


def test_one_setting_of_each_other_paper_is_its_settings_run():
    from experiments.feddyn import settings as feddyn
    from experiments.l2gd import settings as l2gd
    from experiments.losac import settings as losac

    for algorithm in feddyn.ALGORITHMS:  # FedDyn Table 1 / 4, CIFAR-10 Dirichlet (0.3), 10 %
        ours = _key(["+experiment=feddyn/cifar10_dir0.3_p10", f"algorithm={algorithm}"])
        assert ours == _key(feddyn.run_overrides("cifar10", "dirichlet0.3", 0.1, 100, "balanced", algorithm)), algorithm
    for method in losac.METHODS:  # LoSAC Table II, MNIST, M = 5, T = 2
        ours = _key(["+experiment=losac/mnist_noniid_m5", f"algorithm={method}", "train.local_steps=2"])
        assert ours == _key(losac.TABLE2["mnist"].overrides(method, 5, 2)), method
    # L2GD Table 2, ResNet-18: L2GD + natural, FedAvg + natural (shifted)
    for series, extra in (("l2gd_natural", ["algorithm=l2gd", "compressor=natural"]),
                          ("fedavg_c", ["algorithm=fedavg", "compressor=natural_shifted"])):
        ours = _key(["+experiment=l2gd/cifar10_resnet18_10clients", *extra])
        assert ours == _key(l2gd.RESNET18.overrides(series, "paper")), series


def test_every_experiment_file_composes_and_validates():
    for path in FILES:
        cfg = compose_config([f"+experiment={_choice(path)}"])
        validate(cfg)
        assert cfg.dataset.name != "mnist_5k" or path.parent.name == "fen", path  # each names its data


def test_per_algorithm_values_are_read():
    """A value under per_algorithm.<name> that no YAML reads would be silently ignored."""
    for path in FILES:
        raw = OmegaConf.to_container(OmegaConf.load(path))
        for name, values in raw.get("per_algorithm", {}).items():
            algorithm_yaml = (CONF_DIR / "algorithm" / f"{name}.yaml").read_text()
            for key in values:
                if key == "train":
                    for train_key in values["train"]:
                        assert f"per_algorithm.${{algorithm.name}}.train.{train_key}," in raw["train"][train_key], \
                            (path, name, train_key)
                else:
                    assert f"per_algorithm.{name}.{key}," in algorithm_yaml, (path, name, key)


def test_an_experiment_brings_its_model_and_the_command_line_wins():
    cfg = compose_config(["+experiment=fen/cifar10_iid_p10", "algorithm=fen_alg3", "algorithm.lambda1=0.5",
                          "train.rounds=7"])
    assert (cfg.dataset.name, cfg.model.name, cfg.train.batch_size) == ("cifar10", "cnn_cifar", 50)
    assert (cfg.algorithm.lambda1, cfg.algorithm.lambda2, cfg.algorithm.epsilon) == (0.5, 0.01, 0.005)
    assert cfg.train.rounds == 7
    # no default model per dataset: dataset=cifar10 alone keeps the default MLP (an experiment brings its model)
    assert compose_config(["dataset=cifar10"]).model.name == "mlp"
    # a per-algorithm train value: FedDyn's 50 local epochs, FedAvg's 10, in one FedDyn setting
    epochs = {a: compose_config(["+experiment=feddyn/mnist_iid_p10", f"algorithm={a}"]).train.local_epochs
              for a in ("feddyn", "fedavg", "scaffold")}
    assert epochs == {"feddyn": 50, "fedavg": 10, "scaffold": 50}


def test_the_logistic_setting_keeps_the_data_derived_step():
    from experiments.l2gd import settings as l2gd

    etas = generator.logistic_etas(None)
    if "a1a" not in etas:
        pytest.skip("a1a is not here: its eta comes from the data")
    ours = _key(["+experiment=l2gd/a1a", "algorithm.p=0.3"])
    assert ours == _key(l2gd.logistic_overrides("a1a", "none", 0.3, l2gd.LAMBDA_FOR_P, etas["a1a"]))
    assert math.isclose(OmegaConf.load(EXPERIMENTS / "l2gd" / "a1a.yaml").train.lr, etas["a1a"])
