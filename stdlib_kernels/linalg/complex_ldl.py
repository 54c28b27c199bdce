"""complex64 symmetric indefinite factorisation (``linalg.ldl_factor(_ex)``, ``hermitian=False``: LAPACK ``csytrf``,
Bunch-Kaufman partial pivoting, lower) and its solve (``csytrs``), as host loops of native steps on complex64
``trn`` tensors.

The factorisation follows LAPACK's unblocked ``csytf2`` step for step (magnitudes ``|Re| + |Im|``, ties to the first
index), so ``LD`` and ``pivots`` are LAPACK's. One step per column for the whole batch at once: each matrix's
choices (pivot row, block size, whether the step is the second column of a ``2x2`` block it already took, a zero
column) are ``[B]`` flags and every effect is selected by them, so all steps share one set of compiled kernels.
The working matrix is kept whole and exactly symmetric (its lower triangle, LAPACK's storage, mirrored after each
update); the symmetric interchange of rows/columns ``kk`` and ``kp`` is a pair of gathers. The solve applies
``csytrs``' interchanges, column eliminations and ``2x2`` block solves in LAPACK's order the same way.

Example:
    >>> a = torch.tensor([[0, 1j], [1j, 0]], dtype=torch.complex64, device="trn")  # a 2x2 block
    >>> torch.linalg.ldl_factor(a).pivots.cpu()
    tensor([-2, -2], dtype=torch.int32)
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["ldl_factor", "ldl_solve", "MAX_N"]

#: Largest side taken (a host loop of native steps per column).
MAX_N = 128
#: Bunch-Kaufman's ``alpha = (1 + sqrt(17)) / 8`` as LAPACK's single-precision code computes it.
_ALPHA = float(np.float32((np.float32(1) + np.sqrt(np.float32(17))) / np.float32(8)))


def _cabs1(z: torch.Tensor) -> torch.Tensor:
    """LAPACK's ``|Re z| + |Im z|`` (float32)."""
    return torch.view_as_real(z).abs().sum(-1)


def _perm(n: int, i1: torch.Tensor, i2: torch.Tensor) -> torch.Tensor:
    """``[B, n]`` index vectors exchanging ``i1[b]`` and ``i2[b]`` (the identity where they are equal)."""
    ar = torch.arange(n, device="trn").unsqueeze(0)
    a, b = i1.unsqueeze(-1), i2.unsqueeze(-1)
    return torch.where(ar == a, b, torch.where(ar == b, a, ar))


def _swap_rows(x: torch.Tensor, i1: torch.Tensor, i2: torch.Tensor) -> torch.Tensor:
    p = _perm(x.shape[-2], i1, i2)
    return torch.gather(x, 1, p.unsqueeze(-1).expand(x.shape))


def _swap_sym(w: torch.Tensor, i1: torch.Tensor, i2: torch.Tensor) -> torch.Tensor:
    """Rows and columns ``i1`` and ``i2`` of each symmetric ``w[b]`` exchanged."""
    p = _perm(w.shape[-1], i1, i2)
    w = torch.gather(w, 1, p.unsqueeze(-1).expand(w.shape))
    return torch.gather(w, 2, p.unsqueeze(-2).expand(w.shape))


class _Tables:
    """Index masks by step (``[n, n]`` bool, column ``j`` for step ``j``), built once so that steps differ only in
    which column they select."""

    def __init__(self, n: int) -> None:
        ar = torch.arange(n, device="trn")
        self.below = ar.unsqueeze(1) > ar.unsqueeze(0)  # [i, j]: i > j
        self.at = ar.unsqueeze(1) == ar.unsqueeze(0)
        self.steps = torch.arange(1, n + 1, dtype=torch.int32, device="trn")
        self.lower = self.below | self.at

    def below2(self, j: int) -> torch.Tensor:
        """Rows below a ``2x2`` block starting at ``j`` (none when ``j + 1`` is the last row)."""
        n = self.below.shape[0]
        return self.below[:, j + 1] if j + 1 < n else torch.zeros_like(self.below[:, 0])


