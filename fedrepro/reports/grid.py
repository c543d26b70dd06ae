"""A paper table as a grid of runs: each cell is a set of config overrides run for every seed.

`measure_cells` runs (or reuses, through the results store) every cell for seeds 0..n-1 (through
a launcher: in this process, joblib, submitit (local or SLURM) or Ray; `launch`) and
returns the long `ours` frame that `reports.tables.compare_table` and `reports.claims`
read: one row per cell with the mean over seeds, a 95 % t-interval, the profile, the seeds
and the data behind the number. Cells that cannot run here carry status "not run" and the
reason, so the table shows them instead of leaving them out; a run that raises is recorded in
the store (status "failed", the error and round) and its cell shows "failed (reason)"; a
diverged run's cell "diverged (round ...)". The rest of the sweep always completes.
With done_only=True (a target's --done-only, make DONE_ONLY=1; reports.cli, handed down by
reports.target.run) nothing is trained: the cells are filled from the finished runs in the store
and the others show "not run" (not computed yet), so a long target's table can be read, and
committed, while it is under way.

A paper target (reports/target.py) declares its cells and its driver calls `collect` once for
all of them; its render builds frames with `cell_frame`.

Progress: while a sweep computes, a bar over its runs is drawn on stderr (tqdm; only on a
terminal; FEDREPRO_PROGRESS=0 turns it off), and as each run ends (in the order runs come back,
with JOBS > 1 too) the `fedrepro.reports.grid` logger says which run it was (cell, seed, key),
ran or reused, its status and headline number (final test accuracy), its wall time, how many
runs are left and the time left at the pace so far; a last line sums the sweep up.

`python -m experiments grid --cell NAME=OVERRIDES ...` runs an ad-hoc grid the same way and
prints its table (experiments/baselines.py).
"""
from __future__ import annotations

import contextlib
import logging
import math
import os
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Optional

import pandas as pd

from fedrepro.config import compose_config
from fedrepro.errors import FedreproError, one_line
from fedrepro.reports.cli import LAUNCHER_CHOICES, fmt_duration, fmt_wall

logger = logging.getLogger("fedrepro.reports.grid")  # not __name__: "__main__" under -m, outside fedrepro
PROGRESS_ENV = "FEDREPRO_PROGRESS"  # "0": no progress bar

