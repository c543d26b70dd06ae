"""Generated datasets: FedDyn's synthetic logistic data (App. A.1.1) and LoSAC's low-rank
matrix sensing (Sec. V-E). Both are pure functions of their options (seeded numpy
Generators); `data_root` and `download` are unused. Choices: docs/datasets/synthetic.md.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedrepro.data.common import DatasetTensors
from fedrepro.errors import ConfigError

HETEROGENEITY = ("homogeneous", "type1", "type2", "type3")


def _reject_unknown(dataset: str, extra: dict[str, Any], valid: tuple[str, ...]) -> None:
    if extra:
        raise ConfigError(f"{dataset}: unknown option(s) {', '.join(sorted(extra))}; "
                          f"valid options: {', '.join(valid)}")


def _require(dataset: str, checks: dict[str, tuple[Any, bool, str]]) -> None:
    """checks: option -> (value, ok, what it must be)."""
    for name, (value, ok, must) in checks.items():
        if not ok:
            raise ConfigError(f"{dataset}: {name}={value!r} is invalid; it must be {must}")


def _streams(seed: int, n: int) -> list[np.random.Generator]:
    # Independent streams: changing e.g. the test size leaves the training data unchanged.
    return [np.random.default_rng(s) for s in np.random.SeedSequence(int(seed)).spawn(n)]


def _lognormal_sizes(rng: np.random.Generator, num: int, mean: int, sigma: float,
                     min_size: int) -> np.ndarray:
    """`num` sizes, log-sizes with std `sigma`, summing exactly to num * mean, each >= min_size."""
    total = num * mean
    if sigma == 0:
        return np.full(num, mean, dtype=np.int64)
    raw = rng.lognormal(0.0, sigma, num)
    raw = raw / raw.sum() * total  # normalizing shifts log-sizes only: their variance is kept
    sizes = np.floor(raw).astype(np.int64)
    short = total - int(sizes.sum())  # largest-remainder rounding keeps the exact total
    sizes[np.argsort(raw - sizes)[::-1][:short]] += 1
    sizes = np.maximum(sizes, min_size)
    excess = int(sizes.sum()) - total
    while excess > 0:  # give back what the floor added, from the largest device
        i = int(np.argmax(sizes))
        take = min(excess, int(sizes[i]) - min_size)
        sizes[i] -= take
        excess -= take
    return sizes


def _device_rows(rng: np.random.Generator, sizes: np.ndarray, nu: np.ndarray, std: np.ndarray,
                 theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Features N(nu_i, diag(std^2)) and labels argmax(W_i x + b_i), device after device."""
    xs, ys = [], []
    for i, n in enumerate(sizes):
        x = (nu[i] + rng.standard_normal((int(n), len(std))) * std).astype(np.float32)
        # Labels from the stored float32 features: y == argmax exactly, no rounding flips.
        logits = x.astype(np.float64) @ theta[i, :, :-1].T + theta[i, :, -1]
        xs.append(x)
        ys.append(np.argmax(logits, axis=1))
    return np.concatenate(xs), np.concatenate(ys).astype(np.int64)


def load_synthetic_feddyn(data_root: Path, download: bool, *, heterogeneity: str = "homogeneous",
                          num_devices: int = 20, samples_per_device: int = 200,
                          num_features: int = 30, num_classes: int = 5, gamma1: float = 1.0,
                          gamma2: float = 1.0, gamma3: float = 1.0, test_per_device: int = 200,
                          min_samples: int = 10, seed: int = 0, **extra) -> DatasetTensors:
    """FedDyn App. A.1.1: device i's data follow y = argmax(theta_i* x + b_i*),
    x ~ N(nu_i, diag(k^-1.2)). One heterogeneity type at a time; gammas are standard
    deviations (as in FedDyn's code). test_per_device=0: the test set is the training set."""
    name = "synthetic_feddyn"
    _reject_unknown(name, extra, ("heterogeneity", "num_devices", "samples_per_device",
                                  "num_features", "num_classes", "gamma1", "gamma2", "gamma3",
                                  "test_per_device", "min_samples", "seed"))
    _require(name, {
        "heterogeneity": (heterogeneity, heterogeneity in HETEROGENEITY, f"one of {', '.join(HETEROGENEITY)}"),
        "num_devices": (num_devices, num_devices >= 1, "a positive integer"),
        "num_features": (num_features, num_features >= 1, "a positive integer"),
        "num_classes": (num_classes, num_classes >= 2, "an integer >= 2"),
        "min_samples": (min_samples, min_samples >= 1, "a positive integer"),
        "samples_per_device": (samples_per_device, samples_per_device >= max(1, min_samples),
                               f"an integer >= min_samples ({min_samples})"),
        "test_per_device": (test_per_device, test_per_device >= 0, "an integer >= 0 (0: test on the training set)"),
        **{g: (v, v >= 0, "a standard deviation >= 0") for g, v in
           (("gamma1", gamma1), ("gamma2", gamma2), ("gamma3", gamma3))},
    })
    m, f, c = int(num_devices), int(num_features), int(num_classes)
    # Only the selected type keeps its gamma; the other two are disabled (A.1.1).
    g1, g2, g3 = (float(gamma1) * (heterogeneity == "type1"), float(gamma2) * (heterogeneity == "type2"),
                  float(gamma3) * (heterogeneity == "type3"))
    rng_model, rng_mean, rng_size, rng_train, rng_test = _streams(seed, 5)

    if heterogeneity == "type1":  # mu_i ~ N(0, gamma1); (theta_i*, b_i*) entries ~ N(mu_i, 1)
        mu = rng_model.normal(0.0, g1, m)
        theta = rng_model.normal(mu[:, None, None], 1.0, (m, c, f + 1))
    else:  # one shared (theta*, b*) ~ N(0, 1)
        theta = np.broadcast_to(rng_model.normal(0.0, 1.0, (c, f + 1)), (m, c, f + 1)).copy()
    if heterogeneity == "type2":  # beta_i ~ N(0, gamma2); nu_i entries ~ N(beta_i, 1)
        beta = rng_mean.normal(0.0, g2, m)
        nu = rng_mean.normal(beta[:, None], 1.0, (m, f))
    else:
        nu = np.zeros((m, f))
    sizes = _lognormal_sizes(rng_size, m, int(samples_per_device), g3, int(min_samples))
    std = np.arange(1, f + 1, dtype=np.float64) ** -0.6  # variances k^-1.2

    x_train, y_train = _device_rows(rng_train, sizes, nu, std, theta)
    if test_per_device == 0:  # FedDyn's code evaluates on the training data itself
        test_sizes, x_test, y_test = sizes, x_train, y_train
    else:
        test_sizes = np.full(m, int(test_per_device), dtype=np.int64)
        x_test, y_test = _device_rows(rng_test, test_sizes, nu, std, theta)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    options = (f"heterogeneity={heterogeneity}, num_devices={m}, samples_per_device={samples_per_device}, "
               f"num_features={f}, num_classes={c}, gamma1={gamma1}, gamma2={gamma2}, gamma3={gamma3}, "
               f"test_per_device={test_per_device}, min_samples={min_samples}, seed={seed}")
    return DatasetTensors(
        name, torch.from_numpy(x_train), torch.from_numpy(y_train),
        torch.from_numpy(x_test), torch.from_numpy(y_test), num_classes=c,
        source=f"generator synthetic_feddyn (FedDyn App. A.1.1; {options})",
        natural_clients=[np.arange(bounds[i], bounds[i + 1]) for i in range(m)],
        meta={"heterogeneity": heterogeneity,
              "sizes": sizes.tolist(), "test_sizes": test_sizes.tolist(),
              "gammas": {"gamma1": g1, "gamma2": g2, "gamma3": g3},  # effective: 0 = disabled
              "theta": torch.from_numpy(theta),  # (devices, classes, features + 1): [W | b], float64
              "feature_means": torch.from_numpy(nu)})


