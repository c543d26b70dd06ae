"""Lightning's knobs (issue 31, item 7): train.accelerator (older name train.device), train.devices
(older name train.processes) and train.precision reach Fabric; what this machine cannot run is
refused at start with the reason; no stored run's key moves (docs/configuration.md, "Where and in
what precision a run trains")."""
import subprocess
import sys

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

from fedrepro.algorithms.base import LocalObjective
from fedrepro.config import check_machine, compose_config, identity, run_key, validate
from fedrepro.engine.batched import BatchedExecutor
from fedrepro.engine.local import ClientJob, SequentialExecutor
from fedrepro.engine.precision import PRECISIONS, autocast
from fedrepro.errors import ConfigError
from fedrepro.models.flat import FlatModel
from fedrepro.models.mlp import MLP
from fedrepro.runner import run_experiment

SMOKE = ["profile=smoke", "logger.progress=false"]
CUDA = torch.cuda.is_available()

# Run keys computed before the knobs existed (train.device / train.processes only): they must not move.
KEYS_BEFORE = {
    ("profile=smoke",): "c8f48f39a5909b07",
    ("profile=smoke", "algorithm=scaffold"): "f58f4b121b6bee45",
    ("profile=smoke", "train.executor=sequential"): "3c89e4229ebccdf3",
    ("profile=smoke", "train.device=auto"): "e88c277a34fe1040",
    (): "78cf279a7f333711",
    ("algorithm=centralized",): "874c465fd1e2182a",
}


@pytest.mark.parametrize("overrides, key", sorted(KEYS_BEFORE.items()))
def test_the_defaults_keep_the_run_keys(overrides, key):
    cfg = compose_config(list(overrides))
    assert run_key(cfg) == key
    validate(cfg)
    assert run_key(cfg) == key
    # a run stored now reloads to the same key (config.yaml is written resolved, after validate)
    assert run_key(OmegaConf.create(OmegaConf.to_yaml(cfg, resolve=True))) == key


def test_the_defaults_reach_fabric_as_before():
    t = compose_config(SMOKE).train
    assert (t.accelerator, t.devices, t.precision) == ("cpu", 1, "32-true")
    assert t.device is None and t.processes is None  # the older names: not given


def test_device_and_accelerator_ask_for_the_same_run():
    default = run_key(compose_config(SMOKE))
    old, new = compose_config([*SMOKE, "train.device=cpu"]), compose_config([*SMOKE, "train.accelerator=cpu"])
    validate(old), validate(new)
    assert run_key(old) == run_key(new) == default == KEYS_BEFORE[("profile=smoke",)]
    assert old.train.accelerator == new.train.accelerator == "cpu"
    # hashed under `device`, the name every stored run has
    assert identity(new)["train"]["device"] == "cpu" and "accelerator" not in identity(new)["train"]
    auto = compose_config(["profile=smoke", "train.accelerator=auto"])
    assert run_key(auto) == KEYS_BEFORE[("profile=smoke", "train.device=auto")]


def test_devices_and_processes_are_one_knob_outside_the_key():
    old, new = compose_config([*SMOKE, "train.processes=2"]), compose_config([*SMOKE, "train.devices=2"])
    validate(old), validate(new)
    assert old.train.devices == new.train.devices == 2
    assert run_key(old) == run_key(new) == run_key(compose_config(SMOKE))
    assert not {"devices", "processes"} & set(identity(new)["train"])


def refuse(cfg) -> None:
    """What the runner asks before computing a run: the values, then this machine."""
    validate(cfg)
    check_machine(cfg)


@pytest.mark.parametrize("overrides, words", [
    (["train.accelerator=cpu", "train.device=auto"],
     "train.device=auto and train.accelerator=cpu disagree: device is the older name of accelerator; "
     "set only train.accelerator"),
    (["train.devices=1", "train.processes=2"],
     "train.processes=2 and train.devices=1 disagree: processes is the older name of devices; "
     "set only train.devices"),
])
def test_an_older_name_set_apart_is_refused(overrides, words):
    cfg = compose_config([*SMOKE, *overrides])
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert str(err.value) == words
    with pytest.raises(ConfigError, match="disagree"):
        run_key(cfg)
    # the same value twice is no conflict
    same = compose_config([*SMOKE, "train.accelerator=auto", "train.device=auto", "train.devices=2",
                           "train.processes=2"])
    validate(same)


@pytest.mark.parametrize("overrides, words", [
    (["train.precision=fp8"], "train.precision='fp8' is not valid; choose one of: 32-true, bf16-mixed, 16-mixed"),
    (["train.precision=64-true"], "train.precision=64-true is not supported here: the flat parameter vector"),
    (["train.precision=bf16-true"], "train.precision=bf16-true is not supported here"),
    (["train.precision=16-mixed", "train.accelerator=cpu"],
     "train.precision=16-mixed needs a CUDA GPU (float16 autocast), and the run is on cpu"),
    (["train.accelerator=tpu"], "train.accelerator='tpu' is not valid; choose one of: cpu, cuda, gpu, mps, auto"),
    (["train.device=tpu"], "train.device='tpu' is not valid; choose one of: cpu, cuda, gpu, mps, auto"),
    (["train.devices=0"], "train.devices=0 is invalid: it must be >= 1"),
    (["train.processes=0"], "train.processes=0 is invalid: it must be >= 1"),
])
def test_what_cannot_run_is_refused_with_the_reason(overrides, words):
    with pytest.raises(ConfigError) as err:
        refuse(compose_config([*SMOKE, *overrides]))
    assert words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.skipif(CUDA, reason="this machine has a CUDA GPU")
