"""Issue 30's goal lines of `make bench` (experiments/bench.py): goal 2, the batched step against
its products alone, is only judged when glibc runs with the Makefile's malloc tunables."""
import pandas as pd

from experiments import bench


def frame(fast: float, products: float) -> pd.DataFrame:
    return pd.DataFrame({"workload": ["mnist_mlp_p100"] * 2, "method": ["fast", "products_only"],
                         "client_steps_per_s": [fast, products]})


def test_goal_two_is_judged_only_with_the_makefiles_malloc_tunables(monkeypatch):
    assert " 83% |" in bench.goals_markdown(frame(2304, 2764), [], [])
    assert "not met" in bench.goals_markdown(frame(2304, 2764), [], [])
    assert "holds" in bench.goals_markdown(frame(2282, 1896), [], [])  # what an untuned baseline gave
    untuned = bench.goals_markdown(frame(2282, 1896), [], [], malloc_ok=False)
    assert "holds" not in untuned and "not judged" in untuned
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=268435456")
    assert bench.malloc_tuned()
    monkeypatch.delenv("GLIBC_TUNABLES")
    assert not bench.malloc_tuned()
