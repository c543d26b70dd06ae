"""W&B as its users expect, checked offline by reading the run files wandb writes
(`<run folder>/wandb/offline-run-*/run-<id>.wandb`): name, id, group, tags, the resolved config,
the final metrics in the summary, the run's files as an artifact, a resume that does not send
the rounds again; and none of it in the run key."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedrepro.config import compose_config, run_key
from fedrepro.run import Interrupted
from fedrepro.runner import run_experiment

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ["profile=smoke", "dataset=mnist_5k", "train.num_clients=10", "logger.progress=false"]
W_AND_B = ["logger=wandb", "logger.group=sweep-a", "logger.paper=feddyn"]


def wandb_records(run_dir: Path, wait_s: float = 60) -> list:
    """The records of an offline W&B run once its exit record is on disk (or after `wait_s`):
    wandb's service process writes the file and can still be flushing it when `finish` has
    returned (seen once in CI, with the test workers beside each other)."""
    deadline = time.monotonic() + wait_s
    while True:
        records = read_wandb_file(run_dir)
        if of_kind(records, "exit") or time.monotonic() > deadline:
            return records
        time.sleep(0.5)


def read_wandb_file(run_dir: Path) -> list:
    """The protobuf records of an offline W&B run: its .wandb file is a LevelDB-format log
    (32 KiB blocks of records with a 7-byte header: crc32, length, type FULL/FIRST/MIDDLE/LAST)
    after a 7-byte file header; wandb 0.31 ships no Python reader for it."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = next(run_dir.glob("run-*.wandb")).read_bytes()
    assert data[:4] == b":W&B", "not a W&B run file"
    block, header = 32768, 7
    i, pending, records = header, b"", []
    while i + header <= len(data):
        if block - i % block < header:  # the block's zero-filled trailer
            i += block - i % block
            continue
        _, length, kind = struct.unpack("<IHB", data[i:i + header])
        if kind == 0 or i + header + length > len(data):  # the end, or a record still being written
            break
        pending += data[i + header:i + header + length]
        i += header + length
        if kind in (1, 4):  # FULL or LAST: one whole record
            record = pb.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def of_kind(records: list, kind: str) -> list:
    return [getattr(r, kind) for r in records if r.WhichOneof("record_type") == kind]


def items(update) -> dict:
    """{key: decoded value} of a config / summary / history update."""
    return {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in update}


def offline_runs(folder: Path) -> list[Path]:
    return sorted((folder / "wandb").glob("offline-run-*"))


def logged_rounds(run_dir: Path) -> list[int]:
    return [items(h.item)["round"] for h in of_kind(wandb_records(run_dir), "history")]


def test_wandb_fields_do_not_change_the_run_key():
    csv = compose_config(["logger=csv"])
    wandb = compose_config(["logger=wandb", "logger.group=x", "logger.paper=feddyn", "logger.wandb_project=other",
                            "logger.wandb_mode=disabled"])
    assert run_key(wandb) == run_key(csv)


