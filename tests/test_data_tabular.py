"""UCI HAR, ESR and LIBSVM a1a/a2a loaders: generated files in the original formats, plus a
real-data tier (FEDREPRO_DATA_ROOT) on the copies in shared/data."""
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from fedrepro.data import libsvm as LS
from fedrepro.data import uci
from fedrepro.data.loaders import load_dataset, unavailable
from fedrepro.errors import ConfigError, DataError

DATA = os.environ.get("FEDREPRO_DATA_ROOT")
real = pytest.mark.skipif(not DATA, reason="FEDREPRO_DATA_ROOT unset (real-data tier off)")


# ---------------------------------------------------------------- HAR fixtures

def har_number(v: float) -> str:
    """UCI HAR's number format: 7-digit mantissa, 3-digit exponent (2.8858451e-001)."""
    mantissa, exp = f"{v:.7e}".split("e")
    return f"{mantissa}e{int(exp):+04d}"


def make_har(root: Path, n_train=12, n_test=6, seed=0):
    """A small 'UCI HAR Dataset' folder; returns {split: (x as parsed, y 1..6, subjects)}."""
    rng = np.random.default_rng(seed)
    folder = root / "UCI_HAR" / "UCI HAR Dataset"
    out = {}
    for split, n, subjects in (("train", n_train, [1, 3, 5, 6]), ("test", n_test, [2, 4])):
        (folder / split).mkdir(parents=True)
        x = rng.uniform(-1, 1, size=(n, 561))
        text = ["".join(f" {har_number(v):>15}" for v in row) for row in x]
        (folder / split / f"X_{split}.txt").write_text("\n".join(text) + "\n")
        y = np.resize(np.arange(1, 7), n)
        s = np.sort(np.resize(subjects, n))
        (folder / split / f"y_{split}.txt").write_text("".join(f"{v}\n" for v in y))
        (folder / split / f"subject_{split}.txt").write_text("".join(f"{v}\n" for v in s))
        parsed = np.array([[float(t) for t in line.split()] for line in text], dtype=np.float32)
        out[split] = (parsed, y, s)
    return folder, out


@pytest.fixture
def tiny_har(monkeypatch):
    monkeypatch.setattr(uci, "HAR_ROWS", {"train": 12, "test": 6})


def test_har_number_format_is_the_originals():
    assert har_number(0.28858451) == "2.8858451e-001" and har_number(-0.020294171) == "-2.0294171e-002"
    assert f" {har_number(0.28858451):>15} {har_number(-0.020294171):>15}" == \
        "  2.8858451e-001 -2.0294171e-002"


def test_har_parse_labels_and_natural_clients(tmp_path, tiny_har):
    folder, data = make_har(tmp_path)
    d = uci.load_har(tmp_path, download=False)
    x, y, s = data["train"]
    assert d.x_train.dtype == torch.float32 and d.x_train.shape == (12, 561) and d.x_test.shape == (6, 561)
    assert np.allclose(d.x_train.numpy(), x, atol=1e-7) and np.allclose(d.x_test.numpy(), data["test"][0])
    assert d.y_train.dtype == torch.int64 and d.y_train.tolist() == (y - 1).tolist()
    assert d.y_test.tolist() == (data["test"][1] - 1).tolist() and d.num_classes == 6
    assert len(d.natural_clients) == 4  # subjects 1, 3, 5, 6
    assert np.array_equal(np.sort(np.concatenate(d.natural_clients)), np.arange(12))
    for idx in d.natural_clients:
        assert idx.dtype == np.int64 and len(set(s[idx])) == 1
    assert str(folder) in d.source


def test_har_binary_view(tmp_path, tiny_har):
    make_har(tmp_path)
    d = uci.load_har(tmp_path, download=False, binary=True)
    assert d.num_classes == 2
    assert d.y_train.tolist()[:6] == [0, 0, 0, 1, 1, 1]  # labels 1..6 in order: <= 3 -> 0


def test_har_via_registry(tmp_path, tiny_har):
    make_har(tmp_path)
    assert unavailable("har", tmp_path) is None
    d = load_dataset("har", tmp_path, download=False, options={"binary": True, "seed": 3})
    assert d.name == "har" and d.num_classes == 2


