"""Dense linear algebra on the ``trn`` device, as trnlang kernels (float32): this module has Cholesky and the
triangular solves and imports the other linear-algebra families, so importing it registers them all:

* ``linalg_common.py``: operand checks, batch views, the triangular-substitution kernel;
* ``linalg_lu.py``: LU (partial pivoting), LU solve, inverse, solve, lu_unpack, linalg.lu, det, slogdet;
* ``linalg_qr.py``: Householder QR, geqrf, householder_product, ormqr;
* ``linalg_ldl.py``: LDL^T with Bunch-Kaufman pivoting (sytrf) and its solve (sytrs);
* ``linalg_eig.py`` (its own family): Jacobi SVD and symmetric eigendecomposition.

Approach. Each matrix (``n <= 128`` rows, one SBUF tile: rows on partitions, columns on the free axis) is
factorised in SBUF by a right-looking algorithm with one step per column in a ``tl.sequential_range`` loop:

* a column is a free-axis slice of the tile (``A[:, k:k + 1]``); the Tensor engine transposes it into a
  row on partition 0 where free-axis reductions and scalar arithmetic run;
* the rank-1 trailing update ``A -= l l^T`` is one ``tl.matmul`` of two one-partition rows (K = 1) on the
  Tensor engine;
* triangular solves run forward/back substitution on the transposed right-hand side (``B^T``: the unknowns'
  index on the free axis), one column of the triangle (transposed to a row, broadcast over partitions) per
  step.

Batches loop inside one kernel (``tl.affine_range`` over the flattened batch). Larger matrices are blocked on
the host (right-looking: a tile kernel on the diagonal block, triangular solve of the off-diagonal block by the
substitution kernel, Schur-complement update with the ``trn`` matmul): Cholesky and triangular solves of any
size. torch's CPU kernels do not take bfloat16 for these ops either, so bf16 calls go to the fallback, which
raises torch's own error.

Example:
    >>> a = torch.tensor([[4.0, 2.0], [2.0, 3.0]], device="trn")
    >>> torch.linalg.cholesky(a).cpu()
    tensor([[2.0000, 0.0000],
            [1.0000, 1.4142]])
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
from trnlang.device import decline, lowering


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


# host helpers -------------------------------------------------------------------------------------------------
def _chol_tile(a3: torch.Tensor, upper: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, n, n] -> (L or U [B, n, n] contiguous, info [B, 1]) for n <= C.TILE."""
    b, n = a3.shape[0], a3.shape[-1]
    out = C.empty((b, n, n))
    info = torch.empty((b, 1), dtype=torch.int32, device="trn")
    if upper:
        cholesky_kernel(a3.mT, out.mT, info)
    else:
        cholesky_kernel(a3, out, info)
    return out, info


