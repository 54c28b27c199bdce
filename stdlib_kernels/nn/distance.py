"""Pairwise distances: ``cdist`` (``aten::_cdist_forward`` / ``_cdist_backward``) and ``pdist``
(``aten::_pdist_forward`` / ``_pdist_backward``), p-norms for any ``p >= 0`` (0, 1, 2, inf and general).

Layout: 128 rows of ``x1`` on the partitions, a chunk of up to 512 rows of ``x2`` on the free axis; the feature
dimension is a loop whose step broadcasts one column of ``x1`` (``[P, 1]``) against one row of ``x2^T``
(``[1, R]``, replicated across partitions) and accumulates ``|d|^p`` (``max |d|`` for inf, ``d != 0`` for 0).
The backward uses the same layout: per feature, ``sum_j g[i, j] * dd(x1[i] - x2[j], dist[i, j])`` is a free-axis
reduction written into one column of an SBUF tile of the gradient. The per-p derivative formulas, including
torch's zero rules (``dist == 0``, ``diff == 0`` with ``p < 1``), follow torch's CPU kernel.

``pdist`` is the strict upper triangle of ``cdist(x, x)``: the square is computed once and the condensed
vector gathered from it through an index map (host-computed, cached per size); its backward scatters the
condensed gradient into a symmetric square and reuses the ``cdist`` gradient kernel.

``p == 2`` with ``torch.cdist``'s matrix-multiplication mode never reaches these ops: torch runs its composite
``_euclidean_dist`` (native matmul and pointwise ops).

Example:
    >>> import torch
    >>> a, b = torch.randn(4, 3, device="trn"), torch.randn(5, 3, device="trn")   # doctest: +SKIP
    >>> torch.cdist(a, b, p=1).shape                                            # doctest: +SKIP
    torch.Size([4, 5])
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.tiling import col_chunks, row_tiles
from trnlang.device import decline, lowering

_R = 512  # x2 rows per free-axis chunk
_MAX_FEATURES = 8192  # gradient columns kept in one SBUF tile


class PNorm(U.Mode):
    """Which p-norm formula the kernels trace for ``p`` (special cases first)."""

    ZERO = "zero"  #: p = 0: the count of differing features
    ONE = "one"    #: p = 1
    TWO = "two"    #: p = 2: sqrt of the sum of squares
    INF = "inf"    #: p = inf: the largest difference
    LT2 = "lt2"    #: other p < 2 (the backward's special cases at 0)
    GEN = "gen"    #: other p > 2


def _kind(p: float) -> PNorm:
    if p == 0:
        return PNorm.ZERO
    if p == 1:
        return PNorm.ONE
    if p == 2:
        return PNorm.TWO
    if math.isinf(p):
        return PNorm.INF
    return PNorm.LT2 if p < 2 else PNorm.GEN


@trn.kernel
def cdist_fwd(x1, x2, out, p):
    """``out[b, i, j] = ||x1[b, i] - x2[b, j]||_p`` for ``x1 [B, P, M]``, ``x2 [B, R, M]``, ``out [B, P, R]``."""
    b_dim, p_dim, m_dim = x1.shape
    r_dim = x2.shape[1]
    kind = _kind(p)
    for b in tl.affine_range(b_dim):
        for rows, mr in row_tiles(p_dim):
            for cols, mc in col_chunks(r_dim, _R):
                acc = tl.zeros((rows.shape[0], cols.shape[1]), tl.float32)
                for k in tl.sequential_range(m_dim):
                    a, c = _feature(x1, x2, b, k, rows, mr, cols, mc)
                    d = tl.abs(a - c)
                    if kind is PNorm.ZERO:
                        acc[...] = acc + tl.where(d != 0.0, 1.0, 0.0)
                    elif kind is PNorm.ONE:
                        acc[...] = acc + d
                    elif kind is PNorm.TWO:
                        acc[...] = acc + d * d
                    elif kind is PNorm.INF:
                        acc[...] = tl.maximum(acc, d)
                    else:
                        acc[...] = acc + tl.power(d, float(p))
                if kind is PNorm.TWO:
                    res = tl.sqrt(acc)
                elif kind in (PNorm.LT2, PNorm.GEN):
                    res = tl.power(acc, 1.0 / p)
                else:
                    res = acc
                tl.store(out[b, rows, cols], res, mask=mr & mc)


def _feature(x1: Any, x2: Any, b: Any, k: Any, rows: Any, mr: Any, cols: Any, mc: Any) -> tuple[Any, Any]:
    """Feature ``k`` of the ``x1`` rows (``[P, 1]``) and of the ``x2`` rows (``[1, R]`` replicated to ``[P, R]``),
    fp32."""
    a = tl.load(x1[b, rows, k], mask=mr).astype(tl.float32)
    return a, tl.broadcast_to(tl.load(x2[b, cols, k], mask=mc).astype(tl.float32), (rows.shape[0], cols.shape[1]))


def _dd(diff: Any, g: Any, dist: Any, p: float, kind: PNorm) -> Any:
    """torch's per-p backward term ``g * d dist / d x1`` at ``diff = x1 - x2`` (fp32 tiles)."""
    sg = tl.where(diff > 0.0, 1.0, tl.where(diff < 0.0, -1.0, 0.0))
    if kind is PNorm.ONE:
        return g * sg
    if kind is PNorm.TWO:
        return tl.where(dist == 0.0, 0.0, g * diff / dist)
    if kind is PNorm.INF:
        return g * sg * (1.0 - tl.minimum(1.0, tl.ceil(tl.abs(tl.abs(diff) - dist))))
    a = tl.abs(diff)
    if kind is PNorm.LT2:
        r = sg * tl.power(a, p - 1.0) * g / tl.power(dist, p - 1.0)
        r = tl.where(dist == 0.0, 0.0, r)
        return tl.where((diff == 0.0) & (p < 1.0), 0.0, r) if p < 1.0 else r
    return tl.where(dist == 0.0, 0.0, diff * tl.power(a, p - 2.0) * g / tl.power(dist, p - 1.0))


