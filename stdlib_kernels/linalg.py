"""Dense linear algebra on the ``trn`` device: Cholesky, triangular solves, LU (partial pivoting), LU solve,
inverse, solve and Householder QR, as trnlang kernels.

Approach. Each matrix (``n <= 128`` rows, one SBUF tile: rows on partitions, columns on the free axis) is
factorised in SBUF by a right-looking algorithm with one step per column in a ``tl.sequential_range`` loop:

* a column is a free-axis slice of the tile (``A[:, k:k + 1]``); the Tensor engine transposes it into a
  row on partition 0 where free-axis reductions (norms, ``argmax`` for the pivot) and scalar arithmetic run;
* the rank-1 trailing update ``A -= l u^T`` is one ``tl.matmul`` of two one-partition rows (K = 1) on the
  Tensor engine, and ``v^T A`` (Householder) is one matmul against the whole tile;
* LU never moves rows: the pivot row is extracted with a one-hot matmul, used rows are masked out of later
  steps, and the LAPACK row order (and LAPACK's sequential ``ipiv``) is rebuilt at the end with a
  permutation matmul. Ties pick the first candidate in LAPACK's current row order, as ``idamax`` does;
* triangular solves run forward/back substitution on the transposed right-hand side (``B^T``: the unknowns'
  index on the free axis), one column of the triangle (transposed to a row, broadcast over partitions) per
  step;
* Householder QR follows LAPACK's ``dlarfg`` sign convention (``beta = -sign(alpha) * norm``), so ``Q`` and
  ``R`` match torch's CPU results, not only ``Q @ R``; ``Q^T`` is accumulated as ``H_k ... H_1``.

Batches loop inside one kernel (``tl.affine_range`` over the flattened batch). Larger matrices are blocked on
the host (right-looking: panel factorisation by a kernel, triangular solve of the off-diagonal block by the
substitution kernel, Schur-complement update with the ``trn`` matmul): Cholesky and triangular solves of any
size; LU (and LU solve, inverse, solve) up to ``PANEL_ROWS`` = 512 rows, where the panel kernel's pivot search
spans four row tiles. QR / geqrf / householder_product (128 rows, 512 columns), det / slogdet, lu_unpack and
linalg_lu (128 x 128) stay within one tile. Larger inputs are declined (CPU fallback). All of them are
float32 only: torch's CPU kernels do not take bfloat16 for these ops either, so bf16 calls go to the fallback,
which raises torch's own error.
"""

from __future__ import annotations

from typing import Any

import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels import _util as U
from trnlang.device import lowering

#: Largest matrix side handled by one kernel tile (partition count).
TILE = 128
#: Largest number of columns of a QR input.
QR_MAX_COLS = 512
_F32 = (torch.float32,)


# kernels ------------------------------------------------------------------------------------------------------
@trn.kernel
def cholesky_kernel(a, out, info):
    """Cholesky of each ``a[b]`` (``[B, n, n]``, n <= 128) into ``out[b]``: ``L`` (lower) or, for ``upper``,
    ``out`` is a transposed view so ``U = L^T`` lands in place. Reads the lower triangle (for ``upper`` the
    caller passes ``a`` transposed). ``info[b, 0]``: LAPACK's ``info`` (first failing minor)."""
    n = a.shape[-1]
    for bi in tl.affine_range(a.shape[0]):
        rows = tl.arange(n)[:, None]
        cols = tl.arange(n)[None, :]
        raw = tl.load(a[bi, rows, cols])
        low = tl.where(rows > cols, raw, 0.0)
        sym = tl.ndarray((n, n), tl.float32, buffer=tl.sbuf)
        sym[:, :] = tl.where(rows >= cols, raw, 0.0) + tl.transpose(low)
        fac = tl.zeros((n, n), tl.float32)
        state = tl.zeros((1, 3), tl.float32)  # [ok, step count, info]
        state[:, 0:1] = tl.ones((1, 1), tl.float32)
        for k in tl.sequential_range(n):
            col = sym[:, k:k + 1]
            row = tl.transpose(col)
            d = row[:, k:k + 1]
            state[:, 1:2] = state[:, 1:2] + 1.0
            bad = tl.logical_not(d > 0.0)  # LAPACK: ajj <= 0 or NaN
            fail = tl.where(bad, state[:, 0:1], 0.0)
            state[:, 2:3] = state[:, 2:3] + fail * state[:, 1:2]
            state[:, 0:1] = state[:, 0:1] - fail
            r = tl.rsqrt(tl.where(bad, 1.0, d))
            fac[:, k:k + 1] = col * tl.broadcast_to(r, (n, 1))
            lrow = row * r
            sym[:, :] = sym - tl.matmul(lrow, lrow, transpose_x=True)
        tl.store(out[bi, rows, cols], tl.where(rows >= cols, fac, 0.0))
        tl.store(info[bi:bi + 1, 0:1], state[:, 2:3].astype(tl.int32))


def _substitute(tri, bt, n, mt, lower, unit):
    """In-place substitution on ``bt = B^T`` ([mt, n], unknown index on the free axis) with the triangle
    ``tri`` ([n, n] tile; only its lower or upper part and, unless ``unit``, its diagonal are read)."""
    cols = tl.arange(n)[None, :]
    for kk in tl.sequential_range(n):
        k = kk if lower else n - 1 - kk
        trow = tl.copy(tl.transpose(tri[:, k:k + 1]))  # trow[0, j] = tri[j, k]
        xk = bt[:, k:k + 1]
        if not unit:
            xk = xk / tl.broadcast_to(trow[:, k:k + 1], (mt, 1))
            bt[:, k:k + 1] = xk
        below = tl.where((cols > k) if lower else (cols < k), trow, 0.0)
        bt[:, :] = bt - xk * tl.broadcast_to(below, (mt, n))


@trn.kernel
def trisolve_kernel(t, bt, out_t, lower, unit):
    """Solve ``T X = B`` per batch: ``t`` ``[Bt, n, n]`` (Bt is 1 or B), ``bt``/``out_t`` ``[B, m, n]``: the
    right-hand side and the solution seen transposed (strided views, no copies). n <= 128."""
    n = t.shape[-1]
    m = bt.shape[1]
    tm = min(TILE, m)
    rows = tl.arange(n)[:, None]
    cols = tl.arange(n)[None, :]
    for bi in tl.affine_range(bt.shape[0]):
        tb = bi if t.shape[0] > 1 else 0
        tri = tl.load(t[tb, rows, cols])
        for mi in tl.affine_range(tl.cdiv(m, tm)):
            mr = mi * tm + tl.arange(tm)[:, None]
            msk = (mr < m) if m % tm else None
            work = tl.ndarray((tm, n), tl.float32, buffer=tl.sbuf)
            work[:, :] = tl.load(bt[bi, mr, cols], mask=msk)
            _substitute(tri, work, n, tm, lower, unit)
            tl.store(out_t[bi, mr, cols], work, mask=msk)


