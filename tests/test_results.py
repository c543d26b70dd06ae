"""fedrepro.results: every run of a store as one tidy frame, and the curves in long format."""
import pandas as pd
import pytest

from fedrepro import runner
from fedrepro.config import compose_config
from fedrepro import results
from fedrepro.results import load_curves, load_runs, run_metrics


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    for alg in ("fedavg", "fedprox"):
        runner.execute(compose_config([f"algorithm={alg}", "profile=smoke", "train.num_clients=10",
                                       "logger.progress=false", f"results_root={root}"]), quiet=True)
    (root / "runs" / "0000000000000000").mkdir()  # a folder without config: not a run
    return root


def test_load_runs_is_one_row_per_run_with_config_and_final_metrics(store):
    runs = load_runs(store)
    assert len(runs) == 2 and set(runs["algorithm.name"]) == {"fedavg", "fedprox"}
    assert list(runs.columns[:2]) == ["key", "status"] and set(runs.status) == {"finished"}
    assert runs["final.server_test_acc"].between(0, 1).all() and (runs["train.num_clients"] == 10).all()
    assert list(load_runs(store, algorithm="fedprox")["algorithm.name"]) == ["fedprox"]
    assert len(load_runs(store, algorithm=["fedprox", "fedavg"], seed=0)) == 2
    with pytest.raises(KeyError, match="no column 'nosuch'"):
        load_runs(store, nosuch=1)
    assert load_runs(store / "empty").empty


def test_load_curves_is_long_with_the_metrics_csv_values(store):
    runs = load_runs(store)
    curves = load_curves(store, keys=runs.key, metrics=["server_test_acc", "cum_up_nonzeros"])
    assert list(curves.columns) == ["key", "round", "metric", "value"]
    assert set(curves.metric) == {"server_test_acc", "cum_up_nonzeros"} and curves.value.notna().all()
    key = runs.key[0]
    wide = pd.read_csv(store / "runs" / key / "metrics.csv")
    acc = curves[(curves.key == key) & (curves.metric == "server_test_acc")]
    assert list(acc.value) == list(wide.server_test_acc.dropna())
    final = runs.set_index("key").loc[key, "final.server_test_acc"]
    assert acc.value.iloc[-1] == pytest.approx(final)
    assert "step" not in set(load_curves(store).metric)  # a copy of round


def test_run_metrics_parses_a_file_once_per_version_and_hands_out_copies(tmp_path, monkeypatch):
    (tmp_path / "metrics.csv").write_text("round,acc\n1,0.5\n2,0.75\n")
    parses = []
    real = pd.read_csv
    monkeypatch.setattr(results.pd, "read_csv", lambda path, *a, **k: parses.append(path) or real(path, *a, **k))
    results._parsed_metrics.cache_clear()
    first = run_metrics(tmp_path)
    first.loc[0, "acc"] = -1.0  # a caller's change stays in its copy
    assert run_metrics(tmp_path)["acc"].tolist() == [0.5, 0.75] and len(parses) == 1
    (tmp_path / "metrics.csv").write_text("round,acc\n1,0.5\n2,0.75\n3,0.875\n")  # the run went on
    assert run_metrics(tmp_path)["acc"].tolist() == [0.5, 0.75, 0.875] and len(parses) == 2
