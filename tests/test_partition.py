import json

import numpy as np
import pytest
import torch

from fedrepro.data.partition import make_partition, partition_summary
from fedrepro.errors import ConfigError

# 6000 labels, 600 per class, in random order (like a shuffled MNIST slice)
LABELS = np.random.default_rng(123).permutation(np.repeat(np.arange(10), 600))
# uneven class counts, so class boundaries do not line up with shards or quotas
UNEVEN = np.random.default_rng(7).permutation(np.repeat(np.arange(10), [530, 674, 595, 613, 584,
                                                                       542, 591, 626, 585, 594]))


def _check_disjoint(parts, n):
    allidx = np.concatenate(parts)
    assert allidx.dtype == np.int64 and all(p.dtype == np.int64 for p in parts)
    assert len(np.unique(allidx)) == len(allidx), "an index is used twice"
    assert allidx.min() >= 0 and allidx.max() < n
    return allidx


def _max_class_fraction(labels, parts):
    s = partition_summary(labels, parts, 10)
    return np.mean([max(row) / sum(row) for row in s["label_counts"]])


@pytest.mark.parametrize("kind", ["iid", "dirichlet"])
def test_balanced_sizes_exact_and_remainder_dropped(kind):
    assert len(UNEVEN) == 5934  # = 10 * 593 + 4
    parts = make_partition(UNEVEN, 10, kind=kind, seed=0)
    assert [len(p) for p in parts] == [593] * 10
    assert len(_check_disjoint(parts, len(UNEVEN))) == 5930


@pytest.mark.parametrize("kind", ["iid", "dirichlet"])
def test_divisible_uses_every_index_once(kind):
    parts = make_partition(UNEVEN, 46, kind=kind, seed=1)  # 46 * 129
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(len(UNEVEN)))


@pytest.mark.parametrize("kind", ["iid", "dirichlet"])
def test_lognormal_sums_to_n_and_spread_grows(kind):
    stds = []
    for sigma in (0.1, 0.5, 1.0):
        parts = make_partition(UNEVEN, 50, kind=kind, seed=2, balance="lognormal", sigma=sigma)
        assert sum(len(p) for p in parts) == len(UNEVEN)
        assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(len(UNEVEN)))
        stds.append(partition_summary(UNEVEN, parts, 10)["size_std"])
    assert stds[0] < stds[1] < stds[2]


def test_lognormal_sigma_zero_is_balanced():
    parts = make_partition(LABELS, 10, kind="iid", seed=0, balance="lognormal", sigma=0.0)
    assert [len(p) for p in parts] == [600] * 10


KW = {"iid": {}, "dirichlet": {"alpha": 0.3}, "shards": {"shards_per_client": 2},
      "mixed": {"sorted_fraction": 0.5}}


@pytest.mark.parametrize("kind", list(KW))
def test_deterministic_given_seed(kind):
    a = make_partition(UNEVEN, 20, kind=kind, seed=5, **KW[kind])
    b = make_partition(UNEVEN, 20, kind=kind, seed=5, **KW[kind])
    c = make_partition(UNEVEN, 20, kind=kind, seed=6, **KW[kind])
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_global_rng_untouched_and_torch_labels_accepted():
    state = np.random.get_state()[1].copy()
    a = make_partition(torch.from_numpy(UNEVEN), 10, kind="dirichlet", seed=0)
    b = make_partition(UNEVEN, 10, kind="dirichlet", seed=0)
    assert np.array_equal(np.random.get_state()[1], state)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))


def test_iid_label_histograms_close_to_global():
    parts = make_partition(LABELS, 10, kind="iid", seed=0)
    counts = np.array(partition_summary(LABELS, parts, 10)["label_counts"])
    props = counts / counts.sum(1, keepdims=True)
    tv = 0.5 * np.abs(props - 0.1).sum(1)  # total variation to the global histogram
    assert tv.max() < 0.12


def test_dirichlet_small_alpha_more_concentrated():
    low = _max_class_fraction(UNEVEN, make_partition(UNEVEN, 20, kind="dirichlet", seed=0, alpha=0.1))
    high = _max_class_fraction(UNEVEN, make_partition(UNEVEN, 20, kind="dirichlet", seed=0, alpha=10))
    assert low > 0.45 and high < 0.25


