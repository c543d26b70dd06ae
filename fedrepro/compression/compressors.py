"""The compressor library: what a message becomes on the wire, and what that costs.

A compressor C maps a flat vector x in R^d to C(x) (same shape and dtype: the values the
receiver decodes). Each says

    unbiased      E[C(x)] = x
    omega(d)      the variance factor of an unbiased C: E||C(x) - x||^2 <= omega ||x||^2
                  (math.inf for the biased ones, whose error is not of that form)
    bits(d, ...)  the bits the message puts on the wire under its `encoding` (below)
    compress(x, generator) -> Compressed(values, bits, symbols)

Randomness comes only from the torch.Generator passed in; the caller (channel.py) seeds one
per (run seed, direction, round, client, message name), so runs are reproducible and resume
exactly, and the receiver can regenerate any random selection (shared randomness: Rand-k's
indices and Bernoulli's masks are not sent). Values are float32 on the wire (FLOAT_BITS); a
vector's norm or scale costs one float. ceil(log2 d) = `index_bits(d)`.

| compressor  | C(x)                                                        | unbiased | omega              | wire bits |
|-------------|-------------------------------------------------------------|----------|--------------------|-----------|
| identity    | x                                                           | yes      | 0                  | 32 d |
| natural     | sign(x_i) 2^floor(log2|x_i|) or 2^ceil, up with p = |x_i|/2^floor - 1 | yes | 1/8     | 9 d: sign + 8-bit exponent (float32's; 0 codes zero) |
| qsgd        | ||x||_2 sign(x_i) l_i / s, l_i = floor(s|x_i|/||x||) + Bernoulli(frac) | yes | min(d/s^2, sqrt(d)/s) | 32 (norm) + sum_i [gamma(l_i + 1) + (l_i > 0)] |
| terngrad    | max|x| sign(x_i) b_i, b_i ~ Bernoulli(|x_i| / max|x|)        | yes      | sqrt(d) - 1        | 32 (scale) + 2 d |
| bernoulli   | x_i / q w.p. q else 0 (draw=coordinate); x / q w.p. q else 0 (draw=vector) | yes | 1/q - 1 | 32 per kept value (mask from the shared seed); vector: 32 d or 0 |
| topk        | the k largest |x_i| kept, unscaled                           | no       | inf (contraction 1 - k/d) | k (32 + ceil(log2 d)) |
| randk       | k uniform coordinates, scaled d/k                            | yes      | d/k - 1            | 32 k (indices from the shared seed) |
| threshold   | x_i if |x_i| > epsilon else 0 (FedElasticNet)                | no       | inf                | 1 + min(32 + nnz ceil(log2 d), d) + 32 nnz |
| sign        | (||x||_1 / d) sign(x_i), sign(0) = + (EF-SignSGD's scaled sign) | no     | inf (contraction 1 - ||x||_1^2 / (d ||x||^2)) | 32 (scale) + d |

gamma(n) = 2 floor(log2 n) + 1 is the Elias-gamma length of n >= 1 (a zero level costs 1 bit,
a nonzero level l costs gamma(l + 1) plus its sign bit): positions are implicit. Threshold's
positions go as whichever is shorter, a 32-bit count plus nnz indices or a d-bit mask, after
one bit saying which. docs/compression.md derives each omega and names the choices.

`Compressed.symbols()` gives the same message as whole-byte symbols for the lossless coder
(codec.py): natural: one exponent byte a coordinate + the packed sign bits; qsgd: the norm,
one level a coordinate (uint8 for s <= 255, else uint16) + the packed signs of nonzero levels;
terngrad: the scale + one trit byte a coordinate; sign: the scale + the packed sign bits; sparse ones: sorted uint32 indices (or the
packed mask) + float32 values; dense floats as float32.
"""
from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np
import torch

from fedrepro.compression.codec import float32_bytes, lossless_size, numpy_of

FLOAT_BITS = 32
_MIN_NORMAL = 2.0 ** -126  # float32's smallest normal number: the 8-bit exponent's smallest power


def index_bits(d: int) -> int:
    """ceil(log2 d): the bits of one coordinate index (0 for d = 1)."""
    return (int(d) - 1).bit_length()


