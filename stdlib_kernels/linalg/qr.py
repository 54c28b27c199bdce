"""Householder QR on the ``trn`` device: ``linalg.qr``, ``geqrf``, ``householder_product`` (``orgqr``) and
``ormqr``, as trnlang kernels (float32).

Each matrix (up to 128 rows, 512 columns; rows on partitions) is reduced in SBUF, one column per step of a
``tl.sequential_range`` loop: the column is transposed into a row on partition 0 (norms are free-axis
reductions there), ``v^T A`` is one matmul against the whole tile and the rank-1 update another. The signs
follow LAPACK's ``dlarfg`` (``beta = -sign(alpha) * norm``), so ``Q`` and ``R`` match torch's CPU results, not
only ``Q @ R``; ``Q^T`` is accumulated as ``H_k ... H_1``. Larger inputs are declined (CPU fallback).

Example:
    >>> q, r = torch.linalg.qr(torch.tensor([[3.0, 1.0], [4.0, 2.0]], device="trn"))
    >>> r.cpu()
    tensor([[-5.0000, -2.2000],
            [ 0.0000,  0.4000]])
"""

from __future__ import annotations

from typing import Any

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.linalg import common as C
from stdlib_kernels.linalg import complex_qr as CQ
from trnlang.device import decline, lowering

#: Largest number of columns of a QR input.
QR_MAX_COLS = 512


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


@trn.kernel
def ormqr_kernel(v, tau, c, out, forward):
    """``out[b] = H_? ... H_? c[b]``: the reflectors of ``geqrf`` (below the diagonal of ``v[b]`` ``[m, n]``, scales
    ``tau[b, :k]``) applied to ``c[b]`` ``[m, N]`` (m <= 128, N <= 512), ``H_1`` first when ``forward`` (``Q^T c``),
    else ``H_k`` first (``Q c``); one ``v^T C`` matmul and one rank-1 update per reflector."""
    m, nc = c.shape[-2], c.shape[-1]
    kt = tau.shape[-1]
    rows = tl.arange(m)[:, None]
    ncols = tl.arange(nc)[None, :]
    for bi in tl.affine_range(c.shape[0]):
        refl = tl.load(v[bi, rows, tl.arange(kt)[None, :]])
        taus = tl.load(tau[bi:bi + 1, tl.arange(kt)[None, :]])
        work = tl.ndarray((m, nc), tl.float32, buffer=tl.sbuf)
        work[:, :] = tl.load(c[bi, rows, ncols])
        for kk in tl.sequential_range(kt):
            k = kk if forward else kt - 1 - kk
            vcol = tl.where(rows > k, refl[:, k:k + 1], tl.where(rows == k, 1.0, 0.0))
            tv = tl.copy(tl.transpose(vcol)) * taus[:, k:k + 1]
            w = tl.copy(tl.matmul(vcol, work, transpose_x=True))
            work[:, :] = work - tl.matmul(tv, w, transpose_x=True)
        tl.store(out[bi, rows, ncols], work)


# lowerings ----------------------------------------------------------------------------------------------------
@lowering("aten::linalg_qr", dtypes=(torch.float32, torch.complex64))
def linalg_qr(A: torch.Tensor, mode: str = "reduced") -> Any:
    """Householder QR with LAPACK's signs (``torch.linalg.qr``); up to 128 rows and 512 columns.

    >>> q, r = torch.linalg.qr(torch.tensor([[3.0, 1.0], [4.0, 2.0]], device="trn"))
    >>> r.cpu()
    tensor([[-5.0000, -2.2000],
            [ 0.0000,  0.4000]])
    """
    if mode in ("reduced", "complete", "r") and CQ.ok(A):
        return _c_qr(A, mode)
    if mode not in ("reduced", "complete", "r") or not C.ok(A) or A.dim() < 2:
        return decline("not a float32 trn matrix (or conj/neg bit, fewer than 2 dims), or an unknown mode")
    m, n = A.shape[-2], A.shape[-1]
    if m > C.TILE or n > QR_MAX_COLS:
        return decline("more than 128 rows or more than 512 columns")
    batch = tuple(A.shape[:-2])
    k = min(m, n)
    kq = m if mode == "complete" else k
    kr = m if mode == "complete" else k
    a3 = C.flat(A)
    b = a3.shape[0]
    q = C.empty((b, m, kq)) if mode != "r" else None
    r = torch.zeros((b, kr, n), dtype=torch.float32, device="trn") if kr > k else C.empty((b, kr, n))
    if b and m and n:
        qr_kernel(a3, q.mT if q is not None else None, r, kq, kr, None)
    elif q is not None and b and m:  # n == 0: Q is the identity (complete) / empty
        q.copy_(torch.eye(m, kq).expand(b, m, kq).to("trn"))
    qo = C.unflat(q, batch) if q is not None else torch.empty((0,), dtype=torch.float32, device="trn")
    return qo, C.unflat(r, batch)