@trn.kernel
def lu_kernel(a, lu, piv, info):
    """LU with partial pivoting (LAPACK ``getrf`` results) of each ``a[b]`` ``[m, n]`` (m, n <= 128):
    ``lu[b]`` packed ``L\\U`` in LAPACK row order, ``piv[b, :k]`` 1-based sequential swaps, ``info[b, 0]``."""
    m, n = a.shape[-2], a.shape[-1]
    kmin = min(m, n)
    for bi in tl.affine_range(a.shape[0]):
        rows = tl.arange(m)[:, None]
        cols = tl.arange(n)[None, :]
        mcols = tl.arange(m)[None, :]
        work = tl.ndarray((m, n), tl.float32, buffer=tl.sbuf)
        work[:, :] = tl.load(a[bi, rows, cols])
        used = tl.zeros((m, 1), tl.float32)
        pos = tl.ndarray((1, m), tl.float32, buffer=tl.sbuf)  # current LAPACK position of each original row
        pos[:, :] = isa.iota(mcols, tl.float32)
        pv = tl.zeros((1, kmin), tl.float32)
        state = tl.zeros((1, 3), tl.float32)  # [ok, step count k, info]
        state[:, 0:1] = tl.ones((1, 1), tl.float32)
        for k in tl.sequential_range(kmin):
            col = work[:, k:k + 1]
            mag = tl.where(used > 0.0, -1.0, tl.abs(col))
            magrow = tl.transpose(mag)
            best = tl.max(magrow, axis=1, keepdims=True)
            score = tl.where(magrow == best, pos, 1.0e9)
            pp = tl.min(score, axis=1, keepdims=True)  # LAPACK position of the pivot row (idamax: first)
            ohr = tl.where(pos == pp, 1.0, 0.0)
            ohc = tl.transpose(ohr)
            prow = tl.copy(tl.matmul(ohc, work, transpose_x=True))  # the pivot row
            p = prow[:, k:k + 1]
            zero = p == 0.0
            fail = tl.where(zero, state[:, 0:1], 0.0)
            kk = state[:, 1:2]
            state[:, 2:3] = state[:, 2:3] + fail * (kk + 1.0)
            state[:, 0:1] = state[:, 0:1] - fail
            rp = tl.where(zero, 0.0, 1.0 / tl.where(zero, 1.0, p))
            lmask = (1.0 - used) * (1.0 - ohc)
            lcol = col * tl.broadcast_to(rp, (m, 1)) * lmask
            right = tl.where(cols > k, prow, 0.0)
            work[:, :] = work - tl.matmul(tl.transpose(lcol), right, transpose_x=True)
            work[:, k:k + 1] = tl.where(lmask > 0.0, lcol, col)
            used[:, :] = used + ohc
            pv[:, k:k + 1] = pp + 1.0
            ohk = tl.where(pos == kk, 1.0, 0.0)  # the row now at position k swaps with the pivot row
            pos[:, :] = pos + ohk * (pp - kk) + ohr * (kk - pp)
            state[:, 1:2] = kk + 1.0
        perm = tl.where(tl.broadcast_to(tl.transpose(pos), (m, m)) == isa.iota(rows * 0 + mcols, tl.float32),
                        1.0, 0.0)  # perm[i, j] = 1 where original row i sits at position j
        tl.store(lu[bi, rows, cols], tl.matmul(perm, work, transpose_x=True))
        tl.store(piv[bi:bi + 1, tl.arange(kmin)[None, :]], pv.astype(tl.int32))
        tl.store(info[bi:bi + 1, 0:1], state[:, 2:3].astype(tl.int32))


@trn.kernel
def lu_panel_kernel(a, out, order, piv, info):
    """Partial-pivoting LU of a tall panel ``a[b]`` ``[m, w]`` (m <= 512 over up to four row tiles, w <= 128),
    the panel step of the blocked LU. ``out[b]``: the factors with rows left in place (not yet permuted),
    ``order[b, j]``: the original row at LAPACK position ``j``, ``piv``/``info`` as ``getrf`` (panel-local)."""
    m, w = a.shape[-2], a.shape[-1]
    kmin = min(m, w)
    heights = [min(TILE, m - t * TILE) for t in range(tl.cdiv(m, TILE))]
    cols = tl.arange(w)[None, :]
    mcols = tl.arange(m)[None, :]
    for bi in tl.affine_range(a.shape[0]):
        works, useds = [], []
        for t, tr in enumerate(heights):
            wk = tl.ndarray((tr, w), tl.float32, buffer=tl.sbuf)
            wk[:, :] = tl.load(a[bi, t * TILE + tl.arange(tr)[:, None], cols])
            works.append(wk)
            useds.append(tl.zeros((tr, 1), tl.float32))
        pos = tl.ndarray((1, m), tl.float32, buffer=tl.sbuf)
        pos[:, :] = isa.iota(mcols, tl.float32)
        magrow = tl.ndarray((1, m), tl.float32, buffer=tl.sbuf)
        pv = tl.zeros((1, kmin), tl.float32)
        state = tl.zeros((1, 3), tl.float32)  # [ok, step count k, info]
        state[:, 0:1] = tl.ones((1, 1), tl.float32)
        for k in tl.sequential_range(kmin):
            for t, tr in enumerate(heights):
                mag = tl.where(useds[t] > 0.0, -1.0, tl.abs(works[t][:, k:k + 1]))
                magrow[:, t * TILE:t * TILE + tr] = tl.transpose(mag)
            best = tl.max(magrow, axis=1, keepdims=True)
            score = tl.where(magrow == best, pos, 1.0e9)
            pp = tl.min(score, axis=1, keepdims=True)
            ohr = tl.where(pos == pp, 1.0, 0.0)
            ohcs = [tl.copy(tl.transpose(ohr[:, t * TILE:t * TILE + tr])) for t, tr in enumerate(heights)]
            acc = tl.zeros((1, w), tl.float32, buffer=tl.psum)
            for t in range(len(heights)):
                acc += tl.matmul(ohcs[t], works[t], transpose_x=True)
            prow = tl.copy(acc)
            p = prow[:, k:k + 1]
            zero = p == 0.0
            fail = tl.where(zero, state[:, 0:1], 0.0)
            kk = state[:, 1:2]
            state[:, 2:3] = state[:, 2:3] + fail * (kk + 1.0)
            state[:, 0:1] = state[:, 0:1] - fail
            rp = tl.where(zero, 0.0, 1.0 / tl.where(zero, 1.0, p))
            right = tl.where(cols > k, prow, 0.0)
            for t, tr in enumerate(heights):
                col = works[t][:, k:k + 1]
                lmask = (1.0 - useds[t]) * (1.0 - ohcs[t])
                lcol = col * tl.broadcast_to(rp, (tr, 1)) * lmask
                works[t][:, :] = works[t] - tl.matmul(tl.transpose(lcol), right, transpose_x=True)
                works[t][:, k:k + 1] = tl.where(lmask > 0.0, lcol, col)
                useds[t][:, :] = useds[t] + ohcs[t]
            pv[:, k:k + 1] = pp + 1.0
            ohk = tl.where(pos == kk, 1.0, 0.0)
            pos[:, :] = pos + ohk * (pp - kk) + ohr * (kk - pp)
            state[:, 1:2] = kk + 1.0
        # order[j] = sum_i i * (pos[i] == j): one-hot matmuls, exact for integers
        oacc = tl.zeros((1, m), tl.float32, buffer=tl.psum)
        for t, tr in enumerate(heights):
            rloc = tl.arange(tr)[:, None]
            hit = tl.where(tl.broadcast_to(tl.copy(tl.transpose(pos[:, t * TILE:t * TILE + tr])), (tr, m))
                           == isa.iota(rloc * 0 + mcols, tl.float32), 1.0, 0.0)
            oacc += tl.matmul(isa.iota(t * TILE + rloc, tl.float32), hit, transpose_x=True)
            tl.store(out[bi, t * TILE + rloc, cols], works[t])
        tl.store(order[bi:bi + 1, mcols], tl.copy(oacc).astype(tl.int32))
        tl.store(piv[bi:bi + 1, tl.arange(kmin)[None, :]], pv.astype(tl.int32))
        tl.store(info[bi:bi + 1, 0:1], state[:, 2:3].astype(tl.int32))