@trn.kernel
def cdist_bwd(g, x1, x2, dist, out, p):
    """``out[b, i, k] = sum_j dd(x1[b, i, k] - x2[b, j, k], g[b, i, j], dist[b, i, j])`` (``out [B, P, M]``)."""
    b_dim, p_dim, m_dim = x1.shape
    r_dim = x2.shape[1]
    kind = _kind(p)
    for b in tl.affine_range(b_dim):
        for rows, mr in row_tiles(p_dim):
            acc = tl.zeros((rows.shape[0], m_dim), tl.float32)
            for cols, mc in col_chunks(r_dim, _R, loop=tl.sequential_range):
                m = mr & mc
                gt = tl.load(g[b, rows, cols], mask=m).astype(tl.float32)
                dt = tl.load(dist[b, rows, cols], mask=m).astype(tl.float32)
                for k in tl.sequential_range(m_dim):
                    a, c = _feature(x1, x2, b, k, rows, mr, cols, mc)
                    term = tl.where(mc, _dd(a - c, gt, dt, p, kind), 0.0)
                    acc[:, k:k + 1] = acc[:, k:k + 1] + tl.sum(term, axis=1, keepdims=True)
            tl.store(out[b, rows, tl.arange(m_dim)[None, :]], acc, mask=mr)


@trn.kernel
def take_rows(src, idx, out):
    """``out[q] = src[idx[q]]`` for ``src [S, 1]``, ``idx [Q, 1]`` (int32), ``out [Q, 1]`` (indirect DMA)."""
    one = tl.arange(1)[None, :]
    for rows, m in row_tiles(idx.shape[0]):
        li = tl.load(idx[rows, one], mask=m, other=0)
        tl.store(out[rows, one], tl.load(src[li, one], mask=m), mask=m)


