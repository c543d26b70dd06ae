"""The torchvision shim: active next to a CPU torch + CUDA torchvision, a no-op where the ops exist."""
import subprocess
import sys


def _run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip()


def test_torchvision_and_lightning_import_after_fedrepro():
    out = _run("import fedrepro, torchvision, lightning\n"
               "from torchvision import datasets, transforms, models\n"
               "from fedrepro import _compat\n"
               "import torch\n"
               "torch._C._dispatch_find_schema_or_throw('torchvision::nms', '')\n"
               "print('ok')")
    assert out.endswith("ok")


def test_shim_does_nothing_when_the_ops_already_exist():
    # Simulate a torchvision whose extension loaded: the schemas exist before fedrepro runs.
    out = _run("import torch\n"
               "lib = torch.library.Library('torchvision', 'FRAGMENT')\n"
               "lib.define('nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor')\n"
               "lib.define('qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor')\n"
               "from fedrepro import _compat\n"
               "print(_compat.SHIM_ACTIVE, _compat._library is None, _compat.ensure_torchvision_ops())")
    assert out.split()[-3:] == ["False", "True", "False"]