def _row_order(piv, lb, n, steps):
    """``order[0, j]``: the original row at LAPACK position ``j`` after the sequential swaps ``piv[lb, :steps]``
    (1-based, as ``getrf`` writes them); a ``[1, n]`` float tile."""
    cols = tl.arange(n)[None, :]
    order = tl.ndarray((1, n), tl.float32, buffer=tl.sbuf)
    order[:, :] = isa.iota(cols, tl.float32)
    swaps = tl.load(piv[lb:lb + 1, tl.arange(steps)[None, :]]).astype(tl.float32) - 1.0
    for k in tl.sequential_range(steps):
        p = swaps[:, k:k + 1]
        ohp = tl.where(isa.iota(cols, tl.float32) == p, 1.0, 0.0)
        ohk = tl.where(cols == k, 1.0, 0.0)
        vk = tl.sum(order * ohk, axis=1, keepdims=True)
        vp = tl.sum(order * ohp, axis=1, keepdims=True)
        order[:, :] = order + ohk * (vp - vk) + ohp * (vk - vp)
    return order


@trn.kernel
def pivots_order_kernel(piv, order):
    """``order[b, j]``: the original row at LAPACK position ``j`` for the ``getrf`` swaps ``piv[b]``."""
    n = piv.shape[-1]
    for bi in tl.affine_range(piv.shape[0]):
        tl.store(order[bi:bi + 1, tl.arange(n)[None, :]], _row_order(piv, bi, n, n).astype(tl.int32))


@trn.kernel
def lu_solve_kernel(lu, piv, b, out, adjoint, identity):
    """Solve ``A X = B`` (``A^T X = B`` with ``adjoint``) from ``getrf`` results: ``lu`` ``[Bl, n, n]`` (passed
    transposed when ``adjoint``), ``piv`` ``[Bl, n]`` int32, ``b``/``out`` ``[B, n, m]`` (``identity``: B = I,
    ``b`` unused). n <= 128."""
    n = lu.shape[-1]
    m = out.shape[-1]
    tm = min(TILE, m)
    rows = tl.arange(n)[:, None]
    cols = tl.arange(n)[None, :]
    for bi in tl.affine_range(out.shape[0]):
        lb = bi if lu.shape[0] > 1 else 0
        tri = tl.load(lu[lb, rows, cols])
        order = _row_order(piv, lb, n, n)
        ridx = isa.iota(rows + cols * 0, tl.float32)
        # sel[i, j] = 1 where B's row i goes to position j (P^T B); selt = sel^T undoes it (P Y)
        sel = tl.where(tl.broadcast_to(order, (n, n)) == ridx, 1.0, 0.0)
        selt = tl.where(tl.broadcast_to(tl.transpose(order), (n, n)) == isa.iota(rows * 0 + cols, tl.float32),
                        1.0, 0.0)
        for mi in tl.affine_range(tl.cdiv(m, tm)):
            mc = mi * tm + tl.arange(tm)[None, :]
            msk = ((mc < m) & (rows < n)) if m % tm else None
            if identity:
                rhs = tl.where(rows == mc, 1.0, 0.0) * tl.ones((n, tm), tl.float32)
            else:
                rhs = tl.load(b[bi, rows, mc], mask=msk)
            work = tl.ndarray((tm, n), tl.float32, buffer=tl.sbuf)
            if adjoint:
                work[:, :] = tl.transpose(rhs)
                _substitute(tri, work, n, tm, True, False)   # U^T (lower part of LU^T)
                _substitute(tri, work, n, tm, False, True)   # L^T (unit upper part of LU^T)
                res = tl.matmul(selt, tl.transpose(work), transpose_x=True)
            else:
                work[:, :] = tl.transpose(tl.matmul(sel, rhs, transpose_x=True))
                _substitute(tri, work, n, tm, True, True)    # L (unit lower)
                _substitute(tri, work, n, tm, False, False)  # U
                res = tl.transpose(work)
            tl.store(out[bi, rows, mc], res, mask=msk)


@trn.kernel
def lu_unpack_kernel(lu, piv, p, low, up):
    """``getrf`` results -> ``P [B, m, m]``, unit-lower ``L [B, m, k]``, upper ``U [B, k, n]`` (m, n <= 128)."""
    m, n = lu.shape[-2], lu.shape[-1]
    k = min(m, n)
    rows = tl.arange(m)[:, None]
    cols = tl.arange(n)[None, :]
    mcols = tl.arange(m)[None, :]
    kcols = tl.arange(k)[None, :]
    for bi in tl.affine_range(lu.shape[0]):
        t = tl.load(lu[bi, rows, cols])
        order = _row_order(piv, bi, m, k)
        ridx = isa.iota(rows + mcols * 0, tl.float32)
        tl.store(p[bi, rows, mcols], tl.where(tl.broadcast_to(order, (m, m)) == ridx, 1.0, 0.0))
        lt = tl.where(rows > cols, t, 0.0) + tl.where(rows == cols, 1.0, 0.0)
        tl.store(low[bi, rows, kcols], lt[:, 0:k])
        tl.store(up[bi, rows, cols], tl.where(rows <= cols, t, 0.0), mask=rows < k)


