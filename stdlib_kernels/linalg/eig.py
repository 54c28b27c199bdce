"""Singular value and symmetric eigenvalue decompositions on the ``trn`` device, by Jacobi rotations in
trnlang kernels (float32): ``_linalg_svd`` (``svd``, ``linalg.svd``, ``svdvals``, matrix norms, ``cond``,
``pinv``, ...), ``_linalg_eigh`` (``eigh``, ``eigvalsh``) and ``linalg_lstsq`` (from the SVD).

SVD: one-sided (Hestenes) Jacobi. The ``k = min(m, n)`` vectors to orthogonalise (the columns of a tall ``A``,
the rows of a wide one) are the *columns* of an SBUF state ``[len + n2, n2]``: the matrix over ``V`` (the
identity at the start), rows tiled by 128 partitions, ``k`` padded to an even ``n2`` with a zero column. Column
``j`` is paired with column ``h + j`` (``h = n2 / 2``), and one round rotates all ``h`` pairs at once: the three
dot products per pair are sums over the partitions, one masked ones-vector matmul each (Tensor engine,
accumulated over the row tiles in PSUM) into ``[1, h]`` rows; the rotation angles are arithmetic on those rows,
broadcast to the partitions; the rotation is two multiply-adds of whole tiles (Vector engine). The columns
then move by the round-robin ("circle") schedule, which is free-axis slice copies (no data crosses
partitions), so ``n2 - 1`` rounds (one sweep, one kernel launch) pair every two columns once and end with the
columns back in place. Each sweep also writes the largest ``|x.y| / (|x| |y|)`` it met; the host repeats
sweeps until that is below ``sqrt(len) * eps`` (no rotation happened) and declines (CPU fallback) if it has not
after ``MAX_SWEEPS``. A final kernel takes the column norms ``|x_j| / |v_j|`` (the singular values; dividing
by ``|v_j|`` undoes the norm drift of thousands of fp32 rotations) and normalises the columns; ``trn``
sort/gather order them by descending singular value. ``U`` (or ``V^T`` for a wide input) is completed to an
orthonormal basis by the Householder QR kernel of ``linalg_qr.py`` (``full_matrices``, exactly zero singular
values).

eigh: two-sided cyclic Jacobi with the same pairing and schedule. A round is ``A <- G^T A G`` with ``G = J P^T``
(the rotations, then the move): the column operation above on ``A``, one transpose (``(A G)^T = G^T A``, ``A``
symmetric; Tensor engine, 128 x 128 blocks) and the column operation again; ``V <- V G``. The pivots
``(a_pp, a_qq, a_pq)`` of all pairs come from the diagonals of the tile. Converged when every ``|a_pq|`` is
below ``eps * ||A||_F`` (or stalls at the rounding floor just above). The eigenvalues are the Rayleigh quotients
``v^T A v`` with the input ``A`` (one matmul; the rotated diagonal carries every rotation's rounding), sorted
ascending with their vectors.

Results follow LAPACK's conventions where torch defines them (singular values descending, eigenvalues
ascending, orthonormal ``U``/``V``); singular vectors and eigenvectors are defined up to sign only, and the
Jacobi signs are not LAPACK's (torch's own tests compare gauge-invariant quantities: ``|U|``, ``U V^H``).
Inputs are scaled by a power of two (exact) when their largest entry is far from 1. Limits (host time of the
simulated sweeps, SBUF): ``min(m, n) <= 256`` (and ``n <= 256`` for eigh); the sweep kernel takes
``max(m, n) <= 8192`` and ``max(m, n) * min(m, n)^2 <= MAX_WORK`` (2^25: a 512 x 256 SVD takes ~1 s after
compilation); longer vectors (up to ``MAX_GRAM_ELEMS`` elements) are first orthonormalised in HBM by Gram-matrix
eigen-rotations (:func:`_gram_svd`: a 3 x 2^20 SVD takes 0.1 s warm), only the small factor is swept;
``full_matrices`` (or an exactly zero singular value) with ``max(m, n) > 128`` (the QR kernel's tile);
non-finite inputs (LAPACK's error or NaN results are the CPU's business). Declined calls run on the CPU
fallback.

Example:
    >>> a = torch.tensor([[3.0, 0.0], [4.0, 5.0]], device="trn")
    >>> torch.linalg.svdvals(a).cpu()
    tensor([6.7082, 2.2361])
    >>> torch.linalg.eigvalsh(torch.tensor([[2.0, 1.0], [1.0, 2.0]], device="trn")).cpu()
    tensor([1.0000, 3.0000])
"""

from __future__ import annotations

import math
from typing import Any

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.linalg import common as C
from stdlib_kernels.linalg import complex_embed as CE
from stdlib_kernels.linalg import complex_qr as CQ
from stdlib_kernels.linalg import qr as QR
from trnlang.device import decline, lowering

#: Most sweeps before a Jacobi decomposition is declined (fp32 converges in ~6-12 for n <= 256).
MAX_SWEEPS = 40
#: Largest ``max(m, n) * min(m, n)^2`` decomposed natively (host time of the simulated sweeps).
MAX_WORK = 1 << 25
#: Largest number of vectors (``min(m, n)``; two tiles of 128 partitions).
MAX_K = 256
#: Longest vectors (``max(m, n)``: the SVD state's rows, tiled by 128 partitions, stay in SBUF).
MAX_LEN = 8192
#: Longer vectors go through the Gram-matrix rotations (:func:`_gram_svd`), up to this many elements per matrix.
MAX_GRAM_ELEMS = 1 << 26
#: Most orthonormalising steps of :func:`_gram_svd` (two or three suffice below a condition of ~1e3).
MAX_GRAM_STEPS = 12
#: A sweep that stalls (does not halve the largest off-diagonal measure) within this many ``tol`` ends the loop.
STALL = 64.0
_EPS = 2.0 ** -23
_CHUNK = 512  # matmul moving free size (one PSUM bank of fp32)


