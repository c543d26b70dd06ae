"""The command line: a single run and multiruns with two launchers."""
import json
import subprocess
import sys
from pathlib import Path


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
