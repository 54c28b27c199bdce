"""Symmetric indefinite factorisation on the ``trn`` device: ``linalg.ldl_factor(_ex)`` (LAPACK ``sytrf``,
Bunch-Kaufman partial pivoting, lower) and ``linalg.ldl_solve`` (``sytrs``), as trnlang kernels (float32;
complex64 symmetric matrices: host loops of native steps in :mod:`complex_ldl`, Hermitian ones decline).

The factorisation follows LAPACK's unblocked ``ssytf2`` step for step, so ``LD`` and ``pivots`` are LAPACK's
(``1x1`` and ``2x2`` diagonal blocks, ``ipiv`` > 0 for a ``1x1`` block, ``ipiv[k] = ipiv[k+1] = -p`` for a
``2x2`` one, ``info`` = the first zero pivot column). One step per column in a ``tl.sequential_range`` loop;
the step's data-dependent choices (pivot row, block size, whether the step is the second column of a ``2x2``
block) are ``[1, 1]`` flags, and every effect is selected by them, so the loop body is the same for all steps:

* the pivot search (``idamax`` over column ``k``, then over row ``imax``) runs on the column transposed into a
  row (free-axis max; ties to the first index, as ``idamax``); row ``imax`` is extracted by a one-hot matmul;
* the symmetric interchange of rows/columns ``kk`` and ``kp`` of the trailing matrix is ``P W P`` (two
  permutation matmuls; the working tile holds only the trailing submatrix, so the finished columns of ``L``
  keep their row order, as in LAPACK);
* the rank-1 (``1x1``) or rank-2 (``2x2``) update of the trailing matrix is one matmul, its lower triangle
  mirrored to keep the tile exactly symmetric.

The solve applies ``sytrs``' interchanges, column eliminations and ``2x2`` block solves in LAPACK's order on the
transposed right-hand side (the unknowns' index on the free axis). ``n <= 128`` (one tile); larger matrices and
non-finite inputs (LAPACK's NaN handling is its own) are declined (CPU fallback).

Example:
    >>> a = torch.tensor([[0.0, 1.0, 2.0], [1.0, 0.0, 3.0], [2.0, 3.0, 0.0]], device="trn")
    >>> ld, piv = torch.linalg.ldl_factor(a)
    >>> piv.cpu()
    tensor([-3, -3,  3], dtype=torch.int32)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.linalg import common as C
from stdlib_kernels.linalg import complex_embed as CE
from stdlib_kernels.linalg import complex_ldl as CL
from trnlang.device import decline, lowering

#: Bunch-Kaufman's ``alpha = (1 + sqrt(17)) / 8``, rounded as LAPACK's single-precision code computes it.
ALPHA = float(np.float32((np.float32(1) + np.sqrt(np.float32(17))) / np.float32(8)))


def _col(x, rows, cols, j, n):
    """Column ``j`` (an index value, possibly ``n``: then zeros) of the ``[n, n]`` tile ``x`` as ``[n, 1]``."""
    return tl.sum(tl.where(cols == j, x, 0.0), axis=1, keepdims=True)


@trn.kernel
def ldl_factor_kernel(a, ld, piv, info):
    """``sytrf`` (lower) of each ``a[b]`` ``[n, n]`` (lower triangle read): ``ld[b]`` (``L`` below the diagonal,
    ``D`` on it and, for ``2x2`` blocks, on the subdiagonal), ``piv[b, :]`` (int32, LAPACK's ``ipiv``),
    ``info[b, 0]``."""
    n = a.shape[-1]
    rows = tl.arange(n)[:, None]
    cols = tl.arange(n)[None, :]
    ri = isa.iota(rows + 0 * cols, tl.float32)
    ci = isa.iota(0 * rows + cols, tl.float32)
    rcol = isa.iota(rows, tl.float32)  # [n, 1] row indices
    crow = isa.iota(cols, tl.float32)  # [1, n] column indices
    for bi in tl.affine_range(a.shape[0]):
        raw = tl.load(a[bi, rows, cols])
        w = tl.ndarray((n, n), tl.float32, buffer=tl.sbuf)
        w[:, :] = tl.where(rows >= cols, raw, 0.0) + tl.transpose(tl.where(rows > cols, raw, 0.0))
        out = tl.zeros((n, n), tl.float32)
        pv = tl.zeros((1, n), tl.float32)
        state = tl.zeros((1, 3), tl.float32)  # [skip (second column of a 2x2 block), info, step k]
        for k in tl.sequential_range(n):
            act = 1.0 - state[:, 0:1]
            kf = state[:, 2:3]
            # pivot search on column k (transposed into a row)
            row = tl.copy(tl.transpose(w[:, k:k + 1]))
            absakk = tl.abs(row[:, k:k + 1])
            below = tl.where(cols > k, tl.abs(row), -1.0)
            colmax = tl.maximum(tl.max(below, axis=1, keepdims=True), 0.0)
            imax = tl.min(tl.where(below == colmax, crow, 1.0e9), axis=1, keepdims=True)  # idamax: the first
            ohc = tl.where(rcol == tl.broadcast_to(imax, (n, 1)), 1.0, 0.0)
            rrow = tl.copy(tl.matmul(ohc, w, transpose_x=True))  # row imax of the trailing matrix
            rowmax = tl.max(tl.where((crow >= kf) & (crow != imax), tl.abs(rrow), 0.0), axis=1, keepdims=True)
            diag_imax = tl.abs(tl.sum(tl.where(crow == imax, rrow, 0.0), axis=1, keepdims=True))
            zero = tl.where((tl.maximum(absakk, colmax) == 0.0) | (absakk != absakk), act, 0.0)
            live = act - zero
            no_swap = (absakk >= ALPHA * colmax) | (
                absakk >= ALPHA * colmax * (colmax / tl.where(rowmax > 0.0, rowmax, 1.0)))
            one = tl.where(no_swap, live, 0.0)  # 1x1 block, no interchange
            one_sw = tl.where(no_swap | (diag_imax < ALPHA * rowmax), 0.0, live)  # 1x1 block, k <-> imax
            two = live - one - one_sw  # 2x2 block, k+1 <-> imax
            kp = tl.where((one_sw + two) > 0.0, imax, kf)
            kk = kf + two
            # symmetric interchange of kk and kp in the trailing matrix: W <- P W P
            kkb = tl.broadcast_to(kk, (n, n))
            kpb = tl.broadcast_to(kp, (n, n))
            hit = (ri == kkb) | (ri == kpb)
            perm = (tl.where(ri == ci, tl.where(hit, 0.0, 1.0), 0.0) + tl.where((ri == kkb) & (ci == kpb), 1.0, 0.0)
                    + tl.where((ri == kpb) & (ci == kkb) & (kkb != kpb), 1.0, 0.0))
            wp = tl.copy(tl.matmul(w, perm, transpose_x=True))  # W^T P = W P
            w[:, :] = tl.matmul(perm, wp, transpose_x=True)
            # the block's columns after the interchange, as rows
            krow = tl.copy(tl.transpose(w[:, k:k + 1]))
            k1row = tl.copy(tl.transpose(_col(w, rows, cols, k + 1, n)))
            akk = krow[:, k:k + 1]
            ak1k = tl.sum(tl.where(cols == k + 1, krow, 0.0), axis=1, keepdims=True)
            ak1k1 = tl.sum(tl.where(cols == k + 1, k1row, 0.0), axis=1, keepdims=True)
            # 1x1: W -= x (x / d)^T below and right of k; L's column = x / d (LAPACK scales by 1 / d)
            d11 = tl.where((one + one_sw) > 0.0, 1.0 / tl.where(akk != 0.0, akk, 1.0), 0.0)
            x1 = tl.where(cols > k, krow, 0.0)
            l1 = x1 * d11
            # 2x2 (LAPACK's formulas): WK, WKP1 for the rows below the block
            d21 = tl.where(two > 0.0, ak1k, 1.0)
            e11 = ak1k1 / d21
            e22 = akk / d21
            t = 1.0 / tl.where(two > 0.0, e11 * e22 - 1.0, 1.0)
            f21 = tl.where(two > 0.0, t / d21, 0.0)
            x2k = tl.where(cols > k + 1, krow, 0.0)
            x2k1 = tl.where(cols > k + 1, k1row, 0.0)
            wk = f21 * (e11 * x2k - x2k1)
            wkp1 = f21 * (e22 * x2k1 - x2k)
            acc = tl.zeros((n, n), tl.float32, buffer=tl.psum)  # rank-1 or rank-2 update: K = 1 matmuls
            acc += tl.matmul(x1, l1, transpose_x=True)
            acc += tl.matmul(x2k, wk, transpose_x=True)
            acc += tl.matmul(x2k1, wkp1, transpose_x=True)
            upd = w - acc
            sym = tl.where(rows >= cols, upd, 0.0) + tl.transpose(tl.where(rows > cols, upd, 0.0))
            kb = tl.broadcast_to(kf, (n, n))
            twob = tl.broadcast_to(two, (n, n)) > 0.0
            done = (ri == kb) | (ci == kb) | (((ri == kb + 1.0) | (ci == kb + 1.0)) & twob)
            w[:, :] = tl.where(done & (tl.broadcast_to(act, (n, n)) > 0.0), 0.0,
                               tl.where(tl.broadcast_to(live, (n, n)) > 0.0, sym, w))
            # LD's columns k (and k + 1 of a 2x2 block)
            lrow = tl.where(tl.broadcast_to(two, (1, n)) > 0.0, tl.where(cols == k + 1, ak1k, wk), l1)
            newk = tl.where(rows == k, tl.broadcast_to(akk, (n, 1)), tl.copy(tl.transpose(lrow)))
            newk = tl.where(tl.broadcast_to(zero, (n, 1)) > 0.0, tl.where(rows >= k, tl.copy(tl.transpose(krow)), 0.0),
                            newk)
            newk1 = tl.where(rows == k + 1, tl.broadcast_to(ak1k1, (n, 1)), tl.copy(tl.transpose(wkp1)))
            out[:, :] = tl.where((tl.broadcast_to(act, (n, n)) > 0.0) & (ci == kb), tl.broadcast_to(newk, (n, n)),
                                 tl.where(twob & (ci == kb + 1.0), tl.broadcast_to(newk1, (n, n)), out))
            pval = tl.where(two > 0.0, -(kp + 1.0), kp + 1.0)
            pv[:, :] = tl.where(((act > 0.0) & (crow == kf)) | ((two > 0.0) & (crow == kf + 1.0)), pval, pv)
            state[:, 1:2] = tl.where((zero > 0.0) & (state[:, 1:2] == 0.0), kf + 1.0, state[:, 1:2])
            state[:, 0:1] = two
            state[:, 2:3] = kf + 1.0
        tl.store(ld[bi, rows, cols], tl.where(rows >= cols, out, 0.0))
        tl.store(piv[bi:bi + 1, cols], pv.astype(tl.int32))
        tl.store(info[bi:bi + 1, 0:1], state[:, 1:2].astype(tl.int32))


def _swap(work, ci, j1, j2, mt, n):
    """Swap the free-axis columns ``j1`` and ``j2`` (``[1, 1]`` float tiles) of ``work`` ``[mt, n]`` (exact)."""
    e1 = ci == tl.broadcast_to(j1, (mt, n))
    e2 = ci == tl.broadcast_to(j2, (mt, n))
    c1 = tl.sum(tl.where(e1, work, 0.0), axis=1, keepdims=True)
    c2 = tl.sum(tl.where(e2, work, 0.0), axis=1, keepdims=True)
    work[:, :] = tl.where(e1, tl.broadcast_to(c2, (mt, n)), tl.where(e2, tl.broadcast_to(c1, (mt, n)), work))


@trn.kernel
def ldl_solve_kernel(ld, piv, bt, out_t):
    """``sytrs`` (lower): solve ``A X = B`` from ``ldl_factor`` results ``ld[b]`` ``[n, n]``, ``piv[b]`` (int32),
    per batch; ``bt``/``out_t`` ``[B, m, n]`` are the right-hand side and the solution seen transposed."""
    n = ld.shape[-1]
    m = bt.shape[1]
    mt = min(128, m)
    rows = tl.arange(n)[:, None]
    cols = tl.arange(n)[None, :]
    crow = isa.iota(cols, tl.float32)
    for bi in tl.affine_range(bt.shape[0]):
        fac = tl.load(ld[bi, rows, cols])
        pv = tl.load(piv[bi:bi + 1, cols]).astype(tl.float32)
        for mi in tl.affine_range(tl.cdiv(m, mt)):
            mr = mi * mt + tl.arange(mt)[:, None]
            msk = (mr < m) if m % mt else None
            ci = isa.iota(0 * mr + cols, tl.float32)
            work = tl.ndarray((mt, n), tl.float32, buffer=tl.sbuf)
            work[:, :] = tl.load(bt[bi, mr, cols], mask=msk)
            state = tl.zeros((1, 2), tl.float32)  # [skip, step k]
            for k in tl.sequential_range(n):  # L D X = P B, LAPACK's order
                kf = state[:, 1:2]
                p = tl.sum(tl.where(crow == kf, pv, 0.0), axis=1, keepdims=True)
                act = 1.0 - state[:, 0:1]
                one = tl.where(p > 0.0, act, 0.0)
                two = tl.where(p < 0.0, act, 0.0)
                _swap(work, ci, kf + two, tl.where(one + two > 0.0, tl.abs(p) - 1.0, kf + two), mt, n)
                lk = tl.copy(tl.transpose(fac[:, k:k + 1]))  # column k of L as a row
                lk1 = tl.copy(tl.transpose(_col(fac, rows, cols, k + 1, n)))
                xk = work[:, k:k + 1]
                xk1 = _col(work, tl.arange(mt)[:, None], cols, k + 1, n)
                upd = (xk * tl.broadcast_to(tl.where(cols > k + 1, lk, tl.where(cols == k + 1, lk * one, 0.0)),
                                            (mt, n))
                       + xk1 * tl.broadcast_to(tl.where(cols > k + 1, lk1 * two, 0.0), (mt, n)))
                work[:, :] = work - upd * tl.broadcast_to(act, (mt, n))
                # the diagonal block
                akk = lk[:, k:k + 1]
                ak1k = tl.sum(tl.where(cols == k + 1, lk, 0.0), axis=1, keepdims=True)
                ak1k1 = tl.sum(tl.where(cols == k + 1, lk1, 0.0), axis=1, keepdims=True)
                xk = work[:, k:k + 1]
                xk1 = _col(work, tl.arange(mt)[:, None], cols, k + 1, n)
                r1 = xk * tl.broadcast_to(1.0 / tl.where(one > 0.0, akk, 1.0), (mt, 1))
                d = tl.where(two > 0.0, ak1k, 1.0)
                akm1 = akk / d
                ak = ak1k1 / d
                den = akm1 * ak - 1.0
                bkm1 = xk / tl.broadcast_to(d, (mt, 1))
                bk = xk1 / tl.broadcast_to(d, (mt, 1))
                r2k = (tl.broadcast_to(ak, (mt, 1)) * bkm1 - bk) / tl.broadcast_to(den, (mt, 1))
                r2k1 = (tl.broadcast_to(akm1, (mt, 1)) * bk - bkm1) / tl.broadcast_to(den, (mt, 1))
                newk = tl.where(tl.broadcast_to(one, (mt, 1)) > 0.0, r1,
                                tl.where(tl.broadcast_to(two, (mt, 1)) > 0.0, r2k, xk))
                kmask = ci == tl.broadcast_to(kf, (mt, n))
                k1mask = (ci == tl.broadcast_to(kf + 1.0, (mt, n))) & (tl.broadcast_to(two, (mt, n)) > 0.0)
                work[:, :] = tl.where(kmask, tl.broadcast_to(newk, (mt, n)),
                                      tl.where(k1mask, tl.broadcast_to(r2k1, (mt, n)), work))
                state[:, 0:1] = two
                state[:, 1:2] = kf + 1.0
            state[:, :] = tl.zeros((1, 2), tl.float32)
            state[:, 1:2] = state[:, 1:2] + (n - 1.0)
            for kk in tl.sequential_range(n):  # L^T X = Y, then the interchanges, backwards
                k = n - 1 - kk
                kf = state[:, 1:2]
                p = tl.sum(tl.where(crow == kf, pv, 0.0), axis=1, keepdims=True)
                act = 1.0 - state[:, 0:1]
                one = tl.where(p > 0.0, act, 0.0)
                two = tl.where(p < 0.0, act, 0.0)
                lk = tl.copy(tl.transpose(fac[:, k:k + 1]))
                lkm1 = tl.copy(tl.transpose(_col(fac, rows, cols, k - 1, n)))
                dk = tl.sum(work * tl.broadcast_to(tl.where(cols > k, lk, 0.0), (mt, n)), axis=1, keepdims=True)
                dkm1 = tl.sum(work * tl.broadcast_to(tl.where(cols > k, lkm1, 0.0), (mt, n)), axis=1, keepdims=True)
                kmask = ci == tl.broadcast_to(kf, (mt, n))
                km1mask = (ci == tl.broadcast_to(kf - 1.0, (mt, n))) & (tl.broadcast_to(two, (mt, n)) > 0.0)
                actb = tl.broadcast_to(act, (mt, n)) > 0.0
                work[:, :] = tl.where(kmask & actb, work - tl.broadcast_to(dk, (mt, n)),
                                      tl.where(km1mask, work - tl.broadcast_to(dkm1, (mt, n)), work))
                _swap(work, ci, kf, tl.where(one + two > 0.0, tl.abs(p) - 1.0, kf), mt, n)
                state[:, 0:1] = two
                state[:, 1:2] = kf - 1.0
            tl.store(out_t[bi, mr, cols], work, mask=msk)


def _finite(*ts: torch.Tensor) -> bool:
    """No NaN/inf in the tensors (one host read: LAPACK's NaN handling is its own business)."""
    return all(bool(torch.isfinite(t).all().item()) for t in ts if t.numel())


def _c_factor(a: torch.Tensor, hermitian: bool, check_errors: bool) -> Any:
    """complex64 ``ldl_factor_ex`` (``csytrf``, :mod:`complex_ldl`)."""
    if hermitian:
        return decline("complex Hermitian LDL (hetrf) has no native lowering")
    batch, n = tuple(a.shape[:-2]), a.shape[-1]
    b = U.prod(batch)
    ld = torch.empty((b, n, n), dtype=torch.complex64, device="trn").mT  # column-major, as LAPACK leaves it
    piv = torch.zeros((b, n), dtype=torch.int32, device="trn")
    info = torch.zeros((b,), dtype=torch.int32, device="trn")
    if b and n:
        if not _finite(a):
            return decline("NaN or inf in the matrix")
        res, piv, info = CL.ldl_factor(C.flat(a))
        ld.copy_(res)
    info = info.reshape(batch)
    if check_errors:
        torch.ops.aten._linalg_check_errors(info, "torch.linalg.ldl_factor_ex", is_matrix=a.dim() == 2)
    return C.unflat(ld, batch), piv.reshape(*batch, n), info


@lowering("aten::linalg_ldl_factor_ex", dtypes=(torch.float32, torch.complex64))
def linalg_ldl_factor_ex(self: torch.Tensor, *, hermitian: bool = False, check_errors: bool = False) -> Any:
    """``torch.linalg.ldl_factor_ex``: LAPACK ``sytrf`` (Bunch-Kaufman, lower) step for step; ``n <= 128``.
    For real matrices ``hermitian`` changes nothing (LAPACK's ``hetrf`` is ``sytrf`` there); complex64 symmetric
    matrices (``hermitian=False``) by :mod:`complex_ldl`."""
    if CE.is_complex64(self) and self.dim() >= 2 and self.shape[-1] == self.shape[-2] <= CL.MAX_N:
        return _c_factor(self, hermitian, check_errors)
    if not C.ok(self) or self.dim() < 2 or self.shape[-1] != self.shape[-2] or self.shape[-1] > C.TILE:
        return decline("not a float32 trn square matrix, or n above 128")
    batch, n = tuple(self.shape[:-2]), self.shape[-1]
    b = U.prod(batch)
    ld = C.empty((b, n, n)).mT  # column-major per matrix, as LAPACK leaves it
    piv = torch.zeros((b, n), dtype=torch.int32, device="trn")
    info = torch.zeros((b, 1), dtype=torch.int32, device="trn")
    if b and n:
        if not _finite(self):
            return decline("NaN or inf in the matrix")
        ldl_factor_kernel(C.flat(self), ld, piv, info)
    info = info.reshape(batch)
    if check_errors:
        torch.ops.aten._linalg_check_errors(info, "torch.linalg.ldl_factor_ex", is_matrix=self.dim() == 2)
    return C.unflat(ld, batch), piv.reshape(*batch, n), info


def _c_solve(ld3: torch.Tensor, pv2: torch.Tensor, b3: torch.Tensor) -> torch.Tensor:
    """complex64 ``ldl_solve`` (``csytrs``) of flat operands; the result column-major per matrix, as LAPACK's."""
    b, n, m = b3.shape
    res = torch.empty((b, m, n), dtype=torch.complex64, device="trn").mT
    if b and n and m:
        res.copy_(CL.ldl_solve(ld3, pv2, b3))
    return res


@lowering("aten::linalg_ldl_solve", dtypes=(torch.float32, torch.int32, torch.complex64))
def linalg_ldl_solve(LD: torch.Tensor, pivots: torch.Tensor, B: torch.Tensor, *, hermitian: bool = False) -> Any:
    """``torch.linalg.ldl_solve``: LAPACK ``sytrs`` (lower) in LAPACK's order; batch dims broadcast, ``n <= 128``
    (complex64 symmetric: ``csytrs`` by :mod:`complex_ldl`)."""
    cplx = CE.is_complex64(LD, B)
    if cplx and hermitian:
        return decline("complex Hermitian LDL solve (hetrs) has no native lowering")
    if (not (C.ok(LD, B) or cplx) or not U.is_trn(pivots) or pivots.dtype != torch.int32 or LD.dim() < 2 or B.dim() < 2
            or pivots.dim() != LD.dim() - 1):
        return decline("not float32 trn LD/B with int32 trn pivots of matching dims")
    n = LD.shape[-1]
    if LD.shape[-2] != n or B.shape[-2] != n or pivots.shape[-1] != n or n > C.TILE:
        return decline("mismatched shapes (torch raises) or n above 128")  # torch raises its own errors on the CPU
    try:
        batch = tuple(torch.broadcast_shapes(LD.shape[:-2], pivots.shape[:-1], B.shape[:-2]))
    except RuntimeError:
        return decline("batch dims do not broadcast: torch raises")
    m = B.shape[-1]
    b = U.prod(batch)
    if cplx:
        ld3 = C.flat(LD.expand(*batch, n, n))
        if b and n and not _finite(ld3):
            return decline("NaN or inf in LD")
        return C.unflat(_c_solve(ld3, pivots.expand(*batch, n).reshape(b, n), C.flat(B.expand(*batch, n, m))), batch)
    res = C.empty((b, m, n))  # X^T: the result is column-major per matrix, as LAPACK's
    if b and n and m:
        ld3 = C.flat(LD.expand(*batch, n, n))
        pv2 = pivots.expand(*batch, n).reshape(b, n)
        if not _finite(ld3):
            return decline("NaN or inf in LD")
        ldl_solve_kernel(ld3, pv2, C.flat(B.expand(*batch, n, m)).mT, res)
    return C.unflat(res.mT, batch)