def _c_qr(A: torch.Tensor, mode: str) -> Any:
    """``linalg_qr`` of a complex64 matrix (batch)."""
    batch = tuple(A.shape[:-2])
    q, r = CQ.qr(C.flat(A).contiguous(), mode)
    qo = C.unflat(q, batch) if q is not None else torch.empty((0,), dtype=A.dtype, device="trn")
    return qo, C.unflat(r, batch)


@lowering("aten::geqrf", dtypes=(torch.float32, torch.complex64))
def geqrf(self: torch.Tensor) -> Any:
    """``torch.geqrf``: LAPACK's packed Householder QR (R and the reflectors) and ``tau``; up to 128 rows."""
    if CQ.ok(self):
        batch, k = tuple(self.shape[:-2]), min(self.shape[-2:])
        packed, tau = CQ.geqrf(C.flat(self).contiguous())
        col_major = torch.empty((packed.shape[0], *packed.shape[-2:][::-1]), dtype=self.dtype, device="trn").mT
        return C.unflat(col_major.copy_(packed), batch), tau.reshape(*batch, k)
    if not C.ok(self) or self.dim() < 2 or self.shape[-2] > C.TILE or self.shape[-1] > QR_MAX_COLS:
        return decline("not a float32 trn matrix, or more than 128 rows or 512 columns")
    m, n = self.shape[-2], self.shape[-1]
    batch = tuple(self.shape[:-2])
    a3 = C.flat(self)
    b = a3.shape[0]
    packed = C.empty((b, n, m)).mT  # column-major, as LAPACK leaves it
    tau = C.empty((b, min(m, n)))
    if b and m and n:
        qr_kernel(a3, None, packed, min(m, n), min(m, n), tau)
    return C.unflat(packed, batch), tau.reshape(*batch, min(m, n))


@lowering("aten::linalg_householder_product", dtypes=(torch.float32, torch.complex64))
def linalg_householder_product(input: torch.Tensor, tau: torch.Tensor, *, out: torch.Tensor | None = None) -> Any:
    """``torch.linalg.householder_product`` (``orgqr``): accumulates ``H_1 ... H_k`` on the Tensor engine; ``out=``
    as torch's linalg ops take it (resized with its warning, a safely castable dtype)."""
    if out is not None and U.overlaps(out, input) or out is not None and U.overlaps(out, tau):
        return decline("out= overlapping an operand")
    res = _householder_product(input, tau)
    return res if res is NotImplemented else C.into_out(res, out)