@pytest.mark.parametrize("name, damage, expect", [
    ("test/X_test.txt", lambda t: t.replace(t.splitlines()[2], t.splitlines()[2][:400]), "line 3"),
    ("train/X_train.txt", lambda t: t.replace("e-001", "x-001", 1), "line 1"),
    ("train/y_train.txt", lambda t: "7\n" + t.split("\n", 1)[1], "1..6"),
    ("train/y_train.txt", lambda t: t.split("\n", 1)[1], "rows"),
    ("test/subject_test.txt", lambda t: t + "2\n", "rows"),
])
def test_har_damaged_file_named(tmp_path, tiny_har, name, damage, expect):
    folder, _ = make_har(tmp_path)
    path = folder / name
    path.write_text(damage(path.read_text()))
    with pytest.raises(DataError) as e:
        uci.load_har(tmp_path, download=False)
    assert Path(name).name in str(e.value) and expect in str(e.value)


def test_har_real_row_counts_checked(tmp_path):
    make_har(tmp_path)  # 12 rows, but HAR_ROWS stays at the real 7352 / 2947
    with pytest.raises(DataError, match="X_train.txt: 12 rows, expected 7352"):
        uci.load_har(tmp_path, download=False)


def test_har_missing_files_named(tmp_path, tiny_har):
    folder, _ = make_har(tmp_path)
    (folder / "train" / "X_train.txt").unlink()
    (folder / "test" / "subject_test.txt").unlink()
    assert uci.missing_har(tmp_path, binary=True) == [folder / "train" / "X_train.txt",
                                                      folder / "test" / "subject_test.txt"]
    with pytest.raises(DataError) as e:
        uci.load_har(tmp_path, download=False)
    msg = str(e.value)
    assert "train/X_train.txt" in msg and "test/subject_test.txt" in msg and "y_train" not in msg
    assert str(folder) in msg and "archive.ics.uci.edu/dataset/240" in msg
    # the tables' "not run" reason: the shared folder once, then each missing file under it
    assert unavailable("har", tmp_path) == f"data not here: {folder}/ lacks train/X_train.txt, test/subject_test.txt"


# ---------------------------------------------------------------- ESR fixtures

def esr_rows(per_class=10, seed=0):
    """(ids like UCI's 'X21.V1.791', int features (n, 178), labels 1..5)."""
    rng = np.random.default_rng(seed)
    n = 5 * per_class
    x = rng.integers(-1500, 1500, size=(n, 178))
    y = np.repeat(np.arange(1, 6), per_class)
    x[:, 0] += 400 * y  # a per-class shift so rows are easy to tell apart
    ids = [f"X{rng.integers(1, 24)}.V1.{i}" for i in range(n)]
    return ids, x, y


def write_esr(path: Path, ids, x, y, first="", quote=False):
    q = (lambda s: f'"{s}"') if quote else (lambda s: s)
    head = ",".join(q(c) for c in [first] + [f"X{i}" for i in range(1, 179)] + ["y"])
    lines = [",".join([q(i)] + [str(v) for v in row] + [str(c)]) for i, row, c in zip(ids, x, y)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head + "\n" + "\n".join(lines) + "\n")
    return path


@pytest.fixture
def tiny_esr(monkeypatch):
    monkeypatch.setattr(uci, "ESR_ROWS", 50)


@pytest.mark.parametrize("first, quote", [("", False), ("", True), ("Unnamed", False), ("id", False)])
def test_esr_parse_header_variants(tmp_path, tiny_esr, first, quote):
    ids, x, y = esr_rows()
    path = write_esr(tmp_path / "ESR" / "data.csv", ids, x, y, first, quote)
    got_ids, gx, gy = uci.read_esr_csv(path)
    assert got_ids == ids and np.array_equal(gx, x) and np.array_equal(gy, y)


