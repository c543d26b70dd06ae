"""Fault tolerance of sweeps (issue 8): SIGKILL at a random round and during a results write,
failing and diverging runs, concurrent writers, damaged checkpoints, launchers, secrets.

Sweeps run as `python -m experiments grid` (measure_cells, what every table target runs)
or `python -m fedrepro -m` (Hydra multirun) in subprocesses at profile=smoke on mnist_5k.
"""
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from fedrepro import runner, store
from fedrepro.config import compose_config

ROOT = Path(__file__).resolve().parent.parent
EXTRA = ["train.num_clients=10", "profile.max_rounds=8", "train.checkpoint_every=1"]
# qsgd: the compressor draws random numbers (its generator state is in the checkpoint)
CELLS = ["fedavg_qsgd=algorithm=fedavg compressor=qsgd", "fedprox=algorithm=fedprox algorithm.mu=0.01"]


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("FEDREPRO_TEST_FAULT", "LAUNCHER", "DONE_ONLY", "JOBS", "SEEDS", "PROFILE",
                        "WANDB_API_KEY", "WANDB_ENTITY", "RAY_ADDRESS")}
    env.update(OMP_NUM_THREADS="1", PYTHONHASHSEED="0", WANDB_MODE="offline")
    env.update(extra)
    return env


def _sweep_cmd(root, cells, *options, extra=EXTRA) -> list[str]:
    cmd = [sys.executable, "-m", "experiments", "grid", "--profile", "smoke", "--results-root", str(root), *options]
    for c in cells:
        cmd += ["--cell", c]
    return [*cmd, "--", *extra]


def grid_main(argv) -> int:
    """The ad-hoc grid target (`python -m experiments grid ...`) in this process."""
    from experiments.__main__ import main

    return main(["grid", *argv])


def _run(cmd, timeout=300, **env):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=_env(**env))


def _keys_by_algorithm(root) -> dict:
    return {json.loads(p.read_text())["algorithm"]: p.parent.name for p in Path(root).glob("runs/*/summary.json")}


def _leftovers(root) -> list[str]:
    return sorted(str(p) for p in Path(root).glob("runs/*/.*.tmp")) + \
        sorted(str(p) for p in Path(root).glob("runs/*/checkpoint*"))


