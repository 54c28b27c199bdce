"""Helpers shared by the linear-algebra families (``linalg.py``, ``linalg_lu.py``, ``linalg_qr.py``, ...):
operand checks, ``[..., r, c]`` <-> ``[B, r, c]`` views, and the triangular-substitution kernel (with its
host-blocked driver) that Cholesky, LU and the triangular solves build on.

Example:
    >>> from stdlib_kernels.linalg import common as C
    >>> t = torch.tensor([[[2.0, 0.0], [1.0, 1.0]]], device="trn")
    >>> C.trsolve(t, torch.ones(1, 2, 1, device="trn"), lower=True, unit=False).cpu().ravel()  # doctest: +SKIP
    tensor([0.5000, 0.5000])
"""

from __future__ import annotations

from typing import Any

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from trnlang.device import decline

#: Largest matrix side handled by one kernel tile (partition count).
TILE = 128
#: The dtypes of the factorisations (torch's CPU kernels take no bfloat16 for them either).
F32 = (torch.float32,)


def ok(*ts: Any) -> bool:
    """Every operand is a float32 ``trn`` tensor without a lazy conjugate / negation bit."""
    return all(U.is_trn(t) and t.dtype == torch.float32 and not t.is_conj() and not t.is_neg() for t in ts)


def flat(x: torch.Tensor) -> torch.Tensor:
    """``[..., r, c]`` as ``[B, r, c]`` (a view when the batch dims merge, else a native copy)."""
    r, c = x.shape[-2], x.shape[-1]
    if x.dim() == 2:
        return x.unsqueeze(0)
    return x.reshape(U.prod(x.shape[:-2]), r, c)


def unflat(x: torch.Tensor, batch: tuple[int, ...]) -> torch.Tensor:
    """``[B, r, c]`` back to ``[*batch, r, c]``."""
    return x.reshape(*batch, *x.shape[1:])


def empty(shape: Any) -> torch.Tensor:
    """A new float32 ``trn`` tensor."""
    return torch.empty(tuple(shape), dtype=torch.float32, device="trn")


def into_out(res: torch.Tensor, out: torch.Tensor | None) -> Any:
    """A lowering's result ``res``, or, with ``out=``, ``res`` copied into ``out`` (resized to its shape first)
    and ``out`` returned, with torch's warning when a non-empty ``out`` is resized; an ``out`` of another dtype
    takes the result cast, as torch's linalg ops, when the cast is safe; NotImplemented (declined) for an ``out``
    that is not a ``trn`` tensor or not safely castable to (torch raises).

    Example:
        >>> out = torch.empty(0, device="trn")
        >>> into_out(torch.ones(2, device="trn"), out) is out, out.shape
        (True, torch.Size([2]))
    """
    if out is None:
        return res
    if not U.is_trn(out) or not torch.can_cast(res.dtype, out.dtype):
        return decline("out= not a trn tensor the result is safely castable to")
    U.resize_out(out, res.shape)
    out.copy_(res)
    return out


def substitute(tri, bt, n, mt, lower, unit):
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
            substitute(tri, work, n, tm, lower, unit)
            tl.store(out_t[bi, mr, cols], work, mask=msk)


def _block_solver(t3: torch.Tensor, s: int, e: int, lower: bool, unit: bool, by_inverse: bool) -> Any:
    """The solve of diagonal block ``[s:e]`` of ``t3`` against a right-hand side: the substitution kernel, or with
    ``by_inverse`` a matmul with the block's inverse (itself one substitution against the identity, so a wide
    right-hand side costs matmul time, not ``e - s`` sequential steps)."""
    blk = t3[:, s:e, s:e]
    if not by_inverse:
        return lambda rhs: trsolve(blk, rhs, lower, unit)
    k = e - s
    inv = empty((t3.shape[0], k, k))
    eye = torch.eye(k, device="trn").expand(t3.shape[0], k, k)
    trisolve_kernel(blk, eye.mT, inv.mT, lower, unit)
    return lambda rhs: torch.matmul(inv, rhs)


def trsolve(t3: torch.Tensor, b3: torch.Tensor, lower: bool, unit: bool, by_inverse: bool = False) -> torch.Tensor:
    """Solve ``T X = B``: t3 ``[1 or B, n, n]``, b3 ``[B, n, m]`` (any strides) -> X ``[B, n, m]``, blocked on
    the host by 128 rows for n > TILE (right-looking: each solved block row updates the rest with a matmul).
    ``by_inverse`` (taken only when B is wider than a tile; the LU paths use it): each 128 x 128 diagonal block
    is applied as its explicit inverse, so the solve runs at matmul speed; its error grows with the condition of
    the diagonal blocks (fine for LU's unit L, |l| <= 1; for U as ill-conditioned as A itself), so the plain
    triangular solves (``linalg.solve_triangular``) keep the substitution."""
    bsz, n, m = b3.shape
    out = empty((bsz, n, m))
    if n == 0 or m == 0 or bsz == 0:
        return out
    by_inverse = by_inverse and m > TILE
    if n <= TILE and not by_inverse:
        trisolve_kernel(t3, b3.mT, out.mT, lower, unit)
        return out
    out.copy_(b3)
    starts = list(range(0, n, TILE))
    for s in (starts if lower else reversed(starts)):
        e = min(s + TILE, n)
        xk = _block_solver(t3, s, e, lower, unit, by_inverse)(out[:, s:e])
        out[:, s:e] = xk
        if lower and e < n:
            out[:, e:] -= torch.matmul(t3[:, e:, s:e], xk)
        elif not lower and s > 0:
            out[:, :s] -= torch.matmul(t3[:, :s, s:e], xk)
    return out
