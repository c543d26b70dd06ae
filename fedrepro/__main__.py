"""`python -m fedrepro [group=choice ...] [key=value ...]`: one federated run (or a Hydra multirun with -m)."""
from __future__ import annotations

import sys

import hydra
from omegaconf import DictConfig

import fedrepro  # noqa: F401  (torchvision shim before anything imports lightning)
from fedrepro.config import register_configs
from fedrepro.errors import FedreproError

register_configs()


@hydra.main(version_base=None, config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from fedrepro.run import run_experiment

    try:
        result = run_experiment(cfg)
    except FedreproError as exc:
        print(f"fedrepro: error: {exc}", file=sys.stderr)
        sys.exit(2)
    s = result.summary
    final = s["final"]
    print(f"[fedrepro] {s['status']}: {s['algorithm']} on {s['dataset']} ({s['profile']} profile, seed {s['seed']}), "
          f"{s['rounds_completed']} rounds, {s['seconds_per_round']:.3f} s/round")
    print(f"[fedrepro] test accuracy: all-clients mean {final.get('all_test_acc', float('nan')):.4f}, "
          f"server {final.get('server_test_acc', float('nan')):.4f}; "
          f"uploaded {final.get('cum_up_nonzeros', 0):.4g} nonzeros, {final.get('cum_up_entropy', 0):.2f} bits/symbol summed")
    attack = s.get("attack")
    if attack is not None:
        detail = (f"||D_hat - D||_F {attack['initial_distance']:.6g} -> {attack['final_distance']:.6g} "
                  f"on client {attack['client']}'s round-{attack['round']} upload"
                  if attack["status"] == "ok" else attack["reason"])
        print(f"[fedrepro] attack {cfg.attack.name}: {attack['status']}: {detail}")
    names = ("metrics.csv", "accuracy.png", "summary.json") + (("attack.json",) if attack else ())
    for name in names:
        print(f"[fedrepro] {name:13s} {result.folder / name}")
    if s["status"] != "finished":
        print(f"fedrepro: warning: {s['error']}", file=sys.stderr)


if __name__ == "__main__":
    main()
