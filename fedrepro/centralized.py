"""The papers' centralized baseline: one model trained on the pooled training data.

    python -m fedrepro algorithm=centralized [dataset=mnist] [profile=paper]

FedDyn (Sec. 3, App. A.2) reports centralized accuracies as the ceiling of its federated
targets (MNIST 98.4 with lr 0.1, 150 epochs, lr halved every 50). Here the baseline is a plain
`LightningModule` fitted by a Lightning `Trainer` on the whole training set:

* the model and its seeded initialization are the federated runs' (`model_for`:
  seed derive_seed(seed, "init")), and so is the loss (FlatModel's batch mean, applied to the
  module's outputs by `FlatModel.output_loss`, calling the module directly: ~40 % faster than
  functional_call on a flat vector);
* plain SGD (no momentum), lr = `train.lr`, weight decay `train.weight_decay`, batch
  `train.batch_size` with a fresh seeded permutation each epoch, gradient clipping by global
  norm `train.clip_norm` (Trainer's `gradient_clip_val`; null = off), the lr multiplied by
  `algorithm.lr_step_factor` every `algorithm.lr_step_every` epochs (StepLR; null = constant);
* after every epoch the test accuracy / loss and the training loss of the model are evaluated,
  exactly as the federated server model is (same evaluation code and subsets).

What each profile does to the baseline (a profile only caps the paper setting):

* epochs = `algorithm.epochs`, capped at `profile.max_rounds` when set (one epoch stands for
  one round); the StepLR schedule stays the paper's (a capped run just stops earlier);
* batches per epoch are capped at `profile.max_local_steps` when set (Trainer's
  `limit_train_batches`);
* the test set is cut to `profile.max_test_samples` and the training-loss set to
  `profile.max_train_eval_samples` (the same seeded subsets as federated runs);
* `paper`: 150 epochs (MNIST), every batch, full sets.  `quick`: at most 100 epochs (lr halved
  once, at epoch 50), every batch, full test set, training loss on 10 000 samples.  `smoke`:
  3 epochs of at most 5 batches, 1 000 test and 1 000 training-loss samples: seconds;
* ignored: `profile.max_local_epochs` and `profile.min_eval_every` / `train.eval_every`
  (there is no local work, and evaluation runs after every epoch), and `train.rounds`,
  `local_epochs`, `lr_decay`, `num_clients`, `split`, `participation` (none of them is part of
  its run key, so one centralized run serves every split).

The run folder holds what a federated run's does, minus `partition.json` and the checkpoint
(a killed centralized run restarts from epoch 0): config.yaml, metrics.csv (one row per epoch
in `round`, epoch 0 = the initial model; the model's metrics under both the `server_*` and
`all_*` names; every communication column 0: nothing is sent), summary.json (the federated
keys; client_rounds = 0), model.pt (the final flat parameter vector) and accuracy.png.
"""
from __future__ import annotations

import logging
import math
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Optional

import torch
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader, TensorDataset

from fedrepro import store
from fedrepro.config import effective
from fedrepro.data.augment import augment_batch
from fedrepro.data.loaders import dataset_for
from fedrepro.engine.evaluate import evaluate
from fedrepro.engine.loop import EvalData
from fedrepro.metrics.ledger import Ledger
from fedrepro.models.flat import FlatModel, model_for
from fedrepro.run import evaluation_sets, run_loggers
from fedrepro.seeding import generator

import lightning.pytorch as pl  # after fedrepro: its torchvision shim must load first


def centralized_epochs(cfg: DictConfig) -> int:
    """algorithm.epochs capped by the profile's max_rounds (an epoch stands for a round)."""
    cap = cfg.profile.max_rounds
    return cfg.algorithm.epochs if cap is None else min(cfg.algorithm.epochs, cap)


def eval_row(flat: FlatModel, w: torch.Tensor, data: EvalData) -> dict:
    """Test accuracy / loss and training loss of `w`, under the server and all-clients names."""
    test_loss, test_acc = evaluate(flat, w, data.x_test, data.y_test)
    train_loss, _ = evaluate(flat, w, data.x_train, data.y_train)
    row = {}
    for prefix in ("server", "all"):  # one model: table code reading either column finds it
        row.update({f"{prefix}_test_acc": test_acc, f"{prefix}_test_loss": test_loss,
                    f"{prefix}_train_loss": train_loss})
    return row


