"""Split a training set's indices among federated clients.

Every partitioner is deterministic given `seed` (its own `np.random.default_rng(seed)`;
the global numpy RNG is never touched) and returns one int64 index array per client.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np

from fedrepro.errors import ConfigError

KINDS = ("iid", "dirichlet", "shards", "mixed")
BALANCES = ("balanced", "lognormal")


def make_partition(labels, num_clients: int, *, kind: str, seed: int,
                   alpha: float = 0.3, balance: str = "balanced", sigma: float = 0.0,
                   shards_per_client: int = 2, sorted_fraction: float = 0.0) -> list[np.ndarray]:
    """Return one int64 index array per client (indices into the training set).

    kind:
      - "iid": shuffle, then cut into the client sizes.
      - "dirichlet": FedDyn's procedure. Each client gets class priors ~ Dir(alpha * 1);
        then, one sample at a time, a uniformly random client that still has capacity
        draws a class from its prior. FedDyn redraws when the class is exhausted; we draw
        from the prior restricted to the classes that are left (the same distribution,
        but it always terminates). If a client's prior has no mass at all on the classes
        left (possible for tiny alpha), it takes a class uniformly among those left.
      - "shards": McMahan et al. Sort by label, cut into num_clients * shards_per_client
        equal shards, deal them out at random. `balance` is ignored. When N is not a
        multiple of the shard count, N % shards random samples are dropped first (so the
        drop does not hit only the last class).
      - "mixed": LoSAC's c% split (c = sorted_fraction). A random c-fraction of the data
        is sorted by label and divided evenly (contiguously) among all clients; the rest
        is shuffled and also divided evenly among all clients. c=0 is IID; c=1 is LoSAC's
        "sorted by labels, then divided evenly" non-IID. Uses every sample; client sizes
        differ by at most one. `balance` is ignored.

    Client sizes (iid, dirichlet):
      - "balanced": N // num_clients each (FedDyn: N/K exactly, e.g. MNIST 60000/100 = 600);
        the N % num_clients remainder is dropped (for iid, the last samples of the random
        permutation; for dirichlet, whatever the sampling leaves over).
      - "lognormal": FedDyn's sizes ~ lognormal(log(N/K), sigma), normalized to N, cast
        to int; the difference to N is taken from (or, after truncation, added to) the
        first client larger than it. Sums to N exactly. sigma=0 gives balanced sizes.
    """
    y = _as_labels(labels)
    n = len(y)
    _check_args(n, num_clients, kind, alpha, balance, sigma, shards_per_client, sorted_fraction)
    rng = np.random.default_rng(seed)

    if kind == "shards":
        parts = _shards(y, num_clients, shards_per_client, rng)
    elif kind == "mixed":
        parts = _mixed(y, num_clients, sorted_fraction, rng)
    else:
        sizes = client_sizes(n, num_clients, balance=balance, sigma=sigma, rng=rng)
        if kind == "iid":
            perm = rng.permutation(n)
            parts = np.split(perm[: sizes.sum()], np.cumsum(sizes)[:-1])
        else:
            parts = _dirichlet(y, sizes, alpha, rng)
    return [np.asarray(p, dtype=np.int64) for p in parts]


def client_sizes(n: int, num_clients: int, *, balance: str, sigma: float,
                 rng: np.random.Generator) -> np.ndarray:
    """Per-client sample counts (see make_partition's docstring)."""
    if balance == "balanced" or sigma == 0:
        return np.full(num_clients, n // num_clients, dtype=np.int64)
    raw = rng.lognormal(mean=np.log(n / num_clients), sigma=sigma, size=num_clients)
    sizes = (raw / raw.sum() * n).astype(np.int64)
    diff = int(sizes.sum()) - n  # <= 0 after truncation
    if diff != 0:
        # FedDyn: fix the total on the first client larger than the difference
        first = int(np.argmax(sizes > diff))
        sizes[first] -= diff
    return sizes


def _dirichlet(y: np.ndarray, sizes: np.ndarray, alpha: float,
               rng: np.random.Generator) -> list[list[int]]:
    num_classes = int(y.max()) + 1
    k = len(sizes)
    priors = rng.dirichlet(np.full(num_classes, alpha), size=k)
    # each class's samples in random order; a class is consumed from its end
    pools = [rng.permutation(np.flatnonzero(y == c)).tolist() for c in range(num_classes)]
    left = [len(p) for p in pools]
    for c in range(num_classes):
        if left[c] == 0:
            priors[:, c] = 0.0
    cum = np.cumsum(priors, axis=1).tolist()  # python lists: bisect beats numpy on tiny rows
    cap = sizes.tolist()
    active = [i for i in range(k) if cap[i] > 0]
    total = int(sizes.sum())
    u_client, u_class = rng.random(total), rng.random(total)
    parts: list[list[int]] = [[] for _ in range(k)]
    for t in range(total):
        j = int(u_client[t] * len(active))  # uniform over clients with capacity
        i = active[j]
        row = cum[i]
        top = row[-1]
        if top > 0:
            c = bisect_right(row, u_class[t] * top)
            if c == num_classes:  # float rounding put u*top on the top edge
                c = bisect_left(row, top)
        else:
            remaining = [c for c in range(num_classes) if left[c] > 0]
            c = remaining[int(u_class[t] * len(remaining))]
        left[c] -= 1
        parts[i].append(pools[c][left[c]])
        cap[i] -= 1
        if cap[i] == 0:  # swap-remove the full client
            active[j] = active[-1]
            active.pop()
        if left[c] == 0:  # restrict every prior to the classes that are left
            priors[:, c] = 0.0
            cum = np.cumsum(priors, axis=1).tolist()
    return parts


def _shards(y: np.ndarray, num_clients: int, per_client: int,
            rng: np.random.Generator) -> list[np.ndarray]:
    num_shards = num_clients * per_client
    shard_size = len(y) // num_shards
    keep = np.sort(rng.permutation(len(y))[: num_shards * shard_size])
    order = keep[np.argsort(y[keep], kind="stable")]
    shards = order.reshape(num_shards, shard_size)
    deal = rng.permutation(num_shards).reshape(num_clients, per_client)
    return [shards[row].reshape(-1) for row in deal]


def _mixed(y: np.ndarray, num_clients: int, c: float,
           rng: np.random.Generator) -> list[np.ndarray]:
    perm = rng.permutation(len(y))
    n_sorted = int(round(c * len(y)))
    sorted_part = perm[:n_sorted][np.argsort(y[perm[:n_sorted]], kind="stable")]
    sorted_chunks = np.array_split(sorted_part, num_clients)
    # reversed so the +1 remainders of the two parts land on different clients
    shuffled_chunks = np.array_split(perm[n_sorted:], num_clients)[::-1]
    return [np.concatenate([a, b]) for a, b in zip(sorted_chunks, shuffled_chunks)]


def partition_summary(labels, parts, num_classes: int) -> dict:
    """Sizes and per-client label counts of a partition, as plain JSON-ready values."""
    y = _as_labels(labels)
    counts = [np.bincount(y[p], minlength=num_classes) for p in parts]
    sizes = np.array([len(p) for p in parts], dtype=np.int64)
    return {
        "num_clients": len(parts),
        "sizes": [int(s) for s in sizes],
        "label_counts": [[int(v) for v in row] for row in counts],
        "size_mean": float(sizes.mean()) if len(parts) else 0.0,
        "size_std": float(sizes.std()) if len(parts) else 0.0,
        "classes_per_client_mean":
            float(np.mean([np.count_nonzero(row) for row in counts])) if len(parts) else 0.0,
    }


def _as_labels(labels) -> np.ndarray:
    y = np.asarray(labels.cpu() if hasattr(labels, "cpu") else labels)
    if y.ndim != 1:
        raise ConfigError(f"labels must be a 1-D array of class ids, got shape {y.shape}")
    if len(y) and (y.min() < 0 or not np.issubdtype(y.dtype, np.integer)):
        raise ConfigError("labels must be non-negative integer class ids")
    return y.astype(np.int64, copy=False)


def _check_args(n, num_clients, kind, alpha, balance, sigma, shards_per_client, sorted_fraction):
    if kind not in KINDS:
        raise ConfigError(f"unknown partition kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    if not isinstance(num_clients, (int, np.integer)) or not 1 <= num_clients <= n:
        raise ConfigError(f"num_clients must be an integer in [1, {n}] (the number of "
                          f"training samples), got {num_clients!r}")
    if kind in ("iid", "dirichlet"):
        if balance not in BALANCES:
            raise ConfigError(f"unknown balance {balance!r}; valid: {', '.join(BALANCES)}")
        if not sigma >= 0:
            raise ConfigError(f"sigma must be >= 0 (lognormal size spread), got {sigma!r}")
    if kind == "dirichlet" and not alpha > 0:
        raise ConfigError(f"alpha must be > 0 (Dirichlet concentration), got {alpha!r}")
    if kind == "shards":
        if not isinstance(shards_per_client, (int, np.integer)) or shards_per_client < 1:
            raise ConfigError(f"shards_per_client must be an integer >= 1, got {shards_per_client!r}")
        if num_clients * shards_per_client > n:
            raise ConfigError(f"num_clients * shards_per_client = {num_clients * shards_per_client} "
                              f"shards exceed the {n} samples; use fewer clients or shards")
    if kind == "mixed" and not 0.0 <= sorted_fraction <= 1.0:
        raise ConfigError(f"sorted_fraction must be in [0, 1] (0 = IID, 1 = fully sorted), "
                          f"got {sorted_fraction!r}")