# in-kernel helpers ----------------------------------------------------------------------------------------------
def _rotation(num, den, rot):
    """``t = tan`` of the Jacobi angle: the smaller root of ``t^2 + 2 zeta t - 1 = 0``, ``zeta = num / (2 den)``
    (0 where ``rot`` is false); ``c = 1 / sqrt(1 + t^2)``, ``s = c t``. ``[1, h]`` rows, one entry per pair."""
    zeta = num / (2.0 * tl.where(rot, den, 1.0))
    sg = tl.where(zeta >= 0.0, 1.0, -1.0)
    t = tl.where(rot, sg / (tl.abs(zeta) + tl.sqrt(1.0 + zeta * zeta)), 0.0)
    c = 1.0 / tl.sqrt(1.0 + t * t)
    return t, c, c * t


def _rotate_cols(x, cs, sn, h, dst, t):
    """Rotate the column pairs ``(j, h + j)`` of ``x`` ``[p, 2h]`` (``cs``/``sn``: ``[p, h]``) and write them to
    ``dst[:, t, :]`` moved by one step of the round-robin ("circle") schedule: column 0 stays, the others
    travel 1 -> 2 -> ... -> h-1 -> 2h-1 -> 2h-2 -> ... -> h -> 1 (free-axis slices, no data-dependent moves)."""
    top = x[:, 0:h]
    bot = x[:, h:2 * h]
    nx = top * cs - bot * sn
    ny = top * sn + bot * cs
    dst[:, t, 0:1] = nx[:, 0:1]
    dst[:, t, 1:2] = ny[:, 0:1]
    if h > 1:
        if h > 2:
            dst[:, t, 2:h] = nx[:, 1:h - 1]
        dst[:, t, 2 * h - 1:2 * h] = nx[:, h - 1:h]
        dst[:, t, h:2 * h - 1] = ny[:, 1:h]


def _load_sym(src, scale, bi, a, t, rows, cols, lower):
    """Row tile ``t`` of the symmetric matrix given by the ``lower`` (or upper) triangle of ``src[bi]``, scaled
    by ``scale[bi]`` and zero-padded, into ``a[:, t, :]``."""
    pa = a.shape[0]
    n = src.shape[-1]
    r = t * pa + rows
    sc = tl.broadcast_to(tl.load(scale[bi:bi + 1, 0:1]), (pa, 1))
    m = (r < n) & (cols < n)
    direct = tl.load(src[bi, r, cols], mask=m)
    mirror = tl.load(src[bi, cols, r], mask=m)  # A^T rows (a strided DMA)
    a[:, t, :] = tl.where((r >= cols) if lower else (r <= cols), direct, mirror) * sc


def _state_dims(w):
    """The geometry of an SVD state ``w`` ``[B, ln + n2, n2]``: ``rr = ln + n2`` rows, ``n2`` columns, ``ln``,
    the row tile ``p`` (at most 128), the tile count ``nt`` and the index values ``rows`` ``[p, 1]`` and
    ``cols`` ``[1, n2]`` (trace-time helper of the SVD kernels)."""
    rr, n2 = w.shape[-2], w.shape[-1]
    p = min(128, rr)
    return rr, n2, rr - n2, p, tl.cdiv(rr, p), tl.arange(p)[:, None], tl.arange(n2)[None, :]


# kernels --------------------------------------------------------------------------------------------------------
@trn.kernel
def svd_sweep_kernel(src, scale, w, off, tol):
    """One one-sided Jacobi sweep (``n2 - 1`` rounds) over each state ``w[b]`` ``[ln + n2, n2]`` (rows ``0:ln``:
    the matrix whose columns are orthogonalised, rows ``ln:``: ``V``), in place. ``off[b, 0]``: the largest
    ``|cos|`` between two columns met. ``src`` ``[B, ln, k]`` (first sweep only, scaled by ``scale [B, 1]``, with
    ``V = I``) initialises the state. Column dot products are Tensor-engine reductions over the partitions
    (a masked ones-vector, accumulated over row tiles in PSUM)."""
    rr, n2, ln, p, nt, rows, cols = _state_dims(w)
    h = n2 // 2
    for bi in tl.affine_range(w.shape[0]):
        buf = tl.ndarray((p, nt, n2), tl.float32, buffer=tl.sbuf)
        for t in tl.affine_range(nt):
            r = t * p + rows
            if src is None:
                buf[:, t, :] = tl.load(w[bi, r, cols], mask=r < rr)
            else:
                sc = tl.broadcast_to(tl.load(scale[bi:bi + 1, 0:1]), (p, 1))
                x = tl.load(src[bi, r, cols], mask=(r < ln) & (cols < src.shape[-1])) * sc
                buf[:, t, :] = tl.where(r < ln, x, tl.where(cols == r - ln, 1.0, 0.0))
        worst = tl.zeros((1, h), tl.float32)
        for _r in tl.sequential_range(n2 - 1):
            aa = tl.zeros((1, h), tl.float32, buffer=tl.psum)
            bb = tl.zeros((1, h), tl.float32, buffer=tl.psum)
            cc = tl.zeros((1, h), tl.float32, buffer=tl.psum)
            for t in tl.affine_range(nt):
                x = buf[:, t, 0:h]
                y = buf[:, t, h:n2]
                msk = tl.where(t * p + rows < ln, 1.0, 0.0) * tl.ones((p, 1), tl.float32)
                aa += tl.matmul(msk, x * x, transpose_x=True)
                bb += tl.matmul(msk, y * y, transpose_x=True)
                cc += tl.matmul(msk, x * y, transpose_x=True)
            a = tl.copy(aa)
            b = tl.copy(bb)
            c = tl.copy(cc)
            den = tl.sqrt(a) * tl.sqrt(b)
            rel = tl.where(den > 0.0, tl.abs(c) / tl.where(den > 0.0, den, 1.0), 0.0)
            worst[:, :] = tl.maximum(worst, rel)
            _t, cs, sn = _rotation(b - a, c, rel > tol)
            csb = tl.broadcast_to(cs, (p, h))
            snb = tl.broadcast_to(sn, (p, h))
            for t in tl.affine_range(nt):
                _rotate_cols(buf[:, t, :], csb, snb, h, buf, t)
        for t in tl.affine_range(nt):
            r = t * p + rows
            tl.store(w[bi, r, cols], buf[:, t, :], mask=r < rr)
        tl.store(off[bi:bi + 1, 0:1], tl.max(worst, axis=1, keepdims=True))


