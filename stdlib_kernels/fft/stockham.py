"""Power-of-two FFTs of whole rows on the Vector engine: radix-4 (and one radix-2) Stockham stages in SBUF.

For ``n = 2^k`` up to :data:`MAX_N` a row of the batch sits on one partition (``p`` rows per tile) and the whole
transform runs in SBUF, ``O(n log n)`` work per row instead of the matmul DFT's ``O(n sqrt n)``:

1. the row is viewed as ``X [n1, n2]`` (``X[j1, j2] = x[n2 j1 + j2]``) and transformed along ``j1`` by
   self-sorting (Stockham) stages whose operands are runs of at least ``n2`` consecutive elements (so every
   stage is plain vector code);
2. multiplied by ``w^(k1 j2)`` (``w = exp(-+2 pi i / n)``), transposed to ``[n2, n1]`` (one strided copy);
3. transformed along ``j2`` the same way, which leaves ``y[k1 + n1 k2]`` in natural order; stored (cropped to
   y's length: a one-sided ``r2c`` stores the first ``n // 2 + 1``; the real part alone for ``c2r``).

A Stockham stage of radix ``r`` takes the state ``A[q, s]`` (``q < L`` transforms of length ``L`` of the
``m = M / L`` residue classes ``s``) to ``A'[q + u L, s']`` for ``s' < m / r``:
``A'[q + u L, s'] = sum_e w_r^(e u) (w_(rL)^(e q) A[q, s' + e m / r])``; both the reads (``r`` runs per ``q``)
and the writes (``r`` contiguous blocks) are unit-stride views of the ``[p, M * V]`` tile.

Twiddles are one fp32 table per ``(n, direction)``, computed in float64 from the exact integer angle and
cached on the device (:func:`table`): each stage's ``w_(rL)^(e q)`` and the ``w^(k1 j2)`` of step 2.

Status: off by default (``stdlib_kernels.fft.dft.STOCKHAM``). Measured on a 2-core Xeon (AVX-512) at load ~17,
4096 x 1024, same process, interleaved: ``fft`` 377 ms vs the matmul DFT's 364 ms, ``rfft`` 151 vs 137 ms; LLVM
vectorises the stage loops with gathers (small runs fully unrolled, the loop over ``q`` vectorised instead), and a
size compiles for about a minute at that load. What would make it pay: stage loops the vectoriser keeps
contiguous (runs of >= 64), fewer passes (radix 8, or two stages per pass), the transpose folded into a store.

Example:
    >>> x = torch.randn(64, 1024, dtype=torch.complex64).to("trn")  # doctest: +SKIP
    >>> dft.STOCKHAM = True; torch.fft.fft(x)  # reaches fft_rows through stdlib_kernels.fft.dft  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch

import trnlang as trn
import trnlang.language as tl
from trnlang.device import memory

#: Largest power of two transformed in SBUF (two fp32 planes of a row, plus a stage's temporaries, per partition).
MAX_N = 4096
#: Smallest size that takes this path (below it the matmul DFT is as fast, and compiles faster).
MIN_N = 512
#: Rows per tile (one per partition): small tiles keep a stage's working set in the core's first-level cache.
ROWS = 4


def fits(n: int) -> bool:
    """``n`` is a power of two in ``[MIN_N, MAX_N]``.

    >>> fits(1024), fits(1000), fits(64), fits(8192)
    (True, False, False, False)
    """
    return MIN_N <= n <= MAX_N and n & (n - 1) == 0


def factors(n: int) -> tuple[int, int]:
    """``(n1, n2)``, ``n = n1 * n2``, both powers of two, ``n1 <= n2``.

    >>> factors(1024), factors(2048)
    ((32, 32), (32, 64))
    """
    k = n.bit_length() - 1
    n1 = 1 << (k // 2)
    return n1, n // n1


def stages(m: int) -> list[tuple[int, int]]:
    """``(radix, L)`` of the stages transforming along an axis of length ``m`` (a radix-2 first when
    ``log2 m`` is odd, radix 4 after).

    >>> stages(32)
    [(2, 1), (4, 2), (4, 8)]
    """
    out, ell = [], 1
    if (m.bit_length() - 1) % 2:
        out.append((2, 1))
        ell = 2
    while ell < m:
        out.append((4, ell))
        ell *= 4
    return out


def layout(n: int) -> tuple[dict[tuple[int, int], int], int, int]:
    """Offsets in the twiddle table: per ``(axis length, L)`` of a radix-4 stage with ``L > 1`` the start of its
    ``3 L`` entries (``w^(e q)`` at ``start + (e - 1) L + q``); then the ``n`` entries of step 2; total length."""
    n1, n2 = factors(n)
    offs: dict[tuple[int, int], int] = {}
    pos = 0
    for m in dict.fromkeys((n1, n2)):
        for radix, ell in stages(m):
            if radix == 4 and ell > 1:
                offs[(m, ell)] = pos
                pos += 3 * ell
    return offs, pos, pos + n


@functools.lru_cache(maxsize=32)
def table(n: int, inverse: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The cached device twiddle table ``(cos, sign * sin)`` (``[1, T]`` fp32 each) for size ``n``."""
    offs, big, total = layout(n)
    n1, n2 = factors(n)
    ang = torch.zeros(total, dtype=torch.float64)  # angles as exact fractions of a turn: (num mod den) / den
    for (_, ell), start in offs.items():
        q = torch.arange(ell, dtype=torch.float64)
        for e in (1, 2, 3):
            ang[start + (e - 1) * ell: start + e * ell] = (e * q) / (4 * ell)
    k1 = torch.arange(n1, dtype=torch.int64)[:, None]
    j2 = torch.arange(n2, dtype=torch.int64)[None, :]
    ang[big:] = ((k1 * j2) % n).reshape(-1).to(torch.float64) / n
    sign = 1.0 if inverse else -1.0
    rad = ang * (2 * math.pi)
    c = torch.cos(rad).to(torch.float32).reshape(1, total)
    s = (sign * torch.sin(rad)).to(torch.float32).reshape(1, total)
    out = (memory.empty((1, total), torch.float32), memory.empty((1, total), torch.float32))
    out[0].copy_(c)
    out[1].copy_(s)
    return out