def test_sigkill_at_a_random_round_and_during_writes_then_rerun_gives_the_uninterrupted_table(tmp_path):
    clean, hurt = tmp_path / "clean", tmp_path / "killed"
    out = _run(_sweep_cmd(clean, CELLS))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    keys = _keys_by_algorithm(clean)
    first, second = keys["fedavg"], keys["fedprox"]

    # 1. SIGKILL in the middle of writing the checkpoint of a random round of the first run
    r = random.randint(2, 7)
    out = _run(_sweep_cmd(hurt, CELLS), FEDREPRO_TEST_FAULT=f"kill:checkpoint.pt:{r}")
    assert out.returncode == -signal.SIGKILL, f"round {r}: {out.returncode} {out.stderr[-2000:]}"
    folder = hurt / "runs" / first
    assert list(folder.glob(".checkpoint.pt.*.tmp")), f"round {r}: no half-written checkpoint left"
    assert not (folder / "summary.json").exists()

    # 2. SIGKILL from outside at a random moment once the second run has started
    proc = subprocess.Popen(_sweep_cmd(hurt, CELLS), cwd=ROOT, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (hurt / "runs" / second / "config.yaml").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    delay = random.uniform(0, 0.25)
    time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(60) == -signal.SIGKILL, f"the sweep ended before the kill (delay {delay:.2f} s)"
    assert (folder / "summary.json").exists() and not (hurt / "runs" / second / "summary.json").exists()

    # 3. SIGKILL in the middle of writing the second run's summary.json
    out = _run(_sweep_cmd(hurt, CELLS), FEDREPRO_TEST_FAULT="kill:summary.json")
    assert out.returncode == -signal.SIGKILL, out.stderr[-2000:]
    assert list((hurt / "runs" / second).glob(".summary.json.*.tmp"))
    assert not (hurt / "runs" / second / "summary.json").exists()

    # 4. the same sweep again: the table and every number equal the uninterrupted sweep's
    out = _run(_sweep_cmd(hurt, CELLS))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert (hurt / "tables" / "sweep.md").read_text() == (clean / "tables" / "sweep.md").read_text()
    for key in (first, second):
        pd.testing.assert_frame_equal(pd.read_csv(hurt / "runs" / key / "metrics.csv"),
                                      pd.read_csv(clean / "runs" / key / "metrics.csv"))
        assert torch.equal(torch.load(hurt / "runs" / key / "model.pt"), torch.load(clean / "runs" / key / "model.pt"))
    assert store.read_summary(hurt / "runs" / second)["resumed_from"] == 7  # the last checkpoint
    assert _leftovers(hurt) == []


def _alive(pid: int) -> bool:
    """Any thread of the process still running. Its main thread can be a zombie while the others
    (torch's, numba's) still exit, holding the file table and so the run's flock."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    states = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:  # the state follows the ")" that ends the thread's name
            states.append((task / "stat").read_text().rsplit(")", 1)[1].split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # that thread is gone
    return any(s != "Z" for s in states)


@pytest.mark.parametrize("driver", ["grid", "hydra multirun"])
def test_joblib_workers_stop_when_their_sweep_is_killed_and_leave_their_runs_resumable(tmp_path, driver):
    # two runs far too long to end on their own, one per joblib worker
    long = ["train.num_clients=10", "train.rounds=1000000", "profile.max_rounds=1000000"]
    if driver == "grid":
        cmd = _sweep_cmd(tmp_path, ["fedavg=algorithm=fedavg", "fedprox=algorithm=fedprox"], extra=long)
    else:
        cmd = [sys.executable, "-m", "fedrepro", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
               "algorithm=fedavg,fedprox", "profile=smoke", f"results_root={tmp_path}", "logger.progress=false", *long]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(LAUNCHER="joblib", JOBS="2"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    markers, workers = [], []
    try:
        deadline = time.time() + 120
        while len(markers) < 2 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)
            markers = sorted((tmp_path / ".locks").glob("*.json"))
        assert len(markers) == 2, f"the two runs did not start (sweep exit {proc.poll()})"
        workers = [json.loads(m.read_text())["pid"] for m in markers]
        assert proc.pid not in workers  # both runs are in worker processes
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == -signal.SIGTERM
        deadline = time.time() + 30
        while any(map(_alive, workers)) and time.time() < deadline:
            time.sleep(0.1)
        assert not any(map(_alive, workers)), "a worker went on computing after its sweep was killed"
        for m in markers:  # killed mid-run: the lock is free and the marker stays, i.e. "interrupted"
            assert m.exists() and store.running(tmp_path, m.stem) is None
    finally:  # nothing of this test trains on after it
        if proc.poll() is None:
            proc.kill()
        for pid in workers:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_failing_and_diverging_runs_are_recorded_the_others_complete_and_only_failures_rerun(tmp_path):
    cells = ["fedavg=algorithm=fedavg", "fedprox=algorithm=fedprox algorithm.mu=0.01",
             "impossible=split=natural",  # mnist_5k has no clients of its own
             "diverge=train.lr=1e6 train.clip_norm=null"]
    extra = ["train.num_clients=10"]
    out = _run(_sweep_cmd(tmp_path, cells, extra=extra), LAUNCHER="joblib", JOBS="2")  # as `make ... LAUNCHER= JOBS=`
    assert out.returncode == 1, out.stdout[-2000:] + out.stderr[-3000:]  # 1: not every cell is ok
    table = pd.read_csv(tmp_path / "tables" / "sweep.csv").set_index("cell")
    assert table["status"].to_dict() == {"fedavg": "ok", "fedprox": "ok", "impossible": "failed", "diverge": "diverged"}
    assert table.loc["impossible", "ours"].startswith("failed (ConfigError: split=natural")
    assert table.loc["diverge", "ours"].startswith("diverged (local training diverged in round 1")
    md = (tmp_path / "tables" / "sweep.md").read_text()
    assert "failed (ConfigError" in md and "diverged (" in md

    failed = next(s for s in map(json.loads, (p.read_text() for p in tmp_path.glob("runs/*/summary.json")))
                  if s["status"] == "failed")
    folder = tmp_path / "runs" / failed["key"]
    assert "split=natural" in failed["error"] and failed["round"] == 0 and failed["attempts"] == 1
    assert "kind: natural" in (folder / "config.yaml").read_text()
    assert "Traceback" in (folder / "error.txt").read_text()

    # again (through submitit's local executor): only the failed run is attempted again
    again = _run(_sweep_cmd(tmp_path, cells, "--launcher", "submitit_local", "--jobs", "2", extra=extra))
    assert again.returncode == 1, again.stdout[-2000:] + again.stderr[-3000:]
    for name in ("fedavg", "fedprox", "diverge"):  # each run's line, logged to stderr
        assert f" {name} seed 0: reused" in again.stderr, again.stderr
    assert " impossible seed 0: failed" in again.stderr
    assert store.read_summary(folder)["attempts"] == 2
    assert (tmp_path / "tables" / "sweep.md").read_text() == md


def test_a_run_failing_mid_way_records_its_round_and_resumes_on_the_next_attempt(tmp_path, monkeypatch):
    overrides = ["profile=smoke", "logger.progress=false", *EXTRA]
    clean = runner.execute(compose_config([*overrides, f"results_root={tmp_path / 'a'}"]))
    cfg = compose_config([*overrides, f"results_root={tmp_path / 'b'}"])
    monkeypatch.setenv(store.FAULT_ENV, "raise:checkpoint.pt:4")  # disk full at round 4's checkpoint
    monkeypatch.setattr(store, "_writes", {})
    failure = runner.execute(cfg)
    assert isinstance(failure, runner.Failure) and failure.kind == "failed" and failure.round == 4
    s = store.read_summary(failure.folder)
    assert s["status"] == "failed" and s["round"] == 4 and "No space left on device" in s["error"]
    assert list(pd.read_csv(failure.folder / "metrics.csv")["round"]) == [0, 1, 2, 3, 4]  # what it logged
    monkeypatch.delenv(store.FAULT_ENV)
    assert "No space left on device" in (failure.folder / "error.txt").read_text()
    resumed = runner.execute(cfg)
    assert resumed.summary["status"] == "finished" and resumed.summary["resumed_from"] == 3
    assert not (resumed.folder / "error.txt").exists()  # the failed attempt's traceback went with it
    pd.testing.assert_frame_equal(pd.read_csv(resumed.folder / "metrics.csv"), pd.read_csv(clean.folder / "metrics.csv"))


def test_two_joblib_workers_on_the_same_run_at_the_same_moment_leave_the_store_consistent(tmp_path):
    from fedrepro.reports.grid import Cell, measure_cells

    same = ["train.num_clients=10", "profile.max_rounds=8", "train.checkpoint_every=1"]
    cells = [Cell({"c": "a"}, list(same)), Cell({"c": "b"}, list(same)), Cell({"c": "other"}, [*same, "seed=1"])]
    frame, runs = measure_cells(cells[:2], lambda r: r.summary["final"]["server_test_acc"], profile="smoke",
                                seeds=1, results_root=str(tmp_path), jobs=2, launcher="joblib", log=lambda _: None)
    assert list(frame["status"]) == ["ok", "ok"]
    a, b = runs[0][0], runs[1][0]
    assert a.key == b.key and sorted([a.reused, b.reused]) == [False, True]  # one computed, one waited
    folders = list((tmp_path / "runs").iterdir())
    assert len(folders) == 1
    assert list(pd.read_csv(folders[0] / "metrics.csv")["round"]) == list(range(9))  # no row twice
    assert store.read_summary(folders[0])["status"] == "finished"
    assert _leftovers(tmp_path) == [] and not list((tmp_path / ".locks").glob("*.json"))


def test_concurrent_writers_of_one_file_never_leave_it_partial(tmp_path):
    target = tmp_path / "runs" / "k" / "summary.json"
    code = ("import sys; from pathlib import Path; from fedrepro import store\n"
            "for i in range(200): store.write_json(Path(sys.argv[1]), {'writer': sys.argv[2], 'i': i, 'pad': 'x' * 50000})")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(target), w], cwd=ROOT, env=_env()) for w in "ab"]
    reads = 0
    while any(p.poll() is None for p in procs):
        if target.exists():
            data = json.loads(target.read_text())  # a partial file would not parse
            assert data["writer"] in ("a", "b") and len(data["pad"]) == 50000
            reads += 1
    assert [p.wait() for p in procs] == [0, 0] and reads > 0
    assert json.loads(target.read_text())["i"] == 199 and not list(target.parent.glob(".*.tmp"))


def test_truncated_or_corrupted_checkpoint_is_detected_and_the_previous_one_used(tmp_path):
    folder = tmp_path / "run"
    store.save_checkpoint(folder, {"key": "k", "round": 1, "x": torch.arange(1000)})
    store.save_checkpoint(folder, {"key": "k", "round": 2, "x": torch.arange(1000)})
    assert store.load_checkpoint(folder, "k")["round"] == 2
    ckpt = folder / store.CHECKPOINT
    data = ckpt.read_bytes()
    ckpt.write_bytes(data[: len(data) // 2])  # truncated
    with pytest.warns(UserWarning, match="damaged.*previous good checkpoint"):
        assert store.load_checkpoint(folder, "k")["round"] == 1
    # a flipped byte (same size) is caught by the checksum
    store.save_checkpoint(folder, {"key": "k", "round": 3, "x": torch.arange(1000)})
    raw = bytearray(ckpt.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    ckpt.write_bytes(bytes(raw))
    (folder / store.PREVIOUS_CHECKPOINT).write_bytes(b"\x00" * 10)
    with pytest.warns(UserWarning, match="checksum mismatch.*restarting the run from round 0"):
        assert store.load_checkpoint(folder, "k") is None
    # a checkpoint written by save_torch (no checksum) that is truncated
    store.save_torch(folder / store.CHECKPOINT, {"key": "k", "round": 5})
    (folder / store.CHECKPOINT).write_bytes((folder / store.CHECKPOINT).read_bytes()[:50])
    with pytest.warns(UserWarning, match="damaged"):
        assert store.load_checkpoint(folder, "k") is None


def test_truncated_checkpoint_of_a_run_restarts_it_from_the_last_good_one_with_the_same_numbers(tmp_path):
    from fedrepro.run import Interrupted
    from fedrepro.runner import run_experiment

    overrides = ["profile=smoke", "logger.progress=false", *EXTRA]
    clean = run_experiment(compose_config([*overrides, f"results_root={tmp_path / 'a'}"]), quiet=True)
    cfg = compose_config([*overrides, f"results_root={tmp_path / 'b'}"])
    with pytest.raises(Interrupted):
        run_experiment(cfg, interrupt_after=5, quiet=True)  # checkpoints of rounds 1-4
    folder = tmp_path / "b" / "runs" / clean.key
    rotating = (folder / store.PREVIOUS_CHECKPOINT).exists()  # run.py saves with store.save_checkpoint
    ckpt = folder / store.CHECKPOINT
    ckpt.write_bytes(ckpt.read_bytes()[:200])
    with pytest.warns(UserWarning, match="damaged"):
        resumed = run_experiment(cfg, quiet=True)
    assert resumed.summary["resumed_from"] == (3 if rotating else None)
    pd.testing.assert_frame_equal(pd.read_csv(resumed.folder / "metrics.csv"), pd.read_csv(clean.folder / "metrics.csv"))


def test_submitit_local_executor_runs_a_two_run_sweep(tmp_path):
    out = _run([sys.executable, "-m", "fedrepro", "-m", "hydra/launcher=submitit_local",
                "hydra.launcher.cpus_per_task=1", "seed=0,1", "profile=smoke",
                f"results_root={tmp_path}", "logger.progress=false", "train.num_clients=10"])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    summaries = [json.loads(p.read_text()) for p in tmp_path.glob("runs/*/summary.json")]
    assert sorted((s["seed"], s["status"]) for s in summaries) == [(0, "finished"), (1, "finished")]
    logs = "".join(p.read_text() for p in tmp_path.glob("multirun/**/.submitit/*/*_log.out"))
    assert logs.count("[INFO] - finished: fedavg on mnist_5k") == 2  # each run in a submitit job


@pytest.mark.skipif(__import__("importlib").util.find_spec("ray") is None, reason="ray not installed (.[ray])")
def test_ray_launcher_runs_a_two_run_sweep(tmp_path):
    out = _run(_sweep_cmd(tmp_path, CELLS, "--launcher", "ray", "--jobs", "2", extra=["train.num_clients=10"]),
               RAY_AUTH_MODE="disabled")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "2 Ray tasks (local Ray" in out.stderr
    assert sorted(json.loads(p.read_text())["status"] for p in tmp_path.glob("runs/*/summary.json")) == ["finished"] * 2


def test_wandb_key_and_entity_never_reach_configs_results_or_logs(tmp_path):
    key, entity = "f3a9c1e07d5b4a2e9c8f6d1b0a7e5c3d2b1a0f9e", "secret-entity-8c1f"
    outs = [_run([sys.executable, "-m", "fedrepro", "profile=smoke", "logger=wandb", f"results_root={tmp_path}",
                  "logger.progress=false", "train.num_clients=10"], WANDB_API_KEY=key, WANDB_ENTITY=entity),
            _run([sys.executable, "-m", "fedrepro", "-m", "split=iid,natural", "seed=1", "profile=smoke", "logger=wandb",
                  f"results_root={tmp_path}", "logger.progress=false", "train.num_clients=10"],
                 WANDB_API_KEY=key, WANDB_ENTITY=entity)]
    assert all(o.returncode == 0 for o in outs), [o.stderr[-2000:] for o in outs]
    assert list(tmp_path.glob("runs/*/wandb/offline-run-*")), "W&B did not run"
    assert list(tmp_path.glob("runs/*/error.txt")), "the failing run was not recorded"
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) > 20
    for secret in (key, entity):
        for p in files:
            assert secret.encode() not in p.read_bytes(), f"{secret} written to {p}"
        for o in outs:
            assert secret not in o.stdout + o.stderr


def test_status_lists_done_diverged_running_failed_interrupted_and_missing_runs(tmp_path, capsys):
    from fedrepro.config import run_key
    from fedrepro.run import Interrupted
    from fedrepro.runner import run_experiment
    from experiments.__main__ import main as experiments_main

    root = str(tmp_path)
    base = ["profile=smoke", "logger.progress=false", "train.num_clients=10", f"results_root={root}"]
    cells = {"ok": ["algorithm=fedavg"], "bad": ["split=natural"], "nan": ["train.lr=1e6", "train.clip_norm=null"],
             "busy": ["seed=7"], "killed": ["train.checkpoint_every=1", "algorithm=fedprox"], "new": ["seed=9"]}
    # the grid fixes seed=0 after the cell's overrides; "busy" / "new" differ by lr instead
    cells["busy"], cells["new"] = ["train.lr=0.05"], ["train.lr=0.07"]

    def cfg(name):
        return compose_config([*cells[name], *base, "seed=0"])

    for name in ("ok", "bad", "nan"):
        runner.execute(cfg(name))
    with pytest.raises(Interrupted):
        run_experiment(cfg("killed"), interrupt_after=2, quiet=True)
    target = [*[f"--cell={n}={' '.join(o)}" for n, o in cells.items()], "--", "train.num_clients=10"]
    with store.run_lock(root, run_key(cfg("busy"))):  # held as a running process holds it
        assert experiments_main(["status", "grid", "--results-root", root, "--profile", "smoke", *target]) == 0
    text = capsys.readouterr().out
    rows = {line.split("|")[3].strip().split(" seed")[0]: [c.strip() for c in line.split("|")[1:-1]]
            for line in text.splitlines() if line.startswith("| ") and " seed 0" in line}
    assert {n: r[0] for n, r in rows.items()} == {"ok": "done", "bad": "failed", "nan": "diverged", "busy": "running",
                                                  "killed": "interrupted", "new": "missing"}, text
    assert rows["ok"][1].endswith(" s") and rows["bad"][1].endswith(" s") and rows["busy"][1].endswith(" s")
    assert "split=natural" in rows["bad"][4] and "round 2 of " in rows["killed"][4], text
    assert " a round so far, about " in rows["killed"][4] and rows["killed"][4].endswith(" to go"), text
    assert "6 runs: 1 done, 1 diverged, 1 running, 1 failed, 1 interrupted, 1 missing" in text
    assert not (tmp_path / "tables").exists()  # planning renders nothing into the results root
    # the whole store, no target
    from fedrepro.status import main as status_main

    assert status_main(["--results-root", root]) == 0
    assert "results store" in capsys.readouterr().out
    killed = store.run_dir(root, run_key(cfg("killed")))
    assert (killed / store.PROGRESS).exists()
    assert runner.execute(cfg("killed")).summary["status"] == "finished"  # resumed and done: no pace left
    assert not (killed / store.PROGRESS).exists() and not (killed / store.CHECKPOINT).exists()


def test_status_tells_an_unfinished_runs_pace_and_the_time_left_at_it(tmp_path):
    from fedrepro.status import run_state

    folder = store.run_dir(tmp_path, "0123456789abcdef")
    folder.mkdir(parents=True)
    assert run_state(tmp_path, "0123456789abcdef")["detail"] == "killed before its first checkpoint"
    # 30 of 100 rounds in 8 820 s of training: 294 s a round, 70 rounds left
    store.write_json(folder / store.PROGRESS, {"round": 30, "rounds": 100, "train_seconds": 8820.0})
    state = run_state(tmp_path, "0123456789abcdef")
    assert state["state"] == "interrupted"
    assert state["detail"] == ("killed before its first checkpoint, round 30 of 100 logged; "
                               "4.9 min a round so far, about 5.7 h to go")
    store.write_json(folder / store.PROGRESS, {"round": 0, "rounds": 100, "train_seconds": 0.0})
    assert run_state(tmp_path, "0123456789abcdef")["detail"] == "killed before its first checkpoint"


def test_done_only_renders_finished_runs_and_trains_nothing(tmp_path, monkeypatch, capsys):
    root = str(tmp_path)
    common = ["--results-root", root, "--profile", "smoke", "--name", "partial"]
    extra = ["--", "train.num_clients=10"]
    assert grid_main([*common, "--cell=done=algorithm=fedavg", *extra]) == 0
    runs_before = sorted(p.name for p in (tmp_path / "runs").iterdir())
    capsys.readouterr()
    assert grid_main([*common, "--done-only", "--cell=done=algorithm=fedavg",
                      "--cell=todo=algorithm=fedprox", *extra]) == 1  # one cell is not there yet
    table = pd.read_csv(tmp_path / "tables" / "partial.csv").set_index("cell")
    assert table.loc["done", "status"] == "ok" and 0 < table.loc["done", "ours_mean"] <= 1
    assert table.loc["todo", "status"] == "not run" and "not computed yet" in table.loc["todo", "reason"]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == runs_before  # nothing was trained
    assert grid_main([*common, "--cell=todo=algorithm=fedprox", *extra]) == 0  # the next target trains again
    from fedrepro.reports.grid import refuse_done_only  # targets with loops of their own say so
    refuse_done_only("losac-fig7", False)  # not asked for: nothing to refuse
    with pytest.raises(SystemExit, match="its own loop"):
        refuse_done_only("losac-fig7", True)
    monkeypatch.setenv("DONE_ONLY", "yes")  # make DONE_ONLY=yes: refused, naming the variable
    with pytest.raises(SystemExit):
        grid_main([*common, "--cell=todo=algorithm=fedprox", *extra])
    assert "DONE_ONLY='yes'" in capsys.readouterr().err


def test_the_ad_hoc_grid_runs_on_its_data_root(tmp_path):
    """--data-root reaches the runs (the driver's default override) instead of the runs
    reading $FEDREPRO_DATA_ROOT: with no MNIST there, the run says it used the 5k stand-in."""
    empty = tmp_path / "no_data"
    assert grid_main(["--results-root", str(tmp_path), "--profile", "smoke", "--name", "where",
                      "--data-root", str(empty), "--cell=c=algorithm=fedavg",
                      "--", "dataset.download=false", "train.num_clients=10"]) == 0
    row = pd.read_csv(tmp_path / "tables" / "where.csv").set_index("cell").loc["c"]
    assert row["status"] == "ok" and f"no MNIST t10k files in {empty}" in row["data"], row.to_dict()


def test_reading_another_targets_runs_trains_nothing(tmp_path):
    """measure_cells(run=False): what the cross-figure claims of the L2GD and LoSAC targets read."""
    from fedrepro.reports import grid

    root = str(tmp_path)
    extra = ["train.num_clients=10"]
    cells = [grid.Cell({"cell": "done"}, ["algorithm=fedavg"]), grid.Cell({"cell": "todo"}, ["algorithm=fedprox"])]
    measure = dict(profile="smoke", seeds=1, results_root=root, extra=extra, log=lambda line: None)
    grid.measure_cells(cells[:1], lambda r: r.summary["final"]["server_test_acc"], **measure)
    runs_before = sorted(p.name for p in (tmp_path / "runs").iterdir())
    status, runs = grid.measure_cells(cells, lambda r: r.summary["final"]["server_test_acc"], run=False, **measure)
    assert list(status.status) == ["ok", "not run"] and runs[0][0].reused and runs[1] == []
    assert status.reason[1] == grid.NOT_IN_STORE
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == runs_before  # nothing was trained


def test_a_parse_sets_the_launcher_anew(monkeypatch, capsys):
    """Two targets in one process: the first one's --launcher is not the second one's default."""
    from fedrepro.reports.cli import table_parser

    monkeypatch.delenv("LAUNCHER", raising=False)
    assert table_parser("first").parse_args(["--launcher", "joblib"]).launcher == "joblib"
    assert table_parser("second").parse_args([]).launcher == "local"
    monkeypatch.setenv("LAUNCHER", "submitit_local")  # make LAUNCHER=... stays the default
    assert table_parser("third").parse_args([]).launcher == "submitit_local"
    monkeypatch.setenv("LAUNCHER", "slurm")  # not a launcher: refused, naming the variable and the choices
    with pytest.raises(SystemExit):
        table_parser("fourth").parse_args([])
    assert "LAUNCHER='slurm' is unknown; choose one of local, joblib" in capsys.readouterr().err


def test_slurm_launcher_submits_one_array_job_per_run_with_the_given_parameters(tmp_path, monkeypatch):
    """No SLURM here: a fake srun makes submitit's SLURM executor start; the sbatch script it
    would submit is captured instead of submitted."""
    import submitit.slurm.slurm as slurm

    from fedrepro.reports.grid import launch

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "srun").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "bin" / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    cluster = tmp_path / "cluster.yaml"  # a launcher config as conf/hydra/launcher/ holds them
    cluster.write_text("defaults:\n  - submitit_slurm\npartition: cpu\ntimeout_min: 240\nmem_gb: 8\n"
                       "account: proj42\ncpus_per_task: 4\nsubmitit_folder: ${results_root}/submitit/%j\n")
    scripts = []

    class Submitted(Exception):
        pass

    def capture(self, command):
        scripts.append(self._make_submission_file_text(command, "uid"))
        raise Submitted

    monkeypatch.setattr(slurm.SlurmExecutor, "_submit_command", capture)
    with pytest.raises(Submitted):
        launch([["profile=smoke", "seed=0"], ["profile=smoke", "seed=1"], ["profile=smoke", "seed=2"]],
               jobs=2, launcher="submitit_slurm", results_root=str(tmp_path), log=lambda _: None,
               launcher_config=str(cluster))
    text = scripts[0]
    for line in ("--array=0-2%2", "--partition=cpu", "--time=240", "--mem=8GB", "--account=proj42",
                 "--cpus-per-task=4", "--signal=USR2@90"):
        assert f"#SBATCH {line}" in text, text


def test_table_targets_read_the_slurm_settings_of_the_launcher_config_hydra_sweeps_use(tmp_path):
    """One source for cluster settings: conf/hydra/launcher/slurm.yaml, Hydra's own keys dropped;
    a config that is not there is refused with the ones that are."""
    from omegaconf import OmegaConf

    from fedrepro.errors import FedreproError
    from fedrepro.reports.grid import slurm_parameters

    own = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "hydra" / "launcher" / "slurm.yaml")
    params = slurm_parameters()
    assert params["timeout_min"] == own.timeout_min and params["mem_gb"] == own.mem_gb
    assert params["slurm_max_num_timeout"] == own.max_num_timeout
    assert not {"defaults", "submitit_folder", "slurm_submitit_folder"} & set(params)
    with pytest.raises(FedreproError, match="launcher config 'mycluster' not found.*slurm"):
        slurm_parameters("mycluster")
