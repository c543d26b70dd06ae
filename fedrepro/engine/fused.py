"""One local SGD step of S clients at once, after the data gradient: penalties, clipping,
weight decay and the update of (S, d) parameters, in at most two passes over memory.

The step (the sequential executor's, engine/local.py), for each client i with coefficient
c_i = lr (0 for clients past their last step):

    t_i = g_i + mu_i (w_i - a_i) + l1_i sign(w_i - a_i) + lin_i     (local objective terms)
    s_i = min(1, clip / (||t_i|| + 1e-6))                           (clip_grad_norm_'s rule)
    w_i = (1 - c_i decay_i) w_i - c_i s_i t_i                       (decay added after clipping)

Written as torch operations this is up to ten passes over (S, d) arrays, which at MNIST's
d = 199 210 and 10 clients (8 MB each) cost more than the step's matrix products at batch 10
(FedElasticNet's paper setting). On the CPU a numba kernel does it in two passes (one when
nothing needs the norm), parallel over (client, chunk) pairs; elsewhere (a GPU, float64)
the torch form below runs. Both give the same numbers to float32 rounding (the kernel sums
the norm in chunks; tests/test_executors.py compares them).

Also here, for the batched executor's scaled path: `add_layer_bound`, the clipping bound of one
layer's gradient in one pass (a numba kernel on the CPU, its torch form elsewhere).
"""
from __future__ import annotations

import threading

import numpy as np
import torch

_CHUNK = 16384  # elements per (client, chunk) task: a few L1-sized slices per thread


def sgd_step(w: torch.Tensor, grad: torch.Tensor, coef: torch.Tensor, *, decay: torch.Tensor,
             mu: torch.Tensor, l1: torch.Tensor, anchors: torch.Tensor | None,
             linear: torch.Tensor | None, clip: float | None) -> None:
    """Updates w (S, d) in place from the data gradient `grad` (S, d; overwritten with the
    step's total gradient). coef, decay, mu, l1: (S,) per client; anchors (S, d) are given
    when any mu or l1 is nonzero (None skips those terms)."""
    sgd_stepper(w, grad, coef.unsqueeze(0), decay=decay, mu=mu, l1=l1, anchors=anchors, linear=linear,
                clip=clip)(0)


def sgd_stepper(w: torch.Tensor, grad: torch.Tensor, coefs: torch.Tensor, *, decay: torch.Tensor,
                mu: torch.Tensor, l1: torch.Tensor, anchors: torch.Tensor | None,
                linear: torch.Tensor | None, clip: float | None):
    """`step(t)`: sgd_step(w, grad, coefs[t], ...) for the steps t of a local run, coefs (T, S),
    with the arguments converted for the kernel once (at batch 10 a step's conversions cost about
    a tenth of its kernel)."""
    if w.device.type == "cpu" and w.dtype == torch.float32 and w.is_contiguous() and grad.is_contiguous():
        kernels = _kernels()
        if kernels is not None:
            _numba_threads()
            kernel, empty = kernels["sgd_step"], w.new_empty((0, 0)).numpy()
            w_np, g_np = w.numpy(), grad.numpy()
            a_np = anchors.contiguous().numpy() if anchors is not None else empty
            lin_np = linear.contiguous().numpy() if linear is not None else empty
            coef_np, decay_np, mu_np, l1_np = (v.to(torch.float32).contiguous().numpy()
                                               for v in (coefs, decay, mu, l1))
            bound = -1.0 if clip is None else float(clip)

            def step(t: int) -> None:
                kernel(w_np, g_np, a_np, lin_np, coef_np[t], decay_np, mu_np, l1_np, bound, _CHUNK)
            return step
    return lambda t: torch_sgd_step(w, grad, coefs[t], decay=decay, mu=mu, l1=l1, anchors=anchors,
                                    linear=linear, clip=clip)


def torch_sgd_step(w, grad, coef, *, decay, mu, l1, anchors, linear, clip) -> None:
    """The same step as torch operations (the reference, and the path off the CPU)."""
    col = lambda v: v.to(w.dtype)[:, None]  # noqa: E731  (no host sync: nothing is tested on values)
    if anchors is not None:
        diff = w - anchors
        grad.addcmul_(col(mu).expand_as(diff), diff)
        grad.addcmul_(col(l1).expand_as(diff), diff.sign_())
    if linear is not None:
        grad += linear
    c = col(coef)
    w.mul_(1 - c * col(decay))
    if clip is not None:
        c = c * torch.clamp(clip / (grad.norm(dim=1, keepdim=True) + 1e-6), max=1.0)
    w.addcmul_(c.expand_as(grad), grad, value=-1.0)


def add_layer_bound(acc: np.ndarray, dz: torch.Tensor, h: torch.Tensor | None = None,
                    h_norms: torch.Tensor | None = None) -> None:
    """acc (S,) float64 += (sum_b ||dz_b|| sqrt(||h_b||^2 + 1))^2 for each client: the square of an
    upper bound of the norm of one Linear layer's [weight | bias] gradient dz^T [h | 1] (Cauchy-Schwarz),
    dz (S, B, out) and h (S, B, in), or h_norms (S, B), sqrt(||h_b||^2 + 1) given. The batched
    executor's scaled path sums it over layers and compares with the clip every step: one pass of one
    call where the torch form is about seven kernels per layer (docs/performance.md)."""
    kernels = _kernels() if dz.device.type == "cpu" and dz.dtype == torch.float32 else None
    if kernels is not None:
        _numba_threads()
        kernels["layer_bound"](dz.numpy(), _EMPTY3 if h is None else h.numpy(),
                               _EMPTY2 if h_norms is None else h_norms.numpy(), acc)
        return
    if h_norms is None:
        h_norms = norm_with_one(torch.linalg.vector_norm(h, dim=2))
    per_client = torch.linalg.vecdot(torch.linalg.vector_norm(dz, dim=2), h_norms)
    acc += per_client.to(torch.float64).square().cpu().numpy()