@pytest.mark.parametrize("override", ["train.accelerator=cuda", "train.device=cuda", "train.accelerator=gpu"])
def test_cuda_is_refused_on_a_machine_without_it(override):
    cfg = compose_config([*SMOKE, override])
    validate(cfg)  # a valid config: a finished run made on a GPU reads back on this machine
    with pytest.raises(ConfigError) as err:
        check_machine(cfg)
    message = str(err.value)
    assert message.startswith(override) and "CUDA" in message and "use train.accelerator=cpu" in message


@pytest.mark.skipif(CUDA, reason="this machine has a CUDA GPU")
def test_the_command_line_refuses_cuda_before_training(tmp_path):
    out = subprocess.run([sys.executable, "-m", "fedrepro", "profile=smoke", "train.accelerator=cuda",
                          f"results_root={tmp_path}"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "train.accelerator=cuda needs a CUDA GPU" in out.stderr
    assert not (tmp_path / "runs").exists()  # refused before the run had a folder


def test_a_mixed_precision_is_in_the_key_and_32_true_is_not():
    default, bf16 = compose_config(SMOKE), compose_config([*SMOKE, "train.precision=bf16-mixed"])
    validate(bf16)
    assert "precision" not in identity(default)["train"]
    assert identity(bf16)["train"]["precision"] == "bf16-mixed"
    assert run_key(bf16) != run_key(default)
    assert run_key(OmegaConf.create(OmegaConf.to_yaml(bf16, resolve=True))) == run_key(bf16)
    # an explicit 32-true is the default
    assert run_key(compose_config([*SMOKE, "train.precision=32-true"])) == run_key(default)


def test_the_autocast_context_is_fabrics():
    from lightning.fabric import Fabric

    for precision in PRECISIONS[:2]:  # 32-true, bf16-mixed (16-mixed: CUDA)
        with Fabric(accelerator="cpu", devices=1, precision=precision).autocast():
            fabric = (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))
        with autocast(precision, "cpu"):
            ours = (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"))
        assert ours == fabric, precision
    with pytest.raises(ValueError, match="64-true"):
        autocast("64-true", "cpu")


def _executors(precision: str, loss: str = "cross_entropy", classes: int = 3):
    torch.manual_seed(0)
    model = FlatModel(MLP(12, [16, 8], classes), loss=loss)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6 * 23, 12, generator=g)
    y = torch.randint(0, classes, (6 * 23,), generator=g)
    idx = [torch.arange(k * 23, (k + 1) * 23) for k in range(6)]
    kw = dict(batch_size=5, weight_decay=1e-3, clip_norm=1.0, seed=0, precision=precision)
    return model, SequentialExecutor(model, x, y, idx, **kw), BatchedExecutor(model, x, y, idx, **kw)


@pytest.mark.parametrize("loss, classes", [("cross_entropy", 3), ("logistic", 1), ("squared", 1)])
def test_bf16_mixed_changes_both_executors_steps_and_they_agree(loss, classes):
    """The local steps under bf16-mixed: not the float32 models (the knob is not a no-op), close
    to them, finite, still float32, and the two executors agree to bfloat16 rounding."""
    out = {}
    for precision in ("32-true", "bf16-mixed"):
        model, seq, fast = _executors(precision, loss, classes)
        w0 = model.flatten_module()
        jobs = [ClientJob(k, LocalObjective(anchor=w0, prox_mu=0.1 * (k % 2)), 7) for k in range(6)]
        out[precision] = {name: ex.run(jobs, 0.1, 0) for name, ex in (("sequential", seq), ("batched", fast))}
    for name in ("sequential", "batched"):
        (w32, l32), (w16, l16) = out["32-true"][name], out["bf16-mixed"][name]
        assert w16.dtype == torch.float32 and torch.isfinite(w16).all() and torch.isfinite(l16).all()
        assert not torch.equal(w16, w32), name
        assert (w16 - w32).abs().max() < 2e-2 and (l16 - l32).abs().max() < 1e-2, name
    assert (out["bf16-mixed"]["sequential"][0] - out["bf16-mixed"]["batched"][0]).abs().max() < 5e-3


@pytest.mark.parametrize("executor", ["sequential", "batched"])
def test_bf16_mixed_runs_end_to_end_with_other_numbers(executor, tmp_path, monkeypatch):
    """A smoke run on either executor: the knobs reach Fabric, training and evaluation run under
    autocast (the initial model's test loss already differs), the numbers stay finite and close
    to 32-true's."""
    import lightning.fabric

    built = []
    real = lightning.fabric.Fabric

    def fabric(**kwargs):
        built.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(lightning.fabric, "Fabric", fabric)
    frames = {}
    for precision in ("32-true", "bf16-mixed"):
        cfg = compose_config([*SMOKE, f"train.executor={executor}", f"train.precision={precision}",
                              "train.device=cpu", f"results_root={tmp_path}"])
        r = run_experiment(cfg, quiet=True)
        assert r.summary["status"] == "finished" and r.summary["executor"].lower().startswith(executor)
        assert built[-1] == {"accelerator": "cpu", "devices": 1, "precision": precision}
        frames[precision] = pd.read_csv(r.folder / "metrics.csv")
    a, b = frames["32-true"], frames["bf16-mixed"]
    assert a["server_test_loss"][0] != b["server_test_loss"][0]  # round 0: evaluation only
    cols = ["local_loss", "server_test_loss", "server_test_acc", "all_test_loss"]
    assert not a[cols].equals(b[cols])
    last = len(a) - 1
    assert b[cols].iloc[last].notna().all()
    assert abs(a["server_test_loss"][last] - b["server_test_loss"][last]) < 0.05
    assert abs(a["server_test_acc"][last] - b["server_test_acc"][last]) < 0.05
