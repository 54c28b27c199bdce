"""LU on the ``trn`` device: ``getrf`` with partial pivoting, LU solve, inverse, solve, ``lu_unpack``,
``linalg.lu``, det and slogdet, as trnlang kernels (float32).

Each matrix (up to 128 x 128: rows on partitions, columns on the free axis) is factorised in SBUF, one
column per step of a ``tl.sequential_range`` loop. LU never moves rows: the pivot row is extracted with a
one-hot matmul, used rows are masked out of later steps, and the LAPACK row order (and LAPACK's sequential
``ipiv``) is rebuilt at the end with a permutation matmul. Ties pick the first candidate in LAPACK's current
row order, as ``idamax`` does. Up to ``PANEL_ROWS`` = 2048 rows the factorisation is blocked on the host
(panel kernel over up to 16 row tiles, triangular solve of ``U12``, Schur update with the ``trn`` matmul);
det / slogdet, lu_unpack and linalg_lu stay within one tile. Larger inputs are declined (CPU fallback).

Example:
    >>> lu, piv, info = torch.linalg.lu_factor_ex(torch.tensor([[1.0, 2.0], [3.0, 4.0]], device="trn"))
    >>> piv.cpu(), info.item()
    (tensor([2, 2], dtype=torch.int32), 0)
"""

from __future__ import annotations

from typing import Any

import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.linalg import common as C
from stdlib_kernels.linalg import complex_embed as CE
from trnlang.device import decline, lowering

#: Rows of the largest LU handled natively (the panel kernel spans up to 16 row tiles; its cold compile grows with
#: them: ~14 s per panel height at 2048 rows, so a cold 2048 x 2048 LU compiles for minutes, once per shape).
PANEL_ROWS = 2048
#: Free-axis width of one PSUM bank of float32 (the widest matmul result).
_BANK = 512


def _pivot_state(kmin):
    """The pivoting state of one matrix (trace-time helper of the LU kernels): ``pv`` ``[1, kmin]`` (the pivots
    as floats) and ``state`` ``[1, 3]`` = ``[ok, step count k, info]``, ok = 1."""
    pv = tl.zeros((1, kmin), tl.float32)
    state = tl.zeros((1, 3), tl.float32)  # [ok, step count k, info]
    state[:, 0:1] = tl.ones((1, 1), tl.float32)
    return pv, state


def _pick(magrow, pos):
    """The pivot of one step from the candidates' magnitudes ``magrow`` ``[1, m]`` (used rows -1): its LAPACK
    position ``pp`` (ties: the first in the current row order, as ``idamax``) and its one-hot row ``ohr``."""
    best = tl.max(magrow, axis=1, keepdims=True)
    score = tl.where(magrow == best, pos, 1.0e9)
    pp = tl.min(score, axis=1, keepdims=True)  # LAPACK position of the pivot row (idamax: first)
    ohr = tl.where(pos == pp, 1.0, 0.0)
    return pp, ohr


def _pivot(state, p):
    """Step ``k`` (``state[0, 1]``) meets the pivot ``p``: a zero pivot makes ``info`` the 1-based step of the
    first one (``getrf``). Returns ``kk`` (the step count) and ``1 / p`` (0 for a zero pivot)."""
    zero = p == 0.0
    fail = tl.where(zero, state[:, 0:1], 0.0)
    kk = state[:, 1:2]
    state[:, 2:3] = state[:, 2:3] + fail * (kk + 1.0)
    state[:, 0:1] = state[:, 0:1] - fail
    return kk, tl.where(zero, 0.0, 1.0 / tl.where(zero, 1.0, p))


def _swap(pv, pos, state, k, pp, kk, ohr):
    """Record pivot ``pp`` of step ``k`` (1-based) and swap the LAPACK positions of the rows at ``k`` and ``pp``."""
    pv[:, k:k + 1] = pp + 1.0
    ohk = tl.where(pos == kk, 1.0, 0.0)  # the row now at position k swaps with the pivot row
    pos[:, :] = pos + ohk * (pp - kk) + ohr * (kk - pp)
    state[:, 1:2] = kk + 1.0


