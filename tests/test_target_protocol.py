"""The Target protocol (fedrepro/reports/target.py): every paper target has its shape, names its
runs without running anything (what status and archive read), and the driver holds a target to
the runs it declared."""
import ast
import os
from pathlib import Path

import pandas as pd
import pytest

from experiments import registry
from experiments.__main__ import main as experiments_main
from experiments.__main__ import parser_for
from fedrepro.data.mnist import MNIST_MD5
from fedrepro.errors import ConfigError
from fedrepro.reports import grid
from fedrepro.reports import target as targets
from fedrepro.reports.claims import load_claims
from fedrepro.reports.cli import table_parser
from fedrepro.reports.grid import Cell

ROOT = Path(__file__).resolve().parent.parent
ALL = registry.all_targets()


def test_every_target_has_the_shape_and_a_unique_make_name():
    names = [name for name, _ in ALL]
    assert len(names) == len(set(names)), names
    known = set(load_claims().claim_id)
    for name, t in ALL:
        assert isinstance(t, targets.Target), name
        assert t.title and isinstance(t.claims, (list, tuple)), name
        assert set(t.claims) <= known, (name, set(t.claims) - known)
        assert isinstance(getattr(t, "SCALE", {}), dict), name
    for alias, full in registry.ALIASES.items():
        assert full in names, alias


@pytest.mark.parametrize("name", [n for n, _ in ALL if n != "grid"])
def test_status_names_a_targets_runs_without_running_or_writing_anything(name, tmp_path):
    paper, t = registry.find(name)
    options = parser_for(paper, t, name).parse_args(["--profile", "smoke", "--results-root", str(tmp_path)])
    runs = targets.plan(t, options)
    assert len({r["key"] for r in runs}) == len(runs)  # one row per run, keyed
    assert all(len(r["key"]) == 16 for r in runs)
    assert list(tmp_path.iterdir()) == []  # nothing computed, nothing rendered
    if getattr(t, "trains_outside_store", None):
        assert runs == []


class _Toy:
    """A target declaring one cell twice and a second one; its render reads what it is told to."""
    name, title, claims = "toy", "a toy target", ()
    SCALE = {"clients": "clients of every run"}

    def __init__(self, ask):
        self.ask = ask
        self.seen = None

    def cells(self, options, scale):
        n = scale.get("clients", 10)
        return [Cell({"cell": "a"}, ["algorithm=fedavg", f"train.num_clients={n}"]),
                Cell({"cell": "a again"}, ["algorithm=fedavg", f"train.num_clients={n}"]),
                Cell({"cell": "b"}, ["algorithm=fedprox", f"train.num_clients={n}"], not_run="no data here")]

    def render(self, results):
        frame, runs = results.measure(self.ask(results), lambda r: r.summary["final"]["server_test_acc"])
        self.seen = frame
        return 0


def _options(tmp_path, *more):
    _, grid_target = registry.find("grid")
    return parser_for("baselines", grid_target, "toy").parse_args(
        ["--profile", "smoke", "--results-root", str(tmp_path), "--cell", "x=algorithm=fedavg", *more])


def test_the_driver_runs_each_declared_run_once_and_refuses_undeclared_ones_and_unknown_knobs(tmp_path):
    toy = _Toy(lambda results: results.cells)
    options = _options(tmp_path)
    assert targets.run(toy, options, {"clients": 5}) == 0
    assert list(toy.seen.status) == ["ok", "ok", "not run"] and toy.seen.ours_mean[0] == toy.seen.ours_mean[1]
    assert len(list((tmp_path / "runs").iterdir())) == 1  # the cell declared twice is one run
    assert [r["label"] for r in targets.plan(toy, options, {"clients": 5})] == ["a seed 0"]

    undeclared = _Toy(lambda results: [Cell({"cell": "c"}, ["algorithm=fedavg", "train.num_clients=7"])])
    with pytest.raises(targets.UndeclaredCellError, match="train.num_clients=7"):
        targets.run(undeclared, options, {"clients": 5})

    with pytest.raises(ConfigError, match="no scale knob rounds; its knobs: clients"):
        targets.run(toy, options, {"rounds": 2})


def test_the_command_line_names_every_target_and_refuses_an_unknown_one(capsys):
    assert experiments_main(["list"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name, _ in ALL)
    with pytest.raises(ConfigError, match="unknown target 'fen-table9'"):
        experiments_main(["fen-table9"])
    with pytest.raises(ConfigError, match="fedelasticnet has no target 'fig99'; its targets: "):
        experiments_main(["fen", "fig99"])


def test_the_library_does_not_import_the_experiments():
    """Dependencies point one way: experiments/ builds on fedrepro/, never the reverse."""
    offenders = []
    for path in (ROOT / "fedrepro").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "experiments"]
    assert offenders == []


