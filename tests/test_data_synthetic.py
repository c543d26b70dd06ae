"""Statistical checks of the generators in fedrepro/data/synthetic.py.

Tolerances are about 3-5 standard errors of the estimate checked (stated per test); every
draw is seeded, so the tests are deterministic.
"""
import numpy as np
import pytest
import torch

from fedrepro.data.synthetic import (load_lowrank, load_synthetic_feddyn, missing_lowrank,
                                     missing_synthetic_feddyn, recovery_metrics)
from fedrepro.errors import ConfigError


def syn(**options):
    return load_synthetic_feddyn(None, False, **options)


def low(**options):
    return load_lowrank(None, False, **options)


def device_means(ds):
    return np.stack([ds.x_train[idx].double().mean(0).numpy() for idx in ds.natural_clients])


def test_defaults_shapes_and_partition():
    ds = syn()
    assert ds.x_train.shape == (4000, 30) and ds.x_train.dtype == torch.float32
    assert ds.y_train.dtype == torch.int64 and set(ds.y_train.unique().tolist()) <= set(range(5))
    assert ds.x_test.shape == (4000, 30) and ds.num_classes == 5 and ds.task == "classification"
    assert ds.meta["theta"].shape == (20, 5, 31) and ds.meta["sizes"] == [200] * 20
    # natural_clients: contiguous device blocks that partition the rows exactly
    rows = np.concatenate(ds.natural_clients)
    assert np.array_equal(rows, np.arange(len(ds.x_train)))
    assert [len(i) for i in ds.natural_clients] == ds.meta["sizes"]
    assert missing_synthetic_feddyn(None) == [] and missing_lowrank(None) == []


def test_feature_covariance_is_diag_k_pow_minus_1_2():
    ds = syn(num_devices=1, samples_per_device=20000, test_per_device=1)
    x = ds.x_train.double().numpy()
    target = np.arange(1, 31) ** -1.2
    # sample variance: relative s.e. sqrt(2/n) = 1 %; allow 5 %
    assert np.allclose(x.var(0), target, rtol=0.05)
    # off-diagonal correlations: s.e. 1/sqrt(n) = 0.007; allow 0.04
    corr = np.corrcoef(x.T) - np.eye(30)
    assert np.abs(corr).max() < 0.04
    # homogeneous: nu = 0; mean s.e. sqrt(k^-1.2 / n); allow 5 s.e.
    assert np.all(np.abs(x.mean(0)) < 5 * np.sqrt(target / len(x)))


@pytest.mark.parametrize("het", ["homogeneous", "type1", "type2", "type3"])
def test_labels_are_argmax_of_the_device_model(het):
    ds = syn(heterogeneity=het)
    theta = ds.meta["theta"]
    for i, idx in enumerate(ds.natural_clients):
        logits = ds.x_train[idx].double() @ theta[i, :, :-1].T + theta[i, :, -1]
        assert torch.equal(logits.argmax(1), ds.y_train[idx])
    # the test set: per-device blocks of test_per_device rows from the same models
    for i in range(20):
        sl = slice(200 * i, 200 * (i + 1))
        logits = ds.x_test[sl].double() @ theta[i, :, :-1].T + theta[i, :, -1]
        assert torch.equal(logits.argmax(1), ds.y_test[sl])


def test_type1_alone_gives_per_device_models():
    for het in ("homogeneous", "type2", "type3"):
        theta = syn(heterogeneity=het).meta["theta"]
        assert torch.equal(theta, theta[:1].expand_as(theta))  # one shared model
    theta = syn(heterogeneity="type1", num_devices=400, samples_per_device=10, test_per_device=1,
                gamma1=1.0).meta["theta"].numpy()
    assert not np.allclose(theta[0], theta[1])
    # per-device mean of the 155 entries ~ mu_i + N(0, 1/155): variance gamma1^2 + 1/155;
    # relative s.e. of a variance from 400 devices: sqrt(2/399) = 7 %; allow 25 %
    assert abs(theta.reshape(400, -1).mean(1).var() - (1 + 1 / 155)) < 0.25
    # within a device the entries have variance 1 around mu_i (s.e. ~ 0.11 / device; mean of 400)
    assert abs(theta.reshape(400, -1).var(1).mean() - 1) < 0.05


def test_type2_alone_gives_per_device_feature_means():
    for het in ("homogeneous", "type1", "type3"):
        ds = syn(heterogeneity=het)
        assert not ds.meta["feature_means"].any()
        # empirical device means near 0: s.e. <= sqrt(1/200) = 0.07; allow 0.35
        assert np.abs(device_means(ds)).max() < 0.35
    ds = syn(heterogeneity="type2", num_devices=300, gamma2=1.0, test_per_device=1)
    nu = ds.meta["feature_means"].numpy()
    # empirical device means track nu_i (s.e. <= 0.07; allow 0.35)
    assert np.abs(device_means(ds) - nu).max() < 0.35
    # mean of nu_i's entries ~ beta_i + N(0, 1/30): variance gamma2^2 + 1/30, rel. s.e. 8 %; allow 25 %
    assert abs(nu.mean(1).var() - (1 + 1 / 30)) < 0.26
    assert abs(nu.var(1).mean() - 1) < 0.06  # entries vary by 1 around beta_i


