"""Adding an algorithm is one module and one YAML file (docs/adding_an_algorithm.md).

The worked example of that page is taken from it as written, put in a temporary module and a
temporary config folder (Hydra's searchpath), and run: composition and validation, smoke rounds,
a resumed run against an uninterrupted one, and the generic save / restore of its state. And
config.py names no algorithm: its names live in their modules.
"""
import ast
import importlib.util
import re
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from fedrepro.algorithms import Federation, build_algorithm, registry
from fedrepro.algorithms.base import Algorithm
from fedrepro.config import CONF_DIR, compose_config, resolved_executor, run_key, validate
from fedrepro.errors import ConfigError
from fedrepro.run import Interrupted
from fedrepro.runner import run_experiment

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "adding_an_algorithm.md"
NAME = "latest_updates"
SMOKE = ["profile=smoke", "logger.progress=false", "train.num_clients=10"]


def _block(first_line: str) -> str:
    """The fenced code block of the page whose first line is `first_line`."""
    for body in re.findall(r"```[a-z]*\n(.*?)```", DOC.read_text(), flags=re.S):
        if body.splitlines()[0] == first_line:
            return body
    raise AssertionError(f"{DOC} has no block starting {first_line!r}")


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The page's module, imported from a temporary file, and a searchpath holding its YAML."""
    folder = tmp_path_factory.mktemp("new_algorithm")
    module_file = folder / f"{NAME}.py"
    module_file.write_text(_block(f"# fedrepro/algorithms/{NAME}.py"))
    (folder / "conf" / "algorithm").mkdir(parents=True)
    (folder / "conf" / "algorithm" / f"{NAME}.yaml").write_text(_block(f"# conf/algorithm/{NAME}.yaml"))
    assert NAME not in registry.entries()  # nothing in the package knows it yet
    spec = importlib.util.spec_from_file_location(f"_example_{NAME}", module_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)  # its @register runs
    yield module, f"hydra.searchpath=[file://{folder / 'conf'}]"
    registry.unregister(NAME)
    sys.modules.pop(spec.name, None)


def test_the_module_registers_its_config_and_capabilities(example):
    module, _ = example
    entry = registry.entry(NAME)
    assert entry.cls is module.LatestUpdates and entry.config is module.LatestUpdatesConfig
    assert entry.ranges == {"server_lr": "> 0"} and entry.choices == {}
    assert (entry.per_step_rule, entry.server_optimizer, entry.not_attackable, entry.federated) == (
        False, False, None, True)
    assert module.LatestUpdates.state_names() == ("theta", "latest")


def test_the_yaml_composes_validates_and_refuses_bad_values(example):
    _, searchpath = example
    cfg = compose_config([searchpath, f"algorithm={NAME}", *SMOKE])
    validate(cfg)
    assert dict(cfg.algorithm) == {"name": NAME, "server_lr": 1.0}
    assert resolved_executor(cfg) == "batched"  # no per-step rule, an MLP
    assert run_key(compose_config([searchpath, f"algorithm={NAME}", "algorithm.server_lr=0.5"])) != run_key(cfg)
    with pytest.raises(ConfigError) as err:
        validate(compose_config([searchpath, f"algorithm={NAME}", "algorithm.server_lr=0"]))
    assert str(err.value) == ("algorithm.server_lr=0.0 is invalid: it must be > 0: "
                              "the server's step on the mean of the kept updates")


def test_smoke_rounds_and_a_resume_bit_for_bit(example, tmp_path):
    _, searchpath = example
    over = [searchpath, f"algorithm={NAME}", *SMOKE, "profile.max_rounds=4", "train.checkpoint_every=1",
            "participation.rate=0.3"]
    clean = run_experiment(compose_config([*over, f"results_root={tmp_path / 'a'}"]), quiet=True)
    assert clean.summary["status"] == "finished"
    metrics = pd.read_csv(clean.folder / "metrics.csv")
    assert metrics["round"].max() == 4 and metrics["server_test_acc"].notna().all()
    cfg = compose_config([*over, f"results_root={tmp_path / 'b'}"])
    with pytest.raises(Interrupted):
        run_experiment(cfg, interrupt_after=3, quiet=True)  # last checkpoint: round 2, with G_k mid-run
    resumed = run_experiment(cfg, quiet=True)
    assert resumed.key == clean.key and resumed.summary["resumed_from"] == 2
    assert torch.equal(torch.load(resumed.folder / "model.pt"), torch.load(clean.folder / "model.pt"))
    pd.testing.assert_frame_equal(pd.read_csv(resumed.folder / "metrics.csv"), metrics)