@trn.kernel
def eigh_sweep_kernel(src, scale, w, off, tol, lower):
    """One two-sided Jacobi sweep over each state ``w[b]`` ``[2 n2, n2]`` (rows ``0:n2``: the symmetric matrix,
    rows ``n2:``: ``V``), in place; ``off[b, 0]``: the largest ``|a_pq| / ||A||_F`` met. ``src`` ``[B, n, n]``
    (first sweep only: symmetrised from its ``lower`` or upper triangle, scaled by ``scale [B, 1]``, ``V = I``)
    initialises the state. A round is ``A <- G^T A G`` with ``G = J P^T`` (rotations, then the move): the
    column operation, one transpose (``(A G)^T = G^T A``, A symmetric) and the column operation again."""
    n2 = w.shape[-1]
    h = n2 // 2
    pa = min(128, n2)
    ta = n2 // pa
    rows = tl.arange(pa)[:, None]
    cols = tl.arange(n2)[None, :]
    for bi in tl.affine_range(w.shape[0]):
        a = tl.ndarray((pa, ta, n2), tl.float32, buffer=tl.sbuf)
        at = tl.ndarray((pa, ta, n2), tl.float32, buffer=tl.sbuf)
        v = tl.ndarray((pa, ta, n2), tl.float32, buffer=tl.sbuf)
        for t in tl.static_range(ta):
            r = t * pa + rows
            if src is None:
                a[:, t, :] = tl.load(w[bi, r, cols])
                v[:, t, :] = tl.load(w[bi, n2 + r, cols])
            else:
                _load_sym(src, scale, bi, a, t, rows, cols, lower)
                v[:, t, :] = tl.where(cols == r, 1.0, 0.0) * tl.ones((pa, n2), tl.float32)
        sq = tl.zeros((1, 1), tl.float32, buffer=tl.psum)
        for t in tl.static_range(ta):
            sq += tl.matmul(tl.ones((pa, 1), tl.float32), tl.sum(a[:, t, :] * a[:, t, :], axis=1, keepdims=True),
                            transpose_x=True)
        fro = tl.sqrt(tl.copy(sq))
        scl = tl.broadcast_to(tl.where(fro > 0.0, 1.0 / tl.where(fro > 0.0, fro, 1.0), 0.0), (1, h))
        worst = tl.zeros((1, h), tl.float32)
        drow = tl.ndarray((1, n2), tl.float32, buffer=tl.sbuf)
        prow = tl.ndarray((1, n2), tl.float32, buffer=tl.sbuf)
        for _r in tl.sequential_range(n2 - 1):
            for t in tl.static_range(ta):
                r = t * pa + rows
                dcol = tl.sum(tl.where(cols == r, a[:, t, :], 0.0), axis=1, keepdims=True)
                pcol = tl.sum(tl.where(cols == r + h, a[:, t, :], 0.0), axis=1, keepdims=True)
                drow[:, t * pa:(t + 1) * pa] = tl.copy(tl.transpose(dcol))
                prow[:, t * pa:(t + 1) * pa] = tl.copy(tl.transpose(pcol))
            app = drow[:, 0:h]
            aqq = drow[:, h:n2]
            apq = prow[:, 0:h]
            rel = tl.abs(apq) * scl
            worst[:, :] = tl.maximum(worst, rel)
            _t, cs, sn = _rotation(aqq - app, apq, rel > tol)
            csb = tl.broadcast_to(cs, (pa, h))
            snb = tl.broadcast_to(sn, (pa, h))
            for t in tl.static_range(ta):
                _rotate_cols(a[:, t, :], csb, snb, h, a, t)
                _rotate_cols(v[:, t, :], csb, snb, h, v, t)
            for i in tl.static_range(ta):
                for j in tl.static_range(ta):
                    at[:, i, j * pa:(j + 1) * pa] = tl.copy(tl.transpose(a[:, j, i * pa:(i + 1) * pa]))
            for t in tl.static_range(ta):
                _rotate_cols(at[:, t, :], csb, snb, h, a, t)
        for t in tl.static_range(ta):
            r = t * pa + rows
            tl.store(w[bi, r, cols], a[:, t, :])
            tl.store(w[bi, n2 + r, cols], v[:, t, :])
        tl.store(off[bi:bi + 1, 0:1], tl.max(worst, axis=1, keepdims=True))


