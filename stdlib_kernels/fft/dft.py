"""Discrete Fourier transforms on the Tensor engine: ``_fft_c2c``, ``_fft_r2c``, ``_fft_c2r`` (every
``torch.fft`` function and ``torch.stft`` reach these), and complex ``conj_physical``.

A complex tensor on ``trn`` is plain device memory (complex64 = interleaved fp32 pairs); the kernels
see its real and imaginary parts as two strided fp32 planes (``view_as_real`` views, stride 2).

A length-``n`` DFT along a dim is a matmul with twiddle matrices, on the Tensor engine as on a real
Trainium: ``Yr = Xr @ C + Xi @ S``, ``Yi = Xi @ C - Xr @ S`` (``C = cos``, ``S = sin`` of
``2 pi j k / n``; the inverse flips the sign of ``S``), four matmuls per tile accumulated in PSUM. The
signal is moved to the last dim by a strided view (never a copy); the kernel loads it transposed
(signal index on the partitions = the contraction dim), batch rows on the free dim.

Twiddles are built on the device by a kernel (:func:`twiddle`) in fp32 from the exact integer
``j * k mod n``, reduced to an angle in ``[-pi/4, pi/4]`` plus a quadrant, so ``cos``/``sin`` are
accurate to an ulp and exact at multiples of ``pi/2``. They are cached per size.

Sizes above :data:`DIRECT_MAX` factor as ``n = n1 * n2`` (Cooley-Tukey, "four-step"): a DFT of size
``n1`` along the strided view ``x[n2 * j1 + j2]``, the twiddle ``exp(-+2 pi i j2 k1 / n)`` multiplied in
the same kernel before the store, then a DFT of size ``n2`` (recursively factored) written to
``y[k1 + n1 * k2]`` through a strided view. The cost per element is ``O(n1 + n2)``, not ``O(n)``.
Sizes with no useful factor use one matrix up to :data:`PRIME_MAX` and Bluestein's chirp-z algorithm
(:mod:`stdlib_kernels.fft.complex_ops`) above.

``r2c`` is the DFT of a real signal (one-sided: the first ``n // 2 + 1`` outputs; for a factored size the
second step computes only those, no full transform and crop); ``c2r`` of a
Hermitian half spectrum ``X[0 .. n // 2]`` is ``x[j] = sum_k w_k (Xr[k] cos - Xi[k] sin)``
(``w_0 = w_{n/2} = 1``, else 2: the imaginary parts of ``X[0]`` and ``X[n/2]`` are ignored, as
pocketfft does). Multi-dim transforms run one dim after another through device temporaries;
``normalization`` (0: none, 1: ``1/sqrt(N)``, 2: ``1/N``) is fused into the last kernel.

Example:
    >>> x = torch.randn(4096, 1024).to("trn")
    >>> torch.fft.rfft(x), torch.fft.fft2(x.to(torch.complex64)), torch.fft.irfft(torch.fft.rfft(x))  # doctest: +SKIP
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Sequence

import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.fft import complex_ops as FC
from stdlib_kernels.fft import stockham as ST
from stdlib_kernels.fft.complex_ops import complex_mul, conj_physical, cos_sin, planes  # noqa: F401 - re-exported
from trnlang.device import decline, lowering, memory

#: Sizes up to this are one matmul with an ``[n, n]`` twiddle matrix.
DIRECT_MAX = 256
#: Sizes with no factor pair are one matmul up to this size (three ``[n, n]`` fp32 matrices), Bluestein above.
PRIME_MAX = 1024
#: Cached twiddle matrices (bytes) before the least recently used are dropped.
CACHE_BYTES = 64 << 20
_F32 = torch.float32
_C64 = torch.complex64


# ---------------------------------------------------------------------------------------------- kernels
@trn.kernel
def twiddle(c, s, ns, n, weighted):
    """``c[j, k] = cos(2 pi (j k mod n) / n)``, ``s = sin``, ``ns = -sin`` for the rows/cols of ``c [R, K]``.

    ``weighted``: rows scaled by the Hermitian weights of ``c2r`` (1 for ``j = 0`` and ``2 j = n``, else 2).
    """
    nr, nc = c.shape
    p, f = min(128, nr), min(512, nc)
    for i in tl.affine_range(tl.cdiv(nr, p)):
        rows = i * p + tl.arange(p)[:, None]
        for j in tl.affine_range(tl.cdiv(nc, f)):
            cols = j * f + tl.arange(f)[None, :]
            jj = isa.iota(rows + 0 * cols, tl.int32)
            kk = isa.iota(cols + 0 * rows, tl.int32)
            cv, sv = cos_sin(tl.fmod(jj * kk, n), n)
            if weighted:
                w = tl.where((jj == 0) | (jj * 2 == n), 1.0, 2.0)
                cv, sv = cv * w, sv * w
            m = (rows < nr) & (cols < nc)
            tl.store(c[rows, cols], cv, mask=m)
            tl.store(s[rows, cols], sv, mask=m)
            tl.store(ns[rows, cols], -sv, mask=m)


@trn.kernel
def dft(xr, xi, wc, wa, wb, yr, yi, tc, ts, scale):
    """``y[a, r, :] = x[a, r, :] @ W`` for ``x [A, R, K]``, ``y [A, R, M]``, twiddles ``[K, M]``:
    ``Yr = Xr @ wc + Xi @ wa``, ``Yi = Xi @ wc + Xr @ wb`` (``xi`` None: a real signal; ``yi`` None: the real part
    only). Then ``Y *= tc + i ts`` (``[R, M]``, None: none) and ``Y *= scale`` before the store.
    """
    a_dim, r_dim, k_dim = xr.shape
    m_dim = yr.shape[-1]
    tr, tk, tm = min(128, r_dim), min(128, k_dim), min(512, m_dim)
    rag_r, rag_k, rag_m = r_dim % tr != 0, k_dim % tk != 0, m_dim % tm != 0
    for a in tl.affine_range(a_dim):
        for r in tl.affine_range(tl.cdiv(r_dim, tr)):
            rf = r * tr + tl.arange(tr)[None, :]
            rp = r * tr + tl.arange(tr)[:, None]
            for mi in tl.affine_range(tl.cdiv(m_dim, tm)):
                cols = mi * tm + tl.arange(tm)[None, :]
                accr = tl.zeros((tr, tm), tl.float32, buffer=tl.psum)
                acci = tl.zeros((tr, tm), tl.float32, buffer=tl.psum) if yi is not None else None
                for k in tl.affine_range(tl.cdiv(k_dim, tk)):
                    kp = k * tk + tl.arange(tk)[:, None]
                    mx = ((kp < k_dim) & (rf < r_dim)) if (rag_k or rag_r) else None
                    mw = ((kp < k_dim) & (cols < m_dim)) if (rag_k or rag_m) else None
                    xrt = tl.load(xr[a, rf, kp], mask=mx)  # [K, R]: the signal on the partitions
                    wct = tl.load(wc[kp, cols], mask=mw)
                    accr += tl.matmul(xrt, wct, transpose_x=True)
                    if xi is not None:
                        xit = tl.load(xi[a, rf, kp], mask=mx)
                        accr += tl.matmul(xit, tl.load(wa[kp, cols], mask=mw), transpose_x=True)
                        if yi is not None:
                            acci += tl.matmul(xit, wct, transpose_x=True)
                    if yi is not None:
                        acci += tl.matmul(xrt, tl.load(wb[kp, cols], mask=mw), transpose_x=True)
                mo = ((rp < r_dim) & (cols < m_dim)) if (rag_r or rag_m) else None
                re, im = accr, acci
                if tc is not None:
                    twc = tl.load(tc[rp, cols], mask=mo)
                    tws = tl.load(ts[rp, cols], mask=mo)
                    re, im = accr * twc - acci * tws, accr * tws + acci * twc
                if scale != 1.0:
                    re = re * scale
                    im = im * scale if yi is not None else None
                tl.store(yr[a, rp, cols], re, mask=mo)
                if yi is not None:
                    tl.store(yi[a, rp, cols], im, mask=mo)


@trn.kernel
def hermitian_pad(xr, xi, zr, zi, n):
    """``z[.., k] = w_k x[.., k]`` for ``k < m`` (x's length), 0 up to ``n`` (z's length); w as in :func:`twiddle`."""
    a_dim, r_dim, m_dim = xr.shape
    p, f = min(128, r_dim), min(512, n)
    for a in tl.affine_range(a_dim):
        for i in tl.affine_range(tl.cdiv(r_dim, p)):
            rows = i * p + tl.arange(p)[:, None]
            for j in tl.affine_range(tl.cdiv(n, f)):
                cols = j * f + tl.arange(f)[None, :]
                kk = isa.iota(cols + 0 * rows, tl.int32)
                w = tl.where((kk == 0) | (kk * 2 == n), 1.0, 2.0)
                mi = (rows < r_dim) & (cols < m_dim)
                mo = (rows < r_dim) & (cols < n)
                tl.store(zr[a, rows, cols], tl.load(xr[a, rows, cols], mask=mi) * w, mask=mo)
                tl.store(zi[a, rows, cols], tl.load(xi[a, rows, cols], mask=mi) * w, mask=mo)


@trn.kernel
def copy3(x, y):
    """``y[...] = x`` over ``[A, R, L]`` views (a crop of a temporary into an output)."""
    a_dim, r_dim, l_dim = y.shape
    p, f = min(128, r_dim), min(U.FREE_CHUNK, l_dim)
    for a in tl.affine_range(a_dim):
        for i in tl.affine_range(tl.cdiv(r_dim, p)):
            rows = i * p + tl.arange(p)[:, None]
            for j in tl.affine_range(tl.cdiv(l_dim, f)):
                cols = j * f + tl.arange(f)[None, :]
                m = (rows < r_dim) & (cols < l_dim)
                tl.store(y[a, rows, cols], tl.load(x[a, rows, cols], mask=m), mask=m)


# ---------------------------------------------------------------------------------------------- twiddles
_MATS: OrderedDict[tuple[int, int, int, bool], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = OrderedDict()


def mats(n: int, rows: int, cols: int, weighted: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Cached device twiddles ``(cos, sin, -sin)`` of ``2 pi (j k mod n) / n``, each ``[rows, cols]``."""
    key = (n, rows, cols, weighted)
    hit = _MATS.get(key)
    if hit is not None:
        _MATS.move_to_end(key)
        return hit
    ms = tuple(memory.empty((rows, cols), _F32) for _ in range(3))
    twiddle(ms[0], ms[1], ms[2], n, weighted)
    _MATS[key] = ms  # type: ignore[assignment]
    total = sum(3 * k[1] * k[2] * 4 for k in _MATS)
    while total > CACHE_BYTES and len(_MATS) > 1:
        old, _ = _MATS.popitem(last=False)
        total -= 3 * old[1] * old[2] * 4
    return ms  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------- planning