def elias_gamma_bits(n: torch.Tensor) -> torch.Tensor:
    """Elias-gamma code lengths 2 floor(log2 n) + 1 of integers n >= 1 (int64 tensor)."""
    _, e = torch.frexp(n.to(torch.float64))  # n = m 2^e, m in [0.5, 1): floor(log2 n) = e - 1
    return 2 * (e.to(torch.int64) - 1) + 1


class Compressed:
    """One compressed message: the decoded `values`, its wire `bits`, and (lazily) the
    encoded bytes and their size after a lossless coder (cached: a broadcast reaching many
    clients is coded once)."""

    __slots__ = ("values", "bits", "_symbols", "_sizes")

    def __init__(self, values: torch.Tensor, bits: int, symbols: Callable[[], bytes]):
        self.values, self.bits, self._symbols, self._sizes = values, int(bits), symbols, {}

    def symbols(self) -> bytes:
        return self._symbols()

    def coded_size(self, codec: str) -> int:
        """Bytes after the lossless coder; 0 for a message with nothing on the wire."""
        if codec not in self._sizes:
            data = self.symbols()
            self._sizes[codec] = lossless_size(data, codec) if data else 0
        return self._sizes[codec]


def _uniform(x: torch.Tensor, generator: Optional[torch.Generator], n: Optional[int] = None) -> torch.Tensor:
    shape = x.shape if n is None else (n,)
    return torch.rand(shape, generator=generator, dtype=x.dtype, device=x.device)


def _packed_signs(negative: torch.Tensor) -> bytes:
    return np.packbits(numpy_of(negative).astype(np.uint8)).tobytes()


def _uint32(indices: torch.Tensor) -> bytes:
    return numpy_of(indices).astype("<u4").tobytes()


class Compressor:
    name = "base"
    unbiased = True
    encoding = ""

    def omega(self, d: int) -> float:
        """Variance factor: E||C(x) - x||^2 <= omega ||x||^2 (inf when biased)."""
        raise NotImplementedError

    def bits(self, d: int, **stats) -> int:
        """Wire bits of one message of dimension d (stats: what the count depends on)."""
        raise NotImplementedError

    def compress(self, x: torch.Tensor, generator: Optional[torch.Generator] = None) -> Compressed:
        raise NotImplementedError

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({params})"


class Identity(Compressor):
    name = "none"
    encoding = "dense: 32-bit float per coordinate"

    def omega(self, d):
        return 0.0

    def bits(self, d, **stats):
        return FLOAT_BITS * d

    def compress(self, x, generator=None):
        return Compressed(x, self.bits(x.numel()), lambda: float32_bytes(x))


class Natural(Compressor):
    """Natural compression (Horvath et al. 2019): stochastic rounding of |x_i| to one of the
    two nearest powers of two, unbiased. Below float32's smallest normal 2^-126 (which the
    8-bit exponent cannot go under) the two neighbours are 0 and 2^-126."""

    name = "natural"
    encoding = "sign bit + 8-bit exponent (float32's biased exponent, 0 codes zero): 9 bits a coordinate"

    def omega(self, d):
        return 1.0 / 8.0

    def bits(self, d, **stats):
        return 9 * d

    def compress(self, x, generator=None):
        values = self._float32(x, generator) if x.dtype == torch.float32 else self._generic(x, generator)

        def symbols():
            raw = numpy_of(values.to(torch.float32)).view(np.uint32)
            exponent = ((raw >> 23) & 0xFF).astype(np.uint8)
            return exponent.tobytes() + np.packbits((raw >> 31).astype(np.uint8)).tobytes()

        return Compressed(values, self.bits(x.numel()), symbols)

    @staticmethod
    def _float32(x, generator):
        """On float32's bits: sign and exponent kept (2^floor(log2|x|), or 0 below 2^-126), one
        exponent up with probability mantissa / 2^23 = (|x| - low) / low (below 2^-126:
        |x| / 2^-126). The same draws and results as `_generic`, three times faster."""
        bits = x.detach().contiguous().view(torch.int32)
        low = bits & -(1 << 23)  # sign + exponent, mantissa cleared
        p_up = (bits & ((1 << 23) - 1)).to(torch.float32) * 2.0 ** -23
        return torch.where(_uniform(x, generator) < p_up, low + (1 << 23), low).view(torch.float32)

    @staticmethod
    def _generic(x, generator):
        a = x.abs()
        mant, exp = torch.frexp(a)  # a = mant 2^exp, mant in [0.5, 1)
        low = torch.ldexp(torch.ones_like(a), exp - 1)  # 2^floor(log2 a)
        p_up = 2 * mant - 1  # (a - low) / low
        tiny = a < _MIN_NORMAL  # zero included
        low = torch.where(tiny, torch.zeros_like(a), low)
        high = torch.where(tiny, torch.full_like(a, _MIN_NORMAL), 2 * low)
        p_up = torch.where(tiny, a / _MIN_NORMAL, p_up)
        mag = torch.where(_uniform(x, generator) < p_up, high, low)
        return torch.where(x < 0, -mag, mag)


