"""The communication ledger: every message that crosses the network in a round.

The engine (never an algorithm) calls ``Ledger.record`` once per message -- one flat
tensor; a client that uploads several named tensors (SCAFFOLD: model delta and
control-variate delta) makes one call per tensor with the same client id. ``end_round``
closes the round and returns, per direction d in {up, down}:

    {d}_messages     number of messages
    {d}_nonzeros     sum over messages of the nonzero entries
    {d}_entropy      Shannon entropy, bits per symbol, of the values in bins of bin_width (0.01)
    {d}_dense_bits   value_bits per entry
    {d}_sparse_bits  per message nnz * (value_bits + ceil(log2(numel))): value + index
    cum_{d}_...      the same five summed over every round closed so far

Two more, each switched on by the constructor (a run switches both on, see run.py):

    {d}_wire_bits    (wire_bits=True) the bits the message's compressor puts on the wire
                     under its named encoding (fedrepro/compression); an uncompressed message
                     is dense, value_bits per entry
    {d}_zstd_bytes   (lossless="zstd"; "lzma" gives {d}_lzma_bytes) the bytes of each message
                     after a real lossless coder run over its encoded symbols (an
                     uncompressed message: its float32 values), summed -- what a codec
                     achieves, beside the Shannon estimate of {d}_entropy

``record(direction, client, name, tensor, wire=None)``: `wire` is the message's
``Compressed`` (its bits and encoded symbols) when a compressor made it; without it the
message counts as dense float32. A downlink tensor recorded for several clients is coded
once (the same broadcast reaches each of them).

Entropy (FIDELITY.md, FedElasticNet's "cumulative entropy"): in mode ``"pooled"`` (the
default, the reading that reproduces the paper's numbers, e.g. ~2.7 bits/round for MNIST
FedProx) all values of one direction in a round form one sample; in ``"per_client"`` each
client's values form a sample and the round's value is the mean over its clients. The
cumulative entropy is the sum of the per-round values.

Holding messages: none are kept. ``record`` reduces a message at once -- counts its
nonzeros and bits and adds its bin indices to a per-bin histogram of the open round -- so
the caller may mutate or free its tensor right after the call, memory is O(bins) rather
than O(values), and ``end_round`` only turns a few small histograms into entropies.

On the CPU a message's bins and nonzeros are counted in one pass by a numba kernel
(`_count_bins`) where its bins span a moderate range: the same floor(float64(v) / bin_width)
per value as the torch path, so the same counts exactly (tests/test_ledger.py). At 100
clients a round, the torch path's six passes over every message had made the ledger half of
a round (a 1 000-device MNIST run, py-spy; docs/performance.md).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from fedrepro.compression.codec import CODECS, float32_bytes, lossless_size
from fedrepro.errors import DivergenceError

DIRECTIONS = ("up", "down")
ENTROPY_MODES = ("pooled", "per_client")
_FIELDS = ("messages", "nonzeros", "entropy", "dense_bits", "sparse_bits")

# A dense histogram spanning more bins than this (32 MiB of int64) switches to a sparse
# one; model values binned by 0.01 span a few hundred to a few thousand bins.
_DENSE_MAX_BINS = 1 << 22


class _Binner:
    """Bin indices floor(v / bin_width), computed in float64 so bin edges do not depend on
    the message's dtype (float32 arithmetic rounds the quotient and moves values near an
    edge, e.g. float32 -2.99, into the neighbouring bin).

    Works in scratch buffers reused from message to message: allocating fresh multi-MB
    tensors for every message cost page faults that tripled the time of a round.
    """

    def __init__(self, bin_width: float) -> None:
        self.bin_width = bin_width
        self._f: torch.Tensor | None = None  # float64 scratch
        self._i: torch.Tensor | None = None  # int64 scratch

    def __call__(self, values: torch.Tensor) -> tuple[torch.Tensor, int, int] | None:
        """(indices, min index, max index), or None when empty. The indices are a view
        of the scratch buffer: valid until the next call, free to modify in place.
        ValueError when a value is NaN, infinite or beyond the int64 bin range."""
        n = values.numel()
        if n == 0:
            return None
        if self._f is None or self._f.numel() < n or self._f.device != values.device:
            self._f = torch.empty(n, dtype=torch.float64, device=values.device)
            self._i = torch.empty(n, dtype=torch.int64, device=values.device)
        f = self._f[:n]
        f.copy_(values.detach().reshape(-1))
        f.div_(self.bin_width).floor_()
        lo, hi = (float(x) for x in torch.aminmax(f))  # NaN propagates into both
        if not (-(2.0**62) < lo and hi < 2.0**62):
            raise ValueError(f"values must be finite and binnable; bin range [{lo}, {hi}]")
        idx = self._i[:n]
        idx.copy_(f)  # exact: f holds integers
        return idx, int(lo), int(hi)


class _Histogram:
    """Counts of integer bin indices, accumulated message by message.

    Dense (a count tensor plus the index of its first bin) while the bins seen span at
    most _DENSE_MAX_BINS; beyond that a list of (bins, counts) chunks merged once, in
    ``counts()``, so a huge range never allocates a huge tensor nor merges repeatedly.
    """

    def __init__(self) -> None:
        self.offset = 0
        self.dense: torch.Tensor | None = None
        self.chunks: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # sparse mode

    def add(self, binned: tuple[torch.Tensor, int, int] | None) -> None:
        """Count one message's bins: a _Binner result (modified in place) or None."""
        if binned is None:
            return
        idx, lo, hi = binned
        if _small_range(lo, hi, idx.numel()) or self._fits_dense(lo, hi):  # bincount beats sorting here
            self.add_counts(torch.bincount(idx.sub_(lo), minlength=hi - lo + 1), lo, hi)
            return
        self._to_sparse()
        self.chunks.append(torch.unique(idx, return_counts=True))

    def add_counts(self, part: torch.Tensor, lo: int, hi: int) -> None:
        """Count one message given as its counts `part` of the bins lo..hi."""
        if self._fits_dense(lo, hi):
            self._grow(*self._span(lo, hi), part.device)
            self.dense[lo - self.offset : hi - self.offset + 1] += part.to(self.dense.device)
            return
        self._to_sparse()
        bins = torch.nonzero(part).reshape(-1)
        self.chunks.append((bins + lo, part[bins]))

    def _span(self, lo: int, hi: int) -> tuple[int, int]:
        """The first and last bin of the dense counts with bins lo..hi added."""
        if self.dense is None:
            return lo, hi
        return min(lo, self.offset), max(hi, self.offset + len(self.dense) - 1)

    def _fits_dense(self, lo: int, hi: int) -> bool:
        """Dense so far, and still dense with bins lo..hi added."""
        start, stop = self._span(lo, hi)
        return self.chunks is None and stop - start + 1 <= _DENSE_MAX_BINS

    def _grow(self, start: int, stop: int, device: torch.device) -> None:
        # Widen the dense range to [start, stop], keeping the counts already made.
        if self.dense is None:
            self.offset = start
            self.dense = torch.zeros(stop - start + 1, dtype=torch.int64, device=device)
            return
        if start == self.offset and stop - start + 1 == len(self.dense):
            return
        wider = torch.zeros(stop - start + 1, dtype=torch.int64, device=self.dense.device)
        shift = self.offset - start
        wider[shift : shift + len(self.dense)] = self.dense
        self.offset, self.dense = start, wider

    def _to_sparse(self) -> None:
        if self.chunks is not None:
            return
        self.chunks = []
        if self.dense is not None:
            bins = torch.nonzero(self.dense).reshape(-1)
            self.chunks.append((bins + self.offset, self.dense[bins]))
            self.dense = None

    def counts(self) -> torch.Tensor:
        """The nonzero counts (bin order irrelevant for entropy)."""
        if self.chunks is None:
            if self.dense is None:
                return torch.zeros(0, dtype=torch.int64)
            return self.dense[self.dense > 0]
        if not self.chunks:
            return torch.zeros(0, dtype=torch.int64)
        bins = torch.cat([b.to(self.chunks[0][0].device) for b, _ in self.chunks])
        counts = torch.cat([c.to(bins.device) for _, c in self.chunks])
        _, inverse = torch.unique(bins, return_inverse=True)
        merged = torch.zeros(int(inverse.max()) + 1, dtype=torch.int64, device=bins.device)
        return merged.index_add_(0, inverse, counts)

    def entropy(self) -> float:
        """Empirical Shannon entropy, bits per symbol; 0.0 when empty or one bin."""
        c = self.counts().to(torch.float64)
        if c.numel() <= 1:
            return 0.0
        p = c / c.sum()
        return max(0.0, float(-(p * torch.log2(p)).sum()))


