"""CIFAR loaders (fedrepro/data/cifar.py) on small files written in the original formats, the
per-batch augmentation (fedrepro/data/augment.py), and a real-data tier on FEDREPRO_DATA_ROOT."""
import os
import pickle
import sys
import types
import zipfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from fedrepro.data import cifar as C
from fedrepro.data.augment import PAD, augment_batch
from fedrepro.data.common import file_md5
from fedrepro.errors import ConfigError, DataError

# tiny splits: CIFAR-10 5 x 20 train rows (10 per class) and 20 test rows; CIFAR-100 200 / 100
TINY = {"cifar10": {"train": 100, "test": 20}, "cifar100": {"train": 200, "test": 100}}


def balanced_labels(rng, n, k):
    return rng.permutation(np.repeat(np.arange(k), n // k))


def write_batch(path, x, y, spec):
    """One pickle exactly as the archive's: protocol 2, byte-string keys, rows of R, G, B planes."""
    rows = x.transpose(0, 3, 1, 2).reshape(len(x), 3072)
    names = [f"img_{i:05d}.png".encode() for i in range(len(x))]
    if spec.name == "cifar10":
        batch = {b"batch_label": b"training batch", b"labels": [int(v) for v in y], b"data": rows,
                 b"filenames": names}
    else:
        batch = {b"filenames": names, b"batch_label": b"training batch", b"fine_labels": [int(v) for v in y],
                 b"coarse_labels": [int(v) // 5 for v in y], b"data": rows}
    with open(path, "wb") as f:
        pickle.dump(batch, f, protocol=2)


def make_pickles(root, dataset, seed=0):
    """Small pickles under root/<folder>/<pickle_dir>/; returns {split: (x NHWC, y)} as written."""
    spec = C.SPECS[dataset]
    rng = np.random.default_rng(seed)
    folder = root / spec.folder / spec.pickle_dir
    folder.mkdir(parents=True)
    written = {}
    for split, names in spec.pickles.items():
        n = TINY[dataset][split]
        x = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
        y = balanced_labels(rng, n, spec.num_classes)
        for name, xs, ys in zip(names, np.split(x, len(names)), np.split(y, len(names))):
            write_batch(folder / name, xs, ys, spec)
        written[split] = (x, y)
    if dataset == "cifar10":
        with open(folder / "batches.meta", "wb") as f:
            pickle.dump({b"num_cases_per_batch": 20, b"label_names": [b"c%d" % i for i in range(10)],
                         b"num_vis": 3072}, f, protocol=2)
    return written


@pytest.fixture
def tiny(monkeypatch):
    """Shrink the expected sizes; md5s become those of the files `make_pickles` writes (call fix())."""
    for name, spec in C.SPECS.items():
        monkeypatch.setitem(C.SPECS, name, replace(spec, sizes=TINY[name]))

    def fix(root, dataset):
        spec = C.SPECS[dataset]
        pdir = root / spec.folder / spec.pickle_dir
        md5 = {n: file_md5(pdir / n) for n in spec.md5}
        monkeypatch.setitem(C.SPECS, dataset, replace(spec, md5=md5))
    return fix


def make(root, dataset, tiny, seed=0):
    written = make_pickles(root, dataset, seed)
    tiny(root, dataset)
    return root / C.SPECS[dataset].folder, written


# ---------------------------------------------------------------- parsing

def test_real_md5s_are_torchvisions():
    assert C.SPECS["cifar10"].md5["data_batch_1"] == "c99cafc152244af753f735de768cd75f"
    assert C.SPECS["cifar10"].md5["test_batch"] == "40351d587109b95175f43aff81a1287e"
    assert C.SPECS["cifar100"].md5 == {"train": "16019d7e3df5f24257cddd939b257f8d",
                                       "test": "f0ef6b0ae62326f3e7ffdfab6717acfc"}
    assert C.SPECS["cifar10"].sizes == {"train": 50_000, "test": 10_000}


@pytest.mark.parametrize("dataset", ["cifar10", "cifar100"])
def test_pickles_parse_to_the_arrays_written(tmp_path, tiny, dataset):
    folder, written = make(tmp_path, dataset, tiny)
    for split in ("train", "test"):
        x, y = C.read_cifar_split(folder, dataset, split, write_cache=False)
        assert x.dtype == np.uint8 and x.shape == (TINY[dataset][split], 32, 32, 3) and y.dtype == np.int64
        assert np.array_equal(x, written[split][0]) and np.array_equal(y, written[split][1])
    assert not list(folder.glob("*.npz"))


def test_pixel_orientation(tmp_path, tiny):
    """Byte 1024*c + 32*r + col of a row is channel c at (r, col): R, G, B planes, row-major."""
    folder, _ = make(tmp_path, "cifar10", tiny)
    path = folder / "cifar-10-batches-py" / "test_batch"
    with open(path, "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    batch[b"data"][:] = 0
    batch[b"data"][0, 0 * 1024 + 5 * 32 + 7] = 255  # R at row 5, column 7
    batch[b"data"][0, 2 * 1024 + 0 * 32 + 3] = 77   # B at row 0, column 3
    batch[b"data"][1, 1 * 1024 + 31 * 32 + 0] = 9   # G at row 31, column 0
    with open(path, "wb") as f:
        pickle.dump(batch, f, protocol=2)
    x, _ = C.read_cifar_split(folder, "cifar10", "test", check=False, write_cache=False)
    assert x[0, 5, 7, 0] == 255 and x[0, 0, 3, 2] == 77 and x[1, 31, 0, 1] == 9
    assert int(x.astype(int).sum()) == 255 + 77 + 9


def test_cache_written_then_read_back(tmp_path, tiny):
    folder, written = make(tmp_path, "cifar10", tiny)
    x, y = C.read_cifar_split(folder, "cifar10", "train")
    cache = folder / "cifar10_train.npz"
    assert cache.is_file() and [p.name for p in folder.iterdir() if p.is_file()] == ["cifar10_train.npz"]
    with np.load(cache) as z:
        assert z["x"].shape == (100, 32, 32, 3) and z["x"].dtype == np.uint8 and z["y"].dtype == np.uint8
    for p in (folder / "cifar-10-batches-py").glob("data_batch_*"):
        p.unlink()  # from now on only the cache can answer
    x2, y2 = C.read_cifar_split(folder, "cifar10", "train")
    assert np.array_equal(x2, written["train"][0]) and np.array_equal(y2, y) and y2.dtype == np.int64
    assert C.missing_cifar10(tmp_path) == []


def test_lzma_cache_is_read(tmp_path, tiny):
    """The shared folder's npz members are LZMA-compressed; np.load must read them as is."""
    folder, written = make(tmp_path, "cifar10", tiny)
    x, y = written["test"]
    with zipfile.ZipFile(folder / "cifar10_test.npz", "w", compression=zipfile.ZIP_LZMA) as z:
        for key, arr in (("x", x), ("y", y.astype(np.uint8))):
            with z.open(f"{key}.npy", "w") as f:
                np.lib.format.write_array(f, arr)
    (folder / "cifar-10-batches-py" / "test_batch").unlink()
    x2, y2 = C.read_cifar_split(folder, "cifar10", "test")
    assert np.array_equal(x2, x) and np.array_equal(y2, y)


def test_cache_write_failure_is_not_fatal(tmp_path, tiny, monkeypatch):
    folder, written = make(tmp_path, "cifar10", tiny)

    def refuse(*a, **k):
        raise PermissionError("read-only folder")
    monkeypatch.setattr(C.np, "savez_compressed", refuse)
    with pytest.warns(UserWarning, match="cifar10_test.npz"):
        x, _ = C.read_cifar_split(folder, "cifar10", "test")
    assert np.array_equal(x, written["test"][0]) and not [p for p in folder.iterdir() if p.is_file()]


# ---------------------------------------------------------------- damaged and missing files

def test_md5_mismatch_names_file(tmp_path, tiny):
    folder, _ = make(tmp_path, "cifar10", tiny)
    path = folder / "cifar-10-batches-py" / "data_batch_3"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(DataError, match="data_batch_3") as e:
        C.read_cifar_split(folder, "cifar10", "train")
    assert "md5" in str(e.value) and "cs.toronto.edu" in str(e.value)


@pytest.mark.parametrize("cut", [0.5, 0.0])
def test_truncated_pickle_names_file(tmp_path, tiny, cut):
    folder, _ = make(tmp_path, "cifar10", tiny)
    path = folder / "cifar-10-batches-py" / "data_batch_3"
    blob = path.read_bytes()
    path.write_bytes(blob[: int(len(blob) * cut)])
    with pytest.raises(DataError, match="data_batch_3") as e:
        C.read_cifar_split(folder, "cifar10", "train", check=False)
    assert "damaged" in str(e.value)
    assert not (folder / "cifar10_train.npz").exists()


def test_damaged_cache_names_file(tmp_path, tiny):
    folder, _ = make(tmp_path, "cifar10", tiny)
    C.read_cifar_split(folder, "cifar10", "test")
    cache = folder / "cifar10_test.npz"
    blob = cache.read_bytes()
    cache.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(DataError, match="cifar10_test.npz") as e:
        C.read_cifar_split(folder, "cifar10", "test")
    assert "damaged" in str(e.value)
    np.savez(cache, x=np.zeros((20, 32, 32), np.uint8), y=np.zeros(20, np.uint8))  # wrong shape
    with pytest.raises(DataError, match="cifar10_test.npz"):
        C.read_cifar_split(folder, "cifar10", "test")
    np.savez(cache, images=np.zeros(3))  # not a cache at all
    with pytest.raises(DataError, match="cifar10_test.npz"):
        C.read_cifar_split(folder, "cifar10", "test")


def test_counts_and_label_range_are_checked(tmp_path, tiny):
    folder, written = make(tmp_path, "cifar10", tiny)
    x, y = written["test"]
    cache = folder / "cifar10_test.npz"
    for bad in (np.where(y == 0, 1, y), np.where(y == 9, 10, y), x[:19]):  # unbalanced, 10, short
        labels = bad if bad.ndim == 1 else y[:19]
        images = bad if bad.ndim == 4 else x
        np.savez(cache, x=images, y=labels.astype(np.uint8))
        with pytest.raises(DataError, match="cifar10_test.npz") as e:
            C.read_cifar_split(folder, "cifar10", "test")
        assert "2 of each class 0..9" in str(e.value)


def test_real_sizes_reject_tiny_files(tmp_path, monkeypatch):
    make_pickles(tmp_path, "cifar10")  # the real checks (50 000 / 10 000 rows) stay on by default
    with pytest.raises(DataError, match="10000, 32, 32, 3"):
        C.read_cifar_split(tmp_path / "CIFAR10", "cifar10", "test", check=False)


def test_missing_files_named_with_folder(tmp_path, tiny):
    assert [p.name for p in C.missing_cifar10(tmp_path)] == [
        "cifar10_train.npz", *(f"data_batch_{i}" for i in range(1, 6)), "cifar10_test.npz", "test_batch"]
    folder, _ = make(tmp_path, "cifar10", tiny)
    C.read_cifar_split(folder, "cifar10", "test")  # writes the test cache
    for p in (folder / "cifar-10-batches-py").iterdir():
        if p.name in ("data_batch_2", "test_batch"):
            p.unlink()
    # the situation of the shared folder: the test cache, no training split
    missing = C.missing_cifar10(tmp_path)
    assert missing == [folder / "cifar10_train.npz", folder / "cifar-10-batches-py" / "data_batch_2"]
    with pytest.raises(DataError) as e:
        C.load_cifar10(tmp_path, download=False)
    msg = str(e.value)
    assert "train split" in msg and "test split" not in msg
    for part in ("cifar10_train.npz", "data_batch_1", "data_batch_5", "absent: data_batch_2",
                 str(folder), "torchvision.datasets.CIFAR10", "https://www.cs.toronto.edu/~kriz/cifar.html"):
        assert part in msg
    assert [p.name for p in C.missing_cifar100(tmp_path)] == ["cifar100_train.npz", "train",
                                                              "cifar100_test.npz", "test"]


def test_download_is_tried_and_its_failure_is_not_fatal(tmp_path, tiny, monkeypatch):
    calls = []

    def offline(root, train, download):
        calls.append((root, train, download))
        raise OSError("no network")
    fake = types.SimpleNamespace(datasets=types.SimpleNamespace(CIFAR10=offline))
    monkeypatch.setitem(sys.modules, "torchvision", fake)
    with pytest.raises(DataError, match="cifar10_train.npz"):
        C.load_cifar10(tmp_path, download=True)
    assert calls == [(str(tmp_path / "CIFAR10"), True, True)]

    make(tmp_path / "twin", "cifar10", tiny)  # the md5s of the files `online` will write

    def online(root, train, download):  # what torchvision leaves: the unpacked archive
        make_pickles(Path(root).parent, "cifar10")
    fake.datasets.CIFAR10 = online
    assert C.load_cifar10(tmp_path, download=True).x_train.shape == (100, 3, 32, 32)


def test_unknown_option_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="write_cache"):
        C.missing_cifar10(tmp_path, wrte_cache=False)


# ---------------------------------------------------------------- the loaded dataset

@pytest.mark.parametrize("dataset", ["cifar10", "cifar100"])
def test_load_normalizes_with_feddyns_constants(tmp_path, tiny, dataset):
    folder, written = make(tmp_path, dataset, tiny)
    load = C.load_cifar10 if dataset == "cifar10" else C.load_cifar100
    d = load(tmp_path, download=False)
    k = C.SPECS[dataset].num_classes
    assert (d.name, d.num_classes, d.augment) == (dataset, k, "cifar")
    assert d.x_train.shape == (TINY[dataset]["train"], 3, 32, 32)
    assert d.x_test.shape == (TINY[dataset]["test"], 3, 32, 32)
    assert d.x_train.dtype == torch.float32 and d.y_train.dtype == torch.int64 and d.x_train.is_contiguous()
    mean, std = ((0.491, 0.482, 0.447), (0.247, 0.243, 0.262)) if dataset == "cifar10" else \
        ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761))
    for split, xt, yt in (("train", d.x_train, d.y_train), ("test", d.x_test, d.y_test)):
        x, y = written[split]
        expected = (x.astype(np.float64) / 255 - np.array(mean)) / np.array(std)  # NHWC
        assert np.allclose(xt.numpy(), expected.transpose(0, 3, 1, 2), atol=1e-5)
        assert np.array_equal(yt.numpy(), y)
    assert "pickles, md5-verified" in d.source and str(folder) in d.source
    # the second load reads the caches written by the first
    again = load(tmp_path, download=False)
    assert "array cache" in again.source and torch.equal(again.x_train, d.x_train)


# ---------------------------------------------------------------- augmentation

def reference(img, flip, d1, d2):
    """FedDyn's __getitem__, literally: flip the width axis, pad 4 with zeros, take [d1:d1+32, d2:d2+32]."""
    img = img[:, :, ::-1] if flip else img
    c, h, w = img.shape
    ext = np.zeros((c, h + 2 * PAD, w + 2 * PAD), img.dtype)
    ext[:, PAD:-PAD, PAD:-PAD] = img
    return ext[:, d1:d1 + h, d2:d2 + w]


def coordinates(b, h=32, w=32):
    """Images whose channels say where each pixel came from: row + 1, column + 1, 1."""
    r, c = torch.meshgrid(torch.arange(h) + 1.0, torch.arange(w) + 1.0, indexing="ij")
    return torch.stack([r, c, torch.ones(h, w)]).expand(b, 3, h, w).contiguous()


def decode(out):
    """(flip, d1, d2) per image, FedDyn's parameters, read off an augmented coordinates batch."""
    params = []
    w = out.shape[-1]
    for img in out.numpy():
        r0, c0 = np.argwhere(img[2] == 1)[0]  # first kept pixel, row-major
        src_r, src_c = int(img[0, r0, c0]) - 1, int(img[1, r0, c0]) - 1
        flip = img[1, r0, c0 + 1] < img[1, r0, c0]
        d2 = (w - 1 - src_c if flip else src_c) - c0 + PAD
        params.append((bool(flip), src_r - r0 + PAD, d2))
    return params


def test_augmentation_is_feddyns_flip_and_crop():
    b = 4000
    coords = augment_batch("cifar", coordinates(b), torch.Generator().manual_seed(3))
    x = torch.randn(b, 3, 32, 32)
    out = augment_batch("cifar", x, torch.Generator().manual_seed(3))  # same draws: they depend on b only
    assert out.shape == x.shape and out.dtype == x.dtype and out.is_contiguous()
    params = decode(coords)
    cx, xn, on = coords.numpy(), x.numpy(), out.numpy()
    base = coordinates(1)[0].numpy()
    for i, (flip, d1, d2) in enumerate(params):
        assert np.array_equal(cx[i], reference(base, flip, d1, d2))  # shift + mirror, zero fill
        assert np.array_equal(on[i], reference(xn[i], flip, d1, d2))
    flips = np.array([p[0] for p in params])
    d = np.array([p[1:] for p in params])
    cropped = (d != PAD).any(axis=1)  # a crop at offset (4, 4) is the image itself: p = 0.5 * 80 / 81
    assert abs(flips.mean() - 0.5) < 0.04 and abs(cropped.mean() - 0.5 * 80 / 81) < 0.04
    for axis in range(2):
        assert set(d[cropped, axis]) == set(range(2 * PAD + 1))
    # flip and crop are drawn independently
    assert abs((flips & cropped).mean() - flips.mean() * cropped.mean()) < 0.03


def test_flip_mirrors_exactly_and_zero_fill_is_normalized_zero():
    x = torch.randn(512, 3, 32, 32)
    out = augment_batch("cifar", x, torch.Generator().manual_seed(0))
    same = (out == x).flatten(1).all(1)
    mirrored = (out == x.flip(-1)).flatten(1).all(1)
    assert 0.15 < same.float().mean() < 0.35 and 0.15 < mirrored.float().mean() < 0.35  # ~0.25 each
    shifted = ~(same | mirrored)
    # a shifted image keeps zeros (the normalized mean) on at least one border line
    borders = torch.stack([out[..., 0, :].abs().sum((1, 2)), out[..., -1, :].abs().sum((1, 2)),
                           out[..., :, 0].abs().sum((1, 2)), out[..., :, -1].abs().sum((1, 2))], 1)
    assert ((borders == 0).any(1) == shifted).all()


def test_augmentation_is_reproducible_and_leaves_input():
    x = torch.randn(64, 3, 32, 32)
    keep = x.clone()
    a = augment_batch("cifar", x, torch.Generator().manual_seed(7))
    b = augment_batch("cifar", x, torch.Generator().manual_seed(7))
    c = augment_batch("cifar", x, torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c) and torch.equal(x, keep)
    g = torch.Generator().manual_seed(7)
    first, second = augment_batch("cifar", x, g), augment_batch("cifar", x, g)
    assert torch.equal(first, a) and not torch.equal(first, second)  # the generator advances


def test_unknown_augmentation_names_known_kinds():
    with pytest.raises(ValueError, match="'imagenet'; known: cifar"):
        augment_batch("imagenet", torch.zeros(1, 3, 32, 32), torch.Generator())
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        augment_batch("cifar", torch.zeros(3, 32, 32), torch.Generator())


# ---------------------------------------------------------------- real data (FEDREPRO_DATA_ROOT)

DATA = os.environ.get("FEDREPRO_DATA_ROOT")
real = pytest.mark.skipif(not DATA, reason="set FEDREPRO_DATA_ROOT to the folder holding CIFAR10/")


@real
def test_real_cifar10_test_split():
    x, y = C.read_cifar_split(Path(DATA) / "CIFAR10", "cifar10", "test", write_cache=False)
    assert x.shape == (10_000, 32, 32, 3) and x.dtype == np.uint8
    assert np.array_equal(np.bincount(y), [1000] * 10)
    means = x.reshape(-1, 3).mean(0) / 255
    assert np.allclose(means, (0.4942, 0.4851, 0.4504), atol=5e-4)
    assert x[0, 0, :4, 0].tolist() == [158, 159, 165, 166]  # test_batch row 0's start (SOURCES.md)


@real
def test_real_cifar10_train_split_or_its_absence():
    folder = Path(DATA) / "CIFAR10"
    missing = C.missing_cifar10(DATA)
    if missing:  # the training split has not arrived yet
        names = {p.name for p in missing}
        assert {"cifar10_train.npz", "data_batch_1", "data_batch_5"} <= names
        assert not names & {"cifar10_test.npz", "test_batch"}
        with pytest.raises(DataError, match="cifar10_train.npz"):
            C.load_cifar10(Path(DATA), download=False)
        return
    x, y = C.read_cifar_split(folder, "cifar10", "train", write_cache=False)
    assert x.shape == (50_000, 32, 32, 3) and np.array_equal(np.bincount(y), [5000] * 10)
    assert np.allclose(x.reshape(-1, 3).mean(0) / 255, (0.4914, 0.4822, 0.4465), atol=5e-4)