def test_overrides_reach_every_run_of_a_target(tmp_path, monkeypatch):
    """make OVERRIDES="..." (--override): after the target's own overrides, in every run's key."""
    monkeypatch.setenv("OVERRIDES", "train.lr=0.02")
    _, t = registry.find("grid")
    options = parser_for("baselines", t, "grid").parse_args(
        ["--profile", "smoke", "--results-root", str(tmp_path), "--cell", "a=algorithm=fedavg train.lr=0.5",
         "--override", "train.num_clients=10"])
    (run,) = targets.plan(t, options)
    assert run["overrides"].index("train.lr=0.5") < run["overrides"].index("train.lr=0.02")
    from fedrepro.config import compose_config

    cfg = compose_config(run["overrides"])
    assert cfg.train.lr == 0.02 and cfg.train.num_clients == 10


# ---------------------------------------------------------------------------------------------
# The command line's choices travel as options, never through os.environ


def test_a_parse_leaves_the_environment_as_it_was(tmp_path, monkeypatch):
    """--data-root, --done-only and --launcher are the parsed options and nothing else: a parse
    writes no environment variable (two targets in one process do not see each other's
    choices); the environment only gives the defaults, read when the parser is built."""
    before = dict(os.environ)
    paper, t = registry.find("fen-table2")
    argv = ["--profile", "smoke", "--data-root", str(tmp_path), "--done-only", "--launcher", "joblib"]
    options = parser_for(paper, t, "fen-table2").parse_args(argv)
    assert (options.data_root, options.done_only, options.launcher) == (str(tmp_path), True, "joblib")
    table_parser("bare").parse_args(argv)
    assert dict(os.environ) == before

    monkeypatch.setenv("FEDREPRO_DATA_ROOT", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("LAUNCHER", "submitit_local")
    monkeypatch.setenv("DONE_ONLY", "1")
    defaults = table_parser("defaults").parse_args([])
    assert (defaults.data_root, defaults.launcher, defaults.done_only) == (
        str(tmp_path / "elsewhere"), "submitit_local", True)


def _with_mnist(root: Path) -> Path:
    """A data folder where MNIST is 'here' to the data checks (they look for the files only)."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in MNIST_MD5:
        (raw / name).touch()
    return root


def test_a_target_looks_for_its_data_in_its_data_root(tmp_path, monkeypatch):
    """The "data not here" checks read --data-root (options.data_root): with MNIST in the
    environment's data folder but --data-root an empty folder, every row of FedElasticNet Table 2
    is named and rendered as not run because its data is not there."""
    monkeypatch.setenv("FEDREPRO_DATA_ROOT", str(_with_mnist(tmp_path / "env-data")))  # the default only
    empty = tmp_path / "empty"
    empty.mkdir()
    results = tmp_path / "results"
    paper, t = registry.find("fen-table2")

    def options(*more):
        return parser_for(paper, t, "fen-table2").parse_args(
            ["--profile", "smoke", "--datasets", "all", "--results-root", str(results), *more])

    assert {c.keys["dataset_key"] for c in t.cells(options(), {}) if not c.not_run} == {"mnist"}
    cells = t.cells(options("--data-root", str(empty)), {})
    assert cells and all(c.overrides and c.not_run.startswith(f"data not here: {empty}") for c in cells)
    assert targets.plan(t, options("--data-root", str(empty))) == []

    assert targets.run(t, options("--data-root", str(empty), "--done-only")) == 0
    table = pd.read_csv(results / "tables" / "fedelasticnet_table2.csv")
    assert len(table) and set(table.status) == {"not run"}
    assert table.ours.str.contains("data not here").all(), table.ours.tolist()
    assert not list(results.rglob("summary.json"))  # nothing trained


class _Stop(Exception):
    pass


def test_the_driver_takes_done_only_and_the_launcher_from_its_options(tmp_path, monkeypatch):
    """--done-only renders from the store, training nothing; --launcher picks the launcher: both
    read from the options the driver is given (the environment says nothing to it)."""
    monkeypatch.delenv("DONE_ONLY", raising=False)
    toy = _Toy(lambda results: results.cells)
    assert targets.run(toy, _options(tmp_path, "--done-only"), {"clients": 5}) == 0
    assert list(toy.seen.status) == ["not run"] * 3 and toy.seen.reason[0] == grid.NOT_COMPUTED
    assert not list(tmp_path.rglob("summary.json"))  # nothing trained

    seen = {}

    def launch(args, **kw):
        seen.update(kw, runs=len(args))
        raise _Stop

    monkeypatch.setattr(grid, "launch", launch)
    monkeypatch.setenv("LAUNCHER", "ray")  # read by the parser only, as a default
    with pytest.raises(_Stop):
        targets.run(toy, _options(tmp_path, "--launcher", "joblib", "--jobs", "2"), {"clients": 5})
    assert (seen["launcher"], seen["jobs"], seen["runs"]) == ("joblib", 2, 1)