def _householder_product(input: torch.Tensor, tau: torch.Tensor) -> Any:
    if CQ.ok(input) and U.is_trn(tau) and tau.dtype == torch.complex64 and not tau.is_conj() \
            and input.shape[-2] >= input.shape[-1] >= tau.shape[-1] and tau.shape[:-1] == input.shape[:-2]:
        batch, (m, n) = tuple(input.shape[:-2]), input.shape[-2:]
        v3 = C.flat(input).contiguous()
        q = CQ.apply_q(v3, tau.reshape(v3.shape[0], tau.shape[-1]), CQ.eye(v3.shape[0], m, n), False)
        return C.unflat(q, batch)
    if not C.ok(input, tau) or input.dim() < 2:
        return decline("not float32 trn operands, or fewer than 2 dims")
    m, n = input.shape[-2], input.shape[-1]
    if m > C.TILE or n > m or tau.shape[-1] > n or tuple(tau.shape[:-1]) != tuple(input.shape[:-2]):
        return decline("more than 128 rows, more columns than rows, or a tau of the wrong shape")
    batch = tuple(input.shape[:-2])
    v3 = C.flat(input)
    b = v3.shape[0]
    res = C.empty((b, n, m)).mT
    if b and m and n:
        if tau.shape[-1] == 0:
            res.copy_(torch.eye(m, n).expand(b, m, n).to("trn"))
        else:
            householder_kernel(v3, tau.reshape(b, tau.shape[-1]), res.mT)
    return C.unflat(res, batch)


@lowering("aten::ormqr", dtypes=(torch.float32, torch.complex64))
def ormqr(self: torch.Tensor, input2: torch.Tensor, input3: torch.Tensor, left: bool = True,
          transpose: bool = False, *, out: torch.Tensor | None = None) -> Any:
    """``torch.ormqr``: ``Q C``, ``Q^T C``, ``C Q`` or ``C Q^T`` with ``Q = H_1 ... H_k`` from ``geqrf``, without
    forming ``Q`` (``C Q = (Q^T C^T)^T``: the right-hand cases run on transposed views); ``m <= 128``."""
    c = input3
    if CQ.ok(self) and CQ.ok(c.mT if left else c) and U.is_trn(input2) and input2.dtype == torch.complex64 \
            and not input2.is_conj() and out is None:
        return _c_ormqr(self, input2, c, left, transpose)
    if not C.ok(self, input2, c) or self.dim() < 2 or c.dim() < 2 or out is not None:
        return decline("not float32 trn operands, fewer than 2 dims, or out=")
    m = c.shape[-2] if left else c.shape[-1]
    k = input2.shape[-1]
    batch = tuple(c.shape[:-2])
    if (self.dim() != c.dim() or input2.dim() != c.dim() - 1 or tuple(self.shape[:-2]) != batch
            or tuple(input2.shape[:-1]) != batch or self.shape[-2] != m or k > self.shape[-1] or k > m
            or m > C.TILE):
        return decline("mismatched shapes (torch raises) or Q of more than 128 rows")
    ct = c if left else c.mT
    b = U.prod(batch)
    res = C.empty((b, *ct.shape[-2:]))
    if res.numel():
        if k == 0:
            res.copy_(C.flat(ct))
        else:
            v3, t2, c3 = C.flat(self), input2.reshape(b, k), C.flat(ct)
            for c0 in range(0, c3.shape[-1], 512):  # column blocks are independent
                c1 = min(c3.shape[-1], c0 + 512)
                ormqr_kernel(v3, t2, c3[:, :, c0:c1], res[:, :, c0:c1], left == transpose)
    res = C.unflat(res, batch)
    return res if left else res.mT.contiguous()


def _c_ormqr(v: torch.Tensor, tau: torch.Tensor, c: torch.Tensor, left: bool, transpose: bool) -> Any:
    """complex64 ``ormqr`` (``unmqr``): ``transpose`` means the conjugate transpose; ``C Q = (Q^H C^H)^H``."""
    m, k = (c.shape[-2] if left else c.shape[-1]), tau.shape[-1]
    batch = tuple(c.shape[:-2])
    if (v.dim() != c.dim() or tau.dim() != c.dim() - 1 or tuple(v.shape[:-2]) != batch
            or tuple(tau.shape[:-1]) != batch or v.shape[-2] != m or k > v.shape[-1] or k > m):
        return decline("mismatched shapes (torch raises)")
    ct = c if left else c.mH
    b = U.prod(batch)
    c3 = C.flat(ct).contiguous()
    if c3.numel() == 0 or k == 0:
        res = c3.clone()
    else:
        res = CQ.apply_q(C.flat(v).contiguous(), tau.reshape(b, k), c3, transpose == left)
    res = C.unflat(res, batch)
    return res if left else res.mH.contiguous()