def _store_pivots(piv, info, bi, kmin, pv, state):
    """``piv[bi, :kmin]`` and ``info[bi, 0]`` as int32 from the pivoting state."""
    tl.store(piv[bi:bi + 1, tl.arange(kmin)[None, :]], pv.astype(tl.int32))
    tl.store(info[bi:bi + 1, 0:1], state[:, 2:3].astype(tl.int32))


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
        pv, state = _pivot_state(kmin)
        for k in tl.sequential_range(kmin):
            col = work[:, k:k + 1]
            mag = tl.where(used > 0.0, -1.0, tl.abs(col))
            magrow = tl.transpose(mag)
            pp, ohr = _pick(magrow, pos)
            ohc = tl.transpose(ohr)
            prow = tl.copy(tl.matmul(ohc, work, transpose_x=True))  # the pivot row
            kk, rp = _pivot(state, prow[:, k:k + 1])
            lmask = (1.0 - used) * (1.0 - ohc)
            lcol = col * tl.broadcast_to(rp, (m, 1)) * lmask
            right = tl.where(cols > k, prow, 0.0)
            work[:, :] = work - tl.matmul(tl.transpose(lcol), right, transpose_x=True)
            work[:, k:k + 1] = tl.where(lmask > 0.0, lcol, col)
            used[:, :] = used + ohc
            _swap(pv, pos, state, k, pp, kk, ohr)
        perm = tl.where(tl.broadcast_to(tl.transpose(pos), (m, m)) == isa.iota(rows * 0 + mcols, tl.float32),
                        1.0, 0.0)  # perm[i, j] = 1 where original row i sits at position j
        tl.store(lu[bi, rows, cols], tl.matmul(perm, work, transpose_x=True))
        _store_pivots(piv, info, bi, kmin, pv, state)


