"""`python -m fedrepro [group=choice ...] [key=value ...]`: one federated run (or a Hydra multirun with -m).

Launchers (`-m hydra/launcher=...`): basic (one after the other), joblib (`hydra.launcher.n_jobs`
runs at once, cores // n_jobs threads each), submitit_local, submitit_slurm (SLURM;
`hydra.launcher.cpus_per_task` threads each). A run that fails is recorded in the results store
(status "failed", the error and the round reached) and, in a multirun, the sweep goes on; the
next attempt recomputes only the missing and failed runs (finished and diverged ones are reused).

The run logs through the `fedrepro` logger: Hydra's job logging shows it on the console and
keeps it in the run's job log (`<hydra.run.dir>/__main__.log`; a multirun's in each job's
folder); `hydra.verbose=fedrepro` adds its DEBUG lines. An error that stops a single run is
one line on stderr (exit 2); in a multirun it is logged in that job's log and the sweep goes on.

The task returns the run's final headline metric (server test accuracy; test loss for regression;
fedrepro/sweep.py), NaN for a run that did not finish, so an optimizing sweeper (Optuna) can
use it: a failed job is a failed trial, not the end of the sweep. A multirun ends with runs.csv,
curves.csv and sweep.png in its sweep folder (fedrepro/sweep.py, registered in conf/config.yaml).
"""
from __future__ import annotations

import logging
import math
import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

import fedrepro  # noqa: F401  (torchvision shim before anything imports lightning)
from fedrepro.config import register_configs

register_configs()

# not __name__: run with -m, this module is "__main__", outside the fedrepro loggers
log = logging.getLogger("fedrepro.main")


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _launch_context() -> tuple[bool, int]:
    """(multirun?, threads for this run): joblib runs share the cores (cores // n_jobs each),
    submitit runs take their cpus_per_task (SLURM_CPUS_PER_TASK); 0 = leave torch's default."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        multirun = hc.mode == RunMode.MULTIRUN
        target = str(hc.launcher.get("_target_", ""))
    except Exception:  # noqa: BLE001  (called outside Hydra)
        return False, 0
    if os.environ.get("SLURM_CPUS_PER_TASK"):
        return multirun, int(os.environ["SLURM_CPUS_PER_TASK"])
    if "JoblibLauncher" in target:
        n_jobs = int(hc.launcher.get("n_jobs") or 1)
        n_jobs = _cores() if n_jobs < 0 else n_jobs
        return multirun, max(1, _cores() // max(1, n_jobs))
    if "submitit" in target and hc.launcher.get("cpus_per_task"):
        return multirun, int(hc.launcher.cpus_per_task)
    return multirun, 0


def _sweep_name() -> str:
    """The multirun's sweep folder name: W&B's group for its runs unless logger.group is set."""
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().sweep.dir).name


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> float:
    from fedrepro import runner
    from fedrepro.sweep import headline_value

    runner.stop_with_parent()  # a joblib worker of a multirun ends with its driver
    multirun, threads = _launch_context()
    if multirun and cfg.logger.group is None:
        cfg.logger.group = _sweep_name()  # not in the run key: where a run is logged changes no result
    if threads:
        import torch

        torch.set_num_threads(threads)
    result = runner.execute(cfg, quiet=False)
    if isinstance(result, runner.Failure):
        where = f" (recorded in {result.folder / 'summary.json'}, traceback in error.txt)" \
            if result.kind == "failed" and result.folder is not None else ""
        if multirun:
            log.error(f"{result.detail or result.message}{where}")  # in this job's log; the sweep goes on
            return math.nan  # a failed trial for Optuna; re-running the sweep recomputes this run
        # one line on stderr, where a failing command says why (Hydra's console log is stdout)
        print(f"fedrepro: error: {result.detail or result.message}{where}", file=sys.stderr)
        sys.exit(2)
    s = result.summary
    final = s["final"]
    log.info(f"{s['status']}: {s['algorithm']} on {s['dataset']} ({s['profile']} profile, seed {s['seed']}), "
             f"{s['rounds_completed']} rounds, {s['seconds_per_round']:.3f} s/round")
    log.info(f"test accuracy: all-clients mean {final.get('all_test_acc', float('nan')):.4f}, "
             f"server {final.get('server_test_acc', float('nan')):.4f}; "
             f"uploaded {final.get('cum_up_nonzeros', 0):.4g} nonzeros, {final.get('cum_up_entropy', 0):.2f} bits/symbol summed")
    attack = s.get("attack")
    if attack is not None:
        detail = (f"||D_hat - D||_F {attack['initial_distance']:.6g} -> {attack['final_distance']:.6g} "
                  f"on client {attack['client']}'s round-{attack['round']} upload"
                  if attack["status"] == "ok" else attack["reason"])
        log.info(f"attack {cfg.attack.name}: {attack['status']}: {detail}")
    names = ("metrics.csv", "accuracy.png", "summary.json") + (("attack.json",) if attack else ())
    for name in names:
        log.info(f"{name:13s} {result.folder / name}")
    if s["status"] != "finished":
        log.warning(s["error"])
    return headline_value(s, cfg.model.name)


if __name__ == "__main__":
    main()