class QSGD(Compressor):
    """Random dithering / QSGD with s levels on |x_i| / ||x||_2 (Alistarh et al. 2017):
    l_i in {0, ..., s} rounded stochastically, C(x)_i = ||x||_2 sign(x_i) l_i / s."""

    name = "qsgd"
    encoding = ("32-bit l2 norm, then per coordinate Elias-gamma(level + 1) and, for a nonzero "
                "level, its sign bit")

    def __init__(self, levels: int):
        if int(levels) != levels or levels < 1:
            raise ValueError(f"qsgd needs levels s >= 1, got {levels}")
        self.levels = int(levels)

    def omega(self, d):
        s = self.levels
        return min(d / s ** 2, math.sqrt(d) / s)

    def bits(self, d, levels: torch.Tensor = None, **stats):
        if levels is None:
            raise ValueError("qsgd's bits depend on the levels drawn: bits(d, levels=...)")
        levels = levels.to(torch.int64)
        return FLOAT_BITS + int(elias_gamma_bits(levels + 1).sum()) + int(torch.count_nonzero(levels))

    def compress(self, x, generator=None):
        s = self.levels
        norm = torch.linalg.vector_norm(x)
        if float(norm) == 0.0:
            level = torch.zeros(x.shape, dtype=torch.int64, device=x.device)
            values = torch.zeros_like(x)
        else:
            r = x.abs() * (s / norm)
            low = r.floor()
            level = (low + (_uniform(x, generator) < r - low)).clamp_(max=s)
            values = torch.where(x < 0, -level, level) * (norm / s)
            level = level.to(torch.int64)

        def symbols():
            dtype = np.uint8 if s <= 255 else np.dtype("<u2")
            head = np.float32(float(norm)).astype("<f4").tobytes()
            return head + numpy_of(level).astype(dtype).tobytes() + _packed_signs((x < 0)[level > 0])

        return Compressed(values, self.bits(x.numel(), levels=level), symbols)


class TernGrad(Compressor):
    """TernGrad (Wen et al. 2017) without its gradient clipping: C(x)_i = max|x| sign(x_i) b_i,
    b_i ~ Bernoulli(|x_i| / max|x|)."""

    name = "terngrad"
    encoding = "32-bit scale max|x| + 2 bits a coordinate (a trit in {-1, 0, +1})"

    def omega(self, d):
        # E||C(x) - x||^2 = max|x| ||x||_1 - ||x||^2 <= (sqrt(d) - 1) ||x||^2
        return math.sqrt(d) - 1.0

    def bits(self, d, **stats):
        return FLOAT_BITS + 2 * d

    def compress(self, x, generator=None):
        scale = x.abs().max() if x.numel() else torch.zeros((), dtype=x.dtype, device=x.device)
        if float(scale) == 0.0:
            keep = torch.zeros(x.shape, dtype=torch.bool, device=x.device)
        else:
            keep = _uniform(x, generator) < x.abs() / scale
        signed = torch.where(x < 0, -scale, scale)
        values = torch.where(keep, signed, torch.zeros_like(x))

        def symbols():
            trit = keep.to(torch.uint8) * torch.where(x < 0, 2, 1).to(torch.uint8)
            return np.float32(float(scale)).astype("<f4").tobytes() + numpy_of(trit).tobytes()

        return Compressed(values, self.bits(x.numel()), symbols)