def norm_with_one(norms: torch.Tensor) -> torch.Tensor:
    """sqrt(norms^2 + 1): the norm of an input row with the bias's constant 1 appended."""
    return torch.hypot(norms, torch.ones((), dtype=norms.dtype))


_EMPTY2, _EMPTY3 = np.empty((0, 0), np.float32), np.empty((0, 0, 0), np.float32)
_KERNELS: list = []  # [{name: compiled kernel} or None], filled on first use


def _numba_threads() -> None:
    """numba's thread count for this Python thread: torch's (numba keeps it per thread; setting it
    costs ~40 us, more than a small kernel, so it is set only when torch's count changed)."""
    want = torch.get_num_threads()
    if getattr(_THREADS_SET, "count", None) != want:
        import numba

        numba.set_num_threads(max(1, min(want, numba.config.NUMBA_NUM_THREADS)))
        _THREADS_SET.count = want


_THREADS_SET = threading.local()  # .count: the torch thread count numba was last set to, this thread


def _kernels() -> dict | None:
    """The compiled kernels by name, or None where numba is not installed (the torch forms run)."""
    if not _KERNELS:
        try:
            kernels = _compile()
        except ImportError:
            kernels = None
        else:
            # Starting numba's threads sets OpenMP's thread count to all cores, and its OpenMP
            # layer shares torch's runtime: put torch's count back (sharded processes run one
            # thread each). numba's own pool ("workqueue") was measured slower than both.
            threads = torch.get_num_threads()
            import numba

            numba.get_num_threads()
            torch.set_num_threads(threads)
        _KERNELS.append(kernels)
    return _KERNELS[0]


def _compile():
    import numpy as np
    from numba import njit, prange

    # reassoc lets the norm's sum vectorize; no 'nnan'/'ninf', so a diverging step still
    # leaves NaN / inf in w for the loop's divergence check.
    @njit(parallel=True, fastmath={"reassoc", "contract"}, cache=True, boundscheck=False)
    def kernel(w, g, a, lin, coef, decay, mu, l1, clip, chunk):  # pragma: no cover (compiled)
        s, d = w.shape
        chunks = (d + chunk - 1) // chunk
        has_a, has_lin = a.shape[0] > 0, lin.shape[0] > 0
        scale = np.ones(s, dtype=np.float32)
        if has_a or has_lin or clip > 0:
            part = np.zeros((s, chunks), dtype=np.float32)
            for task in prange(s * chunks):
                i, c = task // chunks, task % chunks
                lo, hi = c * chunk, min(d, (c + 1) * chunk)
                wi, gi = w[i, lo:hi], g[i, lo:hi]
                m, l = mu[i], l1[i]
                acc = np.float32(0.0)
                if has_a and has_lin:
                    ai, li = a[i, lo:hi], lin[i, lo:hi]
                    for j in range(hi - lo):
                        diff = wi[j] - ai[j]
                        t = gi[j] + m * diff + l * np.sign(diff) + li[j]
                        gi[j] = t
                        acc += t * t
                elif has_a:
                    ai = a[i, lo:hi]
                    for j in range(hi - lo):
                        diff = wi[j] - ai[j]
                        t = gi[j] + m * diff + l * np.sign(diff)
                        gi[j] = t
                        acc += t * t
                elif has_lin:
                    li = lin[i, lo:hi]
                    for j in range(hi - lo):
                        t = gi[j] + li[j]
                        gi[j] = t
                        acc += t * t
                else:
                    for j in range(hi - lo):
                        acc += gi[j] * gi[j]
                part[i, c] = acc
            if clip > 0:
                for i in range(s):
                    norm = np.sqrt(np.float64(part[i].sum()))
                    scale[i] = min(1.0, clip / (norm + 1e-6))
        for task in prange(s * chunks):
            i, c = task // chunks, task % chunks
            lo, hi = c * chunk, min(d, (c + 1) * chunk)
            keep = np.float32(1.0) - coef[i] * decay[i]
            step = coef[i] * scale[i]
            wi, gi = w[i, lo:hi], g[i, lo:hi]
            for j in range(hi - lo):
                wi[j] = keep * wi[j] - step * gi[j]

    @njit(parallel=True, fastmath={"reassoc", "contract"}, cache=True, boundscheck=False)
    def layer_bound(dz, h, hn, acc):  # pragma: no cover (compiled)
        s, b, o = dz.shape
        use_h = h.shape[0] > 0
        for i in prange(s):
            total = 0.0
            for r in range(b):
                a = np.float32(0.0)
                for j in range(o):
                    a += dz[i, r, j] * dz[i, r, j]
                if use_h:
                    c = np.float32(0.0)
                    for j in range(h.shape[2]):
                        c += h[i, r, j] * h[i, r, j]
                    h_norm = np.sqrt(np.float64(c) + 1.0)
                else:
                    h_norm = np.float64(hn[i, r])
                total += np.sqrt(np.float64(a)) * h_norm
            acc[i] += total * total

    return {"sgd_step": kernel, "layer_bound": layer_bound}
