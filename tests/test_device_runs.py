"""Runs made on another accelerator (a lent GPU machine, experiments/device_runs.py): a table
cell reads one where this accelerator's run is not finished, names its device, and prefers its
own; the device script's bundle restores into a store under the same keys."""
import json
import tarfile
from pathlib import Path

from fedrepro import store
from fedrepro.archive import restore
from fedrepro.config import compose_config, run_key
from fedrepro.reports import grid
from fedrepro.reports.grid import Cell, executed_on
from fedrepro.runner import RunResult

ROOT = Path(__file__).resolve().parent.parent
TINY = ["dataset=synthetic_feddyn", "train.num_clients=20", "train.rounds=2", "model=logistic"]


def _finish(results_root: Path, overrides: list[str], device: str) -> str:
    """A finished run's summary in the store under the key of `overrides`: its key."""
    cfg = compose_config([*overrides, f"results_root={results_root}"])
    key = run_key(cfg)
    folder = store.run_dir(results_root, key)
    folder.mkdir(parents=True)
    store.write_json(folder / "summary.json", {"key": key, "status": "finished", "seed": 0, "device": device,
                                                "executor": "SequentialExecutor", "client_rounds": 4,
                                                "final": {"server_test_acc": 0.5}})
    return key


def _outcome(results_root: Path) -> RunResult:
    by_cell = grid.collect([Cell({"row": "tiny"}, TINY)], profile="smoke", seeds=1,
                           results_root=str(results_root), done_only=True)
    return by_cell[0][0]


def test_a_cell_reads_the_run_another_accelerator_finished(tmp_path):
    gpu = _finish(tmp_path, [*TINY, "profile=smoke", "seed=0", "train.accelerator=cuda"], "cuda:0")
    outcome = _outcome(tmp_path)
    assert isinstance(outcome, RunResult) and outcome.key == gpu
    assert executed_on(outcome.summary) == "SequentialExecutor on cuda:0"


def test_its_own_accelerators_run_comes_first(tmp_path):
    _finish(tmp_path, [*TINY, "profile=smoke", "seed=0", "train.accelerator=cuda"], "cuda:0")
    cpu = _finish(tmp_path, [*TINY, "profile=smoke", "seed=0"], "cpu")
    outcome = _outcome(tmp_path)
    assert outcome.key == cpu and executed_on(outcome.summary) == "SequentialExecutor"


def test_without_any_finished_run_the_cell_stays_not_computed(tmp_path):
    outcome = _outcome(tmp_path)
    assert not isinstance(outcome, RunResult) and outcome.kind == "not run"


def test_the_device_script_bundles_finished_runs_that_restore_under_their_keys(tmp_path, monkeypatch):
    from experiments import device_runs

    monkeypatch.chdir(ROOT)  # its run processes import `experiments` from here
    overrides = [*TINY, "profile=smoke", "seed=0", "results_root=results", "logger.progress=false"]
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([{"key": "-", "label": "tiny", "target": "-", "overrides": overrides}]))
    bundle = tmp_path / "runs.tar.gz"
    assert device_runs.main(["run", str(plan), "--accelerator", "cpu", "--jobs", "1", "--results-root",
                             str(tmp_path / "there"), "--bundle", str(bundle)]) == 0
    archive = tmp_path / "archive"
    with tarfile.open(bundle) as tar:
        tar.extractall(archive, filter="data")
    key = run_key(compose_config([*overrides[:-2], "train.accelerator=cpu"]))
    assert [p.name for p in archive.iterdir()] == [key]
    assert {p.name for p in (archive / key).iterdir()} >= {"config.yaml", "summary.json", "metrics.csv"}
    restored, skipped = restore(tmp_path / "here", archive)
    assert restored == [key] and not skipped


def test_status_and_archive_name_the_run_another_accelerator_finished(tmp_path):
    from types import SimpleNamespace

    from experiments.__main__ import run_status

    overrides = [*TINY, "profile=smoke", "seed=0", f"results_root={tmp_path}"]
    options = SimpleNamespace(results_root=str(tmp_path), archive=tmp_path / "archive")
    planned = {"label": "tiny", "key": run_key(compose_config(overrides)), "overrides": overrides}
    assert run_status(planned, options)["state"] == "missing"
    gpu = _finish(tmp_path, [*TINY, "profile=smoke", "seed=0", "train.accelerator=cuda"], "cuda:0")
    row = run_status(planned, options)
    assert row["state"] == "done" and row["key"] == gpu and "train.accelerator=cuda" in row["detail"]


def test_plan_leaves_out_a_run_that_diverged(tmp_path, capsys):
    """A diverged run is an outcome (reused, never recomputed): planning it again would only
    spend GPU time on the same divergence."""
    from experiments import device_runs

    args = ["plan", "feddyn-table6", "--profile", "smoke", "--results-root", str(tmp_path)]
    assert device_runs.main(args) == 0
    planned = json.loads(capsys.readouterr().out)
    first = planned[0]["key"]
    store.run_dir(tmp_path, first).mkdir(parents=True)
    store.write_json(store.run_dir(tmp_path, first) / "summary.json",
                     {"key": first, "status": "diverged", "error": "diverged: local training diverged in round 3"})
    assert device_runs.main(args) == 0
    assert [r["key"] for r in json.loads(capsys.readouterr().out)] == [r["key"] for r in planned[1:]]
