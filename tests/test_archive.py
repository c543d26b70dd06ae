"""The run archive (fedrepro/archive.py): a target's finished runs saved into the repository's
archive and restored into an empty results store render the same table without training."""
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from fedrepro import archive


def test_archived_runs_restore_into_a_new_store_and_render_the_same_table(tmp_path, monkeypatch, capsys):
    from experiments.__main__ import main as experiments_main

    def grid_main(argv):
        return experiments_main(["grid", *argv])

    data = Path(os.environ.get("FEDREPRO_DATA_ROOT", "data")).resolve()
    monkeypatch.setenv("FEDREPRO_DATA_ROOT", str(data))  # absolute, as make and CI give it
    first, second, arch = str(tmp_path / "first"), str(tmp_path / "second"), tmp_path / "archive"
    cells = ["--cell=done=algorithm=fedavg", "--cell=todo=algorithm=fedprox"]
    extra = ["--", "train.num_clients=10"]
    assert grid_main(["--results-root", first, "--profile", "smoke", "--name", "t", cells[0], *extra]) == 0
    capsys.readouterr()

    # a target's runs: the finished one is archived (small files only), the missing one named
    assert experiments_main(["archive", "grid", "--results-root", first, "--archive", str(arch),
                             "--profile", "smoke", *cells, *extra]) == 0
    out = capsys.readouterr().out
    assert "archived 1 finished runs" in out and out.count("skipped") == 1 and "not finished" in out
    (key,) = [p.name for p in arch.iterdir()]
    assert sorted(p.name for p in (arch / key).iterdir()) == ["config.yaml", "metrics.csv", "partition.json",
                                                             "summary.json"]
    for f in (arch / key).iterdir():  # no path of this machine: the data folder relative to the repository
        assert str(data) not in f.read_text() and os.getcwd() + os.sep not in f.read_text(), f.name
        assert str(tmp_path) not in f.read_text(), f.name  # the scratch results store neither
    assert f"data_root: {os.path.relpath(data)}\n" in (arch / key / "config.yaml").read_text()

    # before the restore, status names the archived run and how to bring it in
    assert experiments_main(["status", "grid", "--results-root", second, "--profile", "smoke",
                             "--archive", str(arch), *cells, *extra]) == 0
    text = capsys.readouterr().out
    assert "2 runs: 1 archived, 1 missing" in text and "make restore" in text, text

    with pytest.raises(SystemExit):  # a wrong archive folder is an error, not "restored 0"
        archive.main(["--results-root", second, "--archive", str(tmp_path / "nowhere"), "restore"])
    assert "no run archive at" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match="no run archive at"):  # from Python too
        archive.restore(second, tmp_path / "nowhere")

    # restored into an empty store, the done-only render trains nothing and gives the same cell
    assert archive.main(["--results-root", second, "--archive", str(arch), "restore"]) == 0
    assert "restored 1 archived runs" in capsys.readouterr().out
    render = ["--profile", "smoke", "--name", "t", "--done-only", *cells, *extra]
    assert grid_main(["--results-root", second, *render]) == 1  # the todo cell is not there
    assert sorted(p.name for p in (tmp_path / "second" / "runs").iterdir()) == [key]  # nothing trained
    table = pd.read_csv(tmp_path / "second" / "tables" / "t.csv").set_index("cell")
    original = pd.read_csv(tmp_path / "first" / "tables" / "t.csv").set_index("cell")
    assert table.loc["done", "status"] == "ok"
    assert table.loc["done", "ours_mean"] == original.loc["done", "ours_mean"]
    capsys.readouterr()

    # a second restore leaves the finished run alone; an archived run whose config no longer
    # hashes to its folder's name (another schema, or edited) is refused, not passed off
    stale = arch / "0123456789abcdef"
    shutil.copytree(arch / key, stale)
    done, skipped = archive.restore(second, arch)
    assert done == [] and len(skipped) == 1 and skipped[0].startswith("0123456789abcdef: its config.yaml hashes to")
    assert not (tmp_path / "second" / "runs" / "0123456789abcdef").exists()


def test_only_a_missing_archive_folder_is_a_usage_error(tmp_path, monkeypatch):
    """A file that vanishes inside restore (a bug, or a run deleted mid-copy) keeps its traceback
    instead of reading as "no run archive" on the command line."""
    def lose_a_file(results_root, folder):
        raise FileNotFoundError(f"{folder}/x/metrics.csv")

    monkeypatch.setattr(archive, "restore", lose_a_file)
    with pytest.raises(FileNotFoundError, match="metrics.csv"):
        archive.main(["--results-root", str(tmp_path), "--archive", str(tmp_path), "restore"])


def test_every_run_a_committed_output_names_is_archived():
    """Each finished or diverged run in a committed `*_runs.csv` with run keys is in the archive,
    so a fresh clone re-renders it."""
    measured = Path(__file__).resolve().parent.parent / "docs" / "measured"
    named = set()
    for path in measured.glob("*_runs.csv"):
        runs = pd.read_csv(path)
        if {"key", "status"} <= set(runs.columns):
            named |= set(runs[runs.status.isin(["finished", "diverged"])].key.dropna())
    archived = {p.name for p in (measured / "runs").iterdir()}
    assert named <= archived, sorted(named - archived)