@trn.kernel
def lu_det_kernel(lu, piv, res, logdet):
    """Determinant from ``getrf`` results (``res[b, 0]``), or with ``logdet`` ``(sign, log|det|)`` in
    ``res[b, 0:2]``: the product of U's diagonal times the sign of the row permutation."""
    n = lu.shape[-1]
    rows = tl.arange(n)[:, None]
    cols = tl.arange(n)[None, :]
    for bi in tl.affine_range(lu.shape[0]):
        t = tl.load(lu[bi, rows, cols])
        dcol = tl.sum(tl.where(rows == cols, t, 0.0), axis=1, keepdims=True)
        drow = tl.copy(tl.transpose(dcol))
        swaps = tl.load(piv[bi:bi + 1, cols]).astype(tl.float32)
        nswap = tl.sum(tl.where(swaps == isa.iota(cols + 1, tl.float32), 0.0, 1.0), axis=1, keepdims=True)
        psign = 1.0 - 2.0 * tl.fmod(nswap, 2.0)
        if logdet:
            neg = tl.sum(tl.where(drow < 0.0, 1.0, 0.0), axis=1, keepdims=True)
            zero = tl.max(tl.where(drow == 0.0, 1.0, 0.0), axis=1, keepdims=True)
            sgn = psign * (1.0 - 2.0 * tl.fmod(neg, 2.0)) * (1.0 - zero)
            tl.store(res[bi:bi + 1, 0:1], sgn)
            tl.store(res[bi:bi + 1, 1:2], tl.sum(tl.log(tl.abs(drow)), axis=1, keepdims=True))
        else:
            tl.store(res[bi:bi + 1, 0:1], tl.prod(drow, axis=1, keepdims=True) * psign)


@trn.kernel
def qr_kernel(a, q, r, kq, kr, tau_out):
    """Householder QR of each ``a[b]`` ``[m, n]`` (m <= 128, n <= 512), LAPACK ``geqrf``/``orgqr`` signs.
    ``q``: ``[B, kq, m]`` view of Q transposed (None: not wanted), ``r``: ``[B, kr, n]``. With ``tau_out``
    (``[B, k]``), ``r`` receives ``geqrf``'s packed result instead (R above, reflectors below the diagonal)."""
    m, n = a.shape[-2], a.shape[-1]
    kmin = min(m, n)
    rows = tl.arange(m)[:, None]
    cols = tl.arange(n)[None, :]
    mcols = tl.arange(m)[None, :]
    for bi in tl.affine_range(a.shape[0]):
        work = tl.ndarray((m, n), tl.float32, buffer=tl.sbuf)
        work[:, :] = tl.load(a[bi, rows, cols])
        qt = tl.ndarray((m, m), tl.float32, buffer=tl.sbuf)
        taus = tl.zeros((1, kmin), tl.float32)
        if q is not None:
            qt[:, :] = tl.where(rows == mcols, 1.0, 0.0) * tl.ones((m, m), tl.float32)
        for k in tl.sequential_range(kmin):
            col = work[:, k:k + 1]
            crow = tl.copy(tl.transpose(col))
            alpha = crow[:, k:k + 1]
            x = tl.where(mcols > k, crow, 0.0)
            xn2 = tl.sum(x * x, axis=1, keepdims=True)
            nz = xn2 > 0.0  # dlarfg: H = I (tau = 0, beta = alpha) when the column below the diagonal is 0
            sgn = tl.where(alpha >= 0.0, 1.0, -1.0)
            beta = tl.where(nz, -sgn * tl.sqrt(alpha * alpha + xn2), alpha)
            tau = tl.where(nz, (beta - alpha) / tl.where(nz, beta, 1.0), 0.0)
            scale = tl.where(nz, 1.0 / tl.where(nz, alpha - beta, 1.0), 0.0)
            vrow = x * scale + tl.where(mcols == k, 1.0, 0.0)
            vcol = tl.copy(tl.transpose(vrow))
            tv = vrow * tau
            w = tl.where(cols > k, tl.copy(tl.matmul(vcol, work, transpose_x=True)), 0.0)  # trailing columns
            work[:, :] = work - tl.matmul(tv, w, transpose_x=True)
            work[:, k:k + 1] = tl.where(rows > k, vcol, tl.where(rows == k, tl.broadcast_to(beta, (m, 1)), col))
            taus[:, k:k + 1] = tau
            if q is not None:
                wq = tl.copy(tl.matmul(vcol, qt, transpose_x=True))
                qt[:, :] = qt - tl.matmul(tv, wq, transpose_x=True)
        if q is not None:
            tl.store(q[bi, rows, mcols], qt, mask=rows < kq)
        if tau_out is not None:
            tl.store(r[bi, rows, cols], work)
            tl.store(tau_out[bi:bi + 1, tl.arange(kmin)[None, :]], taus)
        else:
            tl.store(r[bi, rows, cols], tl.where(rows <= cols, work, 0.0), mask=rows < kr)


@trn.kernel
def householder_kernel(v, tau, qt_out):
    """``orgqr``: the first ``n`` columns of ``H_1 ... H_k`` from reflectors below the diagonal of ``v[b]``
    ``[m, n]`` and ``tau[b, :k]``; ``qt_out`` is ``[B, n, m]`` (Q seen transposed). m <= 128."""
    m, n = v.shape[-2], v.shape[-1]
    kt = tau.shape[-1]
    rows = tl.arange(m)[:, None]
    mcols = tl.arange(m)[None, :]
    for bi in tl.affine_range(v.shape[0]):
        refl = tl.load(v[bi, rows, tl.arange(n)[None, :]])
        taus = tl.load(tau[bi:bi + 1, tl.arange(kt)[None, :]])
        qt = tl.ndarray((m, m), tl.float32, buffer=tl.sbuf)
        qt[:, :] = tl.where(rows == mcols, 1.0, 0.0) * tl.ones((m, m), tl.float32)
        for k in tl.sequential_range(kt):
            vcol = tl.where(rows > k, refl[:, k:k + 1], tl.where(rows == k, 1.0, 0.0))
            tv = tl.copy(tl.transpose(vcol)) * taus[:, k:k + 1]
            wq = tl.copy(tl.matmul(vcol, qt, transpose_x=True))
            qt[:, :] = qt - tl.matmul(tv, wq, transpose_x=True)
        tl.store(qt_out[bi, rows, mcols], qt, mask=rows < n)


# host helpers -------------------------------------------------------------------------------------------------
def _ok(*ts: Any) -> bool:
    return all(U.is_trn(t) and t.dtype == torch.float32 and not t.is_conj() and not t.is_neg() for t in ts)


def _flat(x: torch.Tensor) -> torch.Tensor:
    """``[..., r, c]`` as ``[B, r, c]`` (a view when the batch dims merge, else a native copy)."""
    r, c = x.shape[-2], x.shape[-1]
    if x.dim() == 2:
        return x.unsqueeze(0)
    return x.reshape(U.prod(x.shape[:-2]), r, c)


def _info_out(batch: tuple[int, ...], b: int) -> torch.Tensor:
    return torch.empty((b, 1), dtype=torch.int32, device="trn")


def _empty(shape: Any) -> torch.Tensor:
    return torch.empty(tuple(shape), dtype=torch.float32, device="trn")