class CentralizedModule(pl.LightningModule):
    """SGD on the pooled data; after each epoch evaluates the model and hands the row to `on_row`."""

    def __init__(self, flat: FlatModel, cfg: DictConfig, eval_data: EvalData, on_row,
                 augment: str | None = None):
        super().__init__()
        self.augment = augment
        self._aug_gen = generator(cfg.seed, "centralized-augment")
        self.flat = flat
        self.net = flat.module  # a registered submodule: Lightning moves it, SGD updates it
        for p in self.net.parameters():
            p.requires_grad_(True)  # FlatModel froze them: it differentiates a flat vector instead
        self.cfg, self.eval_data, self.on_row = cfg, eval_data, on_row
        self.comm = Ledger(flat.dim).end_round()  # an empty round: every communication column 0
        self.diverged_at = None

    def training_step(self, batch, batch_idx):
        x, y = batch
        if self.augment is not None:  # CIFAR's flip / crop, seeded (CPU generator)
            x = augment_batch(self.augment, x.cpu(), self._aug_gen).to(x.device)
        loss = self.flat.output_loss(self.net(x), y)
        self._loss_sum += loss.detach()  # a tensor: no device sync per step
        self._batches += 1
        return loss

    def configure_optimizers(self):
        t, a = self.cfg.train, self.cfg.algorithm
        opt = torch.optim.SGD(self.net.parameters(), lr=t.lr, weight_decay=t.weight_decay)
        if a.lr_step_every is None:
            return opt
        step = torch.optim.lr_scheduler.StepLR(opt, step_size=a.lr_step_every, gamma=a.lr_step_factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": step, "interval": "epoch"}}

    def on_fit_start(self):
        self.eval_data = self.eval_data.to(self.device)

    def on_train_epoch_start(self):
        # Read here: Lightning steps epoch schedulers after the last batch, before epoch-end hooks.
        self._lr = self.trainer.optimizers[0].param_groups[0]["lr"]
        self._loss_sum, self._batches = 0.0, 0

    def on_train_epoch_end(self):
        epoch = self.current_epoch + 1
        row = {"round": epoch, "clients": 0, "lr": self._lr,
               "local_loss": float(self._loss_sum) / max(self._batches, 1), **self.comm}
        self.flat.buffers = self.flat.module_buffers()  # BatchNorm: evaluate with the trained statistics
        row.update(eval_row(self.flat, self.flat.flatten_module(), self.eval_data))
        self.net.train()  # evaluation switched BatchNorm models to eval mode
        self.on_row(row)
        if not math.isfinite(row["server_test_loss"]):
            self.diverged_at = epoch
            self.trainer.should_stop = True


@contextmanager
def _lightning_scope():
    """Quiet Lightning, and undo its process-wide determinism switch afterwards."""
    log = logging.getLogger("lightning.pytorch")
    level, was_deterministic = log.level, torch.are_deterministic_algorithms_enabled()
    log.setLevel(logging.WARNING)  # "GPU available: False ..." and tips: noise here
    try:
        with warnings.catch_warnings():
            # In-memory tensors: loader worker processes would only add start-up cost.
            warnings.filterwarnings("ignore", message=".*does not have many workers.*")
            warnings.filterwarnings("ignore", message=".*treespec, LeafSpec.*")  # Lightning vs new torch
            yield
    finally:
        log.setLevel(level)
        torch.use_deterministic_algorithms(was_deterministic)


def run_centralized(cfg: DictConfig, key: str, folder: Path, quiet: bool = False,
                    figure: Optional[Callable] = None) -> dict:
    """Train, evaluate and store the centralized baseline of `cfg` (validated) in `folder`; returns
    its summary. `figure(cfg, folder, history)` draws the run's figure before the summary is written."""
    eff = effective(cfg)
    t = cfg.train
    epochs = centralized_epochs(cfg)
    t0 = time.perf_counter()
    data = dataset_for(cfg)
    folder.mkdir(parents=True, exist_ok=True)
    store.write_text(folder / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    (folder / "metrics.csv").unlink(missing_ok=True)  # left by an unfinished earlier attempt
    loggers = run_loggers(cfg, folder, key)  # CSV, plus W&B offline with logger=wandb
    pl.seed_everything(cfg.seed, verbose=False)

    eval_data = evaluation_sets(cfg, data)  # the same seeded subsets as a federated run
    flat, theta0 = model_for(cfg, data)
    batches = DataLoader(TensorDataset(data.x_train, data.y_train), batch_size=t.batch_size,
                         shuffle=True, generator=generator(cfg.seed, "centralized-batches"))

    history: list[dict] = []

    def on_row(row: dict) -> None:
        history.append(row)
        for lg in loggers:
            lg.log_metrics(row, step=row["round"])

    module = CentralizedModule(flat, cfg, eval_data, on_row, augment=data.augment)
    first = {"round": 0, "clients": 0, "lr": t.lr, "local_loss": float("nan"), **module.comm}
    on_row({**first, **eval_row(flat, theta0, eval_data)})  # the initial model, as federated runs

    show = not quiet and cfg.logger.progress
    with _lightning_scope():
        trainer = pl.Trainer(
            accelerator=t.accelerator, devices=1, precision=t.precision, max_epochs=epochs,
            limit_train_batches=eff.max_local_steps or 1.0,
            gradient_clip_val=t.clip_norm, gradient_clip_algorithm="norm",
            deterministic=True, logger=False, enable_checkpointing=False,
            enable_progress_bar=show, enable_model_summary=False,
            num_sanity_val_steps=0, default_root_dir=str(folder))
        setup_s = time.perf_counter() - t0
        t_train = time.perf_counter()
        try:
            trainer.fit(module, train_dataloaders=batches)
        finally:
            for lg in loggers:
                lg.save()
        train_s = time.perf_counter() - t_train

    status, error = "finished", None
    if module.diverged_at is not None:
        status = "diverged"
        error = (f"the test loss is not finite after epoch {module.diverged_at} (round "
                 f"{module.diverged_at}): the run diverged; lower train.lr (now {t.lr}) or keep "
                 f"train.clip_norm set")
    done = history[-1]["round"]
    summary = {
        "key": key, "status": status, "error": error,
        "profile": cfg.profile.name, "seed": cfg.seed, "dataset": cfg.dataset.name,
        "data_source": data.source, "algorithm": cfg.algorithm.name, "dim": flat.dim,
        "rounds": epochs, "rounds_completed": done, "client_rounds": 0,
        "final": dict(history[-1]), "setup_seconds": round(setup_s, 3),
        "train_seconds": round(train_s, 3), "seconds_per_round": round(train_s / max(done, 1), 4),
        "resumed_from": None, "executor": "LightningTrainer", "processes": 1,
        "device": str(trainer.strategy.root_device), "torch": torch.__version__,
    }
    store.save_torch(folder / "model.pt", flat.flatten_module().cpu())
    if figure is not None:
        figure(cfg, folder, history)
    store.write_json(folder / "summary.json", summary)
    for lg in loggers:
        lg.finalize(status if status == "finished" else "failed")
    return summary
