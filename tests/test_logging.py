"""Logging and progress: a run says what its profile capped, a target's sweep says each run's end
as it comes (sequential and joblib) with the runs and time left, and the package prints only
what is a command's product."""
import ast
import io
import logging
import re
from pathlib import Path

import pytest

from fedrepro.config import compose_config
from fedrepro.reports import grid

ROOT = Path(__file__).resolve().parent.parent
TINY = ["train.num_clients=10"]


def test_a_run_logs_what_its_profile_capped(tmp_path, caplog):
    from fedrepro.run import profile_caps
    from fedrepro.runner import run_experiment

    caplog.set_level(logging.INFO, logger="fedrepro")
    cfg = compose_config(["profile=smoke", "logger.progress=false", *TINY, f"results_root={tmp_path}"])
    run_experiment(cfg)
    caps = [r for r in caplog.records if r.name == "fedrepro.run" and r.getMessage().startswith("profile=smoke: ")]
    assert len(caps) == 1 and caps[0].levelno == logging.INFO
    assert caps[0].getMessage().startswith(f"profile=smoke: rounds {cfg.train.rounds} -> 3, at most 5 local steps "
                                           "a round, test set at most 1000 samples"), caps[0].getMessage()
    quick = compose_config(["profile=quick", "train.local_epochs=10", "train.eval_every=1"])
    assert "local epochs 10 -> 1, evaluation every 1 -> 5 rounds" in profile_caps(quick)
    assert profile_caps(compose_config(["profile=paper"])) == "profile=paper: nothing capped"


CELLS = [grid.Cell({"cell": "a"}, ["algorithm=fedavg"]), grid.Cell({"cell": "b"}, ["algorithm=fedprox"])]


def _measure(root, **kw):
    return grid.measure_cells(CELLS, lambda r: r.summary["final"]["server_test_acc"], profile="smoke", seeds=1,
                              results_root=str(root), extra=TINY, **kw)


def _run_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "fedrepro.reports.grid" and " seed 0: " in r.getMessage()]


def test_a_sweep_logs_each_run_as_it_ends_with_the_runs_and_time_left(tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger="fedrepro")
    events = []
    run_one = grid._run_one

    def recorded(overrides, *a, **k):
        events.append("start " + next(o for o in overrides if o.startswith("algorithm=")))
        return run_one(overrides, *a, **k)

    class Events(logging.Handler):
        def emit(self, record):
            if " seed 0: " in record.getMessage():
                events.append("line " + record.getMessage().split(" seed")[0])

    monkeypatch.setattr(grid, "_run_one", recorded)
    handler = Events()
    logging.getLogger("fedrepro.reports.grid").addHandler(handler)
    try:
        frame, runs = _measure(tmp_path)
    finally:
        logging.getLogger("fedrepro.reports.grid").removeHandler(handler)
    # each run's line comes as the run ends, before the next one starts
    assert events == ["start algorithm=fedavg", "line a", "start algorithm=fedprox", "line b"]
    first, second = _run_lines(caplog)
    key = runs[0][0].key
    assert re.fullmatch(rf"a seed 0: ran {key} \(finished, test acc 0\.\d{{4}}, [0-9.]+ s\); "
                        r"1 of 2 runs done, 1 left, about [0-9.]+ (s|min) to go", first), first
    assert second.startswith(f"b seed 0: ran {runs[1][0].key} (finished, test acc ") and \
        second.endswith("; 2 of 2 runs done"), second
    assert any(re.fullmatch(r"2 runs in [0-9.]+ (s|min): 2 ran", r.getMessage()) for r in caplog.records)

    # joblib: the same lines, logged in this process as the workers' results come back; the
    # outcomes keep the cells' order and keys
    caplog.clear()
    monkeypatch.setattr(grid, "_run_one", run_one)
    again, runs2 = _measure(tmp_path / "joblib", jobs=2, launcher="joblib")
    lines = _run_lines(caplog)
    assert sorted(line.split(" seed")[0] for line in lines) == ["a", "b"], lines
    assert all(" seed 0: ran " in line for line in lines)
    assert "1 of 2 runs done, 1 left, about " in lines[0] and lines[1].endswith("2 of 2 runs done")
    assert [r[0].key for r in runs2.values()] == [r[0].key for r in runs.values()]
    assert list(again.ours_mean) == list(frame.ours_mean)

    caplog.clear()  # done runs: reused, no time to go counted from them
    _measure(tmp_path)
    assert [line.split(": ")[1].split()[0] for line in _run_lines(caplog)] == ["reused", "reused"]
    assert "to go" not in " ".join(_run_lines(caplog))


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("env, drawn", [(None, True), ("0", False)])
def test_the_progress_bar_is_drawn_on_a_terminal_unless_turned_off(monkeypatch, env, drawn):
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    if env is None:
        monkeypatch.delenv(grid.PROGRESS_ENV, raising=False)
    else:
        monkeypatch.setenv(grid.PROGRESS_ENV, env)
    with grid._Progress(["a seed 0"], None) as progress:
        from fedrepro.runner import Failure

        progress(0, Failure("DataError: not here", "not run"))
    assert ("runs: " in terminal.getvalue()) == drawn, terminal.getvalue()