def test_esr_split_labels_and_normalization(tmp_path, tiny_esr):
    ids, x, y = esr_rows()
    write_esr(tmp_path / "ESR" / "data.csv", ids, x, y)
    d = uci.load_esr(tmp_path, download=False)
    assert d.num_classes == 5 and d.x_train.shape == (40, 178) and d.x_test.shape == (10, 178)
    assert d.y_train.bincount().tolist() == [8] * 5 and d.y_test.bincount().tolist() == [2] * 5
    assert d.natural_clients is None and "seed 0" in d.source and "z-scored" in d.source
    # z-score with training statistics: train columns have mean 0 / std 1; test uses the same map
    assert torch.allclose(d.x_train.mean(0), torch.zeros(178), atol=1e-5)
    assert torch.allclose(d.x_train.std(0, unbiased=False), torch.ones(178), atol=1e-5)
    raw = uci.load_esr(tmp_path, download=False, standardize=False)
    assert torch.equal(raw.y_train, d.y_train)  # same split either way
    mean, std = raw.x_train.double().mean(0), raw.x_train.double().std(0, unbiased=False)
    assert torch.allclose(((raw.x_test.double() - mean) / std).float(), d.x_test, atol=1e-5)
    assert np.allclose(d.meta["feature_mean"], mean.numpy())
    assert np.allclose(d.meta["feature_std"], std.numpy())
    # every raw row is an input row with its label (0-based), none lost or duplicated
    rows = sorted(map(tuple, np.column_stack([x, y - 1]).tolist()))
    got = torch.cat([torch.cat([raw.x_train, raw.y_train[:, None].float()], 1),
                     torch.cat([raw.x_test, raw.y_test[:, None].float()], 1)])
    assert sorted(map(tuple, got.long().tolist())) == rows


def test_esr_split_reproducible_and_independent_of_row_order(tmp_path, tiny_esr):
    ids, x, y = esr_rows()
    write_esr(tmp_path / "a" / "ESR" / "data.csv", ids, x, y)
    perm = np.random.default_rng(5).permutation(len(y))  # other order, other ids, other file name
    write_esr(tmp_path / "b" / "ESR" / "data_reconstructed_from_bonn.csv",
              [f"X{i % 23 + 1}.S{i:03d}" for i in range(len(y))], x[perm], y[perm], first="id")
    a, b = (uci.load_esr(tmp_path / k, download=False) for k in "ab")
    for name in ("x_train", "y_train", "x_test", "y_test"):
        assert torch.equal(getattr(a, name), getattr(b, name))
    assert "Bonn" in b.source and "reconstruction" in b.source and "Bonn" not in a.source
    assert torch.equal(uci.load_esr(tmp_path / "a", download=False).x_test, a.x_test)
    other = uci.load_esr(tmp_path / "a", download=False, seed=1)
    assert not torch.equal(other.x_test, a.x_test) and other.y_test.bincount().tolist() == [2] * 5


def test_esr_binary_view(tmp_path, tiny_esr):
    ids, x, y = esr_rows()
    write_esr(tmp_path / "ESR" / "data.csv", ids, x, y)
    multi = uci.load_esr(tmp_path, download=False)
    d = uci.load_esr(tmp_path, download=False, binary=True)
    assert d.num_classes == 2 and torch.equal(d.x_train, multi.x_train)  # same split
    assert torch.equal(d.y_train, (multi.y_train == 0).long()) and d.y_test.sum() == 2


def test_esr_file_name_priority(tmp_path, tiny_esr):
    ids, x, y = esr_rows()
    write_esr(tmp_path / "ESR" / "data_reconstructed_from_bonn.csv", ids, x, y)
    assert uci.esr_path(tmp_path).name == "data_reconstructed_from_bonn.csv"
    write_esr(tmp_path / "ESR" / "Epileptic Seizure Recognition.csv", ids, x, y, first="Unnamed")
    assert uci.esr_path(tmp_path).name == "Epileptic Seizure Recognition.csv"
    write_esr(tmp_path / "ESR" / "data.csv", ids, x, y)
    assert uci.esr_path(tmp_path).name == "data.csv" and uci.missing_esr(tmp_path) == []
    assert "data.csv" in load_dataset("esr", tmp_path, download=False, options={"seed": 0}).source