class Bernoulli(Compressor):
    """Bernoulli sparsification (Khirirat et al. 2018) with keep probability q, scaled by 1/q.
    draw=coordinate: each coordinate kept independently; draw=vector: one draw for the whole
    message (x / q, or the zero message, which is not sent) -- the authors' framework."""

    name = "bernoulli"
    DRAWS = ("vector", "coordinate")

    def __init__(self, q: float, draw: str = "vector"):
        if not 0 < q <= 1:
            raise ValueError(f"bernoulli needs 0 < q <= 1, got {q}")
        if draw not in self.DRAWS:
            raise ValueError(f"bernoulli draw must be one of {self.DRAWS}, got {draw!r}")
        self.q, self.draw = float(q), draw

    @property
    def encoding(self) -> str:
        if self.draw == "coordinate":
            return "the kept values as 32-bit floats; the mask comes from the shared seed"
        return ("the whole vector as 32-bit floats when kept; nothing when dropped (the receiver "
                "knows from the shared seed)")

    def omega(self, d):
        return 1.0 / self.q - 1.0

    def bits(self, d, kept: int = None, **stats):
        if kept is None:
            raise ValueError("bernoulli's bits depend on the draw: bits(d, kept=...)")
        return FLOAT_BITS * (int(kept) * (d if self.draw == "vector" else 1))

    def compress(self, x, generator=None):
        if self.draw == "vector":
            kept = bool(_uniform(x, generator, 1)[0] < self.q)
            values = x / self.q if kept else torch.zeros_like(x)
            return Compressed(values, self.bits(x.numel(), kept=kept),
                              lambda: float32_bytes(values) if kept else b"")
        mask = _uniform(x, generator) < self.q
        values = torch.where(mask, x / self.q, torch.zeros_like(x))
        kept = int(torch.count_nonzero(mask))
        return Compressed(values, self.bits(x.numel(), kept=kept), lambda: float32_bytes(values[mask]))


class _KSparse(Compressor):
    def __init__(self, k: Optional[int] = None, fraction: Optional[float] = None):
        if k is None and fraction is None:
            raise ValueError(f"{self.name} needs k or a fraction of the coordinates")
        if k is not None and (int(k) != k or k < 1):
            raise ValueError(f"{self.name} needs k >= 1, got {k}")
        if k is None and not 0 < fraction <= 1:
            raise ValueError(f"{self.name} needs 0 < fraction <= 1, got {fraction}")
        self.k, self.fraction = (None if k is None else int(k)), (None if k is not None else float(fraction))

    def k_for(self, d: int) -> int:
        """k for a message of d coordinates: k itself, else ceil(fraction d); at most d."""
        k = self.k if self.k is not None else max(1, math.ceil(self.fraction * d - 1e-9))
        return min(k, d)


class TopK(_KSparse):
    """Top-k (Aji & Heafield 2017): the k largest magnitudes, unscaled (biased; a
    contraction: ||C(x) - x||^2 <= (1 - k/d) ||x||^2). Ties: torch.topk's choice."""

    name = "topk"
    unbiased = False
    encoding = "k x (32-bit value + ceil(log2 d)-bit index)"

    def omega(self, d):
        return math.inf

    def contraction(self, d: int) -> float:
        return 1.0 - self.k_for(d) / d

    def bits(self, d, **stats):
        return self.k_for(d) * (FLOAT_BITS + index_bits(d))

    def compress(self, x, generator=None):
        d = x.numel()
        idx = torch.topk(x.abs(), self.k_for(d), sorted=False).indices.sort().values
        values = torch.zeros_like(x)
        values[idx] = x[idx]
        return Compressed(values, self.bits(d), lambda: _uint32(idx) + float32_bytes(x[idx]))


class RandK(_KSparse):
    """Rand-k: k coordinates drawn uniformly without replacement, scaled by d/k (unbiased)."""

    name = "randk"
    encoding = "k x 32-bit value (the indices come from the shared seed)"

    def omega(self, d):
        return d / self.k_for(d) - 1.0

    def bits(self, d, **stats):
        return FLOAT_BITS * self.k_for(d)

    def compress(self, x, generator=None):
        d = x.numel()
        k = self.k_for(d)
        idx = torch.randperm(d, generator=generator, device=x.device)[:k]
        values = torch.zeros_like(x)
        values[idx] = x[idx] * (d / k)
        return Compressed(values, self.bits(d), lambda: float32_bytes(values[idx]))