def test_type3_alone_gives_lognormal_sizes():
    for het in ("homogeneous", "type1", "type2"):
        assert syn(heterogeneity=het).meta["sizes"] == [200] * 20
    for gamma3 in (0.5, 1.0):
        ds = syn(heterogeneity="type3", num_devices=500, gamma3=gamma3, test_per_device=1)
        sizes = np.array(ds.meta["sizes"])
        assert sizes.sum() == 500 * 200 and sizes.min() >= 10  # exact mean, floor at min_samples
        # log-size variance = gamma3^2 (gamma3 is the std), rel. s.e. sqrt(2/499) = 6 %; allow 20 %
        assert abs(np.log(sizes).var() / gamma3 ** 2 - 1) < 0.2
        assert [len(i) for i in ds.natural_clients] == sizes.tolist()


def test_seeded_reproducibility_and_independent_streams():
    a, b = syn(heterogeneity="type1", seed=3), syn(heterogeneity="type1", seed=3)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_train, b.y_train)
    assert torch.equal(a.x_test, b.x_test) and torch.equal(a.meta["theta"], b.meta["theta"])
    assert not torch.equal(a.x_train, syn(heterogeneity="type1", seed=4).x_train)
    # the test-set size does not change the training data
    assert torch.equal(a.x_train, syn(heterogeneity="type1", seed=3, test_per_device=7).x_train)
    same = syn(test_per_device=0)  # FedDyn's code: evaluate on the training data
    assert torch.equal(same.x_test, same.x_train) and torch.equal(same.y_test, same.y_train)


@pytest.mark.parametrize("options, word", [
    ({"heterogeneity": "type4"}, "homogeneous, type1, type2, type3"),
    ({"num_devices": 0}, "num_devices"), ({"samples_per_device": 5}, "min_samples"),
    ({"gamma3": -1.0}, "gamma3"), ({"test_per_device": -1}, "test_per_device"),
    ({"num_device": 3}, "valid options"),
])
def test_synthetic_invalid_options(options, word):
    with pytest.raises(ConfigError, match=word):
        syn(**options)


def test_lowrank_shapes_and_ground_truth():
    ds = low(d=8, rank=3, num_clients=5, samples_per_client=4, test_samples=6)
    assert ds.x_train.shape == (20, 64) and ds.x_train.dtype == torch.float32
    assert ds.y_train.shape == (20,) and ds.y_train.dtype == torch.float32
    assert ds.x_test.shape == (6, 64) and ds.task == "regression" and ds.num_classes == 1
    x_g = ds.meta["X_G"]
    assert x_g.shape == (8, 8) and int(torch.linalg.matrix_rank(x_g)) == 3 == ds.meta["rank"]
    assert torch.equal(x_g[:3, :3], torch.eye(3)) and x_g.sum() == 3
    assert [list(i) for i in ds.natural_clients] == [list(range(4 * c, 4 * c + 4)) for c in range(5)]
    paper = low(num_clients=2, samples_per_client=1, test_samples=1)  # d = 64, rank 8 by default
    assert paper.x_train.shape == (2, 4096) and int(torch.linalg.matrix_rank(paper.meta["X_G"])) == 8


def test_lowrank_statistics_and_least_squares_recovery():
    ds = low(d=8, rank=2, num_clients=20, samples_per_client=500, test_samples=100, seed=1)
    x, y = ds.x_train.double(), ds.y_train.double()
    # entries N(0.1, 1): 640 000 entries, mean s.e. 0.00125, variance s.e. 0.0018; allow 0.01
    assert abs(x.mean().item() - 0.1) < 0.01 and abs(x.var().item() - 1) < 0.01
    # y - <X_G, D> is the noise: std 0.1 (a std, not a variance), rel. s.e. 0.7 %; allow 5 %
    resid = y - x @ ds.meta["X_G"].double().reshape(-1)
    assert abs(resid.std().item() / 0.1 - 1) < 0.05 and abs(resid.mean().item()) < 0.01
    # least squares over 10 000 observations of 64 unknowns: error ~ 0.1 * sqrt(64/10000) = 0.008
    sol = torch.linalg.lstsq(x, y.unsqueeze(1)).solution.reshape(8, 8)
    m = recovery_metrics(sol, ds.meta["X_G"])
    assert m["error"] < 0.05
    # rank with a tolerance above the estimation noise
    assert recovery_metrics(sol, ds.meta["X_G"], tol=0.1)["rank"] == 2
    # test rows follow the same model
    t_resid = ds.y_test.double() - ds.x_test.double() @ ds.meta["X_G"].double().reshape(-1)
    assert t_resid.abs().max() < 0.5  # 5 std


def test_lowrank_reproducible():
    a, b = low(d=4, rank=2, samples_per_client=3), low(d=4, rank=2, samples_per_client=3)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert not torch.equal(a.x_train, low(d=4, rank=2, samples_per_client=3, seed=1).x_train)


def test_recovery_metrics_on_known_matrices():
    x_g = torch.diag(torch.tensor([1.0, 1.0, 0.0, 0.0]))
    assert recovery_metrics(x_g.clone(), x_g) == {"error": 0.0, "rank": 2}
    est = x_g.clone()
    est[3, 3] = 0.5      # an extra singular value above tol
    est[2, 2] = 1e-4     # one below tol: not counted
    m = recovery_metrics(est, x_g)
    assert m["rank"] == 3 and m["error"] == pytest.approx((0.25 + 1e-8) ** 0.5)
    assert recovery_metrics(est.reshape(-1), x_g)["rank"] == 3  # flat vector accepted


@pytest.mark.parametrize("options, word", [
    ({"d": 4, "rank": 5}, "rank"), ({"rank": 0}, "rank"), ({"num_clients": 0}, "num_clients"),
    ({"samples_per_client": 0}, "samples_per_client"), ({"noise": -0.1}, "noise"),
    ({"dim": 3}, "valid options"),
])
def test_lowrank_invalid_options(options, word):
    with pytest.raises(ConfigError, match=word):
        low(**options)