def _drop_column(t):
    lines = t.splitlines()
    lines[3] = lines[3].rsplit(",", 2)[0] + "," + lines[3].rsplit(",", 1)[1]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("damage, expect", [
    (_drop_column, "line 4 has 179 columns"),
    (lambda t: t[: len(t) // 2], "columns"),  # truncated mid-row
    (lambda t: t.replace(",X178,y", ",y", 1), "header"),
    (lambda t: t.replace(",X5,", ",X05,", 1), "header"),
    (lambda t: t.rsplit(",", 1)[0] + ",6\n", "labels"),
    (lambda t: t.rsplit(",", 2)[0] + ",a,5\n", "not numeric"),  # X178 of the last row
])
def test_esr_damaged_file_named(tmp_path, tiny_esr, damage, expect):
    ids, x, y = esr_rows()
    path = write_esr(tmp_path / "ESR" / "Epileptic Seizure Recognition.csv", ids, x, y, first="Unnamed")
    path.write_text(damage(path.read_text()))
    with pytest.raises(DataError) as e:
        uci.load_esr(tmp_path, download=False)
    assert "Epileptic Seizure Recognition.csv" in str(e.value) and expect in str(e.value)


def test_esr_real_counts_checked(tmp_path):
    ids, x, y = esr_rows()  # 50 rows while ESR_ROWS stays 11 500
    write_esr(tmp_path / "ESR" / "data.csv", ids, x, y)
    with pytest.raises(DataError, match=r"data.csv: 50 rows .* expected 11500 rows, 2300 per class"):
        uci.load_esr(tmp_path, download=False)


def test_esr_missing(tmp_path):
    assert uci.missing_esr(tmp_path) == [tmp_path / "ESR" / "data.csv"]
    with pytest.raises(DataError) as e:
        uci.load_esr(tmp_path, download=False)
    assert "data.csv" in str(e.value) and str(tmp_path / "ESR") in str(e.value)
    assert "archive.ics.uci.edu" in str(e.value)


# ---------------------------------------------------------------- LIBSVM

A1A_TEXT = ("-1 3:1 11:1 14:1 19:1 \n"
            "+1 1:1  6:0.5 123:1 \n"   # double space, trailing space, last index
            "\n"
            "-1 5:-2.25\n")


def write_libsvm(folder: Path, name: str, text: str = A1A_TEXT) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder / name


@pytest.fixture
def tiny_libsvm(monkeypatch):
    monkeypatch.setattr(LS, "LIBSVM_ROWS", {})


def test_read_libsvm_dense(tmp_path):
    x, y = LS.read_libsvm(write_libsvm(tmp_path, "a1a"))
    assert x.dtype == np.float32 and y.dtype == np.int64 and x.shape == (3, 123)
    assert y.tolist() == [0, 1, 0]
    assert np.flatnonzero(x[0]).tolist() == [2, 10, 13, 18] and (x[0][[2, 10, 13, 18]] == 1).all()
    assert x[1, 0] == 1 and x[1, 5] == 0.5 and x[1, 122] == 1 and x[1].sum() == 2.5
    assert x[2, 4] == -2.25 and np.count_nonzero(x[2]) == 1
    assert LS.read_libsvm(tmp_path / "a1a", n_features=200)[0].shape == (3, 200)


@pytest.mark.parametrize("text, expect", [
    ("-1 3:1 11:1\n+1 3:1 1", "line 2: malformed token '1'"),   # truncated line
    ("-1 3:1 11:\n", "line 1: malformed token '11:'"),
    ("-1 3:1\n-1 124:1\n", "line 2: feature index 124 outside 1..123"),
    ("-1 0:1\n", "feature index 0"),
    ("2 3:1\n", "line 1: label '2'"),
    ("-1 a:1\n", "malformed token 'a:1'"),
])
def test_read_libsvm_damaged(tmp_path, text, expect):
    path = write_libsvm(tmp_path, "a2a.t", text)
    with pytest.raises(DataError) as e:
        LS.read_libsvm(path)
    assert str(path) in str(e.value) and expect in str(e.value)


def test_re_encoded_text_files_are_named(tmp_path, tiny_har):
    """A UTF-16 copy (what a Windows editor's 'save as Unicode' gives) of a LIBSVM or HAR file."""
    path = tmp_path / "a1a"
    path.write_text("-1 3:1 11:1\n", encoding="utf-16")
    with pytest.raises(DataError, match=r"a1a: not an ASCII text file"):
        LS.read_libsvm(path)
    folder, _ = make_har(tmp_path)
    y = folder / "train/y_train.txt"
    y.write_text(y.read_text(), encoding="utf-16")
    with pytest.raises(DataError, match=r"y_train\.txt: not an ASCII text file"):
        uci.load_har(tmp_path, download=False)


def test_a1a_without_test_file_uses_training_set(tmp_path, tiny_libsvm):
    write_libsvm(tmp_path / "libsvm", "a1a")
    write_libsvm(tmp_path / "libsvm" / "nonoriginal", "a1a.t", "+1 1:1\n")  # never picked up
    d = LS.load_a1a(tmp_path, download=False)
    assert d.name == "a1a" and d.num_classes == 2 and d.x_train.shape == (3, 123)
    assert torch.equal(d.x_test, d.x_train) and torch.equal(d.y_test, d.y_train)
    assert "training set is also the test set" in d.source and d.natural_clients is None
    assert LS.missing_a1a(tmp_path) == []
    assert LS.missing_a1a(tmp_path, require_test=True) == [tmp_path / "libsvm" / "a1a.t"]
    with pytest.raises(DataError) as e:
        LS.load_a1a(tmp_path, download=False, require_test=True)
    assert "a1a.t" in str(e.value) and "libsvmtools/datasets/binary.html#a1a" in str(e.value)


def test_a2a_with_test_file(tmp_path, tiny_libsvm):
    write_libsvm(tmp_path / "libsvm", "a2a")
    write_libsvm(tmp_path / "libsvm", "a2a.t", "+1 2:1\n+1 7:1\n")
    d = load_dataset("a2a", tmp_path, download=False, options={"require_test": True})
    assert d.x_train.shape == (3, 123) and d.x_test.shape == (2, 123) and d.y_test.tolist() == [1, 1]
    assert "a2a.t" in d.source and "also the test set" not in d.source


def test_libsvm_missing_training_file(tmp_path, tiny_libsvm):
    write_libsvm(tmp_path / "libsvm", "a2a.t")  # a test file alone is not enough
    assert LS.missing_a2a(tmp_path) == [tmp_path / "libsvm" / "a2a"]
    with pytest.raises(DataError) as e:
        LS.load_a2a(tmp_path, download=False)
    msg = str(e.value)
    assert "missing a2a." in msg and str(tmp_path / "libsvm") in msg and "binary.html#a2a" in msg


def test_libsvm_real_row_counts_checked(tmp_path):
    write_libsvm(tmp_path / "libsvm", "a1a")  # 3 rows; the published a1a has 1605
    with pytest.raises(DataError, match="a1a: 3 examples, expected 1605"):
        LS.load_a1a(tmp_path, download=False)


@pytest.mark.parametrize("name", ["har", "esr", "a1a", "a2a"])
def test_unknown_option_is_a_config_error(tmp_path, name):
    with pytest.raises(ConfigError, match="unknown option.*bogus"):
        load_dataset(name, tmp_path, download=False, options={"bogus": 1})


# ---------------------------------------------------------------- real data (shared/data)

@real
def test_real_esr():
    d = uci.load_esr(Path(DATA), download=False)
    assert d.x_train.shape == (9200, 178) and d.x_test.shape == (2300, 178)
    counts = (torch.bincount(d.y_train) + torch.bincount(d.y_test)).tolist()
    assert counts == [2300] * 5 and torch.bincount(d.y_test).tolist() == [460] * 5
    assert torch.isfinite(d.x_train).all() and abs(d.x_train.mean().item()) < 1e-4


@real
def test_real_a1a():
    d = LS.load_a1a(Path(DATA), download=False)
    assert d.x_train.shape == (1605, 123) and int(d.y_train.sum()) == 395
    assert set(d.x_train.unique().tolist()) == {0.0, 1.0}


@real
def test_real_a2a_test_file():
    x, y = LS.read_libsvm(Path(DATA) / "libsvm" / "a2a.t")
    assert x.shape == (30296, 123) and int(y.sum()) == 7269


@real
def test_real_har():
    missing = uci.missing_har(Path(DATA))
    if missing:  # not in shared/data today: the check must name the feature matrix
        assert any(m.name == "X_train.txt" for m in missing)
        with pytest.raises(DataError, match="X_train.txt"):
            uci.load_har(Path(DATA), download=False)
        return
    d = uci.load_har(Path(DATA), download=False)
    assert d.x_train.shape == (7352, 561) and d.x_test.shape == (2947, 561)
    assert len(d.natural_clients) == 21 and d.x_train.abs().max() <= 1.0 + 1e-6
    assert torch.bincount(d.y_train).tolist() == [1226, 1073, 986, 1286, 1374, 1407]