@trn.kernel
def svd_finish_kernel(w, u, s, v):
    """From a converged SVD state ``w[b]`` ``[ln + n2, n2]`` (``X = A V`` over ``V``): ``u[b]`` ``[ln, n2]`` =
    ``X`` with unit columns (zero columns stay 0), ``v[b]`` ``[n2, n2]`` = ``V`` with unit columns and ``s[b]``
    ``[1, n2]`` = ``|x_j| / |v_j|``. Dividing by ``|v_j|`` undoes the slow drift of the norms under thousands of
    fp32 rotations (``x_j`` and ``v_j`` were rotated alike), which otherwise dominates the error."""
    rr, n2, ln, p, nt, rows, cols = _state_dims(w)
    for bi in tl.affine_range(w.shape[0]):
        buf = tl.ndarray((p, nt, n2), tl.float32, buffer=tl.sbuf)
        xs = tl.zeros((1, n2), tl.float32, buffer=tl.psum)
        vs = tl.zeros((1, n2), tl.float32, buffer=tl.psum)
        for t in tl.affine_range(nt):
            r = t * p + rows
            buf[:, t, :] = tl.load(w[bi, r, cols], mask=r < rr)
            sq = buf[:, t, :] * buf[:, t, :]
            xs += tl.matmul(tl.where(r < ln, 1.0, 0.0) * tl.ones((p, 1), tl.float32), sq, transpose_x=True)
            vs += tl.matmul(tl.where(r >= ln, 1.0, 0.0) * tl.ones((p, 1), tl.float32), sq, transpose_x=True)
        xn = tl.sqrt(tl.copy(xs))
        vn = tl.sqrt(tl.copy(vs))
        tl.store(s[bi:bi + 1, cols], xn / vn)
        xr = tl.broadcast_to(tl.where(xn > 0.0, 1.0 / tl.where(xn > 0.0, xn, 1.0), 0.0), (p, n2))
        vr = tl.broadcast_to(1.0 / vn, (p, n2))
        for t in tl.affine_range(nt):
            r = t * p + rows
            tl.store(u[bi, r, cols], buf[:, t, :] * xr, mask=r < ln)
            tl.store(v[bi, r - ln, cols], buf[:, t, :] * vr, mask=(r >= ln) & (r < rr))


@trn.kernel
def eigh_finish_kernel(src, scale, w, vals, vecs, lower):
    """From a converged eigh state ``w[b]`` ``[2 n2, n2]``: ``vecs[b]`` = ``V`` with unit columns and
    ``vals[b]`` ``[1, n2]`` = the Rayleigh quotients ``v_j^T A v_j`` with the input ``A`` (``src``, scaled as for
    the sweeps): accurate to second order in the eigenvector error, where the rotated diagonal carries the
    rounding of every rotation (the large eigenvalues leak into the small ones). Padding indices get ``+inf``
    (they sort last)."""
    n2 = w.shape[-1]
    n = src.shape[-1]
    pa = min(128, n2)
    ta = n2 // pa
    rows = tl.arange(pa)[:, None]
    cols = tl.arange(n2)[None, :]
    for bi in tl.affine_range(w.shape[0]):
        v = tl.ndarray((pa, ta, n2), tl.float32, buffer=tl.sbuf)
        a = tl.ndarray((pa, ta, n2), tl.float32, buffer=tl.sbuf)
        vs = tl.zeros((1, n2), tl.float32, buffer=tl.psum)
        for t in tl.static_range(ta):
            v[:, t, :] = tl.load(w[bi, n2 + t * pa + rows, cols])
            vs += tl.matmul(tl.ones((pa, 1), tl.float32), v[:, t, :] * v[:, t, :], transpose_x=True)
            _load_sym(src, scale, bi, a, t, rows, cols, lower)
        vr = tl.broadcast_to(1.0 / tl.sqrt(tl.copy(vs)), (pa, n2))
        for t in tl.static_range(ta):
            v[:, t, :] = v[:, t, :] * vr
            tl.store(vecs[bi, t * pa + rows, cols], v[:, t, :])
        ds = tl.zeros((1, n2), tl.float32, buffer=tl.psum)
        for i in tl.static_range(ta):
            av = tl.zeros((pa, n2), tl.float32, buffer=tl.psum)
            for t in tl.static_range(ta):
                av += tl.matmul(a[:, t, i * pa:(i + 1) * pa], v[:, t, :], transpose_x=True)  # (A^T V) = A V
            ds += tl.matmul(tl.ones((pa, 1), tl.float32), v[:, i, :] * av, transpose_x=True)
        tl.store(vals[bi:bi + 1, cols], tl.where(cols < n, tl.copy(ds), math.inf))