def _chol_tile(a3: torch.Tensor, upper: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, n, n] -> (L or U [B, n, n] contiguous, info [B, 1]) for n <= TILE."""
    b, n = a3.shape[0], a3.shape[-1]
    out = _empty((b, n, n))
    info = torch.empty((b, 1), dtype=torch.int32, device="trn")
    if upper:
        cholesky_kernel(a3.mT, out.mT, info)
    else:
        cholesky_kernel(a3, out, info)
    return out, info


def _chol_lower(a3: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Blocked right-looking Cholesky of [B, n, n] (lower triangle read) -> (L, info [B, 1])."""
    n = a3.shape[-1]
    if n <= TILE:
        return _chol_tile(a3, False)
    k = TILE
    l11, info1 = _chol_tile(a3[:, :k, :k], False)
    # L21 = A21 L11^{-T}: solve L11 L21^T = A21^T, all as strided views
    l21t = _trsolve(l11, a3[:, k:, :k].mT, lower=True, unit=False)
    s = a3[:, k:, k:] - torch.bmm(l21t.mT, l21t)
    l22, info2 = _chol_lower(s)
    out = torch.zeros(a3.shape, dtype=torch.float32, device="trn")
    out[:, :k, :k] = l11
    out[:, k:, :k] = l21t.mT
    out[:, k:, k:] = l22
    info = torch.where(info1 != 0, info1, torch.where(info2 != 0, info2 + k, info2))
    return out, info


def _trsolve(t3: torch.Tensor, b3: torch.Tensor, lower: bool, unit: bool) -> torch.Tensor:
    """Solve ``T X = B``: t3 ``[1 or B, n, n]``, b3 ``[B, n, m]`` (any strides) -> X ``[B, n, m]``, blocked on
    the host for n > TILE."""
    bsz, n, m = b3.shape
    out = _empty((bsz, n, m))
    if n == 0 or m == 0 or bsz == 0:
        return out
    if n <= TILE:
        trisolve_kernel(t3, b3.mT, out.mT, lower, unit)
        return out
    k = TILE
    if lower:  # X1 = T11^-1 B1; X2 = T22^-1 (B2 - T21 X1)
        x1 = _trsolve(t3[:, :k, :k], b3[:, :k], lower, unit)
        rest = b3[:, k:] - torch.matmul(t3[:, k:, :k], x1)
        x2 = _trsolve(t3[:, k:, k:], rest, lower, unit)
    else:  # upper: solve the bottom block first
        s = n - k
        x2 = _trsolve(t3[:, s:, s:], b3[:, s:], lower, unit)
        rest = b3[:, :s] - torch.matmul(t3[:, :s, s:], x2)
        x1 = _trsolve(t3[:, :s, :s], rest, lower, unit)
        out[:, :s] = x1
        out[:, s:] = x2
        return out
    out[:, :k] = x1
    out[:, k:] = x2
    return out