def _chol_lower(a3: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Blocked right-looking Cholesky of [B, n, n] (lower triangle read) -> (L, info [B, 1])."""
    n = a3.shape[-1]
    if n <= C.TILE:
        return _chol_tile(a3, False)
    k = C.TILE
    l11, info1 = _chol_tile(a3[:, :k, :k], False)
    # L21 = A21 L11^{-T}: solve L11 L21^T = A21^T, all as strided views
    l21t = C.trsolve(l11, a3[:, k:, :k].mT, lower=True, unit=False)
    s = a3[:, k:, k:] - torch.bmm(l21t.mT, l21t)
    l22, info2 = _chol_lower(s)
    out = torch.zeros(a3.shape, dtype=torch.float32, device="trn")
    out[:, :k, :k] = l11
    out[:, k:, :k] = l21t.mT
    out[:, k:, k:] = l22
    info = torch.where(info1 != 0, info1, torch.where(info2 != 0, info2 + k, info2))
    return out, info


# lowerings ----------------------------------------------------------------------------------------------------
@lowering("aten::linalg_cholesky_ex", dtypes=(torch.float32, torch.complex64))
def linalg_cholesky_ex(self: torch.Tensor, *, upper: bool = False, check_errors: bool = False) -> Any:
    """Cholesky factor and LAPACK ``info`` (``torch.linalg.cholesky_ex``).

    >>> a = torch.tensor([[4.0, 2.0], [2.0, 3.0]], device="trn")
    >>> torch.linalg.cholesky_ex(a).L.cpu()
    tensor([[2.0000, 0.0000],
            [1.0000, 1.4142]])
    """
    if CE.is_complex64(self) and self.dim() >= 2 and self.shape[-1] == self.shape[-2] <= CE.CHOL_MAX:
        batch, n = tuple(self.shape[:-2]), self.shape[-1]
        if self.numel() == 0:
            return torch.empty(self.shape, dtype=self.dtype, device="trn"), torch.zeros(batch, dtype=torch.int32,
                                                                                        device="trn")
        res, info = CE.cholesky(C.flat(self).contiguous(), upper)
        info = info.reshape(batch)
        if check_errors:
            torch.ops.aten._linalg_check_errors(info, "torch.linalg.cholesky_ex", is_matrix=self.dim() == 2)
        return C.unflat(res, batch), info
    if not C.ok(self) or self.dim() < 2 or self.shape[-1] != self.shape[-2]:
        return decline("not a float32 trn square matrix (or a conj/neg bit; complex64: sides up to 128)")
    batch, n = tuple(self.shape[:-2]), self.shape[-1]
    a3 = C.flat(self)
    if a3.shape[0] == 0 or n == 0:
        return C.empty(self.shape), torch.zeros(batch, dtype=torch.int32, device="trn")
    if upper and n <= C.TILE:
        res, info = _chol_tile(a3, True)
    elif upper:
        lo, info = _chol_lower(a3.mT)
        res = lo.mT.contiguous()
    else:
        res, info = _chol_lower(a3)
    info = info.reshape(batch)
    if check_errors:
        torch.ops.aten._linalg_check_errors(info, "torch.linalg.cholesky_ex", is_matrix=self.dim() == 2)
    return C.unflat(res, batch), info


@lowering("aten::cholesky", dtypes=(torch.float32, torch.complex64))
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
        return decline("info not a trn tensor")
    torch.ops.aten._linalg_check_errors(info.cpu(), api_name, is_matrix=is_matrix)
    return None


def _solve_tri(a: torch.Tensor, b: torch.Tensor, upper: bool, left: bool, unit: bool) -> torch.Tensor | None:
    """X with ``op(A) X = B`` (left) or ``X A = B``, batch dims broadcast; None: declined."""
    if not C.ok(a, b) or a.dim() < 2 or b.dim() < 2 or a.shape[-1] != a.shape[-2]:
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
        t3 = C.flat(aa.expand(*batch, n, n))
    else:
        t3 = aa.reshape(1, n, n)
    res = C.trsolve(t3, C.flat(bb), lower=not upper, unit=unit)
    res = C.unflat(res, batch)
    return res.mT if not left else res


def _complex_tri_ok(a: Any, b: Any, left: bool) -> bool:
    """complex64 operands a complex triangular solve can take: A square, sides that match, n <= 256."""
    return CE.is_complex64(a, b) and a.dim() >= 2 and b.dim() >= 2 and a.shape[-1] == a.shape[-2] \
        and (b.shape[-2] if left else b.shape[-1]) == a.shape[-1] and a.shape[-1] <= 256


@lowering("aten::linalg_solve_triangular", dtypes=(torch.float32, torch.complex64))
def linalg_solve_triangular(self: torch.Tensor, B: torch.Tensor, *, upper: bool, left: bool = True,
                            unitriangular: bool = False, out: torch.Tensor | None = None) -> Any:
    """``torch.linalg.solve_triangular`` by substitution on the Tensor/Vector engines.

    >>> a = torch.tensor([[2.0, 0.0], [1.0, 1.0]], device="trn")
    >>> torch.linalg.solve_triangular(a, torch.ones(2, 1, device="trn"), upper=False).cpu().ravel()
    tensor([0.5000, 0.5000])
    """
    a, b = CE.resolved(self), CE.resolved(B)  # complex operands with a lazy conjugate: materialised
    if _complex_tri_ok(a, b, left):
        return C.into_out(CE.solve_triangular(a, b, upper, left, unitriangular), out)
    res = _solve_tri(self, B, upper, left, unitriangular)
    if res is None:
        return decline("not float32 trn operands, A not square, or shapes that do not match or broadcast")
    return C.into_out(res, out)


@lowering("aten::triangular_solve", dtypes=(torch.float32, torch.complex64))
def triangular_solve(self: torch.Tensor, A: torch.Tensor, upper: bool = True, transpose: bool = False,
                     unitriangular: bool = False) -> Any:
    """``torch.triangular_solve(b, A)`` -> (solution, clone of A)."""
    a = A.mT if transpose else A
    if _complex_tri_ok(a, self, True):
        res = CE.solve_triangular(a, self, upper != transpose, True, unitriangular)
        return res, A.expand(*res.shape[:-2], *A.shape[-2:]).clone()
    res = _solve_tri(a, self, upper != transpose, True, unitriangular)
    if res is None:
        return decline("not float32 trn operands, A not square, or shapes that do not match or broadcast")
    batch = res.shape[:-2]
    return res, A.expand(*batch, *A.shape[-2:]).clone()


@lowering("aten::_cholesky_solve_helper", dtypes=(torch.float32, torch.complex64))
def cholesky_solve_helper(self: torch.Tensor, A: torch.Tensor, upper: bool) -> Any:
    """``torch.cholesky_solve``'s kernel (batch dims already broadcast): two triangular solves."""
    if self.dim() < 2 or A.dim() < 2:
        return decline("fewer than 2 dims: torch raises")
    if _complex_tri_ok(A, self, True):
        return CE.cholesky_solve(self, A, upper)
    if upper:  # A = U^T U
        y = _solve_tri(A.mT, self, False, True, False)
        x = _solve_tri(A, y, True, True, False) if y is not None else None
    else:  # A = L L^T
        y = _solve_tri(A, self, False, True, False)
        x = _solve_tri(A.mT, y, True, True, False) if y is not None else None
    if x is None:
        return decline("not float32 trn operands, A not square, or shapes that do not match or broadcast")
    return x


@lowering("aten::cholesky_inverse", dtypes=(torch.float32, torch.complex64))
def cholesky_inverse(self: torch.Tensor, upper: bool = False, *, out: torch.Tensor | None = None) -> Any:
    """``(L L^T)^{-1} = L^{-T} L^{-1}``: one triangular solve against the identity and one matmul (complex64:
    ``cholesky_solve`` of the identity)."""
    if CE.is_complex64(self) and self.dim() >= 2 and self.shape[-1] == self.shape[-2] and self.shape[-1] <= 256:
        n = self.shape[-1]
        eye = torch.eye(n, dtype=torch.complex64, device="trn").expand(*self.shape[:-2], n, n)
        return C.into_out(CE.cholesky_solve(eye, self, upper), out)
    if not (C.ok(self) or CE.is_complex64(self)) or self.dim() < 2 or self.shape[-1] != self.shape[-2]:
        return decline("not a float32/complex64 trn square matrix (or a conj/neg bit)")
    n = self.shape[-1]
    batch = tuple(self.shape[:-2])
    eye = torch.eye(n).to("trn").expand(*batch, n, n)
    low = self.mT if upper else self
    li = _solve_tri(low, eye, False, True, False)  # L^{-1}
    if li is None:
        return decline("the triangular solve of L against the identity declined")
    res = torch.matmul(li.mT, li)
    return C.into_out(res, out)



# matrix exponential ----------------------------------------------------------------------------------------------
#: Most squarings (``||A||_1 <= 3.01 * 2^MAX_SQUARINGS``) done natively. Squaring multiplies the rounding of
#: the polynomial by ``2^s``, so entries far below ``||exp(A)||`` carry absolute errors that depend on the
#: summation order of each matmul: on an OpInfo sample (``||A||_1 = 30``, ``s = 4``) the CPU's own result is
#: ``1.6e-4`` away from the exact one on an entry of 0.148, and trn's as close or closer (``trn coverage`` passes
#: a float32 result beyond tolerance that is no less accurate than the CPU's against a float64 reference).
MAX_SQUARINGS = 64
#: The same limit for complex64: on the OpInfo samples (1-norms 39 and 46, 4 squarings) the result is within 1e-4
#: (relative) of the CPU's and closer than the CPU's to the complex128 result.
MAX_SQUARINGS_COMPLEX = 64
#: torch's float32 ``thetas``: the largest 1-norm for the Taylor degrees 1, 2, 4, 8, 12, 18 (Bader, Blanes, Casas).
_THETAS = (1.192092800768788e-07, 5.978858893805233e-04, 5.116619363445086e-02, 5.800524627688768e-01,
           1.461661507209034e+00, 3.010066362817634e+00)
_SQ177 = 0.1330413469565007072504e+2
_X3 = 2.0 / 3.0
_T8 = (_X3 * ((1.0 + _SQ177) / 88.0), _X3 * ((1.0 + _SQ177) / 352.0), _X3, (-271.0 + 29.0 * _SQ177) / (315.0 * _X3),
       (-11.0 + 11.0 * _SQ177) / (1260.0 * _X3), (-99.0 + 11.0 * _SQ177) / (5040.0 * _X3),
       (89.0 - _SQ177) / (5040.0 * _X3), (857.0 - 58.0 * _SQ177) / 630.0)
_T12 = ((9.0198e-16, 0.46932117595418237389, -0.20099424927047284052, -0.04623946134063071740),
        (5.31597895759871264183, 1.19926790417132231573, 0.01179296240992997031, 0.01108844528519167989),
        (0.18188869982170434744, 0.05502798439925399070, 0.09351590770535414968, 0.00610700528898058230),
        (-2.0861320e-13, -0.13181061013830184015, -0.02027855540589259079, -0.00675951846863086359))
_T18 = ((0.0, -1.00365581030144618291e-01, -8.02924648241156932449e-03, -8.92138498045729985177e-04, 0.0),
        (0.0, 3.97849749499645077844e-01, 1.36783778460411720168e+00, 4.98289622525382669416e-01,
         -6.37898194594723280150e-04),
        (-1.09676396052962061844e+01, 1.68015813878906206114e+00, 5.71779846478865511061e-02,
         -6.98210122488052056106e-03, 3.34975017086070470649e-05),
        (-9.04316832390810593223e-02, -6.76404519071381882256e-02, 6.75961301770459654925e-02,
         2.95552570429315521194e-02, -1.39180257516060693404e-05),
        (0.0, 0.0, -9.23364619367118555360e-02, -1.69364939002081722752e-02, -1.40086798182036094347e-05))


def _lincomb(coefs: tuple[float, ...], mats: list[torch.Tensor]) -> torch.Tensor:
    """``sum_j coefs[j] * mats[j]`` with ``trn`` ops (zero coefficients skipped, as they add exact zeros)."""
    out = None
    for c, m in zip(coefs, mats):
        if c != 0.0:
            out = m * c if out is None else out + m * c
    return out if out is not None else torch.zeros_like(mats[0])


def _taylor(a: torch.Tensor, deg: int) -> torch.Tensor:
    """torch's optimised Taylor polynomial of degree ``deg`` of ``exp(a)`` (``mexp``'s ``compute_T*``), by ``trn``
    matmuls and linear combinations."""
    n = a.shape[-1]
    eye = torch.eye(n, dtype=a.dtype, device="trn").expand(a.shape)
    if deg == 1:
        return eye + a
    a2 = torch.matmul(a, a)
    if deg == 2:
        return eye + a + a2 * 0.5
    if deg == 4:
        return eye + a + torch.matmul(a2, _lincomb((0.5, 1 / 6.0, 1 / 24.0), [eye, a, a2]))
    if deg == 8:
        x1, x2, x3, x4, x5, x6, x7, y2 = _T8
        a4 = torch.matmul(a2, _lincomb((x1, x2), [a, a2]))
        a8 = torch.matmul(_lincomb((x3, 1.0), [a2, a4]), _lincomb((x4, x5, x6, x7), [eye, a, a2, a4]))
        return _lincomb((1.0, 1.0, y2, 1.0), [eye, a, a2, a8])
    a3 = torch.matmul(a, a2)
    if deg == 12:
        b = [_lincomb(row, [eye, a, a2, a3]) for row in _T12]
        a6 = torch.matmul(b[3], b[3]) + b[2]
        return b[0] + torch.matmul(b[1] + a6, a6)
    a6 = torch.matmul(a3, a3)
    b = [_lincomb(row, [eye, a, a2, a3, a6]) for row in _T18]
    a9 = torch.matmul(b[0], b[4]) + b[3]
    return b[1] + torch.matmul(b[2] + a9, a9)


@lowering("aten::linalg_matrix_exp", dtypes=(torch.float32, torch.complex64))
def linalg_matrix_exp(self: torch.Tensor) -> Any:
    """``torch.linalg.matrix_exp`` by torch's own algorithm (optimised Taylor polynomials of degree 1-18 chosen by
    the 1-norm, scaling and squaring above it, see :data:`MAX_SQUARINGS`) on ``trn`` matmuls; its backward is
    the same op on a ``2n x 2n`` block matrix. bfloat16 is declined: torch's CPU kernel for it returns NaN.

    >>> torch.linalg.matrix_exp(torch.zeros(2, 2, device="trn")).cpu()
    tensor([[1., 0.],
            [0., 1.]])
    """
    if not (C.ok(self) or CE.is_complex64(self)) or self.dim() < 2 or self.shape[-1] != self.shape[-2]:
        return decline("not a float32/complex64 trn square matrix (or a conj/neg bit)")
    n = self.shape[-1]
    if n == 0 or self.numel() == 0:
        return self.clone()
    if n == 1:
        return self.exp()
    a3 = C.flat(self).contiguous()
    norms = a3.abs().sum(-2).amax(-1).cpu().tolist()  # B floats: the degree choice is host control (as on CUDA)
    if not all(math.isfinite(v) for v in norms):
        return decline("NaN or inf in the matrix")
    groups: dict[tuple[int, int], list[int]] = {}
    for i, v in enumerate(norms):
        deg = next((d for d, th in zip((1, 2, 4, 8, 12), _THETAS) if v <= th), 18)
        sq = max(0, math.ceil(math.log2(v / _THETAS[5]))) if deg == 18 else 0
        if sq > (MAX_SQUARINGS_COMPLEX if self.is_complex() else MAX_SQUARINGS):
            return decline("a 1-norm that needs squarings (above 3.01): the CPU's own rounding is matched there")
        groups.setdefault((deg, sq), []).append(i)
    res = None if len(groups) > 1 else a3
    for (deg, sq), idx in sorted(groups.items()):
        sub = a3 if res is a3 else a3.index_select(0, torch.tensor(idx, device="trn"))
        m = _taylor(sub * (2.0 ** -sq) if sq else sub, deg)
        for _ in range(sq):
            m = torch.matmul(m, m)
        if res is a3:
            res = m
        else:
            res = torch.empty_like(a3) if res is None else res
            res.index_copy_(0, torch.tensor(idx, device="trn"), m)
    return C.unflat(res, tuple(self.shape[:-2]))


# the other linear-algebra families register their lowerings on import (FAMILIES lists this module only)
from stdlib_kernels.linalg import ldl, lu, qr  # noqa: E402,F401