def _small_range(lo: int, hi: int, numel: int) -> bool:
    """Bins lo..hi few enough to count densely for a message of `numel` values."""
    return hi - lo + 1 <= max(2 * numel, 1 << 16)


_KERNEL: list = []  # [compiled kernel or None], filled on first use


def _count_kernel():
    """numba's `count_bins(values, bin_width, lo, counts) -> nonzeros`, or None without numba."""
    if not _KERNEL:
        try:
            from numba import njit
        except ImportError:
            _KERNEL.append(None)
        else:
            # no fastmath: each bin must be floor(float64(v) / bin_width) exactly as IEEE division
            # gives it (a reciprocal multiply would move values on bin edges)
            @njit(cache=True, boundscheck=False)
            def count_bins(values, bin_width, lo, counts):  # pragma: no cover (compiled)
                nonzeros = 0
                for j in range(values.shape[0]):
                    v = np.float64(values[j])
                    if v != 0.0:
                        nonzeros += 1
                    counts[np.int64(np.floor(v / bin_width)) - lo] += 1
                return nonzeros

            _KERNEL.append(count_bins)
    return _KERNEL[0]


def _count_bins(values: torch.Tensor, bin_width: float):
    """(bin counts, lo, hi, nonzeros) of a 1-D CPU float message in one pass, or None where the
    kernel does not serve (no numba, another device or dtype, an empty message, bins over a
    range too wide to count densely): then the torch path (`_Binner`) runs. The bin range comes
    from the message's min and max (floor(v / w) is monotone in v); ValueError when a value is
    NaN, infinite or beyond the int64 bin range, as `_Binner`."""
    if values.device.type != "cpu" or values.dtype not in (torch.float32, torch.float64) or values.numel() == 0:
        return None
    kernel = _count_kernel()
    if kernel is None:
        return None
    low, high = (float(x) / bin_width for x in torch.aminmax(values))
    if not (-(2.0**62) < low and high < 2.0**62):  # NaN and infinities fail too
        raise ValueError(f"values must be finite and binnable; bin range [{low}, {high}]")
    lo, hi = math.floor(low), math.floor(high)
    if not _small_range(lo, hi, values.numel()):
        return None
    counts = np.zeros(hi - lo + 1, dtype=np.int64)
    nonzeros = kernel(values.contiguous().numpy(), bin_width, lo, counts)
    return torch.from_numpy(counts), lo, hi, int(nonzeros)