def _choose(w: torch.Tensor, j: int, t: _Tables) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Bunch-Kaufman's choice at column ``j`` of each ``w[b]``: ``(zero column, kp, 2x2 block)``."""
    b, n, _ = w.shape
    mag = _cabs1(w[:, :, j])
    absakk = mag[:, j]
    cm = torch.where(t.below[:, j], mag, -1.0)
    colmax, imax = cm.amax(-1).clamp(min=0.0), cm.argmax(-1)
    zero = torch.maximum(absakk, colmax) == 0
    rows_b = torch.arange(b, device="trn")
    rmag = _cabs1(w[rows_b, imax, :])
    ar = torch.arange(n, device="trn").unsqueeze(0)
    rowmax = torch.where(~t.below[j] & (ar != imax.unsqueeze(-1)), rmag, -1.0).amax(-1)  # columns >= j, not imax
    rowmax = torch.where(rowmax > 0, rowmax, 1.0)
    keep = zero | (absakk >= _ALPHA * colmax) | (absakk >= _ALPHA * colmax * (colmax / rowmax))
    take = ~keep & (_cabs1(w[rows_b, imax, imax]) >= _ALPHA * rowmax)
    kp = torch.where(keep, j, imax)
    return zero, kp, ~keep & ~take


def _col(ld: torch.Tensor, j: int, sel: torch.Tensor, new: torch.Tensor) -> None:
    """Column ``j`` of each ``ld[b]`` set to ``new[b]`` where ``sel[b]``."""
    ld[:, :, j] = torch.where(sel.unsqueeze(-1), new, ld[:, :, j])