# Two-sided 95 % Student t quantiles by degrees of freedom (beyond 30: the normal 1.96).
_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the 95 % t-interval of the mean; low = high = mean for one value or
    when a value is not finite (an undefined metric's NaN, a diverged seed's inf: no spread)."""
    mean = statistics.fmean(values)
    if len(values) < 2 or not all(math.isfinite(v) for v in values):
        return mean, mean, mean
    df = len(values) - 1
    half = (_T975[df - 1] if df <= len(_T975) else 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


@dataclass
class Cell:
    keys: dict  # e.g. {"dataset_key": "mnist", "split_key": "iid", "algorithm_key": "fedprox"}
    overrides: list[str] = field(default_factory=list)
    not_run: Optional[str] = None  # the reason this cell cannot run here


def _run_one(overrides: list[str], threads: int, cwd: Optional[str] = None):
    """One run in this process or a worker (joblib, submitit, Ray): a RunResult, or a
    `runner.Failure` (recorded in the results store unless its data is missing)."""
    import torch

    from fedrepro import runner

    if cwd:
        os.chdir(cwd)  # a worker started elsewhere (Ray, SLURM): relative results roots as the driver's
    threads = int(os.environ.get("SLURM_CPUS_PER_TASK", threads or 0))
    if threads:
        torch.set_num_threads(threads)
    try:
        cfg = compose_config(overrides)
    except Exception as exc:  # noqa: BLE001  (a bad override: nothing to record, the message says it)
        return runner.Failure(one_line(exc))
    return runner.execute(cfg, quiet=True)


try:
    from submitit.helpers import Checkpointable as _Checkpointable
except ImportError:  # pragma: no cover
    _Checkpointable = object


class _RequeueingRun(_Checkpointable):
    """A run as a SLURM job: timed out or preempted, submitit requeues it (up to
    slurm_max_num_timeout times) and it resumes from its last checkpoint."""

    def __call__(self, overrides: list[str], threads: int, cwd: Optional[str] = None):
        return _run_one(overrides, threads, cwd)


def _run_many(args: list[tuple[int, list[str]]], threads: int, cwd: Optional[str] = None) -> list:
    """Several runs one after the other in one job (submitit's local executor): [(index, outcome)]."""
    return [(i, _run_one(overrides, threads, cwd)) for i, overrides in args]


def _indexed(i: int, overrides: list[str], threads: int):
    """One run in a joblib worker, which dies with the driver (runner.stop_with_parent)."""
    from fedrepro import runner

    runner.stop_with_parent()
    return i, _run_one(overrides, threads)


def _worker_died(overrides: list[str], why: str):
    """A worker that died (killed, out of memory) cannot record its own failure: record it here,
    unless the run got done before or another process computes it now."""
    from fedrepro import runner, store
    from fedrepro.config import run_key

    message = one_line(f"WorkerDied: {why}")
    try:
        cfg = compose_config(overrides)
        key = run_key(cfg)
    except Exception:  # noqa: BLE001
        return runner.Failure(message)
    folder = store.run_dir(cfg.results_root, key)
    s = store.done_summary(folder)
    if s is not None:
        return runner.RunResult(key, folder, s, reused=True)
    if store.running(cfg.results_root, key) is None:
        s = runner.record_failure(folder, cfg, message)
        return runner.Failure(s["error"], "failed", key, folder, s["round"])
    return runner.Failure(message, "failed", key, folder)


NOT_COMPUTED = "not computed yet (rendered with --done-only: no finished run in the results store)"
NOT_IN_STORE = "not in the results store (run its target)"


def refuse_done_only(target: str, done_only: bool) -> None:
    """For the targets that train in loops of their own, outside the results store: refused when
    asked to render from finished runs only (`done_only`: the target's options.done_only)."""
    if done_only:
        raise SystemExit(f"{target} trains in its own loop, not through the results store, so it has "
                         "nothing to render from: run it without --done-only (DONE_ONLY)")


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _no_report(i: int, outcome) -> None:
    pass


def _launch_in_order(args: list[list[str]], threads: int, report) -> list:
    """One run after the other in this process."""
    outcomes = []
    for i, a in enumerate(args):
        outcomes.append(_run_one(a, threads))
        report(i, outcomes[-1])
    return outcomes


def _launch_joblib(args: list[list[str]], jobs: int, threads: int, log, report) -> list:
    """joblib processes (loky); a worker that dies (SIGKILL, out of memory) does not end the
    sweep: the runs it left are tried once more, then recorded as failed. Each outcome is
    reported as it comes back."""
    from joblib import Parallel, delayed
    from joblib.externals.loky.process_executor import TerminatedWorkerError

    outcomes: list = [None] * len(args)
    why = ""
    for attempt in range(2):
        pending = [i for i, o in enumerate(outcomes) if o is None]
        if not pending:
            break
        try:
            for i, out in Parallel(n_jobs=min(jobs, len(pending)), backend="loky",
                                   return_as="generator_unordered")(
                    delayed(_indexed)(i, args[i], threads) for i in pending):
                outcomes[i] = out
                report(i, out)
        except TerminatedWorkerError:
            why = "TerminatedWorkerError: killed, out of memory or crashed"
            left = sum(o is None for o in outcomes)
            log(f"a worker process died ({why}); {left} runs left" + ("; trying them again" if attempt == 0 else ""))
    return _fill_died(outcomes, args, f"the worker process died: {why}", report)


def _fill_died(outcomes: list, args: list[list[str]], why: str, report) -> list:
    """`outcomes` with the runs that came back without one recorded as died (`_worker_died`)."""
    for i, o in enumerate(outcomes):
        if o is None:
            outcomes[i] = _worker_died(args[i], why)
            report(i, outcomes[i])
    return outcomes


# Hydra's submitit_slurm fields that submitit's executor takes as they are; every other field
# is SLURM's own and is passed as slurm_<name> (as hydra-submitit-launcher does).
_GENERIC_SUBMITIT = {"timeout_min", "mem_gb", "cpus_per_task", "gpus_per_node", "nodes", "tasks_per_node",
                     "name", "stderr_to_stdout"}
_LAUNCHER_DIR = Path(__file__).resolve().parents[2] / "conf" / "hydra" / "launcher"


def slurm_parameters(config: str = "slurm") -> dict:
    """submitit's parameters from a Hydra launcher config: `config` names a file of
    conf/hydra/launcher/ (the one `python -m fedrepro -m hydra/launcher=slurm` uses too) or is a
    path to such a YAML. One source for cluster settings: a sweep and a table target read the
    same file."""
    from omegaconf import OmegaConf

    path = Path(config) if config.endswith((".yaml", ".yml")) else _LAUNCHER_DIR / f"{config}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(f.stem for f in _LAUNCHER_DIR.glob("*.yaml")))
        raise FedreproError(f"launcher config {config!r} not found ({path}); name one of conf/hydra/launcher/ "
                            f"({known}) or give the path of a YAML with hydra-submitit-launcher's fields")
    fields = OmegaConf.to_container(OmegaConf.load(path))
    # Hydra's own keys, and the job folder, which a target puts under its results root
    for key in ("defaults", "_target_", "submitit_folder"):
        fields.pop(key, None)
    return {(k if k in _GENERIC_SUBMITIT else f"slurm_{k}"): v for k, v in fields.items() if v is not None}


def _launch_submitit(args: list[list[str]], jobs: int, threads: int, cluster: str,
                     results_root: str, log, report, launcher_config: str = "slurm") -> list:
    """submitit: on SLURM one array job per run (at most `jobs` at once; the partition, time,
    memory and requeues of `launcher_config`, conf/hydra/launcher/slurm.yaml by default); locally
    `jobs` processes, each running its share of the runs in turn with cores // jobs threads."""
    import submitit

    cwd = os.getcwd()
    folder = str(Path(results_root) / "submitit" / "%j")
    if cluster == "submitit_slurm":
        # defaults for a cluster node (this machine's cores say nothing about it); the config wins,
        # except for how many run at once, which is --jobs
        params = {"timeout_min": 24 * 60, "cpus_per_task": 4, "name": "fedrepro",
                  **slurm_parameters(launcher_config), "slurm_array_parallelism": jobs}
        requeues = int(params.pop("slurm_max_num_timeout", 3))
        executor = submitit.AutoExecutor(folder=folder, cluster="slurm", slurm_max_num_timeout=requeues)
        executor.update_parameters(**params)
        submitted = executor.map_array(_RequeueingRun(), args, [params["cpus_per_task"]] * len(args),
                                       [cwd] * len(args))
        log(f"submitted {len(submitted)} SLURM jobs (array {submitted[0].job_id.split('_')[0] if submitted else '-'}), "
            f"at most {jobs} at once; logs in {Path(results_root) / 'submitit'}")
        groups = [[i] for i in range(len(args))]
    else:
        executor = submitit.AutoExecutor(folder=folder, cluster="local")
        executor.update_parameters(timeout_min=24 * 60)
        groups = [list(range(len(args)))[k::jobs] for k in range(min(jobs, len(args)))]
        submitted = [executor.submit(_run_many, [(i, args[i]) for i in g], threads, cwd) for g in groups]
        log(f"{len(submitted)} submitit local jobs for {len(args)} runs; logs in {Path(results_root) / 'submitit'}")
    return _collect_submitit(submitted, groups, args, [None] * len(args), cluster, report)


def _collect_submitit(jobs_list, groups, args, outcomes, cluster, report=_no_report) -> list:
    """The jobs' outcomes, reported job by job as each ends (the first to end first)."""
    waiting = list(zip(jobs_list, groups))
    while waiting:
        done = [(job, group) for job, group in waiting if job.done()]
        if not done:
            time.sleep(1.0 if cluster == "submitit_slurm" else 0.2)
            continue
        for job, group in done:
            waiting.remove((job, group))
            try:
                result = job.result()
            except Exception as exc:  # noqa: BLE001  (job killed, timed out, node failure)
                lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
                why = lines[-1] if lines else type(exc).__name__  # submitit: the job's own last line
                for i in group:
                    outcomes[i] = _worker_died(args[i], f"{cluster} job {job.job_id}: {why}")
                    report(i, outcomes[i])
                continue
            for i, out in ([(group[0], result)] if cluster == "submitit_slurm" else result):
                outcomes[i] = out
                report(i, out)
    return _fill_died(outcomes, args, f"{cluster}: no result", report)


def _launch_ray(args: list[list[str]], jobs: int, threads: int, log, report) -> list:
    """Ray tasks: against RAY_ADDRESS when set (a running cluster), else a local Ray instance
    started here with `jobs` x `threads` CPUs; each task asks for `threads` CPUs. Each outcome
    is reported as its task ends."""
    try:
        import ray
    except ImportError as exc:
        raise FedreproError("LAUNCHER=ray needs Ray: pip install -e '.[ray]' (ray==2.60.0)") from exc
    address = os.environ.get("RAY_ADDRESS")
    started = not ray.is_initialized()
    if started:
        ray.init(address=address or None, num_cpus=None if address else jobs * threads,
                 include_dashboard=False, log_to_driver=False, configure_logging=False,
                 runtime_env={"env_vars": {"OMP_NUM_THREADS": str(threads)}})
    try:
        task = ray.remote(num_cpus=threads, max_retries=0)(_run_one)
        refs = [task.remote(a, threads, os.getcwd()) for a in args]
        log(f"{len(refs)} Ray tasks ({'cluster ' + address if address else 'local Ray'}, {threads} CPUs each)")
        outcomes: list = [None] * len(args)
        index = {ref: i for i, ref in enumerate(refs)}
        while index:
            (ref,), _ = ray.wait(list(index), num_returns=1)
            i = index.pop(ref)
            try:
                outcomes[i] = ray.get(ref)
            except Exception as exc:  # noqa: BLE001  (worker crashed)
                outcomes[i] = _worker_died(args[i], f"ray: {one_line(exc, limit=200)}")
            report(i, outcomes[i])
        return outcomes
    finally:
        if started:
            ray.shutdown()


def launch(args: list[list[str]], *, jobs: int = 1, launcher: str = "local",
           results_root: str = "results", log: Optional[Callable[[str], None]] = None,
           report: Callable[[int, object], None] = _no_report, launcher_config: str = "slurm") -> list:
    """Run every override list; one outcome each (RunResult or runner.Failure), in order.

    local: in this process (jobs = 1) or joblib processes (jobs > 1); joblib: always joblib;
    submitit_local / submitit_slurm: submitit's executors; ray: Ray tasks. Every launcher gives a
    run cores // jobs threads (on SLURM: its cpus_per_task), so runs never oversubscribe.
    `report(index, outcome)` is called in this process as each outcome comes back; the
    launcher's own lines go to `log` (default: this module's logger)."""
    launcher = launcher or "local"
    if launcher not in LAUNCHER_CHOICES:
        raise FedreproError(f"unknown launcher {launcher!r}; choose one of {', '.join(LAUNCHER_CHOICES)}")
    jobs = max(1, int(jobs))
    threads = max(1, _cores() // jobs)
    if not args:
        return []
    say, warn = log or logger.info, log or logger.warning
    if launcher == "local" and (jobs == 1 or len(args) == 1):
        return _launch_in_order(args, 0, report)
    if launcher in ("local", "joblib"):
        if jobs == 1 or len(args) == 1:
            return _launch_in_order(args, threads, report)
        return _launch_joblib(args, jobs, threads, warn, report)
    if launcher.startswith("submitit"):
        return _launch_submitit(args, jobs, threads, launcher, results_root, say, report, launcher_config)
    return _launch_ray(args, jobs, threads, say, report)


def executed_on(summary: dict) -> str:
    """How a run was computed, for a table's notes: its executor, and the device where not the CPU
    (a GPU's numbers agree with the CPU's to float rounding only)."""
    executor, device = summary.get("executor", ""), str(summary.get("device") or "cpu")
    return executor if device == "cpu" or not executor else f"{executor} on {device}"


def finished_elsewhere(args: list[str]) -> list[str]:
    """`args`, or, where its run is not finished here but the same run made on another
    accelerator is (a lent GPU machine's runs, experiments/device_runs.py), the overrides of
    that run: the accelerator is in the run key (its numbers differ in rounding), so a table
    reads such a run only through this, and names its device (`executed_on`)."""
    twin = finished_twin(compose_config(args))
    return args if twin is None else [*args, f"train.accelerator={twin.train.accelerator}"]


def finished_twin(cfg):
    """The config of `cfg`'s run made on another accelerator, where `cfg`'s own run is not
    finished in its results root and that one is; else None."""
    from fedrepro import store
    from fedrepro.config import ACCELERATORS, run_key

    def finished(c) -> bool:
        return store.done_summary(store.run_dir(c.results_root, run_key(c))) is not None

    if finished(cfg):
        return None
    for other in ACCELERATORS:
        if other not in (cfg.train.accelerator, "gpu", "auto"):  # gpu and auto name cpu / cuda / mps runs
            twin = cfg.copy()  # the accelerator changes nothing else in the config: no second compose
            twin.train.accelerator = other
            if finished(twin):
                return twin
    return None


def _stored(args: list[list[str]], labels: list[str], *, owned: bool = True) -> list:
    """Outcomes from the store alone (nothing is computed): finished and diverged runs come back,
    the others as "not run" (not computed yet, or, for another target's runs (owned=False), not
    in the store)."""
    from fedrepro import store
    from fedrepro.config import run_key
    from fedrepro.runner import Failure, RunResult

    why = NOT_COMPUTED if owned else NOT_IN_STORE
    outcomes = []
    for a in args:
        cfg = compose_config(a)
        key = run_key(cfg)
        folder = store.run_dir(cfg.results_root, key)
        s = store.done_summary(folder)
        outcomes.append(RunResult(key, folder, s, reused=True) if s is not None
                        else Failure(why, "not run", key, folder))
    return outcomes


# A run's headline number: the first of these its final row holds as a finite number.
HEADLINES = (("server_test_acc", "test acc"), ("personal_test_acc", "personal test acc"),
             ("server_test_loss", "test loss"), ("personal_loss", "personal loss"))


def headline(summary: dict) -> str:
    """'test acc 0.9123': a run's main number, from its summary's final row."""
    final = summary.get("final") or {}
    for column, name in HEADLINES:
        value = final.get(column)
        if isinstance(value, (int, float)) and math.isfinite(value):
            return f"{name} {value:.4f}"
    return "no final metric"


class _Progress:
    """A sweep's progress, told as each run ends (called with its index and outcome): a bar over
    the runs (stderr, only on a terminal, off with FEDREPRO_PROGRESS=0) and one log line per
    run, then a summing-up."""

    def __init__(self, labels: list[str], log: Optional[Callable[[str], None]]):
        from tqdm import tqdm  # the plain bar: logging_redirect_tqdm writes above it
        from tqdm.contrib.logging import logging_redirect_tqdm

        self.labels, self.say, self.warn = labels, log or logger.info, log or logger.warning
        self.counts: Counter = Counter()
        self.t0 = time.perf_counter()
        # a caller's own `log` (a silent second pass over done runs) draws no bar either
        off = log is not None or os.environ.get(PROGRESS_ENV, "1") == "0"
        self.bar = tqdm(total=len(labels), desc="runs", unit="run", file=sys.stderr, leave=False,
                        dynamic_ncols=True, disable=True if off else None)  # None: a terminal only
        # while the bar is drawn, log lines are written above it instead of through it
        self.redirect = contextlib.nullcontext() if self.bar.disable else logging_redirect_tqdm()

    def __enter__(self):
        self.redirect.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()
        self.redirect.__exit__(*exc)
        if self.counts:
            kinds = ", ".join(f"{n} {kind}" for kind, n in self.counts.items())
            self.say(f"{sum(self.counts.values())} runs in {fmt_duration(time.perf_counter() - self.t0)}: {kinds}")

    def __call__(self, i: int, outcome) -> None:
        from fedrepro.runner import Failure

        failed = isinstance(outcome, Failure)
        kind = outcome.kind if failed else "reused" if outcome.reused else "ran"
        self.counts[kind] += 1
        self.bar.update(1)
        (self.warn if failed else self.say)(f"{self.labels[i]}: {kind} {self.detail(outcome)}; {self.left()}")

    @staticmethod
    def detail(outcome) -> str:
        """'KEY (finished, test acc 0.9123, 12.3 s)'; a failure's key, error and round."""
        from fedrepro.runner import Failure

        if isinstance(outcome, Failure):
            where = f"{outcome.key} " if outcome.key else ""
            at = f", round {outcome.round}" if outcome.round is not None else ""
            return f"{where}({one_line(outcome.message, 200)}{at})"
        s = outcome.summary
        wall = "" if outcome.reused else f", {fmt_wall((s.get('setup_seconds') or 0) + (s.get('train_seconds') or 0))}"
        return f"{outcome.key} ({s.get('status')}, {headline(s)}{wall})"

    def left(self) -> str:
        """'3 of 18 runs done, 15 left, about 4.2 min to go': the pace is the wall time so far
        per run computed (reused and not-run ones take none), so JOBS > 1 is counted in."""
        done, total = sum(self.counts.values()), len(self.labels)
        text = f"{done} of {total} runs done"
        computed = self.counts["ran"] + self.counts["failed"]
        if done < total:
            text += f", {total - done} left"
            if computed:
                pace = (time.perf_counter() - self.t0) / computed
                text += f", about {fmt_duration(pace * (total - done))} to go"
        return text


def saved_config(folder):
    """A run's config.yaml (read-only: cached per file version, as renders read it per cell), or
    None where the run has none."""
    path = Path(folder) / "config.yaml"
    return _load_config(str(path), path.stat().st_mtime_ns) if path.exists() else None


@lru_cache(maxsize=4096)
def _load_config(path: str, version: int):
    from omegaconf import OmegaConf

    return OmegaConf.load(path)


def configured_rounds(folder) -> Optional[int]:
    """train.rounds of a run (the paper's count before the profile's cap), from its config.yaml."""
    cfg = saved_config(folder)
    return int(cfg.train.rounds) if cfg is not None else None


def run_overrides(cell: Cell, seed: int, *, profile: str, results_root: str, extra=()) -> list[str]:
    """The full override list of one run of `cell`: its overrides, `extra`, then the sweep's."""
    return [*cell.overrides, *extra, f"profile={profile}", f"seed={seed}", f"results_root={results_root}",
            "logger.progress=false"]


def cell_label(cell: Cell, seed: int) -> str:
    return " ".join(str(v) for v in cell.keys.values()) + f" seed {seed}"


def collect(cells: list[Cell], *, profile: str, seeds: int, results_root: str = "results",
            extra: list[str] = (), jobs: int = 1, log: Optional[Callable[[str], None]] = None,
            launcher: str = "local", run: bool = True, launcher_config: str = "slurm",
            done_only: bool = False) -> dict[int, list]:
    """{cell index: [outcome per seed]} of every runnable cell: run (or reused) through `launcher`,
    or, with run=False or done_only (--done-only), read from the store alone (nothing is computed)."""
    tasks = [(i, seed) for i, cell in enumerate(cells) if not cell.not_run for seed in range(seeds)]
    args = [finished_elsewhere(run_overrides(cells[i], seed, profile=profile, results_root=results_root,
                                              extra=extra)) for i, seed in tasks]
    labels = [cell_label(cells[i], seed) for i, seed in tasks]
    if done_only or not run:
        outcomes = _stored(args, labels, owned=run)
    else:
        if args:
            (log or logger.info)(f"{len(args)} runs ({profile} profile, {jobs} at a time, "
                                 f"{launcher or 'local'} launcher, results in {results_root})")
        with _Progress(labels, log) as progress:
            outcomes = launch(args, jobs=jobs, launcher=launcher, results_root=results_root, log=log,
                              report=progress, launcher_config=launcher_config)
    by_cell: dict[int, list] = {}
    for (i, seed), outcome in zip(tasks, outcomes):
        by_cell.setdefault(i, []).append(outcome)
    return by_cell


def cell_frame(cells: list[Cell], by_cell: dict[int, list], metric: Callable, *,
               profile: str) -> tuple[pd.DataFrame, dict]:
    """The long `ours` frame of `cells` from their outcomes (`collect`), `metric(run)` measured on
    each finished run: (frame, {cell index: [RunResult]})."""
    from fedrepro.runner import Failure

    rows, summaries = [], {}
    for i, cell in enumerate(cells):
        base = {**cell.keys, "profile": profile, "n_seeds": 0, "seeds": "", "data": ""}
        if cell.not_run:
            rows.append({**base, "ours_mean": float("nan"), "status": "not run", "reason": cell.not_run})
            continue
        outcomes = by_cell[i]
        runs = [o for o in outcomes if not isinstance(o, Failure)]
        summaries[i] = runs
        failed = [o for o in outcomes if isinstance(o, Failure)]
        diverged = [r for r in runs if r.summary["status"] != "finished"]
        if failed and all(f.kind == "not run" for f in failed):
            status, reason = "not run", failed[0].message  # the data is not here: the message names the files
        elif failed:
            f = next(f for f in failed if f.kind == "failed")
            status, reason = "failed", failure_reason(f)
        elif diverged:
            status, reason = "diverged", divergence_reason(diverged[0].summary)
        else:
            status, reason = "ok", ""
        values = [metric(r) for r in runs] if status == "ok" else []
        mean, lo, hi = mean_interval(values) if values else (float("nan"),) * 3
        first = runs[0].summary if runs else {}
        rounds_set = configured_rounds(runs[0].folder) if runs else None
        rows.append({**base, "ours_mean": mean, "ours_lo": lo, "ours_hi": hi, "status": status,
                     "reason": reason, "n_seeds": len(values),
                     "seeds": ",".join(str(r.summary["seed"]) for r in runs),
                     "data": first.get("data_source", ""), "executor": executed_on(first) if first else "",
                     "dim": first.get("dim"),
                     "rounds_run": first.get("rounds"), "rounds_set": rounds_set,
                     "client_rounds": statistics.fmean(r.summary["client_rounds"] for r in runs) if runs else None})
    return pd.DataFrame(rows), summaries


def measure_cells(cells: list[Cell], metric: Callable, *, profile: str, seeds: int,
                  results_root: str = "results", extra: list[str] = (), jobs: int = 1,
                  log: Optional[Callable[[str], None]] = None, launcher: str = "local",
                  run: bool = True, done_only: bool = False) -> tuple[pd.DataFrame, dict]:
    """Run every runnable cell for seeds 0..seeds-1 and measure `metric(run_result)` on each
    (`collect`, then `cell_frame`).

    run=False reads another target's cells: only runs already in the store count, nothing is
    computed, and a missing run's cell is "not run" (NOT_IN_STORE); done_only=True reads this
    target's own runs the same way (a missing one is NOT_COMPUTED).

    `jobs` runs at once through `launcher` (default local: joblib processes when jobs > 1; a
    target passes its --launcher), each with cores // jobs threads, so they do not oversubscribe the machine.
    A run that fails is recorded in the results store and its cell shows "failed" with the
    error; the other runs go on. Each run's end is told as it comes (`_Progress`) through this
    module's logger, or to `log` when given. Returns (ours frame, {cell index: [RunResult]})."""
    by_cell = collect(cells, profile=profile, seeds=seeds, results_root=results_root, extra=extra,
                      jobs=jobs, log=log, launcher=launcher, run=run, done_only=done_only)
    return cell_frame(cells, by_cell, metric, profile=profile)


def why_no_numbers(frame: pd.DataFrame, i: int) -> str:
    """Why cell i of a `cell_frame` frame has no numbers: its reason (not_run's text, "not computed
    yet", the failure with its error), else its status."""
    row = frame.iloc[i]
    return row["reason"] or row["status"]


@lru_cache(maxsize=None)
def every_round(profile: str) -> tuple[str, ...]:
    """The override that makes `profile`'s runs evaluate every round, or none where the profile
    already does (smoke, paper), so those runs keep their keys."""
    every = compose_config([f"profile={profile}"]).profile.min_eval_every or 1
    return ("profile.min_eval_every=1",) if every > 1 else ()


def failure_reason(failure, limit: int = 120) -> str:
    """A failed cell's reason: the error's first line and the round it reached."""
    text = failure.message if len(failure.message) <= limit else failure.message[: limit - 3] + "..."
    return f"{text}, round {failure.round}" if failure.round is not None else text


def divergence_reason(summary: dict) -> str:
    """A diverged cell's reason: the error up to its advice ("local training diverged in round 3
    (non-finite loss or model)"), else the round."""
    error = summary.get("error") or ""
    head = error.split(": ")[0].strip()
    return head or f"round {summary.get('rounds_completed', '?')}"