def test_its_state_is_saved_and_restored_by_the_base_class(example, tmp_path):
    _, searchpath = example
    node = compose_config([searchpath, f"algorithm={NAME}", "algorithm.server_lr=0.5"]).algorithm
    fed = Federation(4, 3, torch.tensor([1.0, 2.0, 3.0, 4.0]))

    def fresh():
        alg = build_algorithm(node)
        alg.setup(fed, torch.zeros(3))
        return alg

    a = fresh()
    assert a.name == NAME and a.server_lr == 0.5
    a.aggregate(torch.tensor([0, 2]), {"delta": torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])})
    torch.save(a.state_dict(), tmp_path / "state.pt")
    b = fresh()
    b.load_state_dict(torch.load(tmp_path / "state.pt"))
    assert set(b.state_dict()) == {"theta", "latest"} and b.memory_bytes() == (4 * 3 + 3) * 4
    for alg in (a, b):  # the same next round from the same state
        alg.aggregate(torch.tensor([1]), {"delta": torch.tensor([[0.5, -1.0, 2.0]])})
    assert torch.equal(a.theta, b.theta) and torch.equal(a.latest, b.latest)
    assert torch.equal(a.latest[2], torch.tensor([4.0, 5.0, 6.0]))  # absent from round 2, still counted
    with pytest.raises(KeyError, match="latest"):
        fresh().load_state_dict({"theta": torch.zeros(3)})


class _Kinds(Algorithm):
    state_fields = ("table", "tables", "named", "count", "rng", "unused")


def test_the_generic_state_covers_lists_dicts_numbers_and_generators():
    def make():
        alg = _Kinds()
        alg.setup(Federation(2, 2, torch.ones(2)), torch.zeros(2))
        alg.table, alg.tables, alg.named = torch.zeros(2, 2), [torch.zeros(2)], {"m": torch.zeros(2)}
        alg.count, alg.rng, alg.unused = 0, torch.Generator().manual_seed(1), None
        return alg

    a = make()
    a.table += 1
    a.tables[0] += 2
    a.named["m"] += 3
    a.count = 7
    torch.rand(5, generator=a.rng)
    state = a.state_dict()
    saved = state["table"].clone()
    assert "unused" not in state
    b = make()
    b.load_state_dict(state)
    assert torch.equal(b.table, a.table) and torch.equal(b.tables[0], a.tables[0])
    assert torch.equal(b.named["m"], a.named["m"]) and b.count == 7
    assert torch.equal(torch.rand(3, generator=b.rng), torch.rand(3, generator=a.rng))
    b.table += 1  # restored tensors are copies: the saved state stays as it was
    assert torch.equal(state["table"], saved)


def test_the_builtin_algorithms_declare_state_not_save_it():
    """The registered algorithms leave state_dict / load_state_dict to the base class."""
    own = sorted(f"{e.cls.__qualname__}.{method}" for e in registry.entries().values()
                 for klass in e.cls.__mro__ if klass is not Algorithm
                 for method in ("state_dict", "load_state_dict") if method in vars(klass))
    assert not own, own


def _string_constants(path: Path) -> set[str]:
    return {node.value for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)}


@pytest.mark.parametrize("module", ["fedrepro/config.py", "fedrepro/settings.py",
                                    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "fedrepro" / "engine").glob("*.py"))])
def test_config_settings_and_engine_name_no_algorithm(module):
    """The names live in the algorithms' modules (and their YAML): no list of them elsewhere."""
    names = set(registry.entries()) | {p.stem for p in (CONF_DIR / "algorithm").glob("*.yaml")}
    assert len(names) >= 20
    found = sorted(_string_constants(ROOT / module) & names)
    assert not found, f"{module} names algorithms {found}: declare what it needs as a capability"


def test_the_default_algorithm_comes_from_the_yaml():
    assert "- algorithm: fedavg" in (CONF_DIR / "config.yaml").read_text()
    assert compose_config([]).algorithm.name == "fedavg"