def test_entry_points_outside_hydra_log_to_stderr_when_nothing_is_configured(monkeypatch):
    from fedrepro.reports.cli import run_target

    root, package = logging.getLogger(), logging.getLogger("fedrepro")
    monkeypatch.setattr(root, "handlers", [])  # as in a fresh `python -m experiments....` process
    level = package.level
    package.setLevel(logging.NOTSET)
    stderr = io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)

    def target() -> int:
        logging.getLogger("fedrepro.experiments").info("a target's line")
        logging.getLogger("some_library").info("a library's INFO line")
        return 0

    try:
        assert run_target(target) == 0
        assert "a target's line" in stderr.getvalue() and "a library's" not in stderr.getvalue()
        assert len(root.handlers) == 1
        run_target(target)  # configured once
        assert len(root.handlers) == 1
    finally:
        package.setLevel(level)  # setLevel, not setattr: the loggers' cached levels are cleared too


# Where the package may print: what the command's product is (its table, its listing, its answer)
# or its error line on stderr. Everything else goes through the fedrepro loggers.
PRINTS = {
    ("fedrepro/__main__.py", "main"): "the error that stops a run, on stderr (exit 2)",
    ("fedrepro/reports/cli.py", "run_target"): "a target's error, on stderr (exit 2)",
    ("fedrepro/reports/grid.py", "main"): "the ad-hoc grid's table and where it was written",
    ("fedrepro/status.py", "main"): "the status listing",
    ("fedrepro/archive.py", "main"): "what archive save / restore did",
    ("fedrepro/algorithms/l2gd.py", "main"): "the optimal-p calculator's answer",
}


def _prints(path: Path) -> list[tuple[str, int]]:
    """(enclosing function, line) of every use of print (a call, or print passed as a callable)."""
    found = []

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, function or child.name)  # a nested function counts as its outer one
                continue
            if isinstance(child, ast.Name) and child.id == "print":
                found.append((function or "<module>", child.lineno))
            visit(child, function)

    visit(ast.parse(path.read_text()), None)
    return found


def test_the_package_prints_only_its_commands_products():
    stray = [f"{path.relative_to(ROOT)}:{line} ({function})"
             for path in sorted((ROOT / "fedrepro").rglob("*.py"))
             for function, line in _prints(path)
             if (str(path.relative_to(ROOT)), function) not in PRINTS]
    assert stray == [], "print outside a command's product (log it instead): " + ", ".join(stray)


def test_a_bad_log_level_is_one_line_naming_the_choices(monkeypatch, capsys):
    from fedrepro.reports.cli import run_target

    monkeypatch.setenv("FEDREPRO_LOG_LEVEL", "loud")
    assert run_target(lambda: 0) == 2
    err = capsys.readouterr().err.strip()
    assert err == "fedrepro: error: FEDREPRO_LOG_LEVEL=loud is invalid: choose one of DEBUG, INFO, WARNING, ERROR, CRITICAL"