@trn.kernel
def sign_fix_kernel(qt, r, out):
    """``out[b]`` = rows of ``qt[b]`` (``Q^T`` of a complete QR, ``[l, l]``) times ``sign(R[j, j])`` (1 where
    ``R[j, j]`` is 0 or ``j >= k``): the completed basis whose first columns are the QR's input columns."""
    ln, k = r.shape[-2], r.shape[-1]
    rows = tl.arange(ln)[:, None]
    kcols = tl.arange(k)[None, :]
    lcols = tl.arange(ln)[None, :]
    for bi in tl.affine_range(qt.shape[0]):
        rt = tl.load(r[bi, rows, kcols])
        d = tl.sum(tl.where(rows == kcols, rt, 0.0), axis=1, keepdims=True)
        sg = tl.where(d < 0.0, -1.0, 1.0)
        tl.store(out[bi, rows, lcols], tl.load(qt[bi, rows, lcols]) * sg)


# host side --------------------------------------------------------------------------------------------------------
def _scales(a3: torch.Tensor) -> torch.Tensor | None:
    """Per-matrix power-of-two scale ``[B, 1]`` bringing the largest entry near 1 (exact); None: non-finite."""
    amax = a3.abs().amax(dim=(-2, -1)).cpu().tolist()  # a B-float host read: the choice of scale is control
    out = []
    for v in amax:
        if not math.isfinite(v):
            return None
        out.append(1.0 if v == 0.0 or 2.0 ** -40 < v < 2.0 ** 40 else 2.0 ** -math.frexp(v)[1])
    return torch.tensor(out, dtype=torch.float32).reshape(-1, 1).to("trn")


def _sweep(kernel: Any, src: torch.Tensor, scale: torch.Tensor, state: torch.Tensor, tol: float,
           *extra: Any) -> bool:
    """Jacobi sweeps until no rotation is needed (True) or ``MAX_SWEEPS`` (False). A sweep that no longer halves
    the largest off-diagonal measure, already within ``STALL * tol``, has reached the rounding floor: done."""
    off = torch.empty((state.shape[0], 1), dtype=torch.float32, device="trn")
    kernel(src, scale, state, off, tol, *extra)
    prev = math.inf
    for _ in range(MAX_SWEEPS):
        worst = off.max().item()  # one float: the convergence test is host control
        if not math.isfinite(worst):
            return False
        if worst <= tol or (worst <= STALL * tol and worst > 0.5 * prev):
            return True
        prev = worst
        kernel(None, None, state, off, tol, *extra)
    return False


def _complete(m3: torch.Tensor) -> torch.Tensor:
    """``[B, l, k]`` orthonormal-or-zero columns -> ``[B, l, l]`` orthogonal ``Q`` whose first columns are the
    input's (up to rounding), zero columns replaced by an orthonormal completion (Householder QR, l <= 128)."""
    b, ln, k = m3.shape
    qt = C.empty((b, ln, ln))
    r = C.empty((b, ln, k))
    QR.qr_kernel(m3, qt, r, ln, ln, None)
    out = C.empty((b, ln, ln))
    sign_fix_kernel(qt, r, out)
    return out.mT


def _svd_ok(A: torch.Tensor) -> bool:
    if not C.ok(A) or A.dim() < 2:
        return False
    k, ln = min(A.shape[-2:]), max(A.shape[-2:])
    return k <= MAX_K and (ln <= MAX_LEN and ln * k * k <= MAX_WORK or ln * k <= MAX_GRAM_ELEMS)


def _gram_svd(a3: torch.Tensor, compute_uv: bool) -> tuple[Any, torch.Tensor, Any] | None:
    """SVD of ``[B, m, n]`` with long vectors (``max(m, n)`` beyond the SBUF state of the sweep kernel): the
    ``k = min(m, n)`` vectors ``X`` ``[B, k, len]`` are orthonormalised in HBM, ``X = T Q``, and the small ``T``
    ``[k, k]`` goes through the sweep kernel. Each orthonormalising step takes the vectors' normalised Gram matrix
    ``G = D^-1 Y Y^T D^-1`` (unit diagonal, ``D`` the norms; trn matmul) and its eigenvectors ``W`` (the Jacobi
    eigh kernel), then ``Y <- W^T D^-1 Y`` (rows orthogonal up to the eigenvectors' rounding); the steps repeat
    on the fresh Gram matrix until every ``|y_i . y_j| / (|y_i| |y_j|)`` is at the rounding floor (each step
    shrinks the cosines by about ``eps cond^2``), and ``Q`` is ``Y`` with unit rows, ``T = X Q^T``."""
    b, m, n = a3.shape
    tall = m >= n
    k = min(m, n)
    scale = _scales(a3)
    if scale is None:
        return None
    x = (a3.mT if tall else a3) * scale.unsqueeze(-1)  # [B, k, len]
    y, eye = x, torch.eye(k, device="trn")
    tol, prev = 8.0 * math.sqrt(k) * _EPS, math.inf
    for _ in range(MAX_GRAM_STEPS):
        g = torch.bmm(y, y.mT)
        d = torch.sqrt(torch.diagonal(g, dim1=-2, dim2=-1))
        if bool((d == 0).any().item()):
            return None  # an exactly zero vector: Q would need an orthonormal completion
        rd = (1.0 / d).unsqueeze(-1)
        gn = g * rd * rd.mT
        worst = (gn.abs() - eye).amax().item()  # host control: one float
        if not math.isfinite(worst):
            return None
        if worst <= tol or (worst <= STALL * tol and worst > 0.5 * prev):
            break
        prev = worst
        r = eigh3(gn, True)
        if r is None:
            return None
        y = torch.bmm(r[1].mT, y * rd)
    else:
        return None
    q = y / torch.linalg.vector_norm(y, dim=-1, keepdim=True)  # [B, k, len], orthonormal rows
    small = svd3(torch.bmm(x, q.mT), compute_uv, False)  # X = T Q, T = U S W^T
    if small is None:
        return None
    u, sv, wt = small
    s = sv / scale
    if not compute_uv:
        return None, s, None
    vt = torch.bmm(wt, q)  # X = U S (W^T Q)
    return (vt.mT, s, u.mT) if tall else (u, s, vt)