def _lu_blocked(a3: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-looking blocked getrf for ``m <= PANEL_ROWS`` rows and any columns: per 128-column panel, the
    panel kernel (pivot search over all remaining rows), the panel's row order applied to the other columns,
    ``U12 = L11^{-1} A12`` (triangular-solve kernel) and the Schur update ``A22 -= L21 U12`` (trn matmul)."""
    b, m, n = a3.shape
    kmin = min(m, n)
    work = a3.clone(memory_format=torch.contiguous_format)
    piv = torch.empty((b, kmin), dtype=torch.int32, device="trn")
    info = torch.zeros((b, 1), dtype=torch.int32, device="trn")
    for j0 in range(0, kmin, TILE):
        w = min(TILE, kmin - j0)
        rows = m - j0
        panel = _empty((b, rows, w))
        order = torch.empty((b, rows), dtype=torch.int32, device="trn")
        ppiv = torch.empty((b, w), dtype=torch.int32, device="trn")
        pinfo = torch.empty((b, 1), dtype=torch.int32, device="trn")
        lu_panel_kernel(work[:, j0:, j0:j0 + w], panel, order, ppiv, pinfo)
        work[:, j0:, j0:j0 + w] = panel
        idx = order.long().unsqueeze(-1).expand(b, rows, n)
        work[:, j0:, :] = torch.gather(work[:, j0:, :], 1, idx)
        piv[:, j0:j0 + w] = ppiv + j0
        info = torch.where((info == 0) & (pinfo != 0), pinfo + j0, info)
        if j0 + w < n:
            u12 = _trsolve(work[:, j0:j0 + w, j0:j0 + w], work[:, j0:j0 + w, j0 + w:], lower=True, unit=True)
            work[:, j0:j0 + w, j0 + w:] = u12
            if j0 + w < m:
                work[:, j0 + w:, j0 + w:] -= torch.bmm(work[:, j0 + w:, j0:j0 + w], u12)
    lu = _empty((b, n, m)).mT
    lu.copy_(work)
    return lu, piv, info


#: Rows of the largest LU handled natively (the panel kernel spans four row tiles).
PANEL_ROWS = 512


def _lu(a3: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """getrf of [B, m, n]; LU comes back column-major per matrix (LAPACK's layout, as torch's CPU op)."""
    b, m, n = a3.shape
    if (m > TILE or n > TILE) and b and m and n:
        return _lu_blocked(a3)
    lu = _empty((b, n, m)).mT
    piv = torch.empty((b, min(m, n)), dtype=torch.int32, device="trn")
    info = torch.empty((b, 1), dtype=torch.int32, device="trn")
    if b and m and n:
        lu_kernel(a3, lu, piv, info)
    else:
        info.zero_()
    return lu, piv, info


def _lu_solve_blocked(lu3: torch.Tensor, piv2: torch.Tensor, b3: torch.Tensor | None, m: int, adjoint: bool,
                      bsz: int) -> torch.Tensor:
    """LU solve above one tile: the row order from the pivots (kernel), a gather, and two host-blocked
    triangular solves."""
    n = lu3.shape[-1]
    if b3 is None:
        b3 = torch.eye(n, m).to("trn").expand(bsz, n, m)
    lu3 = lu3.expand(bsz, n, n) if lu3.shape[0] != bsz else lu3
    order = torch.empty((piv2.shape[0], n), dtype=torch.int32, device="trn")
    pivots_order_kernel(piv2, order)
    idx = order.long().expand(bsz, n).unsqueeze(-1).expand(bsz, n, m)
    if not adjoint:  # A = P L U: X = U^-1 L^-1 P^T B
        y = _trsolve(lu3, torch.gather(b3, 1, idx), lower=True, unit=True)
        return _trsolve(lu3, y, lower=False, unit=False)
    y = _trsolve(lu3.mT, b3, lower=True, unit=False)  # U^T
    z = _trsolve(lu3.mT, y, lower=False, unit=True)  # L^T
    return torch.empty_like(z).scatter_(1, idx, z)  # X = P z


def _lu_solve(lu3: torch.Tensor, piv2: torch.Tensor, b3: torch.Tensor | None, m: int, adjoint: bool,
              bsz: int) -> torch.Tensor:
    n = lu3.shape[-1]
    if n > TILE and m and bsz:
        return _lu_solve_blocked(lu3, piv2, b3, m, adjoint, bsz)
    out = _empty((bsz, n, m))
    if n and m and bsz:
        lu_solve_kernel(lu3.mT if adjoint else lu3, piv2, b3, out, adjoint, b3 is None)
    return out


def _unflat(x: torch.Tensor, batch: tuple[int, ...]) -> torch.Tensor:
    return x.reshape(*batch, *x.shape[1:])


# lowerings ----------------------------------------------------------------------------------------------------
@lowering("aten::linalg_cholesky_ex", dtypes=_F32)
def linalg_cholesky_ex(self: torch.Tensor, *, upper: bool = False, check_errors: bool = False) -> Any:
    """Cholesky factor and LAPACK ``info`` (``torch.linalg.cholesky_ex``).

    >>> a = torch.tensor([[4.0, 2.0], [2.0, 3.0]], device="trn")
    >>> torch.linalg.cholesky_ex(a).L.cpu()
    tensor([[2.0000, 0.0000],
            [1.0000, 1.4142]])
    """
    if not _ok(self) or self.dim() < 2 or self.shape[-1] != self.shape[-2]:
        return NotImplemented
    batch, n = tuple(self.shape[:-2]), self.shape[-1]
    a3 = _flat(self)
    if a3.shape[0] == 0 or n == 0:
        return _empty(self.shape), torch.zeros(batch, dtype=torch.int32, device="trn")
    if upper and n <= TILE:
        res, info = _chol_tile(a3, True)
    elif upper:
        lo, info = _chol_lower(a3.mT)
        res = lo.mT.contiguous()
    else:
        res, info = _chol_lower(a3)
    info = info.reshape(batch)
    if check_errors:
        torch.ops.aten._linalg_check_errors(info, "torch.linalg.cholesky_ex", is_matrix=self.dim() == 2)
    return _unflat(res, batch), info


@lowering("aten::cholesky", dtypes=_F32)
def cholesky(self: torch.Tensor, upper: bool = False) -> Any:
    """``torch.cholesky`` (deprecated API): raises torch's error for a non positive-definite input."""
    r = linalg_cholesky_ex(self, upper=upper)
    if r is NotImplemented:
        return NotImplemented
    torch.ops.aten._linalg_check_errors(r[1], "cholesky", is_matrix=self.dim() == 2)
    return r[0]


@lowering("aten::_linalg_check_errors", kind="plumbing")
def linalg_check_errors(info: torch.Tensor, api_name: str, *, is_matrix: bool) -> Any:
    """torch's own ``info`` check (and error message) on a host copy of the (small) ``info`` tensor."""
    if not U.is_trn(info):
        return NotImplemented
    torch.ops.aten._linalg_check_errors(info.cpu(), api_name, is_matrix=is_matrix)
    return None


def _solve_tri(a: torch.Tensor, b: torch.Tensor, upper: bool, left: bool, unit: bool) -> torch.Tensor | None:
    """X with ``op(A) X = B`` (left) or ``X A = B``, batch dims broadcast; None: declined."""
    if not _ok(a, b) or a.dim() < 2 or b.dim() < 2 or a.shape[-1] != a.shape[-2]:
        return None
    n = a.shape[-1]
    if (b.shape[-2] if left else b.shape[-1]) != n:
        return None
    try:
        batch = tuple(torch.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except RuntimeError:
        return None
    bb = b.expand(*batch, *b.shape[-2:])
    if not left:  # X A = B  <=>  A^T X^T = B^T
        aa = a.mT
        upper = not upper
        bb = bb.mT
    else:
        aa = a
    if a.shape[:-2] == torch.Size(batch) or U.prod(a.shape[:-2]) > 1:
        t3 = _flat(aa.expand(*batch, n, n))
    else:
        t3 = aa.reshape(1, n, n)
    res = _trsolve(t3, _flat(bb), lower=not upper, unit=unit)
    res = _unflat(res, batch)
    return res.mT if not left else res


@lowering("aten::linalg_solve_triangular", dtypes=_F32)
def linalg_solve_triangular(self: torch.Tensor, B: torch.Tensor, *, upper: bool, left: bool = True,
                            unitriangular: bool = False, out: torch.Tensor | None = None) -> Any:
    """``torch.linalg.solve_triangular`` by substitution on the Tensor/Vector engines.

    >>> a = torch.tensor([[2.0, 0.0], [1.0, 1.0]], device="trn")
    >>> torch.linalg.solve_triangular(a, torch.ones(2, 1, device="trn"), upper=False).cpu().ravel()
    tensor([0.5000, 0.5000])
    """
    res = _solve_tri(self, B, upper, left, unitriangular)
    if res is None:
        return NotImplemented
    if out is not None:
        if not U.is_trn(out) or out.dtype != torch.float32:
            return NotImplemented
        if tuple(out.shape) != tuple(res.shape):
            out.resize_(res.shape)
        out.copy_(res)
        return out
    return res


@lowering("aten::triangular_solve", dtypes=_F32)
def triangular_solve(self: torch.Tensor, A: torch.Tensor, upper: bool = True, transpose: bool = False,
                     unitriangular: bool = False) -> Any:
    """``torch.triangular_solve(b, A)`` -> (solution, clone of A)."""
    a = A.mT if transpose else A
    res = _solve_tri(a, self, upper != transpose, True, unitriangular)
    if res is None:
        return NotImplemented
    batch = res.shape[:-2]
    return res, A.expand(*batch, *A.shape[-2:]).clone()


@lowering("aten::linalg_lu_factor_ex", dtypes=_F32)
def linalg_lu_factor_ex(A: torch.Tensor, *, pivot: bool = True, check_errors: bool = False) -> Any:
    """LU with partial pivoting, LAPACK layout (``torch.linalg.lu_factor_ex``); matrices up to 128 x 128.

    >>> lu, piv, info = torch.linalg.lu_factor_ex(torch.tensor([[1.0, 2.0], [3.0, 4.0]], device="trn"))
    >>> piv.cpu(), info.item()
    (tensor([2, 2], dtype=torch.int32), 0)
    """
    if not pivot or not _ok(A) or A.dim() < 2 or A.shape[-2] > PANEL_ROWS:
        return NotImplemented
    batch = tuple(A.shape[:-2])
    lu, piv, info = _lu(_flat(A))
    info = info.reshape(batch)
    if check_errors:
        torch.ops.aten._linalg_check_errors(info, "torch.linalg.lu_factor_ex", is_matrix=A.dim() == 2)
    return _unflat(lu, batch), piv.reshape(*batch, piv.shape[-1]), info


def _bcast_lu(lu: torch.Tensor, piv: torch.Tensor, batch: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    n = lu.shape[-1]
    if U.prod(lu.shape[:-2]) <= 1 and U.prod(batch) > 1:
        return lu.reshape(1, n, n), piv.reshape(1, n)
    return _flat(lu.expand(*batch, n, n)), piv.expand(*batch, n).reshape(U.prod(batch), n)


@lowering("aten::linalg_lu_solve", dtypes=(torch.float32, torch.int32))
def linalg_lu_solve(LU: torch.Tensor, pivots: torch.Tensor, B: torch.Tensor, *, left: bool = True,
                    adjoint: bool = False, out: torch.Tensor | None = None) -> Any:
    """``torch.linalg.lu_solve`` (row swaps as a permutation matmul, then two substitutions)."""
    if not _ok(LU, B) or not U.is_trn(pivots) or pivots.dtype != torch.int32 or LU.dim() < 2 or B.dim() < 2:
        return NotImplemented
    n = LU.shape[-1]
    if LU.shape[-2] != n or n > PANEL_ROWS or pivots.shape[-1] != n:
        return NotImplemented
    try:
        batch = tuple(torch.broadcast_shapes(LU.shape[:-2], pivots.shape[:-1], B.shape[:-2]))
    except RuntimeError:
        return NotImplemented
    bb = B.expand(*batch, *B.shape[-2:])
    if not left:  # X A = B  <=>  A^H X^H = B^H
        bb = bb.mT
        adjoint = not adjoint
    if bb.shape[-2] != n:
        return NotImplemented
    lu3, piv2 = _bcast_lu(LU, pivots, batch)
    b3 = _flat(bb)
    res = _unflat(_lu_solve(lu3, piv2, b3, b3.shape[-1], adjoint, b3.shape[0]), batch)
    if not left:
        res = res.mT
    if out is not None:
        if not U.is_trn(out) or out.dtype != torch.float32:
            return NotImplemented
        if tuple(out.shape) != tuple(res.shape):
            out.resize_(res.shape)
        out.copy_(res)
        return out
    return res


@lowering("aten::linalg_inv_ex", dtypes=_F32)
def linalg_inv_ex(A: torch.Tensor, *, check_errors: bool = False, inverse: torch.Tensor | None = None,
                  info: torch.Tensor | None = None) -> Any:
    """Inverse via LU and an LU solve against the identity (``torch.linalg.inv_ex``); up to 128 x 128.

    >>> torch.linalg.inv(torch.tensor([[2.0, 0.0], [0.0, 4.0]], device="trn")).cpu()
    tensor([[0.5000, 0.0000],
            [0.0000, 0.2500]])
    """
    if inverse is not None or info is not None:
        return NotImplemented
    if not _ok(A) or A.dim() < 2 or A.shape[-1] != A.shape[-2] or A.shape[-1] > PANEL_ROWS:
        return NotImplemented
    batch, n = tuple(A.shape[:-2]), A.shape[-1]
    lu, piv, inf = _lu(_flat(A))
    res = _unflat(_lu_solve(lu, piv, None, n, False, lu.shape[0]), batch)
    inf = inf.reshape(batch)
    if check_errors:
        torch.ops.aten._linalg_check_errors(inf, "torch.linalg.inv_ex", is_matrix=A.dim() == 2)
    return res, inf


@lowering("aten::_linalg_solve_ex", dtypes=_F32)
def linalg_solve_ex(A: torch.Tensor, B: torch.Tensor, *, left: bool = True, check_errors: bool = False) -> Any:
    """``torch.linalg.solve``'s kernel: LU of A, then an LU solve (returns result, LU, pivots, info)."""
    if not _ok(A, B) or A.dim() < 2 or A.shape[-1] != A.shape[-2] or A.shape[-1] > PANEL_ROWS or B.dim() < 1:
        return NotImplemented
    n = A.shape[-1]
    vector = B.dim() == 1 or (left and B.dim() == A.dim() - 1 and B.shape == A.shape[:-1])
    bm = B.unsqueeze(-1) if vector else B
    try:
        batch = tuple(torch.broadcast_shapes(A.shape[:-2], bm.shape[:-2]))
    except RuntimeError:
        return NotImplemented
    abatch = tuple(A.shape[:-2])
    lu, piv, info = _lu(_flat(A))
    lu_b, piv_b = _unflat(lu, abatch), piv.reshape(*abatch, n)
    res = linalg_lu_solve(lu_b, piv_b, bm, left=left)
    if res is NotImplemented:
        return NotImplemented
    if vector:
        res = res.squeeze(-1)
    info = info.reshape(abatch)
    if check_errors:
        torch.ops.aten._linalg_check_errors(info, "torch.linalg.solve_ex", is_matrix=A.dim() == 2)
    del batch
    return res, lu_b, piv_b, info


@lowering("aten::linalg_qr", dtypes=_F32)
def linalg_qr(A: torch.Tensor, mode: str = "reduced") -> Any:
    """Householder QR with LAPACK's signs (``torch.linalg.qr``); up to 128 rows and 512 columns.

    >>> q, r = torch.linalg.qr(torch.tensor([[3.0, 1.0], [4.0, 2.0]], device="trn"))
    >>> r.cpu()
    tensor([[-5.0000, -2.2000],
            [ 0.0000,  0.4000]])
    """
    if mode not in ("reduced", "complete", "r") or not _ok(A) or A.dim() < 2:
        return NotImplemented
    m, n = A.shape[-2], A.shape[-1]
    if m > TILE or n > QR_MAX_COLS:
        return NotImplemented
    batch = tuple(A.shape[:-2])
    k = min(m, n)
    kq = m if mode == "complete" else k
    kr = m if mode == "complete" else k
    a3 = _flat(A)
    b = a3.shape[0]
    q = _empty((b, m, kq)) if mode != "r" else None
    r = torch.zeros((b, kr, n), dtype=torch.float32, device="trn") if kr > k else _empty((b, kr, n))
    if b and m and n:
        qr_kernel(a3, q.mT if q is not None else None, r, kq, kr, None)
    elif q is not None and b and m:  # n == 0: Q is the identity (complete) / empty
        q.copy_(torch.eye(m, kq).expand(b, m, kq).to("trn"))
    qo = _unflat(q, batch) if q is not None else torch.empty((0,), dtype=torch.float32, device="trn")
    return qo, _unflat(r, batch)


def _unpack(lu3: torch.Tensor, piv2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    b, m, n = lu3.shape
    k = min(m, n)
    p, lo, up = _empty((b, m, m)), _empty((b, m, k)), _empty((b, k, n))
    if b and m and n:
        lu_unpack_kernel(lu3, piv2, p, lo, up)
    elif b and m:
        p.copy_(torch.eye(m).expand(b, m, m).to("trn"))
    return p, lo, up


@lowering("aten::lu_unpack", dtypes=(torch.float32, torch.int32))
def lu_unpack(LU_data: torch.Tensor, LU_pivots: torch.Tensor, unpack_data: bool = True,
              unpack_pivots: bool = True) -> Any:
    """``torch.lu_unpack``: permutation matrix, unit-lower L and upper U from ``getrf`` results."""
    if not (unpack_data or unpack_pivots) or not _ok(LU_data) or LU_data.dim() < 2:
        return NotImplemented
    m, n = LU_data.shape[-2], LU_data.shape[-1]
    if not U.is_trn(LU_pivots) or LU_pivots.dtype != torch.int32 or m > TILE or n > TILE:
        return NotImplemented
    batch = tuple(LU_data.shape[:-2])
    if tuple(LU_pivots.shape) != (*batch, min(m, n)):
        return NotImplemented
    p, lo, up = _unpack(_flat(LU_data), LU_pivots.reshape(U.prod(batch), min(m, n)))
    none = _empty((0,))
    return (_unflat(p, batch) if unpack_pivots else none, _unflat(lo, batch) if unpack_data else none,
            _unflat(up, batch) if unpack_data else none)


@lowering("aten::linalg_lu", dtypes=_F32)
def linalg_lu(A: torch.Tensor, *, pivot: bool = True) -> Any:
    """``torch.linalg.lu``: ``P, L, U`` with ``A = P L U`` (LU kernel, then the unpack kernel)."""
    if not pivot or not _ok(A) or A.dim() < 2 or A.shape[-1] > TILE or A.shape[-2] > TILE:
        return NotImplemented
    batch = tuple(A.shape[:-2])
    lu, piv, _ = _lu(_flat(A))
    p, lo, up = _unpack(lu, piv)
    return _unflat(p, batch), _unflat(lo, batch), _unflat(up, batch)


def _det(A: torch.Tensor, logdet: bool) -> Any:
    if not _ok(A) or A.dim() < 2 or A.shape[-1] != A.shape[-2] or A.shape[-1] > TILE:
        return None
    batch, n = tuple(A.shape[:-2]), A.shape[-1]
    # as torch's CPU kernel: det(A^T) = det(A), so a row-major A is factorised transposed (the backward
    # formula expects exactly this LU)
    lu, piv, _ = _lu(_flat(A.mT if A.is_contiguous() else A))
    res = _empty((lu.shape[0], 2 if logdet else 1))
    if n and lu.shape[0]:
        lu_det_kernel(lu, piv, res, logdet)
    elif lu.shape[0]:  # empty matrix: det 1, log|det| 0
        res.fill_(1.0)
        if logdet:
            res[:, 1] = 0.0
    return res, _unflat(lu, batch), piv.reshape(*batch, n), batch


@lowering("aten::_linalg_det", dtypes=_F32)
def linalg_det(A: torch.Tensor) -> Any:
    """``torch.linalg.det``'s kernel: LU, then a kernel multiplying U's diagonal with the permutation sign."""
    r = _det(A, False)
    if r is None:
        return NotImplemented
    res, lu, piv, batch = r
    return res[:, 0].reshape(batch), lu, piv


@lowering("aten::_linalg_slogdet", dtypes=_F32)
def linalg_slogdet(A: torch.Tensor) -> Any:
    """``torch.linalg.slogdet``'s kernel: ``(sign, log|det|, LU, pivots)``."""
    r = _det(A, True)
    if r is None:
        return NotImplemented
    res, lu, piv, batch = r
    return res[:, 0].reshape(batch).clone(), res[:, 1].reshape(batch).clone(), lu, piv


@lowering("aten::_cholesky_solve_helper", dtypes=_F32)
def cholesky_solve_helper(self: torch.Tensor, A: torch.Tensor, upper: bool) -> Any:
    """``torch.cholesky_solve``'s kernel (batch dims already broadcast): two triangular solves."""
    if self.dim() < 2 or A.dim() < 2:
        return NotImplemented
    if upper:  # A = U^T U
        y = _solve_tri(A.mT, self, False, True, False)
        x = _solve_tri(A, y, True, True, False) if y is not None else None
    else:  # A = L L^T
        y = _solve_tri(A, self, False, True, False)
        x = _solve_tri(A.mT, y, True, True, False) if y is not None else None
    return NotImplemented if x is None else x


@lowering("aten::cholesky_inverse", dtypes=_F32)
def cholesky_inverse(self: torch.Tensor, upper: bool = False, *, out: torch.Tensor | None = None) -> Any:
    """``(L L^T)^{-1} = L^{-T} L^{-1}``: one triangular solve against the identity and one matmul."""
    if not _ok(self) or self.dim() < 2 or self.shape[-1] != self.shape[-2]:
        return NotImplemented
    n = self.shape[-1]
    batch = tuple(self.shape[:-2])
    eye = torch.eye(n).to("trn").expand(*batch, n, n)
    low = self.mT if upper else self
    li = _solve_tri(low, eye, False, True, False)  # L^{-1}
    if li is None:
        return NotImplemented
    res = torch.matmul(li.mT, li)
    if out is not None:
        if not U.is_trn(out) or out.dtype != torch.float32:
            return NotImplemented
        if tuple(out.shape) != tuple(res.shape):
            out.resize_(res.shape)
        out.copy_(res)
        return out
    return res


@lowering("aten::geqrf", dtypes=_F32)
def geqrf(self: torch.Tensor) -> Any:
    """``torch.geqrf``: LAPACK's packed Householder QR (R and the reflectors) and ``tau``; up to 128 rows."""
    if not _ok(self) or self.dim() < 2 or self.shape[-2] > TILE or self.shape[-1] > QR_MAX_COLS:
        return NotImplemented
    m, n = self.shape[-2], self.shape[-1]
    batch = tuple(self.shape[:-2])
    a3 = _flat(self)
    b = a3.shape[0]
    packed = _empty((b, n, m)).mT  # column-major, as LAPACK leaves it
    tau = _empty((b, min(m, n)))
    if b and m and n:
        qr_kernel(a3, None, packed, min(m, n), min(m, n), tau)
    return _unflat(packed, batch), tau.reshape(*batch, min(m, n))


@lowering("aten::linalg_householder_product", dtypes=_F32)
def linalg_householder_product(input: torch.Tensor, tau: torch.Tensor, *, out: torch.Tensor | None = None) -> Any:
    """``torch.linalg.householder_product`` (``orgqr``): accumulates ``H_1 ... H_k`` on the Tensor engine."""
    if not _ok(input, tau) or input.dim() < 2 or out is not None:
        return NotImplemented
    m, n = input.shape[-2], input.shape[-1]
    if m > TILE or n > m or tau.shape[-1] > n or tuple(tau.shape[:-1]) != tuple(input.shape[:-2]):
        return NotImplemented
    batch = tuple(input.shape[:-2])
    v3 = _flat(input)
    b = v3.shape[0]
    res = _empty((b, n, m)).mT
    if b and m and n:
        if tau.shape[-1] == 0:
            res.copy_(torch.eye(m, n).expand(b, m, n).to("trn"))
        else:
            householder_kernel(v3, tau.reshape(b, tau.shape[-1]), res.mT)
    return _unflat(res, batch)