class Threshold(Compressor):
    """FedElasticNet's epsilon threshold: entries with |x_i| <= epsilon are sent as 0 (biased)."""

    name = "threshold"
    unbiased = False
    encoding = ("1 bit choosing the position format, then a 32-bit count + ceil(log2 d)-bit index a "
                "nonzero, or a d-bit mask (whichever is shorter); 32-bit value a nonzero")

    def __init__(self, epsilon: float):
        if not epsilon >= 0:
            raise ValueError(f"threshold needs epsilon >= 0, got {epsilon}")
        self.epsilon = float(epsilon)

    def omega(self, d):
        return math.inf

    def bits(self, d, nnz: int = None, **stats):
        if nnz is None:
            raise ValueError("threshold's bits depend on the nonzeros: bits(d, nnz=...)")
        return 1 + min(FLOAT_BITS + nnz * index_bits(d), d) + FLOAT_BITS * nnz

    def compress(self, x, generator=None):
        d = x.numel()
        keep = x.abs() > self.epsilon
        values = torch.where(keep, x, torch.zeros_like(x))
        nnz = int(torch.count_nonzero(values))

        def symbols():
            nonzero = values != 0
            if FLOAT_BITS + nnz * index_bits(d) < d:
                idx = torch.nonzero(nonzero).reshape(-1)
                head = b"\x00" + np.uint32(nnz).astype("<u4").tobytes() + _uint32(idx)
            else:
                head = b"\x01" + np.packbits(numpy_of(nonzero).astype(np.uint8)).tobytes()
            return head + float32_bytes(values[nonzero])

        return Compressed(values, self.bits(d, nnz=nnz), symbols)


class Sign(Compressor):
    """Scaled sign, as in EF-SignSGD (Karimireddy et al. 2019, "Error feedback fixes SignSGD"):
    C(x) = (||x||_1 / d) sign(x), one scale for the whole message: the mean absolute value.
    That scale is the one minimising ||a sign(x) - x||^2 over a, so ||C(x) - x||^2 =
    ||x||^2 - ||x||_1^2 / d (a contraction; biased, so use it with error feedback). One bit a
    coordinate cannot say 0: a zero coordinate goes as +, i.e. +scale (the same error formula
    holds, its term being 0 in ||x||_1)."""

    name = "sign"
    unbiased = False
    encoding = "32-bit scale ||x||_1 / d + 1 sign bit a coordinate (0 goes as +)"

    def omega(self, d):
        return math.inf

    def contraction(self, x: torch.Tensor) -> float:
        """||C(x) - x||^2 / ||x||^2 = 1 - ||x||_1^2 / (d ||x||^2) (1 - 1/d at worst)."""
        return 1.0 - float(x.abs().sum()) ** 2 / (x.numel() * float(x.square().sum()))

    def bits(self, d, **stats):
        return FLOAT_BITS + d

    def compress(self, x, generator=None):
        d = x.numel()
        scale = x.abs().sum() / d if d else torch.zeros((), dtype=x.dtype, device=x.device)
        negative = x < 0
        values = torch.where(negative, -scale, scale).expand_as(x).clone()

        def symbols():
            return np.float32(float(scale)).astype("<f4").tobytes() + _packed_signs(negative)

        return Compressed(values, self.bits(d), symbols)


# config name -> kind; the choices of compressor.name / compressor.downlink (config.py keeps the
# same tuple as COMPRESSOR_CHOICES; a test checks they agree)
KINDS = ("none", "natural", "qsgd", "terngrad", "bernoulli", "topk", "randk", "threshold", "sign")


def make_compressor(kind: str, cfg) -> Compressor:
    """The compressor `kind` with its parameters from a CompressorConfig node."""
    if kind == "none":
        return Identity()
    if kind == "natural":
        return Natural()
    if kind == "qsgd":
        return QSGD(cfg.levels)
    if kind == "terngrad":
        return TernGrad()
    if kind == "bernoulli":
        return Bernoulli(cfg.keep_prob, cfg.bernoulli_draw)
    if kind in ("topk", "randk"):
        cls = TopK if kind == "topk" else RandK
        return cls(k=cfg.k) if cfg.k is not None else cls(fraction=cfg.k_fraction)
    if kind == "threshold":
        return Threshold(cfg.epsilon)
    if kind == "sign":
        return Sign()
    raise ValueError(f"compressor {kind!r} is unknown; choose one of: {', '.join(KINDS)}")