def svd3(a3: torch.Tensor, compute_uv: bool, full: bool) -> tuple[Any, torch.Tensor, Any] | None:
    """SVD of ``[B, m, n]`` (non-empty): ``(U, S, Vh)`` (``U``/``Vh`` None without ``compute_uv``); None: declined."""
    b, m, n = a3.shape
    if max(m, n) > MAX_LEN or max(m, n) * min(m, n) ** 2 > MAX_WORK:
        return None if full else _gram_svd(a3, compute_uv)
    tall = m >= n
    k, ln = min(m, n), max(m, n)
    scale = _scales(a3)
    if scale is None:
        return None
    n2 = k + (k % 2)
    state = C.empty((b, ln + n2, n2))
    if not _sweep(svd_sweep_kernel, a3 if tall else a3.mT, scale, state, math.sqrt(ln) * _EPS):
        return None
    u, s, v = C.empty((b, ln, n2)), C.empty((b, n2)), C.empty((b, n2, n2))
    svd_finish_kernel(state, u, s, v)
    s, idx = torch.sort(s, dim=-1, descending=True, stable=True)  # the padding column (s = 0) stays last
    s = s[:, :k] / scale
    if not compute_uv:
        return None, s, None
    idx = idx[:, None, :k]
    u = torch.gather(u, 2, idx.expand(b, ln, k))
    v = torch.gather(v, 2, idx.expand(b, n2, k))[:, :k, :]
    if ln <= C.TILE:
        basis = _complete(u)  # [B, ln, ln]
        u = basis if full else basis[:, :, :k]
    elif full or bool((s[:, -1] == 0).any().item()):
        return None  # the orthonormal completion needs the one-tile QR kernel
    return (u, s, v.mT) if tall else (v, s, u.mT)


@lowering("aten::_linalg_svd", dtypes=(torch.float32, torch.complex64))
def linalg_svd(A: torch.Tensor, full_matrices: bool = False, compute_uv: bool = True, *,
               driver: str | None = None) -> Any:
    """``torch.linalg.svd``'s kernel by one-sided Jacobi (see the module docstring for the limits).

    >>> s = torch.linalg.svdvals(torch.tensor([[3.0, 0.0], [4.0, 5.0]], device="trn"))
    >>> s.cpu()
    tensor([6.7082, 2.2361])
    """
    if CE.is_complex64(A) and not compute_uv and driver is None and A.dim() >= 2:  # singular values only
        if A.numel() == 0:
            return C.empty((0,)), C.empty((*A.shape[:-2], min(A.shape[-2:]))), C.empty((0,))
        return C.empty((0,)), CE.svdvals(A), C.empty((0,))
    if CE.is_complex64(A) and driver is None and A.dim() >= 2 and A.numel() == 0:  # empty: torch's shapes
        batch, (m, n) = tuple(A.shape[:-2]), A.shape[-2:]
        k = min(m, n)
        u = torch.eye(m, m if full_matrices else k, dtype=A.dtype, device="trn").expand(*batch, -1, -1).clone()
        vh = torch.eye(n if full_matrices else k, n, dtype=A.dtype, device="trn").expand(*batch, -1, -1).clone()
        return u, C.empty((*batch, k)), vh
    if CE.is_complex64(A) and driver is None and A.dim() >= 2 and A.numel() and min(A.shape[-2:]) <= 128 \
            and (not full_matrices or max(A.shape[-2:]) <= 64):
        return CE.svd(A, full_matrices)
    if driver is not None or not _svd_ok(A):
        return decline("a driver=, or not a float32 trn matrix with min side <= 256, max side <= 8192 (complex64: "
                       "singular values only)")
    batch = tuple(A.shape[:-2])
    m, n = A.shape[-2], A.shape[-1]
    k = min(m, n)
    bsz = 1
    for d in batch:
        bsz *= d
    ushape = (*batch, m, m if full_matrices else k)
    vshape = (*batch, n if full_matrices else k, n)
    if bsz == 0 or k == 0:
        s = C.empty((*batch, k))
        if not compute_uv:
            return C.empty((0,)), s, C.empty((0,))
        u = torch.zeros(ushape, dtype=torch.float32, device="trn")
        vh = torch.zeros(vshape, dtype=torch.float32, device="trn")
        if full_matrices and bsz:  # no singular vectors: the identity bases
            u.copy_(torch.eye(m).expand(ushape).to("trn"))
            vh.copy_(torch.eye(n).expand(vshape).to("trn"))
        return u, s, vh
    r = svd3(C.flat(A), compute_uv, full_matrices)
    if r is None:
        return decline("NaN or inf in the matrix, or the Jacobi sweeps did not converge")
    u, s, vh = r
    s = s.reshape(*batch, k)
    if not compute_uv:
        return C.empty((0,)), s, C.empty((0,))
    return C.unflat(u, batch), s, C.unflat(vh, batch)


