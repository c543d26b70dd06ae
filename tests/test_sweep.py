"""A Hydra multirun ends in a table and a plot (fedrepro/sweep.py): each job folder linked to its
run, runs.csv (one row per job, failed ones included), curves.csv (consistent with every run's
metrics.csv), sweep.png; the task returns the headline metric an optimizing sweeper needs."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from fedrepro import sweep
from fedrepro.config import compose_config

ROOT = Path(__file__).resolve().parent.parent
SWEPT = ["algorithm=fedavg,feddyn", "split=iid,natural"]  # split=natural fails on mnist_5k
FIXED = ["profile=smoke", "dataset=mnist_5k", "train.num_clients=10", "logger.progress=false"]


@pytest.fixture(scope="module")
def multirun(tmp_path_factory):
    """A 4-job smoke multirun in a subprocess: 2 runs finish, 2 fail (recorded in the store)."""
    tmp = tmp_path_factory.mktemp("multirun")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    out = subprocess.run([sys.executable, "-m", "fedrepro", "-m", *SWEPT, *FIXED, f"results_root={tmp}",
                          f"hydra.sweep.dir={tmp / 'sweep'}"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return tmp, tmp / "sweep"


def test_multirun_writes_runs_curves_and_plot(multirun):
    root, sweep_dir = multirun
    runs = pd.read_csv(sweep_dir / "runs.csv")
    assert list(runs["job"]) == [0, 1, 2, 3]
    assert list(runs[["algorithm", "split"]].itertuples(index=False, name=None)) == [
        ("fedavg", "iid"), ("fedavg", "natural"), ("feddyn", "iid"), ("feddyn", "natural")]
    assert list(runs["status"]) == ["finished", "failed", "finished", "failed"]
    done = runs[runs["status"] == "finished"]
    assert (done["metric"] == "server_test_acc").all()
    assert all(math.isfinite(a) and 0 < a <= 1 for a in done["final.server_test_acc"])
    assert (done["headline"] == done["final.server_test_acc"]).all()
    failed = runs[runs["status"] == "failed"]
    assert failed["error"].str.contains("split=natural").all()
    assert (sweep_dir / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    for job in runs.itertuples():  # every job folder links to its run folder
        assert (sweep_dir / str(job.job) / "run").resolve() == Path(job.folder).resolve()
        assert Path(job.folder).parent.parent.resolve() == root.resolve()


def test_curves_match_each_runs_metrics_csv(multirun):
    _, sweep_dir = multirun
    runs = pd.read_csv(sweep_dir / "runs.csv")
    curves = pd.read_csv(sweep_dir / "curves.csv")
    assert list(curves.columns) == ["key", "round", "metric", "value"]
    for run in runs[runs["status"] == "finished"].itertuples():
        wide = pd.read_csv(Path(run.folder) / "metrics.csv").drop(columns="step").set_index("round")
        expected = {(rnd, metric): value for (rnd, metric), value in wide.stack().dropna().items()}
        got = {(r.round, r.metric): r.value for r in curves[curves["key"] == run.key].itertuples()}
        assert got.keys() == expected.keys()
        assert all(got[k] == pytest.approx(expected[k]) for k in expected)
        assert got[(3, "server_test_acc")] == pytest.approx(run.headline)
    assert set(curves["key"]) == set(runs.loc[runs["status"] == "finished", "key"])


def test_summary_is_written_again_on_demand(multirun):
    _, sweep_dir = multirun
    before = (sweep_dir / "runs.csv").read_text()
    (sweep_dir / "runs.csv").unlink()
    assert sweep.main([str(sweep_dir)]) == 0
    assert (sweep_dir / "runs.csv").read_text() == before


def test_task_returns_the_headline_metric_and_nan_for_a_failed_run(multirun, monkeypatch):
    """What an optimizing sweeper (Optuna) reads: a float, NaN (a failed trial) for a run that failed."""
    import fedrepro.__main__ as cli

    root, sweep_dir = multirun
    runs = pd.read_csv(sweep_dir / "runs.csv")
    monkeypatch.setattr(cli, "_launch_context", lambda: (True, 0))  # as a job of a multirun
    monkeypatch.setattr(cli, "_sweep_name", lambda: "sweep")
    task = cli.main.__wrapped__
    finished = task(compose_config(["algorithm=fedavg", "split=iid", *FIXED, f"results_root={root}"]))  # reused
    assert finished == pytest.approx(runs.loc[0, "headline"])
    assert math.isnan(task(compose_config(["algorithm=fedavg", "split=natural", *FIXED, f"results_root={root}"])))


def test_headline_is_accuracy_or_the_loss_of_regression():
    final = {"server_test_acc": 0.8, "server_test_loss": 0.3}
    assert sweep.headline_value({"status": "finished", "final": final}, "mlp") == 0.8
    assert sweep.headline_value({"status": "finished", "final": final}, "matrix") == 0.3
    assert math.isnan(sweep.headline_value({"status": "diverged", "final": final}, "mlp"))


def test_job_link_falls_back_to_run_txt(tmp_path, monkeypatch):
    job, folder = tmp_path / "job", tmp_path / "runs" / "abc"
    job.mkdir()
    folder.mkdir(parents=True)
    sweep.link_run(job, folder)
    assert sweep.linked_run(job) == folder
    monkeypatch.setattr(Path, "symlink_to", lambda *a, **k: (_ for _ in ()).throw(OSError("no symlinks here")))
    sweep.link_run(job, folder)
    assert not (job / "run").exists() and (job / "run.txt").exists()
    assert sweep.linked_run(job) == folder


def test_job_folders_of_an_earlier_multirun_into_the_same_folder_are_left_out(tmp_path):
    for job in ("0", "1", "5"):
        (tmp_path / job / ".hydra").mkdir(parents=True)
        (tmp_path / job / ".hydra" / "overrides.yaml").write_text(f"- seed={job}\n")
    os.utime(tmp_path / "5" / ".hydra" / "overrides.yaml", (0, 1e9))  # a job of the sweep before
    (tmp_path / "multirun.yaml").write_text("{}\n")
    assert [p.name for p in sweep.job_dirs(tmp_path)] == ["0", "1"]
    assert sweep.parse_overrides(tmp_path / "1") == {"seed": "1"}


def test_sweep_figure_puts_the_numeric_key_with_most_values_on_x(tmp_path, monkeypatch):
    """The README's FedElasticNet sweep (3 algorithms x 3 lambda1 x 2 epsilon): lambda1 on the x
    axis, one line for each algorithm and epsilon; with no numeric swept key, curves per job."""
    swept = ["algorithm", "algorithm.lambda1", "algorithm.epsilon"]
    rows = [{"job": i, "algorithm": a, "algorithm.lambda1": l1, "algorithm.epsilon": eps, "status": "finished",
             "metric": "server_test_acc", "headline": 0.5 + 0.01 * i, "key": f"k{i}"}
            for i, (a, l1, eps) in enumerate((a, l1, eps) for a in ("fen_alg1", "fen_alg2", "fen_alg3")
                                             for l1 in (1e-6, 1e-5, 1e-4) for eps in (0, 1e-3))]
    table = pd.DataFrame(rows)
    table.attrs["swept"] = swept
    assert sweep._x_key(table, swept) == "algorithm.lambda1"
    assert sweep._x_key(table, ["algorithm"]) is None
    import matplotlib.pyplot as plt
    saved = []
    real_savefig = plt.Figure.savefig
    monkeypatch.setattr(plt.Figure, "savefig", lambda fig, *a, **k: (saved.append(fig), real_savefig(fig, *a, **k))[1])
    sweep.sweep_figure(table, pd.DataFrame(columns=["key", "round", "metric", "value"]), tmp_path / "s.png")
    lines = saved[0].axes[0].get_lines()
    assert len(lines) == 6 and all(len(line.get_xdata()) == 3 for line in lines)
    assert saved[0].axes[0].get_xscale() == "log"


def test_two_sweeps_started_in_the_same_second_get_their_own_folders():
    """The default sweep folder (hydra.sweep.dir, formatted by Hydra's `now`: strftime of the
    start) differs for two starts 0.5 ms apart: a second sweep would otherwise write its job
    folders into the first's and its runs.csv would list the wrong overrides."""
    import re
    from datetime import datetime, timedelta

    from omegaconf import OmegaConf

    pattern = OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "config.yaml").hydra.sweep)["dir"]
    start = datetime(2026, 11, 27, 19, 11, 53, 100)
    names = {re.sub(r"\$\{now:([^}]*)\}", lambda m: t.strftime(m.group(1)), pattern)
             for t in (start, start + timedelta(microseconds=500))}
    assert len(names) == 2, names