@trn.kernel
def put_rows(src, idx_a, idx_b, out):
    """``out[idx_a[q]] = out[idx_b[q]] = src[q]`` (``out [S, 1]``; the symmetric square of a condensed vector)."""
    one = tl.arange(1)[None, :]
    for rows, m in row_tiles(idx_a.shape[0]):
        v = tl.load(src[rows, one], mask=m)
        tl.store(out[tl.load(idx_a[rows, one], mask=m, other=0), one], v, mask=m)
        tl.store(out[tl.load(idx_b[rows, one], mask=m, other=0), one], v, mask=m)


# ------------------------------------------------------------------------------------------ host side
def _ok(*ts: Any) -> bool:
    return all(U.is_trn(t) and t.dtype == torch.float32 and not t.is_conj() and not t.is_neg() for t in ts)


def _batched(x1: torch.Tensor, x2: torch.Tensor) -> tuple[list[int], torch.Tensor, torch.Tensor] | None:
    """Broadcast batch dims: ``(batch shape, x1 [B, P, M], x2 [B, R, M])`` (expanded views made dense)."""
    try:
        batch = list(torch.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]))
    except RuntimeError:
        return None
    nb = U.prod(batch)
    a = x1.expand(*batch, *x1.shape[-2:]).reshape(nb, *x1.shape[-2:])
    b = x2.expand(*batch, *x2.shape[-2:]).reshape(nb, *x2.shape[-2:])
    return batch, a, b


def _ok_p(p: Any) -> bool:
    return isinstance(p, (int, float)) and not math.isnan(p) and p >= 0


@lowering("aten::_cdist_forward", dtypes=None)
def cdist_forward(x1: torch.Tensor, x2: torch.Tensor, p: float, compute_mode: int | None) -> Any:
    """``torch.cdist``'s direct kernel (every p except the matmul form of p = 2, which torch composes itself)."""
    if not _ok(x1, x2) or x1.dim() < 2 or x2.dim() < 2 or x1.shape[-1] != x2.shape[-1] or not _ok_p(p):
        return decline("not float32 trn tensors, fewer than 2 dims, mismatched feature sizes, or p negative or NaN")
    r1, r2 = x1.shape[-2], x2.shape[-2]
    bt = _batched(x1, x2)
    if bt is None or x1.shape[-1] > _MAX_FEATURES:
        return decline("batch dims do not broadcast, or more than 8192 features")
    batch, a, b = bt
    out = torch.empty((*batch, r1, r2), dtype=x1.dtype, device="trn")
    if out.numel() == 0:
        return out
    if x1.shape[-1] == 0:
        return out.zero_()
    if p == 2 and (compute_mode == 1 or (compute_mode in (None, 0) and (r1 > 25 or r2 > 25))):
        return decline("p = 2 by the matmul form (compute_mode or more than 25 rows): the CPU's own rounding")
    cdist_fwd(a, b, out.view(-1, r1, r2), float(p))
    return out


def _grad(g3: torch.Tensor, a: torch.Tensor, b: torch.Tensor, d3: torch.Tensor, p: float) -> torch.Tensor:
    out = torch.empty(a.shape, dtype=a.dtype, device="trn")
    if out.numel() == 0:
        return out
    if p == 0 or b.shape[1] == 0:
        return out.zero_()
    cdist_bwd(g3, a, b, d3, out, float(p))
    return out