@trn.kernel
def lu_panel_kernel(a, out, order, piv, info):
    """Partial-pivoting LU of a tall panel ``a[b]`` ``[m, w]`` (m <= 2048 over up to 16 row tiles, w <= 128),
    the panel step of the blocked LU. ``out[b]``: the factors with rows left in place (not yet permuted),
    ``order[b, j]``: the original row at LAPACK position ``j``, ``piv``/``info`` as ``getrf`` (panel-local)."""
    m, w = a.shape[-2], a.shape[-1]
    kmin = min(m, w)
    heights = [min(C.TILE, m - t * C.TILE) for t in range(tl.cdiv(m, C.TILE))]
    cols = tl.arange(w)[None, :]
    mcols = tl.arange(m)[None, :]
    for bi in tl.affine_range(a.shape[0]):
        works, useds = [], []
        for t, tr in enumerate(heights):
            wk = tl.ndarray((tr, w), tl.float32, buffer=tl.sbuf)
            wk[:, :] = tl.load(a[bi, t * C.TILE + tl.arange(tr)[:, None], cols])
            works.append(wk)
            useds.append(tl.zeros((tr, 1), tl.float32))
        pos = tl.ndarray((1, m), tl.float32, buffer=tl.sbuf)
        pos[:, :] = isa.iota(mcols, tl.float32)
        magrow = tl.ndarray((1, m), tl.float32, buffer=tl.sbuf)
        pv, state = _pivot_state(kmin)
        for k in tl.sequential_range(kmin):
            for t, tr in enumerate(heights):
                mag = tl.where(useds[t] > 0.0, -1.0, tl.abs(works[t][:, k:k + 1]))
                magrow[:, t * C.TILE:t * C.TILE + tr] = tl.transpose(mag)
            pp, ohr = _pick(magrow, pos)
            ohcs = [tl.copy(tl.transpose(ohr[:, t * C.TILE:t * C.TILE + tr])) for t, tr in enumerate(heights)]
            acc = tl.zeros((1, w), tl.float32, buffer=tl.psum)
            for t in range(len(heights)):
                acc += tl.matmul(ohcs[t], works[t], transpose_x=True)
            prow = tl.copy(acc)
            kk, rp = _pivot(state, prow[:, k:k + 1])
            right = tl.where(cols > k, prow, 0.0)
            for t, tr in enumerate(heights):
                col = works[t][:, k:k + 1]
                lmask = (1.0 - useds[t]) * (1.0 - ohcs[t])
                lcol = col * tl.broadcast_to(rp, (tr, 1)) * lmask
                works[t][:, :] = works[t] - tl.matmul(tl.transpose(lcol), right, transpose_x=True)
                works[t][:, k:k + 1] = tl.where(lmask > 0.0, lcol, col)
                useds[t][:, :] = useds[t] + ohcs[t]
            _swap(pv, pos, state, k, pp, kk, ohr)
        # order[j] = sum_i i * (pos[i] == j): one-hot matmuls, exact for integers (one PSUM bank of j at a time)
        for c0 in range(0, m, _BANK):
            cw = min(_BANK, m - c0)
            ccols = c0 + tl.arange(cw)[None, :]
            oacc = tl.zeros((1, cw), tl.float32, buffer=tl.psum)
            for t, tr in enumerate(heights):
                rloc = tl.arange(tr)[:, None]
                hit = tl.where(tl.broadcast_to(tl.copy(tl.transpose(pos[:, t * C.TILE:t * C.TILE + tr])), (tr, cw))
                               == isa.iota(rloc * 0 + ccols, tl.float32), 1.0, 0.0)
                oacc += tl.matmul(isa.iota(t * C.TILE + rloc, tl.float32), hit, transpose_x=True)
            tl.store(order[bi:bi + 1, ccols], tl.copy(oacc).astype(tl.int32))
        for t, tr in enumerate(heights):
            tl.store(out[bi, t * C.TILE + tl.arange(tr)[:, None], cols], works[t])
        _store_pivots(piv, info, bi, kmin, pv, state)


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
    tm = min(C.TILE, m)
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
                C.substitute(tri, work, n, tm, True, False)   # U^T (lower part of LU^T)
                C.substitute(tri, work, n, tm, False, True)   # L^T (unit upper part of LU^T)
                res = tl.matmul(selt, tl.transpose(work), transpose_x=True)
            else:
                work[:, :] = tl.transpose(tl.matmul(sel, rhs, transpose_x=True))
                C.substitute(tri, work, n, tm, True, True)    # L (unit lower)
                C.substitute(tri, work, n, tm, False, False)  # U
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