def eigh3(a3: torch.Tensor, lower: bool) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Eigenvalues ``[B, n]`` (ascending) and eigenvectors ``[B, n, n]`` of ``[B, n, n]``; None: declined."""
    b, n, _ = a3.shape
    scale = _scales(a3)
    if scale is None:
        return None
    n2 = n + (n % 2) if n <= C.TILE else 2 * C.TILE  # two full tiles above one
    state = C.empty((b, 2 * n2, n2))
    if not _sweep(eigh_sweep_kernel, a3, scale, state, _EPS, lower):
        return None
    vals, vecs = C.empty((b, n2)), C.empty((b, n2, n2))
    eigh_finish_kernel(a3, scale, state, vals, vecs, lower)
    vals, idx = torch.sort(vals, dim=-1, stable=True)  # padding indices (+inf) last
    vecs = torch.gather(vecs, 2, idx[:, None, :n].expand(b, n2, n))[:, :n, :]
    return vals[:, :n] / scale, vecs


@lowering("aten::_linalg_eigh", dtypes=(torch.float32, torch.complex64))
def linalg_eigh(A: torch.Tensor, UPLO: str = "L", compute_v: bool = True) -> Any:
    """``torch.linalg.eigh``'s kernel by cyclic Jacobi (eigenvalues ascending); ``n <= 256``.

    >>> torch.linalg.eigvalsh(torch.tensor([[2.0, 1.0], [1.0, 2.0]], device="trn")).cpu()
    tensor([1.0000, 3.0000])
    """
    if isinstance(UPLO, str) and UPLO in ("l", "u"):
        UPLO = UPLO.upper()  # torch takes either case
    if CE.is_complex64(A) and not compute_v and A.dim() >= 2 and A.shape[-1] == A.shape[-2] and A.numel() \
            and UPLO in ("L", "U"):  # eigenvalues only
        return CE.eigvalsh(A, UPLO == "L"), torch.empty((0,), dtype=A.dtype, device="trn")  # vectors: A's dtype
    if CE.is_complex64(A) and A.dim() >= 2 and A.shape[-1] == A.shape[-2] and A.numel() == 0:
        return C.empty((*A.shape[:-1],)), torch.empty(A.shape, dtype=A.dtype, device="trn")
    if CE.is_complex64(A) and A.dim() >= 2 and A.shape[-1] == A.shape[-2] and 0 < A.shape[-1] <= 128 \
            and A.numel() and UPLO in ("L", "U"):
        r = CE.eigh(A, UPLO == "L")
        if r is None:
            return decline("a repeated eigenvalue: its complex vectors mix in the real embedding")
        return r
    if not C.ok(A) or A.dim() < 2 or A.shape[-1] != A.shape[-2] or UPLO not in ("L", "U"):
        return decline("not a float32 trn square matrix, or UPLO not L or U (complex64: eigenvalues only)")
    n = A.shape[-1]
    if n > MAX_K or n ** 3 > MAX_WORK:
        return decline("n above 256 or n^3 above 2^25")
    batch = tuple(A.shape[:-2])
    a3 = C.flat(A)
    if a3.shape[0] == 0 or n == 0:
        vals = C.empty((*batch, n))
        return vals, (C.empty(A.shape) if compute_v else C.empty((0,)))
    r = eigh3(a3, UPLO == "L")
    if r is None:
        return decline("NaN or inf in the matrix, or the Jacobi sweeps did not converge")
    vals, vecs = r
    vals = vals.reshape(*batch, n)
    return vals, (C.unflat(vecs, batch) if compute_v else C.empty((0,)))


#: Least squares: the condition number up to which the SVD solution is used (every LAPACK driver then returns the
#: same full-rank solution, to ``cond * eps``); worse-conditioned or rank-deficient problems are declined, since
#: ``gels`` / ``gelsy`` decide rank (or fail) from a QR factorisation, not from singular values.
LSTSQ_MAX_COND = 100.0
_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def _c_lstsq(a3: torch.Tensor, b3: torch.Tensor) -> torch.Tensor:
    """The full-rank least-squares (``m >= n``: ``R^-1 Q^H b`` from ``A = QR``) or minimum-norm (``m < n``: ``Q
    R^-H b`` from ``A^H = QR``) solution of complex64 ``[B, m, n]`` systems, by the complex QR."""
    m, n = a3.shape[-2:]
    if m >= n:
        q, r = CQ.qr(a3.contiguous(), "reduced")
        return torch.linalg.solve_triangular(r, torch.matmul(q.mH.resolve_conj(), b3), upper=True)
    q, r = CQ.qr(a3.mH.resolve_conj().contiguous(), "reduced")
    return torch.matmul(q, torch.linalg.solve_triangular(r.mH.resolve_conj(), b3, upper=False))


def _rcond(rcond: float | None, m: int, n: int) -> float:
    """lstsq's relative rank threshold: torch's default ``eps * max(m, n)``; a negative ``rcond`` means machine
    precision, as LAPACK's drivers read it."""
    eps = torch.finfo(torch.float32).eps
    return eps * max(m, n) if rcond is None else (eps if rcond < 0 else rcond)