def missing_synthetic_feddyn(data_root: Path, **options) -> list[Path]:
    return []


def load_lowrank(data_root: Path, download: bool, *, d: int = 64, rank: int = 8,
                 num_clients: int = 100, samples_per_client: int = 100, test_samples: int = 2000,
                 mean: float = 0.1, noise: float = 0.1, seed: int = 0, **extra) -> DatasetTensors:
    """LoSAC V-E: y_j = <X_G, D_j> + N(0, noise^2), D_j entries ~ N(mean, 1),
    X_G = diag(I_rank, 0). x rows are D_j flattened row-major; `noise` is a standard deviation."""
    name = "lowrank"
    _reject_unknown(name, extra, ("d", "rank", "num_clients", "samples_per_client",
                                  "test_samples", "mean", "noise", "seed"))
    _require(name, {
        "d": (d, d >= 1, "a positive integer"),
        "rank": (rank, 1 <= rank <= d, f"an integer in 1..d (d={d})"),
        "num_clients": (num_clients, num_clients >= 1, "a positive integer"),
        "samples_per_client": (samples_per_client, samples_per_client >= 1, "a positive integer"),
        "test_samples": (test_samples, test_samples >= 1, "a positive integer"),
        "noise": (noise, noise >= 0, "a standard deviation >= 0"),
    })
    d, rank = int(d), int(rank)
    x_g = np.zeros((d, d), dtype=np.float32)
    x_g[np.arange(rank), np.arange(rank)] = 1.0
    diag = np.arange(rank) * (d + 1)  # flat positions of X_G's ones
    rng_train, rng_test = _streams(seed, 2)

    def draw(rng: np.random.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        # float32 from the start: 10 000 x 4096 entries would be 328 MB as float64
        x = rng.standard_normal((n, d * d), dtype=np.float32)
        x += np.float32(mean)
        y = x[:, diag].sum(axis=1, dtype=np.float64) + noise * rng.standard_normal(n)
        return torch.from_numpy(x), torch.from_numpy(y.astype(np.float32))

    n = int(num_clients) * int(samples_per_client)
    x_train, y_train = draw(rng_train, n)
    x_test, y_test = draw(rng_test, int(test_samples))
    options = (f"d={d}, rank={rank}, num_clients={num_clients}, samples_per_client={samples_per_client}, "
               f"test_samples={test_samples}, mean={mean}, noise={noise}, seed={seed}")
    return DatasetTensors(
        name, x_train, y_train, x_test, y_test, num_classes=1, task="regression",
        source=f"generator lowrank (LoSAC Sec. V-E; {options})",
        natural_clients=[np.arange(i * samples_per_client, (i + 1) * samples_per_client)
                         for i in range(int(num_clients))],  # IID: contiguous blocks of i.i.d. rows
        meta={"X_G": torch.from_numpy(x_g), "rank": rank})


def missing_lowrank(data_root: Path, **options) -> list[Path]:
    return []


def recovery_metrics(X_est: torch.Tensor, X_G: torch.Tensor, tol: float = 1e-3) -> dict[str, float | int]:
    """LoSAC's two metrics: ||X_est - X_G||_F and rank(X_est) = #singular values > tol."""
    est = X_est.detach().to(torch.float64).reshape(X_G.shape)
    return {"error": float(torch.linalg.matrix_norm(est - X_G.to(torch.float64))),
            "rank": int((torch.linalg.svdvals(est) > tol).sum())}