def plan(n: int) -> tuple[int, int] | None:
    """``(n1, n2)`` with ``n = n1 * n2`` for a Cooley-Tukey step (n1: the largest factor <= sqrt(n) and
    <= DIRECT_MAX), or None for one matmul."""
    if n <= DIRECT_MAX:
        return None
    best = 1
    for d in range(2, min(math.isqrt(n), DIRECT_MAX) + 1):
        if n % d == 0:
            best = d
    return (best, n // best) if best > 1 else None


def supported(n: int) -> bool:
    """A transform of size ``n`` runs natively: every factor left after the Cooley-Tukey steps is at most
    :data:`PRIME_MAX` (one matmul) or :data:`~stdlib_kernels.fft.complex_ops.BLUESTEIN_MAX` (Bluestein)."""
    if not 1 <= n < (1 << 28):  # the twiddles' integer arithmetic (4 j k mod n) stays within int32
        return False
    p = plan(n)
    if p is None:
        return n <= max(PRIME_MAX, FC.BLUESTEIN_MAX)
    return supported(p[1])


# ---------------------------------------------------------------------------------------------- launching
def _split(views: Sequence[torch.Tensor | None], keep_last: bool) -> list[list[torch.Tensor | None]]:
    """Views ``[*B, L_k]`` (a common batch shape B) as lists of ``[A, R, L_k]`` views, one list per launch.

    Batch dims contiguous in every view merge; more than two remaining loop on the host. ``keep_last``: the
    last batch dim stays R on its own (a per-row twiddle is indexed by it).
    """
    live = [v for v in views if v is not None]
    batch = tuple(live[0].shape[:-1])
    nb = len(batch)
    head = batch[:-1] if keep_last and nb else batch
    sh, sts = U.coalesce(head, [list(v.stride()[:len(head)]) for v in live])
    if keep_last and nb:
        sh = sh + [batch[-1]]
        sts = [s + [v.stride()[nb - 1]] for s, v in zip(sts, live)]
    while len(sh) < 2:
        sh, sts = [1] + sh, [[0] + s for s in sts]
    outer, inner = sh[:-2], sh[-2:]
    import itertools

    out = []
    for idx in itertools.product(*[range(k) for k in outer]):
        it = iter(range(len(live)))
        row: list[torch.Tensor | None] = []
        for v in views:
            if v is None:
                row.append(None)
                continue
            k = next(it)
            off = v.storage_offset() + sum(i * sts[k][d] for d, i in enumerate(idx))
            row.append(U.view(v, (*inner, v.shape[-1]), (*sts[k][len(outer):], v.stride()[-1]), off))
        out.append(row)
    return out


def _row_parts(a: int, r: int, work: int) -> list[tuple[slice, slice]]:
    """Disjoint (A, R) blocks, one per thread, for a big launch."""
    threads = U.num_threads()
    if threads == 1 or work < 16 * U.PARALLEL_MIN_WORK:
        return [(slice(None), slice(None))]
    if a >= threads:
        return [(slice(lo, hi), slice(None)) for lo, hi in U.chunks(a, threads, 1)]
    if r >= 256:
        return [(slice(None), slice(lo, hi)) for lo, hi in U.chunks(r, threads, 128)]
    return [(slice(None), slice(None))]


def launch_dft(xr: torch.Tensor, xi: torch.Tensor | None, w: tuple[Any, Any, Any], yr: torch.Tensor,
               yi: torch.Tensor | None, tw: tuple[Any, Any] | None, scale: float) -> None:
    """One :func:`dft` launch per 3-D piece of the batch (split across host threads when big)."""
    wc, wa, wb = w
    tc, ts = tw if tw is not None else (None, None)
    k, m = xr.shape[-1], yr.shape[-1]
    calls = []
    for vr, vi, wr, wi in _split([xr, xi, yr, yi], keep_last=tw is not None):
        a, r = wr.shape[0], wr.shape[1]
        for sa, sr in _row_parts(a, r, a * r * k * m):
            def call(vr: Any = vr[sa, sr], vi: Any = vi[sa, sr] if vi is not None else None, wr: Any = wr[sa, sr],
                     wi: Any = wi[sa, sr] if wi is not None else None,
                     tcv: Any = tc[sr] if tc is not None else None, tsv: Any = ts[sr] if ts is not None else None
                     ) -> None:
                dft(vr, vi, wc, wa, wb, wr, wi, tcv, tsv, scale)
            calls.append(call)
    U.run_parallel(calls)


#: Power-of-two sizes in ``[ST.MIN_N, ST.MAX_N]`` take the in-SBUF Stockham FFT (:mod:`stockham`) when set. Off:
#: at n = 1024 it measured no faster than the matmul DFT here (the generated stage loops use gathers) and it
#: compiles for much longer.
STOCKHAM = False


def launch_rows(xr: torch.Tensor, xi: torch.Tensor | None, yr: torch.Tensor, yi: torch.Tensor | None,
                inverse: bool, scale: float) -> None:
    """One :func:`stockham.fft_rows` launch per 3-D piece of the batch, row blocks split across host threads."""
    n = xr.shape[-1]
    wr, wi = ST.table(n, inverse)
    calls = []
    for vr, vi, ur, ui in _split([xr, xi, yr, yi], keep_last=False):
        a, r = ur.shape[0], ur.shape[1]
        for sa, sr in _row_parts(a, r, a * r * n * 16):
            def call(vr: Any = vr[sa, sr], vi: Any = vi[sa, sr] if vi is not None else None, ur: Any = ur[sa, sr],
                     ui: Any = ui[sa, sr] if ui is not None else None) -> None:
                ST.fft_rows(vr, vi, ur, ui, wr, wi, inverse, scale)
            calls.append(call)
    U.run_parallel(calls)


def _copy(src: torch.Tensor, dst: torch.Tensor) -> None:
    for s, d in _split([src, dst], keep_last=False):
        copy3(s, d)


def dft_last(xr: torch.Tensor, xi: torch.Tensor | None, yr: torch.Tensor, yi: torch.Tensor | None, n: int,
             inverse: bool, scale: float) -> None:
    """The first ``m`` outputs (y's last dim) of the length-``n`` DFT along the last dim of fp32 planes.

    ``x [*B, n]`` (``xi`` None: real), ``y [*B, m]`` (``yi`` None: only the real part is wanted); ``inverse``
    flips the sign of the exponent (no 1/n: ``scale`` multiplies the result).
    """
    m = yr.shape[-1]
    if STOCKHAM and ST.fits(n):
        launch_rows(xr, xi, yr, yi, inverse, scale)
        return
    p = plan(n)
    if p is None and n > PRIME_MAX:
        FC.bluestein(xr, xi, yr, yi, n, inverse, scale)
        return
    if p is None:
        c, s, ns = mats(n, n, n)
        wa, wb = (ns, s) if inverse else (s, ns)
        launch_dft(xr, xi, (c[:, :m], wa[:, :m], wb[:, :m]), yr, yi, None, scale)
        return
    batch = tuple(xr.shape[:-1])
    n1, n2 = p
    half = m == n // 2 + 1 and n2 % 2 == 0 and plan(n2) is None and n2 <= PRIME_MAX
    if m < n and not half:  # a crop of a factored size: the whole transform, then the crop
        tr = memory.empty((*batch, n), _F32)
        ti = memory.empty((*batch, n), _F32) if yi is not None else None
        dft_last(xr, xi, tr, ti, n, inverse, scale)
        _copy(tr[..., :m], yr)
        if yi is not None and ti is not None:
            _copy(ti[..., :m], yi)
        return

    def split_in(v: torch.Tensor) -> torch.Tensor:  # x[n2 * j1 + j2] as [*B, j2, j1]
        st = v.stride()[-1]
        return U.view(v, (*batch, n2, n1), (*v.stride()[:-1], st, n2 * st), v.storage_offset())

    def split_out(v: torch.Tensor) -> torch.Tensor:  # y[k1 + n1 * k2] as [*B, k1, k2]
        st = v.stride()[-1]
        return U.view(v, (*batch, n1, n2), (*v.stride()[:-1], st, n1 * st), v.storage_offset())

    t1r = memory.empty((*batch, n2, n1), _F32)
    t1i = memory.empty((*batch, n2, n1), _F32)
    c1, s1, ns1 = mats(n1, n1, n1)
    tc, ts, tns = mats(n, n2, n1)
    w1 = (c1, ns1, s1) if inverse else (c1, s1, ns1)
    launch_dft(split_in(xr), split_in(xi) if xi is not None else None, w1, t1r, t1i,
               (tc, ts if inverse else tns), 1.0)

    def transposed(t: torch.Tensor) -> torch.Tensor:  # [*B, j2, k1] -> [*B, k1, j2]
        st = t.stride()
        return U.view(t, (*batch, n1, n2), (*st[:-2], st[-1], st[-2]), t.storage_offset())

    if m < n:
        _onesided_tail(transposed(t1r), transposed(t1i), yr, yi, n1, n2, inverse, scale)
        return
    dft_last(transposed(t1r), transposed(t1i), split_out(yr), split_out(yi) if yi is not None else None, n2,
             inverse, scale)


def _onesided_tail(tr: torch.Tensor, ti: torch.Tensor, yr: torch.Tensor, yi: torch.Tensor | None, n1: int,
                   n2: int, inverse: bool, scale: float) -> None:
    """The second Cooley-Tukey step of a one-sided transform (``y``: the first ``n // 2 + 1`` outputs), computing
    only those: ``y[k1 + n1 k2]`` for ``k2 < n2 / 2`` (the first half of each length-``n2`` DFT of ``t [*B, k1, j2]``)
    and ``y[n / 2]`` (``k1 = 0``, ``k2 = n2 / 2``). Saves half the step and the crop copies."""
    batch = tuple(tr.shape[:-2])
    h, n = n2 // 2, n1 * n2

    def part(v: torch.Tensor, shape: tuple[int, int], first: int) -> torch.Tensor:  # y[first + k1 + n1 k2]
        st = v.stride()[-1]
        return U.view(v, (*batch, *shape), (*v.stride()[:-1], st, n1 * st), v.storage_offset() + first * st)

    c, s, ns = mats(n2, n2, n2)
    wa, wb = (ns, s) if inverse else (s, ns)
    launch_dft(tr, ti, (c[:, :h], wa[:, :h], wb[:, :h]), part(yr, (n1, h), 0),
               part(yi, (n1, h), 0) if yi is not None else None, None, scale)
    launch_dft(tr[..., :1, :], ti[..., :1, :], (c[:, h:h + 1], wa[:, h:h + 1], wb[:, h:h + 1]),
               part(yr, (1, 1), n // 2), part(yi, (1, 1), n // 2) if yi is not None else None, None, scale)


def c2r_last(xr: torch.Tensor, xi: torch.Tensor, y: torch.Tensor, n: int, scale: float) -> None:
    """Real ``y [*B, n]`` from the Hermitian half spectrum ``x [*B, n // 2 + 1]`` along the last dim."""
    m = n // 2 + 1
    xr, xi = xr[..., :m], xi[..., :m]
    if plan(n) is None and n <= PRIME_MAX:
        cw, sw, nsw = mats(n, m, n, weighted=True)
        launch_dft(xr, xi, (cw, nsw, None), y, None, None, scale)
        return
    batch = tuple(xr.shape[:-1])
    zr, zi = memory.empty((*batch, n), _F32), memory.empty((*batch, n), _F32)
    for vr, vi, wr, wi in _split([xr, xi, zr, zi], keep_last=False):
        hermitian_pad(vr, vi, wr, wi, n)
    dft_last(zr, zi, y, None, n, True, scale)


# ---------------------------------------------------------------------------------------------- lowerings
def _last(t: torch.Tensor, d: int) -> torch.Tensor:
    """A view of ``t`` with dim ``d`` moved last (strides permuted, no copy)."""
    nd = t.dim()
    order = [i for i in range(nd) if i != d] + [d]
    return U.view(t, [t.shape[i] for i in order], [t.stride()[i] for i in order], t.storage_offset())


def _dims(dim: Sequence[int], nd: int) -> list[int] | None:
    out = []
    for d in dim:
        d = int(d)
        if not -nd <= d < nd:
            return None
        out.append(d % nd)
    return out if out and len(set(out)) == len(out) else None


def _scale(normalization: int, sizes: Sequence[int]) -> float | None:
    n = U.prod(sizes)
    return {0: 1.0, 1: 1.0 / math.sqrt(n), 2: 1.0 / n}.get(int(normalization))


def _ok(t: Any, dtype: torch.dtype) -> bool:
    return U.is_trn(t) and t.dtype == dtype and not t.is_neg()


def _c2c_dims(src: tuple[torch.Tensor, torch.Tensor], dst: torch.Tensor, dims: Sequence[int], inverse: bool,
              scale: float) -> None:
    """c2c along ``dims`` (one after another) from planes ``src`` into the complex tensor ``dst``."""
    shape = tuple(dst.shape)
    for i, d in enumerate(dims):
        last = i == len(dims) - 1
        tgt = dst if last else memory.empty(shape, _C64)
        tr, ti = planes(tgt)
        dft_last(_last(src[0], d), _last(src[1], d), _last(tr, d), _last(ti, d), shape[d], inverse,
                 scale if last else 1.0)
        src = (tr, ti)


@lowering("aten::_fft_c2c", dtypes=(_C64,))
def fft_c2c(self: torch.Tensor, dim: Sequence[int], normalization: int, forward: bool) -> Any:
    """Complex-to-complex DFT over ``dim`` (``forward``: ``exp(-2 pi i jk/n)``), normalized by ``normalization``.

    Example: ``torch.fft.fft(torch.randn(8, dtype=torch.complex64).to("trn"))``.
    """
    dims = _dims(dim, self.dim())
    if not _ok(self, _C64) or dims is None:
        return decline("not a complex64 trn tensor (or a neg bit), or dims out of range, repeated or empty")
    sizes = [self.shape[d] for d in dims]
    scale = _scale(normalization, sizes)
    if scale is None or (self.numel() and not all(supported(n) for n in sizes)):
        return decline("unknown normalization, or a length of 0, >= 2^28 or with a residual factor above 46340")
    out = memory.empty(tuple(self.shape), _C64)
    if self.numel() == 0:
        return out
    _c2c_dims(planes(self), out, dims, not forward, scale)
    return out


@lowering("aten::_fft_r2c", dtypes=(_F32, _C64))
def fft_r2c(self: torch.Tensor, dim: Sequence[int], normalization: int, onesided: bool) -> Any:
    """Real-to-complex DFT over ``dim`` (the last one first; ``onesided``: its first ``n // 2 + 1`` outputs).

    Example: ``torch.fft.rfft(torch.randn(4, 10).to("trn"))``.
    """
    dims = _dims(dim, self.dim())
    if not _ok(self, _F32) or dims is None:
        return decline("not a float32 trn tensor (or a neg bit), or dims out of range, repeated or empty")
    sizes = [self.shape[d] for d in dims]
    scale = _scale(normalization, sizes)
    if scale is None or not all(supported(n) for n in sizes):
        return decline("unknown normalization, or a length of 0, >= 2^28 or with a residual factor above 46340")
    ld = dims[-1]
    n = self.shape[ld]
    shape = list(self.shape)
    shape[ld] = n // 2 + 1 if onesided else n
    out = memory.empty(shape, _C64)
    if out.numel() == 0:
        return out
    first = out if len(dims) == 1 else memory.empty(shape, _C64)
    fr, fi = planes(first)
    dft_last(_last(self, ld), None, _last(fr, ld), _last(fi, ld), n, False, scale if len(dims) == 1 else 1.0)
    if len(dims) > 1:
        _c2c_dims((fr, fi), out, dims[:-1], False, scale)
    return out


@lowering("aten::_fft_c2r", dtypes=(_C64, _F32))
def fft_c2r(self: torch.Tensor, dim: Sequence[int], normalization: int, last_dim_size: int) -> Any:
    """Complex-to-real inverse DFT over ``dim``: c2c over all but the last, then the Hermitian ``c2r`` of
    length ``last_dim_size`` over the last.

    Example: ``torch.fft.irfft(torch.randn(4, 6, dtype=torch.complex64).to("trn"))``.
    """
    dims = _dims(dim, self.dim())
    if not _ok(self, _C64) or dims is None:
        return decline("not a complex64 trn tensor (or a neg bit), or dims out of range, repeated or empty")
    ld, n = dims[-1], int(last_dim_size)
    if n < 1 or self.shape[ld] not in (n // 2 + 1, n):
        return decline("last_dim_size does not match the input: torch raises")  # the CPU raises its own error
    sizes = [self.shape[d] for d in dims[:-1]] + [n]
    scale = _scale(normalization, sizes)
    if scale is None or not all(supported(k) for k in sizes):
        return decline("unknown normalization, or a length of 0, >= 2^28 or with a residual factor above 46340")
    shape = list(self.shape)
    shape[ld] = n
    out = memory.empty(shape, _F32)
    if out.numel() == 0:
        return out
    src = planes(self)
    if len(dims) > 1:
        tmp = memory.empty(tuple(self.shape), _C64)
        _c2c_dims(src, tmp, dims[:-1], True, 1.0)
        src = planes(tmp)
    c2r_last(_last(src[0], ld), _last(src[1], ld), _last(out, ld), n, scale)
    return out


@lowering("aten::conj_physical.out", dtypes=(_C64, torch.complex32, *U.FLOAT_DTYPES), variants=False)
def conj_physical_out(self: torch.Tensor, *, out: torch.Tensor) -> Any:
    """``out = conj(self)`` (complex: the imaginary plane negated; real: a copy; complex32 through complex64,
    exactly)."""
    if self.dtype == torch.complex32:
        from stdlib_kernels.elementwise.complex_arith import unary_via_complex64

        return unary_via_complex64(conj_physical, self, out)
    return conj_physical(self, out=out)


@lowering("aten::conj_physical_", dtypes=None, variants=False)
def conj_physical_(self: torch.Tensor) -> Any:
    """In-place ``conj_physical`` (its composite kernel calls a CPU-only stub): a no-op for real tensors."""
    if not self.is_complex():
        return self
    if self.dtype != _C64 or self.is_conj():
        return decline("not complex64, or a lazy conjugate bit")
    return conj_physical(self, out=self)