def _step(w: torch.Tensor, ld: torch.Tensor, j: int, act: torch.Tensor, t: _Tables
          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One ``csytf2`` step at column ``j`` for the matrices ``act`` (the others took ``j`` in a ``2x2`` block):
    returns the updated working matrix and ``(zero, kp, 2x2)``; ``ld``'s columns are written in place."""
    n = w.shape[-1]
    zero, kp, two = _choose(w, j, t)
    zero, two = zero & act, two & act
    kk = torch.where(two, j + 1, j)
    w = _swap_sym(w, torch.where(act, kk, j), torch.where(act, kp, j))
    one = act & ~zero & ~two
    x0, d = w[:, :, j], w[:, j, j]
    b1 = t.below[:, j]
    xb = torch.where(b1, x0, 0.0)
    r1 = 1.0 / torch.where(one, d, 1.0)
    u = xb.unsqueeze(-1) * (r1.unsqueeze(-1) * xb).unsqueeze(-2)  # x_i (r1 x_l): csyr's products
    _col(ld, j, one, torch.where(b1, x0 * r1.unsqueeze(-1), torch.where(t.at[:, j], x0, 0.0)))
    _col(ld, j, zero, torch.where(b1 | t.at[:, j], x0, 0.0))
    if j + 1 < n:  # a 2x2 block (j, j + 1)
        b2 = t.below2(j)
        x1 = w[:, :, j + 1]
        d21 = torch.where(two, w[:, j + 1, j], 1.0)
        d11, d22 = w[:, j + 1, j + 1] / d21, d / d21
        d21 = (1.0 / (d11 * d22 - 1.0)) / d21
        a0, a1 = torch.where(b2, x0, 0.0), torch.where(b2, x1, 0.0)
        wk = d21.unsqueeze(-1) * (d11.unsqueeze(-1) * a0 - a1)
        wkp1 = d21.unsqueeze(-1) * (d22.unsqueeze(-1) * a1 - a0)
        u2 = a0.unsqueeze(-1) * wk.unsqueeze(-2) + a1.unsqueeze(-1) * wkp1.unsqueeze(-2)
        u = torch.where(two.view(-1, 1, 1), u2, u)
        _col(ld, j, two, torch.where(b2, wk, torch.where(t.at[:, j] | t.at[:, j + 1], x0, 0.0)))
        _col(ld, j + 1, two, torch.where(b2, wkp1, torch.where(t.at[:, j + 1], x1, 0.0)))
    w = w - torch.where((one | two).view(-1, 1, 1), u, 0.0)
    return torch.where(t.lower, w, w.mT), zero, kp, two  # LAPACK's lower triangle, mirrored


def ldl_factor(a3: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``csytrf`` (lower) of complex64 ``[B, n, n]`` (lower triangle read): ``(LD, pivots int32 [B, n], info int32
    [B])``, LAPACK's ``LD`` (``L`` below the diagonal, ``D`` on it and on the subdiagonal of ``2x2`` blocks, zeros
    above), ``ipiv`` (``kp + 1`` for a ``1x1`` block, ``-(kp + 1)`` twice for a ``2x2`` one) and ``info`` (the first
    zero column, 1-based)."""
    b, n, _ = a3.shape
    t = _Tables(n)
    w = torch.where(t.lower, a3, a3.mT)  # the symmetric matrix of the lower triangle
    ld = torch.zeros_like(w)
    piv = torch.zeros((b, n), dtype=torch.int32, device="trn")
    info = torch.zeros((b,), dtype=torch.int32, device="trn")
    act = torch.ones((b,), dtype=torch.bool, device="trn")
    for j in range(n):
        w, zero, kp, two = _step(w, ld, j, act, t)
        code = (kp + 1).to(torch.int32)
        piv[:, j] = torch.where(act, torch.where(two, -code, code), piv[:, j])
        if j + 1 < n:
            piv[:, j + 1] = torch.where(two, -code, piv[:, j + 1])
        info = torch.where(zero & (info == 0), t.steps[j], info)
        act = ~two
    return ld, piv, info


def ldl_solve(ld: torch.Tensor, piv: torch.Tensor, b3: torch.Tensor) -> torch.Tensor:
    """``csytrs`` (lower): ``X`` with ``A X = B`` from ``A = P L D L^T P^T`` (``ld``/``piv`` as :func:`ldl_factor`
    returns them, ``[B, n, n]`` / ``[B, n]``; ``b3`` ``[B, n, m]``)."""
    b, n, _ = ld.shape
    t = _Tables(n)
    x = b3.clone()
    pv = piv.to(torch.int64)
    kp = torch.where(pv > 0, pv - 1, -pv - 1)
    firsts = torch.zeros((b, n), dtype=torch.bool, device="trn")
    second = torch.zeros((b,), dtype=torch.bool, device="trn")
    for j in range(n):  # L D Y = B: interchanges, eliminations, the diagonal blocks
        one, first = pv[:, j] > 0, (pv[:, j] < 0) & ~second
        firsts[:, j] = first
        i1 = torch.where(first, j + 1, j)  # a 2x2 block's interchange is with its second row
        x = _swap_rows(x, i1, torch.where(one | first, kp[:, j], i1))
        x = _forward(x, ld, j, one, first, t)
        second = first
    for j in reversed(range(n)):  # L^T X = Y, then the interchanges undone
        acts = (pv[:, j] > 0) | (firsts[:, j - 1] if j > 0 else torch.zeros_like(second))
        lcol = torch.where(t.below[:, j], ld[:, :, j], 0.0)
        x[:, j, :] -= torch.where(acts.unsqueeze(-1), (lcol.unsqueeze(-1) * x).sum(1), 0.0)
        if j > 0:
            sec = firsts[:, j - 1]
            lprev = torch.where(t.below[:, j], ld[:, :, j - 1], 0.0)
            x[:, j - 1, :] -= torch.where(sec.unsqueeze(-1), (lprev.unsqueeze(-1) * x).sum(1), 0.0)
        x = _swap_rows(x, torch.full_like(kp[:, j], j), torch.where(acts, kp[:, j], j))
    return x


def _forward(x: torch.Tensor, ld: torch.Tensor, j: int, one: torch.Tensor, first: torch.Tensor, t: _Tables
             ) -> torch.Tensor:
    """One step of ``csytrs``' forward pass at column ``j`` (``one``: a ``1x1`` block; ``first``: a ``2x2`` block
    starting at ``j``; neither: the second column of a block already done)."""
    n = x.shape[-2]
    xj = x[:, j, :]
    l0 = torch.where(t.below[:, j], ld[:, :, j], 0.0)
    d = torch.where(one, ld[:, j, j], 1.0)
    upd = torch.where(one.view(-1, 1, 1), l0.unsqueeze(-1) * xj.unsqueeze(-2), 0.0)
    newj = torch.where(one.unsqueeze(-1), xj / d.unsqueeze(-1), xj)
    if j + 1 < n:
        b2 = t.below2(j)
        xj1 = x[:, j + 1, :]
        a0, a1 = torch.where(b2, ld[:, :, j], 0.0), torch.where(b2, ld[:, :, j + 1], 0.0)
        upd2 = a0.unsqueeze(-1) * xj.unsqueeze(-2) + a1.unsqueeze(-1) * xj1.unsqueeze(-2)
        upd = torch.where(first.view(-1, 1, 1), upd2, upd)
        akm1k = torch.where(first, ld[:, j + 1, j], 1.0)
        akm1, ak = ld[:, j, j] / akm1k, ld[:, j + 1, j + 1] / akm1k
        denom = (akm1 * ak - 1.0).unsqueeze(-1)
        bkm1, bk = xj / akm1k.unsqueeze(-1), xj1 / akm1k.unsqueeze(-1)
        newj = torch.where(first.unsqueeze(-1), (ak.unsqueeze(-1) * bkm1 - bk) / denom, newj)
        x = x - upd  # row j + 1 is below a 1x1 block's column, not below a 2x2 block's
        x[:, j + 1, :] = torch.where(first.unsqueeze(-1), (akm1.unsqueeze(-1) * bk - bkm1) / denom, x[:, j + 1, :])
    else:
        x = x - upd
    x[:, j, :] = newj
    return x