def test_dirichlet_tiny_alpha_terminates_and_is_a_partition():
    # priors put ~all mass on one class: exercises the exhausted-class and zero-mass paths
    parts = make_partition(UNEVEN, 46, kind="dirichlet", seed=3, alpha=1e-3)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(len(UNEVEN)))


def test_shards_label_count_and_sizes():
    # equal classes of 600 = 2 shards of 300 each: a client holds at most 2 labels
    parts = make_partition(LABELS, 10, kind="shards", seed=0, shards_per_client=2)
    s = partition_summary(LABELS, parts, 10)
    assert all(np.count_nonzero(r) <= 2 for r in s["label_counts"])
    assert s["sizes"] == [600] * 10 and len(_check_disjoint(parts, len(LABELS))) == 6000
    # uneven classes: a shard may straddle a class boundary, so at most 2 labels per shard
    parts = make_partition(UNEVEN, 20, kind="shards", seed=0, shards_per_client=3)
    s = partition_summary(UNEVEN, parts, 10)
    assert all(np.count_nonzero(r) <= 6 for r in s["label_counts"])
    assert s["classes_per_client_mean"] < 5
    assert set(s["sizes"]) == {3 * (5934 // 60)}
    _check_disjoint(parts, 5934)


def test_mixed_extremes():
    sorted_parts = make_partition(LABELS, 100, kind="mixed", seed=0, sorted_fraction=1.0)
    s = partition_summary(LABELS, sorted_parts, 10)
    assert s["classes_per_client_mean"] == 1.0  # 600 per class / 60 per client
    iid_parts = make_partition(LABELS, 10, kind="mixed", seed=0, sorted_fraction=0.0)
    assert _max_class_fraction(LABELS, iid_parts) < 0.15
    assert partition_summary(LABELS, iid_parts, 10)["classes_per_client_mean"] == 10.0


def test_mixed_fraction_and_uneven_sizes():
    n, k, c = len(UNEVEN), 100, 0.3  # 5934: not a multiple of 100
    parts = make_partition(UNEVEN, k, kind="mixed", seed=0, sorted_fraction=c)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(n))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1
    # heterogeneity grows with c
    fr = [_max_class_fraction(UNEVEN, make_partition(UNEVEN, k, kind="mixed", seed=0,
                                                     sorted_fraction=f)) for f in (0, 0.5, 1)]
    assert fr[0] < fr[1] < fr[2]


@pytest.mark.parametrize("kwargs, words", [
    ({"kind": "bogus"}, "iid, dirichlet, shards, mixed"),
    ({"kind": "dirichlet", "alpha": 0.0}, "alpha"),
    ({"kind": "dirichlet", "alpha": -1.0}, "alpha"),
    ({"kind": "iid", "num_clients": 7000}, "num_clients"),
    ({"kind": "iid", "num_clients": 0}, "num_clients"),
    ({"kind": "mixed", "sorted_fraction": 1.5}, "[0, 1]"),
    ({"kind": "mixed", "sorted_fraction": -0.1}, "[0, 1]"),
    ({"kind": "iid", "balance": "skewed"}, "balanced, lognormal"),
    ({"kind": "iid", "balance": "lognormal", "sigma": -1.0}, "sigma"),
    ({"kind": "shards", "num_clients": 4000, "shards_per_client": 2}, "shards"),
])
def test_bad_arguments(kwargs, words):
    kwargs = {"num_clients": 10, **kwargs}
    with pytest.raises(ConfigError) as e:
        make_partition(LABELS, seed=0, **kwargs)
    assert words in str(e.value)


def test_summary_is_json_serializable():
    parts = make_partition(UNEVEN, 7, kind="dirichlet", seed=0, balance="lognormal", sigma=0.5)
    s = partition_summary(UNEVEN, parts, 10)
    assert json.loads(json.dumps(s)) == s
    assert s["num_clients"] == 7 and sum(s["sizes"]) == len(UNEVEN)
    assert [sum(r) for r in s["label_counts"]] == s["sizes"]
    assert s["size_mean"] == pytest.approx(len(UNEVEN) / 7)
    assert 1 <= s["classes_per_client_mean"] <= 10
