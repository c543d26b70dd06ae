"""Issue 30's goal lines of `make bench` (experiments/bench.py): goal 2, the batched step against
its products alone, is only judged when glibc's malloc thresholds are set (runner.keep_freed_memory)."""
import pandas as pd

from experiments import bench


def frame(fast: float, products: float) -> pd.DataFrame:
    return pd.DataFrame({"workload": ["mnist_mlp_p100"] * 2, "method": ["fast", "products_only"],
                         "client_steps_per_s": [fast, products]})


def test_goal_two_is_judged_only_with_glibcs_malloc_thresholds_set():
    assert " 83% |" in bench.goals_markdown(frame(2304, 2764), [], [])
    assert "not met" in bench.goals_markdown(frame(2304, 2764), [], [])
    assert "holds" in bench.goals_markdown(frame(2282, 1896), [], [])  # what an untuned baseline gave
    untuned = bench.goals_markdown(frame(2282, 1896), [], [], malloc_ok=False)
    assert "| holds" not in untuned and "not judged" in untuned


def test_goal_one_says_when_the_rounds_products_alone_rule_it_out():
    """A paper round below 3x is 'not met' either way; the line adds what the round's products alone at
    the matmul rate would allow, and calls the goal out of reach when that is below 3x."""
    def line(speedup, most):
        row = {"method": "round_fedrepro", "workload": "mnist_fedavg_round", "threads": 1,
               "speedup": speedup, "attainable_speedup": most}
        return bench.goals_markdown(pd.DataFrame(), [row], []).splitlines()[-1]

    assert "holds" in line(3.2, 4.0) and "products alone" not in line(3.2, 4.0)
    assert "not met (products alone: 3.58x)" in line(2.66, 3.58)
    assert "out of reach at this matmul rate (products alone: 2.99x)" in line(2.48, 2.99)


def test_a_ratio_goal_holds_only_when_every_turn_meets_it():
    """Goals 2 and 4 compare two rows timed in turns: turn i of each saw the same load, so each turn
    gives a ratio; a verdict that one turn would flip is 'undecided', with the turns' spread."""
    def turns_frame(fast_turns, products_turns):
        median = lambda v: sorted(v)[len(v) // 2]  # noqa: E731
        return pd.DataFrame({"workload": ["mnist_mlp_p10"] * 2, "method": ["fast", "products_only"],
                             "client_steps_per_s": [median(fast_turns), median(products_turns)],
                             "turns": [";".join(map(str, fast_turns)), ";".join(map(str, products_turns))]})

    assert bench.turn_ratios(turns_frame([90, 80], [100, 100]), "mnist_mlp_p10", "fast", "products_only") == [0.9, 0.8]
    steady = bench.goals_markdown(turns_frame([90, 88, 86], [100, 100, 100]), [], [])
    assert "holds (turns 86%-90%)" in steady
    flips = bench.goals_markdown(turns_frame([90, 80, 86], [100, 100, 100]), [], [])
    assert "undecided: 2 of 3 turns meet it (turns 80%-90%)" in flips and "holds" not in flips
    assert "not met (turns 70%-80%)" in bench.goals_markdown(turns_frame([70, 80, 75], [100, 100, 100]), [], [])
    no_turns = pd.DataFrame({"workload": ["cifar_cnn_p10"] * 2, "method": ["fast", "dataloader"],
                             "client_steps_per_s": [38, 27]})  # a bench.csv from before the turns column
    assert bench.goals_markdown(no_turns, [], []).splitlines()[-1].endswith("not met |")


def test_the_client_block_row_times_blocks_against_all_clients_on_both_paths():
    row = bench.client_block_row(seconds=0.01, repeats=1)
    assert row["block"] == 2 and row["threads"] == 1
    for path in ("scaled", "prox"):
        assert row[f"{path}_speedup"] > 0 and len(row[f"{path}_turns"].split()) == 1
    assert "blocks of 2 / all 100 clients" in row["detail"]


def test_a_misspelt_only_part_is_refused_by_name(capsys, tmp_path):
    import pytest

    with pytest.raises(SystemExit):
        bench.main(["--profile", "smoke", "--only", "blcks,rounds", "--out", str(tmp_path / "bench")])
    assert "--only blcks: not a part of the bench" in capsys.readouterr().err