# ---------------------------------------------------------------------------------------------- kernel
def _cmul(ar: Any, ai: Any, br: Any, bi: Any) -> tuple[Any, Any]:
    return ar * br - ai * bi, ar * bi + ai * br


def _along(re: Any, im: Any, p: int, m: int, v: int, wr: Any, wi: Any, offs: dict[tuple[int, int], int],
           inverse: bool) -> tuple[Any, Any]:
    """The DFT along the middle axis of ``[p, m, v]`` planes stored ``[p, m * v]`` (Stockham, natural order)."""
    n = m * v
    ip = tl.arange(p)[:, None, None]
    for radix, ell in stages(m):
        mv = (m // (radix * ell)) * v  # length of one run: the s' (and v) of a stage
        q = tl.arange(ell)[None, :, None]
        t = tl.arange(mv)[None, None, :]
        src = [q * (radix * mv) + e * mv + t for e in range(radix)]
        fr = [re[ip, s] for s in src]
        fi = [im[ip, s] for s in src]
        if radix == 4 and ell > 1:
            start = offs[(m, ell)]
            for e in (1, 2, 3):
                lo = start + (e - 1) * ell
                cr, ci = wr[0:1, lo:lo + ell][:, :, None], wi[0:1, lo:lo + ell][:, :, None]
                fr[e], fi[e] = _cmul(fr[e], fi[e], cr, ci)
        outs: list[tuple[Any, Any]]
        if radix == 2:
            outs = [(fr[0] + fr[1], fi[0] + fi[1]), (fr[0] - fr[1], fi[0] - fi[1])]
        else:
            ar, ai = fr[0] + fr[2], fi[0] + fi[2]  # G0 + G2
            br, bi = fr[0] - fr[2], fi[0] - fi[2]  # G0 - G2
            cr, ci = fr[1] + fr[3], fi[1] + fi[3]  # G1 + G3
            dr, di = fr[1] - fr[3], fi[1] - fi[3]  # G1 - G3: times -i (forward) or +i (inverse) below
            if inverse:
                dr, di = -di, dr
            else:
                dr, di = di, -dr
            outs = [(ar + cr, ai + ci), (br + dr, bi + di), (ar - cr, ai - ci), (br - dr, bi - di)]
        nr = tl.ndarray((p, n), tl.float32)
        ni = tl.ndarray((p, n), tl.float32)
        for u, (yr, yi) in enumerate(outs):
            dst = u * ell * mv + q * mv + t
            nr[ip, dst] = yr
            ni[ip, dst] = yi
        re, im = nr, ni
    return re, im


@trn.kernel
def fft_rows(xr, xi, yr, yi, wr, wi, inverse, scale):
    """``y[a, r, :] = DFT_n(x[a, r, :])[:m]`` for ``x [A, R, n]`` (``xi`` None: real), ``y [A, R, m]``, ``m <= n``
    (``yi`` None: the real part only); ``inverse`` flips the exponent's sign (the table must match), ``scale``
    multiplies the result."""
    a_dim, r_dim, n = xr.shape
    m_out = yr.shape[-1]
    n1, n2 = factors(n)
    offs, big, _ = layout(n)
    p = min(ROWS, r_dim)
    ttr = tl.load(wr[0:1, 0:wr.shape[1]])
    tti = tl.load(wi[0:1, 0:wi.shape[1]])
    btr, bti = ttr[0:1, big:big + n], tti[0:1, big:big + n]
    ip = tl.arange(p)[:, None, None]
    for a in tl.affine_range(a_dim):
        for r in tl.affine_range(tl.cdiv(r_dim, p)):
            rows = r * p + tl.arange(p)[:, None]
            cols = tl.arange(n)[None, :]
            mi = (rows < r_dim) if r_dim % p else None
            re = tl.load(xr[a, rows, cols], mask=mi)
            im = tl.load(xi[a, rows, cols], mask=mi) if xi is not None else tl.zeros((p, n), tl.float32)
            re, im = _along(re, im, p, n1, n2, ttr, tti, offs, inverse)
            re, im = _cmul(re, im, btr, bti)
            j2 = tl.arange(n2)[None, :, None]
            k1 = tl.arange(n1)[None, None, :]
            re = tl.reshape(tl.copy(re[ip, k1 * n2 + j2]), (p, n))  # [k1, j2] -> [j2, k1]
            im = tl.reshape(tl.copy(im[ip, k1 * n2 + j2]), (p, n))
            re, im = _along(re, im, p, n2, n1, ttr, tti, offs, inverse)
            if scale != 1.0:
                re = re * scale
                im = im * scale
            oc = tl.arange(m_out)[None, :]
            mo = (rows < r_dim) if r_dim % p else None
            tl.store(yr[a, rows, oc], re[0:p, 0:m_out], mask=mo)
            if yi is not None:
                tl.store(yi[a, rows, oc], im[0:p, 0:m_out], mask=mo)