def shannon_entropy(values: torch.Tensor, bin_width: float = 0.01) -> float:
    """Empirical Shannon entropy, in bits per symbol, of `values` discretized into bins of
    width `bin_width` (bin index = floor(v / bin_width)). 0.0 for an empty or constant tensor."""
    if not bin_width > 0:
        raise ValueError(f"bin_width must be > 0, got {bin_width}")
    hist = _Histogram()
    hist.add(_Binner(bin_width)(values))
    return hist.entropy()


def _version(t: torch.Tensor) -> int | None:
    """The tensor's in-place modification counter (None where it has none: inference mode)."""
    try:
        return t._version
    except RuntimeError:
        return None


def _zero_totals(fields: tuple[str, ...] = _FIELDS) -> dict[str, dict[str, float]]:
    return {d: {f: (0.0 if f == "entropy" else 0) for f in fields} for d in DIRECTIONS}


class Ledger:
    """Per-round and cumulative communication metrics of one federated run.

    dim: the model dimension d (kept for reports; a resumed run must have the same d).
    entropy: "pooled" or "per_client" (module docstring). bin_width: entropy bin size.
    value_bits: bits of one transmitted value (32 for float32).
    wire_bits: also record {d}_wire_bits. lossless: "zstd" | "lzma" | "none": also record
    each message's size after that coder, {d}_<codec>_bytes (module docstring).
    """

    def __init__(self, dim: int, entropy: str = "pooled", bin_width: float = 0.01,
                 value_bits: int = 32, *, wire_bits: bool = False, lossless: str = "none"):
        if entropy not in ENTROPY_MODES:
            raise ValueError(f"entropy mode must be one of {ENTROPY_MODES}, got {entropy!r}")
        if not bin_width > 0:
            raise ValueError(f"bin_width must be > 0, got {bin_width}")
        if int(value_bits) != value_bits or value_bits < 1:
            raise ValueError(f"value_bits must be a positive integer, got {value_bits}")
        if int(dim) != dim or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim}")
        if lossless not in CODECS:
            raise ValueError(f"lossless must be one of {CODECS}, got {lossless!r}")
        self.dim = int(dim)
        self.wire_bits = bool(wire_bits)
        self.lossless = lossless
        self._coded_field = None if lossless == "none" else f"{lossless}_bytes"
        self.fields = _FIELDS + (("wire_bits",) if self.wire_bits else ()) + (
            (self._coded_field,) if self._coded_field else ())
        self.entropy = entropy
        self.bin_width = float(bin_width)
        self.value_bits = int(value_bits)
        self.rounds_closed = 0
        self._binner = _Binner(self.bin_width)
        self._cum = _zero_totals(self.fields)
        self._open_round()

    def _open_round(self) -> None:
        self._round = _zero_totals(self.fields)
        # The round's downlink tensors, their bins and coded sizes: a broadcast recorded for every
        # selected client is counted and coded once (the tensor is held so its id stays its own).
        self._counted_down: dict[int, tuple] = {}
        self._coded_down: dict[int, tuple] = {}
        # Histograms of the open round, keyed (direction, client); client is None when
        # pooled so that one histogram per direction holds all the round's values.
        self._hists: dict[tuple[str, int | None], _Histogram] = {}

    def record(self, direction: str, client: int, name: str, tensor: torch.Tensor, wire=None) -> None:
        """Account one message (a 1-D tensor: the values the receiver decodes) sent in the
        open round; `wire`: its ``Compressed`` when a compressor made it (else dense). The
        tensor is reduced before returning and no reference to it is kept (except an
        uncompressed downlink tensor's, until the round ends, to code a broadcast once)."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        if tensor.dim() != 1:
            raise ValueError(
                f"message {name!r} of client {client} must be a flat (1-D) tensor, "
                f"got shape {tuple(tensor.shape)}"
            )
        values = tensor.detach()
        try:
            if direction == "down":
                counted = self._per_broadcast(self._counted_down, tensor, lambda: _count_bins(values, self.bin_width))
            else:
                counted = _count_bins(values, self.bin_width)
            binned = self._binner(values) if counted is None else None
        except ValueError as err:
            raise DivergenceError(
                f"{direction} message {name!r} of client {client} in round index "
                f"{self.rounds_closed} (0-based): {err}; training diverged",
                round=self.rounds_closed,
            ) from err
        numel = values.numel()
        nnz = int(torch.count_nonzero(values)) if counted is None else counted[3]
        index_bits = (numel - 1).bit_length() if numel else 0  # == ceil(log2(numel))
        tot = self._round[direction]
        tot["messages"] += 1
        tot["nonzeros"] += nnz
        tot["dense_bits"] += self.value_bits * numel
        tot["sparse_bits"] += nnz * (self.value_bits + index_bits)
        if self.wire_bits:
            tot["wire_bits"] += self.value_bits * numel if wire is None else int(wire.bits)
        if self._coded_field:
            tot[self._coded_field] += self._coded_size(direction, tensor, wire)
        key = (direction, None if self.entropy == "pooled" else int(client))
        hist = self._hists.setdefault(key, _Histogram())
        if counted is None:
            hist.add(binned)
        else:
            hist.add_counts(*counted[:3])

    def _coded_size(self, direction: str, values: torch.Tensor, wire) -> int:
        if wire is not None:
            return wire.coded_size(self.lossless)
        size = lambda: lossless_size(float32_bytes(values), self.lossless)  # noqa: E731
        return self._per_broadcast(self._coded_down, values, size) if direction == "down" else size()

    @staticmethod
    def _per_broadcast(cache: dict, tensor: torch.Tensor, compute):
        """compute(), or what it gave for this same downlink tensor, unchanged since, earlier in
        the round (a broadcast reaches every selected client: one tensor, recorded for each)."""
        version = _version(tensor)
        if version is not None:
            hit = cache.get(id(tensor))
            if hit is not None and hit[0] is tensor and hit[1] == version:
                return hit[2]
        value = compute()
        if version is not None:
            cache[id(tensor)] = (tensor, version, value)
        return value

    def end_round(self) -> dict[str, float]:
        """Close the open round: return its metrics and the cumulative ones, then start a
        new, empty round."""
        for d in DIRECTIONS:
            per_key = [h.entropy() for (hd, _), h in self._hists.items() if hd == d]
            # pooled: one histogram (or none); per_client: the mean over the round's clients
            self._round[d]["entropy"] = sum(per_key) / len(per_key) if per_key else 0.0
        out: dict[str, float] = {}
        for d in DIRECTIONS:
            for f in self.fields:
                self._cum[d][f] += self._round[d][f]
                out[f"{d}_{f}"] = self._round[d][f]
                out[f"cum_{d}_{f}"] = self._cum[d][f]
        self.rounds_closed += 1
        self._open_round()
        return out

    def state_dict(self) -> dict:
        """Cumulative totals and rounds closed (plain python values; the open round is not
        saved, a resumed run replays it). The settings are saved to refuse a mismatch."""
        return {
            "dim": self.dim,
            "entropy": self.entropy,
            "bin_width": self.bin_width,
            "value_bits": self.value_bits,
            "wire_bits": self.wire_bits,
            "lossless": self.lossless,
            "rounds_closed": self.rounds_closed,
            "cumulative": {d: dict(self._cum[d]) for d in DIRECTIONS},
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue the cumulative sums of a saved ledger made with the same settings.

        A state saved before wire bits and coded sizes existed (no such settings in it) is
        accepted: its messages were uncompressed, so cum wire bits = cum dense bits; its
        coded bytes are unknown (NaN from then on)."""
        old = "wire_bits" not in state
        for key in ("dim", "entropy", "bin_width", "value_bits", "wire_bits", "lossless"):
            if old and key in ("wire_bits", "lossless"):
                continue
            if state[key] != getattr(self, key):
                raise ValueError(
                    f"ledger state has {key}={state[key]!r} but this ledger has "
                    f"{key}={getattr(self, key)!r}; resume with the run's original settings"
                )
        if any(self._round[d]["messages"] for d in DIRECTIONS):
            raise RuntimeError("load_state_dict called with messages recorded in an open round")
        self.rounds_closed = int(state["rounds_closed"])
        self._cum = {d: dict(state["cumulative"][d]) for d in DIRECTIONS}
        if old:
            for d in DIRECTIONS:
                if self.wire_bits:
                    self._cum[d]["wire_bits"] = self._cum[d]["dense_bits"]
                if self._coded_field:
                    self._cum[d][self._coded_field] = float("nan")