def _empty_lstsq(a: torch.Tensor, bm: torch.Tensor, batch: tuple[int, ...], drv: str, vector: bool,
                 rcond: float | None) -> Any:
    """``lstsq`` with nothing to solve (an empty batch, or ``m``, ``n`` or ``k`` zero), with the CPU's outputs: a
    zero solution; residuals ``[*batch, k]`` when ``m > n`` (except gelsy): ``|b|^2`` per column (``x = 0``), zeros
    from gels; rank 0 (none from gels); gelsd/gelss's singular values ``[*batch, min(m, n)]``. A non-empty ``A``
    with no right-hand side under gelsd/gelss (the CPU's LAPACK call rejects it, then crashes the process on the
    next such call) gets A's singular values and the rank they give."""
    m, n, k = a.shape[-2], a.shape[-1], bm.shape[-1]
    if min(m, n) > 0 and U.prod(batch) > 0 and drv in ("gelsd", "gelss"):
        sv = torch.linalg.svdvals(a.expand(*batch, m, n))  # here k == 0 (b is a matrix)
        rank = (sv > _rcond(rcond, m, n) * sv[..., :1]).sum(-1)
        return torch.zeros((*batch, n, 0), dtype=a.dtype, device="trn"), \
            torch.empty((*batch, 0) if m > n else (0,), device="trn"), rank, sv
    dt = a.dtype
    x = torch.zeros((*batch, n, k), dtype=dt, device="trn")
    real = torch.float32
    res = torch.empty((0,), dtype=real, device="trn")
    if m > n and drv != "gelsy":
        b3 = bm.expand(*batch, m, k)
        res = torch.zeros((*batch, k), dtype=real, device="trn") if drv == "gels" else \
            (b3.abs().square().sum(-2) if k else torch.empty((*batch, 0), dtype=real, device="trn"))
    rank = torch.empty((0,), dtype=torch.int64, device="trn") if drv == "gels" else \
        torch.zeros(batch, dtype=torch.int64, device="trn")
    sv = torch.empty((*batch, min(m, n)), dtype=real, device="trn") if drv in ("gelsd", "gelss") else \
        torch.empty((0,), dtype=real, device="trn")
    return (x.squeeze(-1) if vector else x), res, rank, sv


@lowering("aten::linalg_lstsq", dtypes=(torch.float32, torch.complex64))
def linalg_lstsq(self: torch.Tensor, b: torch.Tensor, rcond: float | None = None, *,
                 driver: str | None = None) -> Any:
    """``torch.linalg.lstsq`` from the Jacobi SVD: ``x = V S^-1 U^T b`` (the least-squares / minimum-norm
    solution; complex64: from the complex QR, see :func:`_c_lstsq`), with each driver's extra outputs as on the
    CPU (``rank`` for gelsy/gelsd/gelss, singular values for gelsd/gelss, residuals ``|A x - b|^2`` when ``m > n``
    except for gelsy). Well-conditioned inputs only (:data:`LSTSQ_MAX_COND`)."""
    drv = driver or "gelsy"
    cplx = CE.is_complex64(self, b)
    if not (C.ok(self, b) or cplx) or drv not in _DRIVERS or self.dim() < 2 or not 0 <= self.dim() - b.dim() <= 1:
        return decline("not float32 trn operands, an unknown driver, fewer than 2 dims, or b of the wrong rank")
    vector = b.dim() == self.dim() - 1
    bm = b.unsqueeze(-1) if vector else b
    m, n, k = self.shape[-2], self.shape[-1], bm.shape[-1]
    if bm.shape[-2] != m:
        return decline("b's rows do not match A's: torch raises")
    try:
        batch = tuple(torch.broadcast_shapes(self.shape[:-2], bm.shape[:-2]))
    except RuntimeError:
        return decline("batch dims do not broadcast: torch raises")
    nb = U.prod(batch)
    if nb == 0 or min(m, n, k) == 0:
        return _empty_lstsq(self, bm, batch, drv, vector, rcond)
    if not _svd_ok(torch.view_as_real(self)[..., 0] if cplx else self):
        return decline("beyond the SVD size limits")
    rc = _rcond(rcond, m, n)
    a3 = C.flat(self.expand(*batch, m, n))
    if cplx:  # singular values for the rank decision, the solution from QR (gels), as the CPU's drivers agree
        finite = bool(torch.isfinite(torch.view_as_real(a3)).all())
        r = (None, torch.linalg.svdvals(a3), None) if finite else None
    else:
        r = svd3(a3, True, False)
    if r is None:
        return decline("NaN or inf in the matrix, or the Jacobi sweeps did not converge")
    u, s, vh = r
    lo = (s[:, -1] / s[:, 0]).min().item()  # one float: whether every driver agrees on full rank is host control
    if not lo * LSTSQ_MAX_COND >= 1.0 or lo <= 10.0 * rc:
        return decline("ill-conditioned or rank-deficient A (condition above 100)")
    b3 = C.flat(bm.expand(*batch, m, k))
    x = _c_lstsq(a3, b3) if cplx else torch.matmul(vh.mT, torch.matmul(u.mT, b3) / s.unsqueeze(-1))
    res = C.empty((0,))  # distinct empty tensors: autograd marks the residuals, never the singular values
    if m > n and drv != "gelsy":
        res = (torch.matmul(a3, x) - b3).abs().square().sum(-2).reshape(*batch, k)
    rank = torch.full(batch, min(m, n), dtype=torch.int64, device="trn") if drv != "gels" else \
        torch.empty((0,), dtype=torch.int64, device="trn")
    sv = s.reshape(*batch, min(m, n)) if drv in ("gelsd", "gelss") else C.empty((0,))
    sol = C.unflat(x, batch)
    return (sol.squeeze(-1) if vector else sol), res, rank, sv