@lowering("aten::_cdist_backward", dtypes=None)
def cdist_backward(grad: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, p: float, cdist: torch.Tensor) -> Any:
    """Gradient of ``_cdist_forward`` with respect to ``x1`` (batch dims as broadcast; autograd reduces them)."""
    if not _ok(grad, x1, x2, cdist) or x1.dim() < 2 or x2.dim() < 2 or not _ok_p(p) or \
            x1.shape[-1] != x2.shape[-1] or x1.shape[-1] > _MAX_FEATURES:
        return decline("not float32 trn tensors, fewer than 2 dims, mismatched or more than 8192 features, or bad p")
    bt = _batched(x1, x2)
    if bt is None:
        return decline("batch dims do not broadcast")
    batch, a, b = bt
    r1, r2 = x1.shape[-2], x2.shape[-2]
    if tuple(grad.shape) != (*batch, r1, r2) or grad.shape != cdist.shape:
        return decline("grad of the wrong shape")
    if a.numel() == 0 or b.numel() == 0:
        return torch.zeros((*batch, r1, x1.shape[-1]), dtype=x1.dtype, device="trn")
    out = _grad(grad.reshape(-1, r1, r2), a, b, cdist.reshape(-1, r1, r2), p)
    return out.view(*batch, r1, x1.shape[-1])


_MAPS: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}


def _maps(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat positions ``i * n + j`` and ``j * n + i`` of the pairs ``i < j`` in pdist's order (int32, on trn)."""
    hit = _MAPS.get(n)
    if hit is None:
        i, j = np.triu_indices(n, 1)
        up = torch.from_numpy((i * n + j).astype(np.int32).reshape(-1, 1)).to("trn")
        lo = torch.from_numpy((j * n + i).astype(np.int32).reshape(-1, 1)).to("trn")
        hit = _MAPS[n] = (up, lo)
        if len(_MAPS) > 32:
            _MAPS.pop(next(iter(_MAPS)))
    return hit


def _pdist_ok(self: Any, p: Any) -> bool:
    return _ok(self) and self.dim() == 2 and _ok_p(p) and self.shape[1] <= _MAX_FEATURES and \
        self.shape[0] * self.shape[0] < 2 ** 31


@lowering("aten::_pdist_forward", dtypes=None)
def pdist_forward(self: torch.Tensor, p: float = 2.0) -> Any:
    """``F.pdist``: the condensed upper triangle of ``cdist(x, x)`` (row-major pairs ``i < j``)."""
    if not _pdist_ok(self, p):
        return decline("not a 2-D float32 trn tensor, p negative or NaN, more than 8192 features, or n^2 >= 2^31")
    n, m = self.shape
    q = n * (n - 1) // 2
    out = torch.empty((q,), dtype=self.dtype, device="trn")
    if q == 0:
        return out
    if m == 0:
        return out.zero_()
    x = self.contiguous().view(1, n, m)
    sq = torch.empty((n * n, 1), dtype=self.dtype, device="trn")
    cdist_fwd(x, x, sq.view(1, n, n), float(p))
    take_rows(sq, _maps(n)[0], out.view(q, 1))
    return out


@lowering("aten::_pdist_backward", dtypes=None)
def pdist_backward(grad: torch.Tensor, self: torch.Tensor, p: float, pdist: torch.Tensor) -> Any:
    """Gradient of ``pdist``: the condensed gradient and distances as symmetric squares, then ``cdist``'s."""
    if not _pdist_ok(self, p) or not _ok(grad, pdist):
        return decline("not 2-D float32 trn tensors, p negative or NaN, more than 8192 features, or n^2 >= 2^31")
    n, m = self.shape
    q = n * (n - 1) // 2
    if grad.numel() != q or pdist.numel() != q:
        return decline("grad or pdist of the wrong size")
    if q == 0 or m == 0 or p == 0:
        return torch.zeros(self.shape, dtype=self.dtype, device="trn")
    up, lo = _maps(n)
    gs = torch.zeros((n * n, 1), dtype=self.dtype, device="trn")
    ds = torch.zeros((n * n, 1), dtype=self.dtype, device="trn")
    put_rows(grad.contiguous().view(q, 1), up, lo, gs)
    put_rows(pdist.contiguous().view(q, 1), up, lo, ds)
    x = self.contiguous().view(1, n, m)
    return _grad(gs.view(1, n, n), x, x, ds.view(1, n, n), p).view(n, m)