# host helpers -------------------------------------------------------------------------------------------------
def _lu_blocked(a3: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-looking blocked getrf for ``m <= PANEL_ROWS`` rows and any columns: per 128-column panel, the
    panel kernel (pivot search over all remaining rows), the panel's row order applied to the other columns,
    ``U12 = L11^{-1} A12`` (triangular-solve kernel) and the Schur update ``A22 -= L21 U12`` (trn matmul)."""
    b, m, n = a3.shape
    kmin = min(m, n)
    work = a3.clone(memory_format=torch.contiguous_format)
    piv = torch.empty((b, kmin), dtype=torch.int32, device="trn")
    info = torch.zeros((b, 1), dtype=torch.int32, device="trn")
    base = torch.arange(b, device="trn").unsqueeze(-1) * m  # the first flat row of each matrix
    for j0 in range(0, kmin, C.TILE):
        w = min(C.TILE, kmin - j0)
        rows = m - j0
        panel = C.empty((b, rows, w))
        order = torch.empty((b, rows), dtype=torch.int32, device="trn")
        ppiv = torch.empty((b, w), dtype=torch.int32, device="trn")
        pinfo = torch.empty((b, 1), dtype=torch.int32, device="trn")
        lu_panel_kernel(work[:, j0:, j0:j0 + w], panel, order, ppiv, pinfo)
        work[:, j0:, j0:j0 + w] = panel
        # the panel's row order applied to whole rows: its sequential swaps move only the first w positions and
        # the pivots' positions (at most 2w rows), so only those rows are copied
        dst = torch.cat((torch.arange(w, device="trn").expand(b, w), ppiv.long() - 1), 1)
        src = torch.gather(order.long(), 1, dst)
        flat = work.view(b * m, n)
        flat[(dst + (base + j0)).reshape(-1)] = flat[(src + (base + j0)).reshape(-1)]
        piv[:, j0:j0 + w] = ppiv + j0
        info = torch.where((info == 0) & (pinfo != 0), pinfo + j0, info)
        if j0 + w < n:
            u12 = C.trsolve(work[:, j0:j0 + w, j0:j0 + w], work[:, j0:j0 + w, j0 + w:], lower=True, unit=True,
                              by_inverse=True)
            work[:, j0:j0 + w, j0 + w:] = u12
            if j0 + w < m:
                work[:, j0 + w:, j0 + w:] -= torch.bmm(work[:, j0 + w:, j0:j0 + w], u12)
    lu = C.empty((b, n, m)).mT
    lu.copy_(work)
    return lu, piv, info


def _lu(a3: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """getrf of [B, m, n]; LU comes back column-major per matrix (LAPACK's layout, as torch's CPU op)."""
    b, m, n = a3.shape
    if (m > C.TILE or n > C.TILE) and b and m and n:
        return _lu_blocked(a3)
    lu = C.empty((b, n, m)).mT
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
        y = C.trsolve(lu3, torch.gather(b3, 1, idx), lower=True, unit=True, by_inverse=True)
        return C.trsolve(lu3, y, lower=False, unit=False, by_inverse=True)
    y = C.trsolve(lu3.mT, b3, lower=True, unit=False, by_inverse=True)  # U^T
    z = C.trsolve(lu3.mT, y, lower=False, unit=True, by_inverse=True)  # L^T
    return torch.empty_like(z).scatter_(1, idx, z)  # X = P z


def _lu_solve(lu3: torch.Tensor, piv2: torch.Tensor, b3: torch.Tensor | None, m: int, adjoint: bool,
              bsz: int) -> torch.Tensor:
    n = lu3.shape[-1]
    if n > C.TILE and m and bsz:
        return _lu_solve_blocked(lu3, piv2, b3, m, adjoint, bsz)
    out = C.empty((bsz, n, m))
    if n and m and bsz:
        lu_solve_kernel(lu3.mT if adjoint else lu3, piv2, b3, out, adjoint, b3 is None)
    return out


# lowerings ----------------------------------------------------------------------------------------------------
def _c_lu_ok(A: Any) -> bool:
    """A complex64 matrix (batch) the column-by-column complex LU takes."""
    return CE.is_complex64(A) and A.dim() >= 2 and max(A.shape[-2:]) <= CE.LU_MAX


def _c_factor(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(LU, pivots, info)`` of a complex64 ``[..., m, n]`` with its batch dims."""
    batch, k = tuple(A.shape[:-2]), min(A.shape[-2:])
    if A.numel() == 0:
        return (torch.empty(A.shape, dtype=A.dtype, device="trn"), torch.ones((*batch, k), dtype=torch.int32,
                device="trn").cumsum(-1).to(torch.int32), torch.zeros(batch, dtype=torch.int32, device="trn"))
    lu, piv, info = CE.lu_factor(C.flat(A).contiguous())
    return C.unflat(lu, batch), piv.reshape(*batch, k), info.reshape(batch)


@lowering("aten::linalg_lu_factor_ex", dtypes=(torch.float32, torch.complex64))
def linalg_lu_factor_ex(A: torch.Tensor, *, pivot: bool = True, check_errors: bool = False) -> Any:
    """LU with partial pivoting, LAPACK layout (``torch.linalg.lu_factor_ex``); up to 2048 rows.

    >>> lu, piv, info = torch.linalg.lu_factor_ex(torch.tensor([[1.0, 2.0], [3.0, 4.0]], device="trn"))
    >>> piv.cpu(), info.item()
    (tensor([2, 2], dtype=torch.int32), 0)
    """
    if pivot and _c_lu_ok(A):
        lu, piv, info = _c_factor(A)
        if check_errors:
            torch.ops.aten._linalg_check_errors(info, "torch.linalg.lu_factor_ex", is_matrix=A.dim() == 2)
        return lu, piv, info
    if not pivot or not C.ok(A) or A.dim() < 2 or A.shape[-2] > PANEL_ROWS:
        return decline("pivot=False, not a float32 trn matrix, or more than 2048 rows (complex64: 256)")
    batch = tuple(A.shape[:-2])
    lu, piv, info = _lu(C.flat(A))
    info = info.reshape(batch)
    if check_errors:
        torch.ops.aten._linalg_check_errors(info, "torch.linalg.lu_factor_ex", is_matrix=A.dim() == 2)
    return C.unflat(lu, batch), piv.reshape(*batch, piv.shape[-1]), info


def _bcast_lu(lu: torch.Tensor, piv: torch.Tensor, batch: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    n = lu.shape[-1]
    if U.prod(lu.shape[:-2]) <= 1 and U.prod(batch) > 1:
        return lu.reshape(1, n, n), piv.reshape(1, n)
    return C.flat(lu.expand(*batch, n, n)), piv.expand(*batch, n).reshape(U.prod(batch), n)


@lowering("aten::linalg_lu_solve", dtypes=(torch.float32, torch.int32, torch.complex64))
def linalg_lu_solve(LU: torch.Tensor, pivots: torch.Tensor, B: torch.Tensor, *, left: bool = True,
                    adjoint: bool = False, out: torch.Tensor | None = None) -> Any:
    """``torch.linalg.lu_solve`` (row swaps as a permutation matmul, then two substitutions)."""
    if CE.is_complex64(LU, B) and U.is_trn(pivots) and pivots.dtype == torch.int32 and LU.dim() >= 2 \
            and B.dim() >= 2 and LU.shape[-1] == LU.shape[-2] == B.shape[-2 if left else -1] <= CE.LU_MAX:
        if left:
            return C.into_out(_c_lu_solve(LU, pivots, B, adjoint), out)
        # X A = B  <=>  A^H X^H = B^H (and X A^H = B  <=>  A X^H = B^H)
        return C.into_out(_c_lu_solve(LU, pivots, B.mH.resolve_conj(), not adjoint).mH.resolve_conj(), out)
    if not C.ok(LU, B) or not U.is_trn(pivots) or pivots.dtype != torch.int32 or LU.dim() < 2 or B.dim() < 2:
        return decline("not float32 trn LU/B with int32 trn pivots, or fewer than 2 dims")
    n = LU.shape[-1]
    if LU.shape[-2] != n or n > PANEL_ROWS or pivots.shape[-1] != n:
        return decline("LU not square, n above 2048, or pivots of the wrong length")
    try:
        batch = tuple(torch.broadcast_shapes(LU.shape[:-2], pivots.shape[:-1], B.shape[:-2]))
    except RuntimeError:
        return decline("batch dims do not broadcast: torch raises")
    bb = B.expand(*batch, *B.shape[-2:])
    if not left:  # X A = B  <=>  A^H X^H = B^H
        bb = bb.mT
        adjoint = not adjoint
    if bb.shape[-2] != n:
        return decline("B's rows do not match LU: torch raises")
    lu3, piv2 = _bcast_lu(LU, pivots, batch)
    b3 = C.flat(bb)
    res = C.unflat(_lu_solve(lu3, piv2, b3, b3.shape[-1], adjoint, b3.shape[0]), batch)
    if not left:
        res = res.mT
    return C.into_out(res, out)


@lowering("aten::linalg_inv_ex", dtypes=(torch.float32, torch.complex64))
def linalg_inv_ex(A: torch.Tensor, *, check_errors: bool = False, inverse: torch.Tensor | None = None,
                  info: torch.Tensor | None = None) -> Any:
    """Inverse via LU and an LU solve against the identity (``torch.linalg.inv_ex``); up to 2048 x 2048.

    >>> torch.linalg.inv(torch.tensor([[2.0, 0.0], [0.0, 4.0]], device="trn")).cpu()
    tensor([[0.5000, 0.0000],
            [0.0000, 0.2500]])
    """
    if inverse is not None or info is not None:
        return decline("inverse=/info= out tensors")
    if CE.is_complex64(A) and A.dim() >= 2 and A.shape[-1] == A.shape[-2] and 2 * A.shape[-1] <= PANEL_ROWS:
        if A.numel() == 0:
            return torch.empty(A.shape, dtype=A.dtype, device="trn"), torch.zeros(A.shape[:-2], dtype=torch.int32,
                                                                                   device="trn")
        return CE.inv_ex(A, check_errors)  # the real embedding's inverse
    if not C.ok(A) or A.dim() < 2 or A.shape[-1] != A.shape[-2] or A.shape[-1] > PANEL_ROWS:
        return decline("not a float32 trn square matrix, or n above 2048 (complex64: 1024)")
    batch, n = tuple(A.shape[:-2]), A.shape[-1]
    lu, piv, inf = _lu(C.flat(A))
    res = C.unflat(_lu_solve(lu, piv, None, n, False, lu.shape[0]), batch)
    inf = inf.reshape(batch)
    if check_errors:
        torch.ops.aten._linalg_check_errors(inf, "torch.linalg.inv_ex", is_matrix=A.dim() == 2)
    return res, inf


def _c_lu_solve(LU: torch.Tensor, pivots: torch.Tensor, B: torch.Tensor, adjoint: bool = False) -> torch.Tensor:
    """complex64 ``A X = B`` (``A^H X = B`` when ``adjoint``) from A's LU (batch dims broadcast)."""
    n = LU.shape[-1]
    batch = tuple(torch.broadcast_shapes(LU.shape[:-2], pivots.shape[:-1], B.shape[:-2]))
    if n == 0 or B.numel() == 0 or U.prod(batch) == 0:
        return torch.empty((*batch, *B.shape[-2:]), dtype=torch.complex64, device="trn")
    lu3 = C.flat(LU.expand(*batch, n, n)).contiguous()
    piv2 = pivots.expand(*batch, n).reshape(-1, n)
    b3 = C.flat(B.expand(*batch, *B.shape[-2:])).contiguous()
    return C.unflat((CE.lu_solve_adjoint if adjoint else CE.lu_solve)(lu3, piv2, b3), batch)


@lowering("aten::_linalg_solve_ex", dtypes=(torch.float32, torch.complex64))
def linalg_solve_ex(A: torch.Tensor, B: torch.Tensor, *, left: bool = True, check_errors: bool = False) -> Any:
    """``torch.linalg.solve``'s kernel: LU of A, then an LU solve (returns result, LU, pivots, info)."""
    if _c_lu_ok(A) and CE.is_complex64(B) and A.shape[-1] == A.shape[-2] and B.dim() >= 1:
        # torch factorises A itself for complex inputs (never A^T) and solves with the same left/right side
        vector = B.dim() == 1 or (left and B.dim() == A.dim() - 1 and B.shape == A.shape[:-1])
        lu, piv, info = _c_factor(A)
        res = linalg_lu_solve(lu, piv, B.unsqueeze(-1) if vector else B, left=left)
        if res is NotImplemented:
            return res
        if check_errors:
            torch.ops.aten._linalg_check_errors(info, "torch.linalg.solve_ex", is_matrix=A.dim() == 2)
        return (res.squeeze(-1) if vector else res), lu, piv, info
    if not C.ok(A, B) or A.dim() < 2 or A.shape[-1] != A.shape[-2] or A.shape[-1] > PANEL_ROWS or B.dim() < 1:
        return decline("not float32 trn operands, A not square, n above 2048, or a 0-dim B")
    n = A.shape[-1]
    vector = B.dim() == 1 or (left and B.dim() == A.dim() - 1 and B.shape == A.shape[:-1])
    bm = B.unsqueeze(-1) if vector else B
    try:
        batch = tuple(torch.broadcast_shapes(A.shape[:-2], bm.shape[:-2]))
    except RuntimeError:
        return decline("batch dims do not broadcast: torch raises")
    abatch = tuple(A.shape[:-2])
    lu, piv, info = _lu(C.flat(A))
    lu_b, piv_b = C.unflat(lu, abatch), piv.reshape(*abatch, n)
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


def _unpack(lu3: torch.Tensor, piv2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    b, m, n = lu3.shape
    k = min(m, n)
    p, lo, up = C.empty((b, m, m)), C.empty((b, m, k)), C.empty((b, k, n))
    if b and m and n:
        lu_unpack_kernel(lu3, piv2, p, lo, up)
    elif b and m:
        p.copy_(torch.eye(m).expand(b, m, m).to("trn"))
    return p, lo, up


@lowering("aten::lu_unpack", dtypes=(torch.float32, torch.int32, torch.complex64))
def lu_unpack(LU_data: torch.Tensor, LU_pivots: torch.Tensor, unpack_data: bool = True,
              unpack_pivots: bool = True) -> Any:
    """``torch.lu_unpack``: permutation matrix, unit-lower L and upper U from ``getrf`` results (complex64: the
    permutation from the real kernel, L and U as the complex triangles)."""
    if CE.is_complex64(LU_data) and LU_data.dim() >= 2 and (unpack_data or unpack_pivots):
        return _c_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots)
    if not (unpack_data or unpack_pivots) or not C.ok(LU_data) or LU_data.dim() < 2:
        return decline("nothing to unpack, not a float32 trn matrix, or fewer than 2 dims")
    m, n = LU_data.shape[-2], LU_data.shape[-1]
    if not U.is_trn(LU_pivots) or LU_pivots.dtype != torch.int32 or m > C.TILE or n > C.TILE:
        return decline("pivots not an int32 trn tensor, or more than 128 rows or columns")
    batch = tuple(LU_data.shape[:-2])
    if tuple(LU_pivots.shape) != (*batch, min(m, n)):
        return decline("pivots of the wrong shape: torch raises")
    p, lo, up = _unpack(C.flat(LU_data), LU_pivots.reshape(U.prod(batch), min(m, n)))
    none = C.empty((0,))
    return (C.unflat(p, batch) if unpack_pivots else none, C.unflat(lo, batch) if unpack_data else none,
            C.unflat(up, batch) if unpack_data else none)


def _c_unpack(LU: torch.Tensor, piv: torch.Tensor, data: bool, pivots: bool) -> Any:
    m, n = LU.shape[-2], LU.shape[-1]
    k = min(m, n)
    none = torch.empty((0,), dtype=LU.dtype, device="trn")
    lo = up = p = none
    if pivots:
        r = lu_unpack(torch.view_as_real(LU)[..., 0].contiguous(), piv, False, True)  # the real kernel's P
        if r is NotImplemented:
            return r
        p = torch.complex(r[0], torch.zeros_like(r[0]))
    if data:
        eye = torch.eye(m, k, dtype=torch.bool, device="trn")
        low = torch.tril(LU[..., :, :k], -1)
        lo = torch.where(eye, torch.ones((), dtype=LU.dtype, device="trn"), low)
        up = torch.triu(LU[..., :k, :])
    return p, lo, up


@lowering("aten::linalg_lu", dtypes=(torch.float32, torch.complex64))
def linalg_lu(A: torch.Tensor, *, pivot: bool = True) -> Any:
    """``torch.linalg.lu``: ``P, L, U`` with ``A = P L U`` (LU kernel, then the unpack kernel)."""
    if pivot and _c_lu_ok(A):
        lu, piv, _ = _c_factor(A)
        return _c_unpack(lu, piv, True, True)
    if not pivot or not C.ok(A) or A.dim() < 2 or A.shape[-1] > C.TILE or A.shape[-2] > C.TILE:
        return decline("pivot=False, not a float32 trn matrix, or more than 128 rows or columns")
    batch = tuple(A.shape[:-2])
    lu, piv, _ = _lu(C.flat(A))
    p, lo, up = _unpack(lu, piv)
    return C.unflat(p, batch), C.unflat(lo, batch), C.unflat(up, batch)


def _det(A: torch.Tensor, logdet: bool) -> Any:
    if not C.ok(A) or A.dim() < 2 or A.shape[-1] != A.shape[-2] or A.shape[-1] > C.TILE:
        return None
    batch, n = tuple(A.shape[:-2]), A.shape[-1]
    # as torch's CPU kernel: det(A^T) = det(A), so a row-major A is factorised transposed (the backward
    # formula expects exactly this LU)
    lu, piv, _ = _lu(C.flat(A.mT if A.is_contiguous() else A))
    res = C.empty((lu.shape[0], 2 if logdet else 1))
    if n and lu.shape[0]:
        lu_det_kernel(lu, piv, res, logdet)
    elif lu.shape[0]:  # empty matrix: det 1, log|det| 0
        res.fill_(1.0)
        if logdet:
            res[:, 1] = 0.0
    return res, C.unflat(lu, batch), piv.reshape(*batch, n), batch


def _c_det(A: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(U's diagonal [B, n], parity sign [B] float32, LU, pivots)`` of a complex64 square A, factorised
    transposed when contiguous as torch's CPU kernel does (its backward expects that LU)."""
    lu, piv, _ = _c_factor(A.mT if A.is_contiguous() else A)
    d = torch.diagonal(lu, dim1=-2, dim2=-1)
    n = A.shape[-1]
    swaps = (piv != torch.arange(1, n + 1, dtype=torch.int32, device="trn")).sum(-1)
    return d, 1.0 - 2.0 * (swaps % 2).to(torch.float32), lu, piv


def _c_prod(d: torch.Tensor) -> torch.Tensor:
    """The product along the last dim of complex64 ``d`` (native complex products; 1 when empty)."""
    r = torch.ones(d.shape[:-1], dtype=torch.complex64, device="trn")
    for j in range(d.shape[-1]):
        r = r * d[..., j]
    return r


@lowering("aten::_linalg_det", dtypes=(torch.float32, torch.complex64))
def linalg_det(A: torch.Tensor) -> Any:
    """``torch.linalg.det``'s kernel: LU, then a kernel multiplying U's diagonal with the permutation sign."""
    if _c_lu_ok(A) and A.shape[-1] == A.shape[-2]:
        d, sign, lu, piv = _c_det(A)
        return _c_prod(d) * sign, lu, piv
    r = _det(A, False)
    if r is None:
        return decline("not a float32 trn square matrix, or n above 128")
    res, lu, piv, batch = r
    return res[:, 0].reshape(batch), lu, piv


@lowering("aten::_linalg_slogdet", dtypes=(torch.float32, torch.complex64))
def linalg_slogdet(A: torch.Tensor) -> Any:
    """``torch.linalg.slogdet``'s kernel: ``(sign, log|det|, LU, pivots)`` (complex64: the sign as the product of
    ``u / |u|`` over U's diagonal, ``log|det|`` as the sum of ``log|u|``)."""
    if _c_lu_ok(A) and A.shape[-1] == A.shape[-2]:
        d, sign, lu, piv = _c_det(A)
        mag = d.abs()
        singular = (mag == 0).any(-1)
        unit = d / torch.where(mag == 0, 1.0, mag)
        s = torch.where(singular, torch.zeros((), dtype=torch.complex64, device="trn"), _c_prod(unit) * sign)
        return s, torch.log(mag).sum(-1), lu, piv
    r = _det(A, True)
    if r is None:
        return decline("not a float32 trn square matrix, or n above 128")
    res, lu, piv, batch = r
    return res[:, 0].reshape(batch).clone(), res[:, 1].reshape(batch).clone(), lu, piv