@pytest.fixture
def no_network(monkeypatch):
    """Offline, and any connection W&B tried would go to a closed port instead of waiting on the network."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")


def test_offline_run_has_name_group_tags_config_summary_and_artifact(results, no_network):
    t0 = time.perf_counter()
    r = run_experiment(compose_config([*SMOKE, *W_AND_B, f"results_root={results}"]), quiet=True)
    assert time.perf_counter() - t0 < 120, "the W&B run waited (on the network?)"
    assert r.summary["status"] == "finished"
    (run_dir,) = offline_runs(r.folder)
    records = wandb_records(run_dir)

    (run,) = of_kind(records, "run")
    assert run.run_id == r.key and run.display_name == "fedavg-mnist_5k-iid-0"
    assert run.run_group == "sweep-a" and run.project == "fedrepro"
    assert list(run.tags) == ["feddyn", "smoke", "mnist_5k", "iid"]
    config = items(run.config.update)
    assert config["train"]["lr"] == 0.1 and config["algorithm"]["name"] == "fedavg"
    assert config["data_root"] == compose_config([*SMOKE])["data_root"]  # resolved, not ${oc.env:...}

    summary = {}
    for update in of_kind(records, "summary"):
        summary.update(items(update.update))
    stored = json.loads((r.folder / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["rounds_completed"] == 3
    for name in ("server_test_acc", "all_test_acc", "server_test_loss", "cum_up_nonzeros"):
        assert summary[name] == pytest.approx(stored["final"][name])

    (artifact,) = of_kind(records, "artifact")
    assert artifact.name == f"run-{r.key}" and artifact.type == "fedrepro-run"
    files = {m.path: m.digest for m in artifact.manifest.contents}
    assert set(files) == {"metrics.csv", "config.yaml", "summary.json"}
    for name, digest in files.items():  # the artifact holds the run's files as they are now
        assert digest == base64.b64encode(hashlib.md5((r.folder / name).read_bytes()).digest()).decode()

    assert logged_rounds(run_dir) == [0, 1, 2, 3]
    assert [e.exit_code for e in of_kind(records, "exit")] == [0]


def test_resumed_run_continues_its_history_without_replaying_it(results, no_network):
    cfg = compose_config([*SMOKE, *W_AND_B, "train.checkpoint_every=1", f"results_root={results}"])
    with pytest.raises(Interrupted):  # after round 2 is logged, before its checkpoint: resumes from 1
        run_experiment(cfg, interrupt_after=2, quiet=True)
    time.sleep(1.1)  # offline-run folders are named to the second
    r = run_experiment(cfg, quiet=True)
    assert r.summary["resumed_from"] == 1
    first, resumed = offline_runs(r.folder)
    assert logged_rounds(first) == [0, 1, 2]
    assert logged_rounds(resumed) == [2, 3]  # after the checkpoint only; round 2 was recomputed
    (run,) = of_kind(wandb_records(resumed), "run")
    assert run.run_id == r.key  # the same W&B run, continued
    # the CSV is whole: rewritten from the checkpoint's history, then the new rounds
    assert (r.folder / "metrics.csv").read_text().count("\n") == 5


def test_a_multiruns_runs_are_grouped_under_its_sweep(tmp_path):
    """Without logger.group, a multirun's W&B runs share the sweep folder's name as their group."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", "WANDB_BASE_URL": "http://127.0.0.1:9"}
    out = subprocess.run([sys.executable, "-m", "fedrepro", "-m", "seed=0,1", *SMOKE, "logger=wandb",
                          f"results_root={tmp_path}", f"hydra.sweep.dir={tmp_path / 'seed-study'}"],
                         cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    runs = [of_kind(wandb_records(d), "run")[0] for d in sorted(tmp_path.glob("runs/*/wandb/offline-run-*"))]
    assert sorted(r.display_name for r in runs) == ["fedavg-mnist_5k-iid-0", "fedavg-mnist_5k-iid-1"]
    assert {r.run_group for r in runs} == {"seed-study"}


def test_a_targets_runs_are_grouped_under_the_target(tmp_path, no_network):
    """`make <target> OVERRIDES="logger=wandb"`: every run of the target is logged under the
    target's make name as W&B's group (here the ad-hoc grid target; a paper's targets also tag
    their paper), and --override still wins over the target's own logger settings."""
    from experiments.__main__ import main as experiments_main

    common = ["grid", "--results-root", str(tmp_path), "--profile", "smoke", "--override", "logger=wandb",
              "--cell=a=algorithm=fedavg", "--cell=b=algorithm=fedprox"]
    assert experiments_main([*common, "--", "train.num_clients=10"]) == 0
    runs = [of_kind(wandb_records(d), "run")[0] for d in sorted(tmp_path.glob("runs/*/wandb/offline-run-*"))]
    assert len(runs) == 2 and {r.run_group for r in runs} == {"grid"}
    mine = tmp_path / "mine"
    assert experiments_main([*common[:2], str(mine), *common[3:], "--override", "logger.group=mine",
                             "--", "train.num_clients=10"]) == 0
    runs = [of_kind(wandb_records(d), "run")[0] for d in sorted(mine.glob("runs/*/wandb/offline-run-*"))]
    assert {r.run_group for r in runs} == {"mine"}


def test_a_paper_targets_runs_carry_its_group_and_paper():
    from types import SimpleNamespace

    from fedrepro.reports.grid import Cell
    from fedrepro.reports.target import _as_the_targets_runs

    options = SimpleNamespace(data_root="d", group="fen-table2", paper="fedelasticnet", override=["logger=wandb"])
    (cell,) = _as_the_targets_runs([Cell({}, ["algorithm=fedavg"])], options)
    assert cell.overrides == ["data_root=d", "logger.group=fen-table2", "logger.paper=fedelasticnet",
                              "algorithm=fedavg", "logger=wandb"]
