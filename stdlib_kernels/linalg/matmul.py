"""Matrix products on the Tensor engine: ``mm``, ``addmm`` (nn.Linear), ``bmm``, ``baddbmm``, ``addmv``
(``mv``), ``dot``/``vdot``, ``addr`` (``outer`` reaches ``mul``; ``matmul``/``linear`` are composites that
reach these).

Tiles: M by 128 (stationary), K by 128 (contraction, accumulated in a PSUM bank), N by 512
(moving). Ragged edges are masked (masked loads give 0, which adds nothing to the product).
Inputs may be any strided views (``x.t()`` from autograd is a transposed access pattern, not a
copy). PSUM accumulates in fp32 and the store rounds to the output dtype, as torch's CPU bf16
matmul does.
"""

from __future__ import annotations

import math
from typing import Any

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from trnlang.device import Accepts, decline, lowering


def _at(t: Any, bi: Any, rows: Any, cols: Any) -> Any:
    return t[bi, rows, cols] if t.ndim == 3 else t[rows, cols]


def tile_extent(n: Any, cap: int) -> Any:
    """A tile size for a dim of ``n`` along which tiles hold at most ``cap``: ``n`` itself when it fits, else the
    largest divisor of ``n`` that is at most ``cap`` and at least ``cap / 4`` (whole tiles: the loops fold into one
    gemm call, ``trnlang/passes/collapse_gemm.py``, which masked ragged tiles do not), else ``cap`` (ragged).

    Example:
        >>> tile_extent(300, 512), tile_extent(1408, 512), tile_extent(1024, 128), tile_extent(50257, 512)
        (300, 352, 128, 512)
    """
    if not isinstance(n, int) or n <= cap:
        return min(cap, n)
    for d in range(cap, max(cap // 4, 1) - 1, -1):
        if n % d == 0:
            return d
    return cap


@trn.kernel
def matmul(a, b, bias, out, alpha, beta, adds=False):
    """``out = beta * bias + alpha * (a @ b)`` for ``a [(B,) M, K]``, ``b [(B,) K, N]``; ``bias``: None or
    a (broadcast) view shaped like ``out``. ``alpha``/``beta`` are compile-time floats. ``adds`` (``alpha`` 1, an
    fp32 ``out``): ``out += a @ b``, after ``out = beta * bias`` when there is a bias; the tile loops of the product
    then fold into one gemm that adds (``passes/collapse_gemm.py``), which an epilogue would prevent."""
    m_dim, k_dim = a.shape[-2], a.shape[-1]
    n_dim = b.shape[-1]
    batch = a.shape[0] if a.ndim == 3 else 1
    tm, tk, tn = tile_extent(m_dim, 128), tile_extent(k_dim, 128), tile_extent(n_dim, 512)
    rag_m, rag_k, rag_n = m_dim % tm != 0, k_dim % tk != 0, n_dim % tn != 0
    if adds and bias is not None:  # the bias goes into the output first, tile by tile
        for bi in tl.affine_range(batch):
            for m in tl.affine_range(tl.cdiv(m_dim, tm)):
                for n in tl.affine_range(tl.cdiv(n_dim, tn)):
                    im = m * tm + tl.arange(tm)[:, None]
                    jn = n * tn + tl.arange(tn)[None, :]
                    mo = ((im < m_dim) & (jn < n_dim)) if (rag_m or rag_n) else None
                    bt = tl.load(_at(bias, bi, im, jn), mask=mo).astype(tl.float32)
                    tl.store(_at(out, bi, im, jn), bt * beta if beta != 1.0 else bt, mask=mo)
        bias = None
    for bi in tl.affine_range(batch):
        for m in tl.affine_range(tl.cdiv(m_dim, tm)):
            for n in tl.affine_range(tl.cdiv(n_dim, tn)):
                acc = tl.zeros((tm, tn), tl.float32, buffer=tl.psum)
                im = m * tm + tl.arange(tm)[:, None]
                jn = n * tn + tl.arange(tn)[None, :]
                for k in tl.affine_range(tl.cdiv(k_dim, tk)):
                    kk = k * tk + tl.arange(tk)[None, :]
                    ik = k * tk + tl.arange(tk)[:, None]
                    ma = ((im < m_dim) & (kk < k_dim)) if (rag_m or rag_k) else None
                    mb = ((ik < k_dim) & (jn < n_dim)) if (rag_k or rag_n) else None
                    at = tl.load(_at(a, bi, im, kk), mask=ma)
                    bt = tl.load(_at(b, bi, ik, jn), mask=mb)
                    acc += tl.matmul(at, bt)
                mo = ((im < m_dim) & (jn < n_dim)) if (rag_m or rag_n) else None
                res = acc
                if alpha != 1.0 or bias is not None:
                    res = tl.copy(acc)
                    if alpha != 1.0:
                        res = res * alpha
                    if bias is not None:
                        bt = tl.load(_at(bias, bi, im, jn), mask=mo).astype(tl.float32)
                        res = res + (bt * beta if beta != 1.0 else bt)
                tl.store(_at(out, bi, im, jn), res, mask=mo, accumulate="add" if adds else None)


#: integer dtypes multiplied through the fp32 kernels when every partial sum is exact there (see :func:`_int_matmul`)
_INT_MM = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
_MM_DTYPES = (*U.FLOAT_DTYPES, *_INT_MM, torch.complex64)
_NOT_REAL = "alpha or beta not a real number"


def _scalar(v: Any, cplx: Any = None) -> Any:
    """``alpha``/``beta`` as a float (a complex number too when ``cplx`` is a complex tensor: complex products take
    complex coefficients); None when not a number."""
    if isinstance(v, complex) and isinstance(cplx, torch.Tensor) and cplx.is_complex():
        return v
    if isinstance(v, (bool, complex)):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


@lowering("aten::mm", dtypes=_MM_DTYPES)
def mm(self: torch.Tensor, mat2: torch.Tensor, *, out: torch.Tensor | None = None) -> Any:
    """``self @ mat2`` (2-D)."""
    return _matmul(self, mat2, None, 1.0, 1.0, out, batched=False)


@lowering("aten::bmm", dtypes=_MM_DTYPES)
def bmm(self: torch.Tensor, mat2: torch.Tensor, *, out: torch.Tensor | None = None) -> Any:
    """Batched ``self @ mat2`` (3-D)."""
    return _matmul(self, mat2, None, 1.0, 1.0, out, batched=True)


@lowering("aten::addmm", dtypes=_MM_DTYPES)
def addmm(self: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, *, beta: Any = 1, alpha: Any = 1,
          out: torch.Tensor | None = None) -> Any:
    """``beta * self + alpha * (mat1 @ mat2)`` (nn.Linear's forward)."""
    a, b = _scalar(alpha, mat1), _scalar(beta, mat1)
    if a is None or b is None:
        return decline(_NOT_REAL)
    return _matmul(mat1, mat2, self, a, b, out, batched=False)


@lowering("aten::baddbmm", dtypes=_MM_DTYPES)
def baddbmm(self: torch.Tensor, batch1: torch.Tensor, batch2: torch.Tensor, *, beta: Any = 1, alpha: Any = 1,
            out: torch.Tensor | None = None) -> Any:
    """``beta * self + alpha * (batch1 @ batch2)`` in one kernel (the bias is read through a broadcast view).

    >>> x = torch.ones(2, 3, 4, device="trn")
    >>> torch.baddbmm(torch.zeros(2, 3, 3, device="trn"), x, x.mT, alpha=0.5).cpu()[0, 0]
    tensor([2., 2., 2.])
    """
    a, b = _scalar(alpha, batch1), _scalar(beta, batch1)
    if a is None or b is None:
        return decline(_NOT_REAL)
    return _matmul(batch1, batch2, self, a, b, out, batched=True)


#: the reason of an ``out=`` the kernels cannot write
_BAD_OUT = "out= not a trn tensor of the result's shape and dtype, or with internal overlap"


def _bias_ok(bias: torch.Tensor, dtype: torch.dtype, shape: tuple[int, ...]) -> bool:
    """The bias of an addmm/baddbmm: a plain ``trn`` tensor of the operands' dtype broadcasting to the result."""
    if not U.is_trn(bias) or bias.dtype != dtype or bias.is_conj() or bias.is_neg():
        return False
    return U.broadcast_shape(bias.shape, shape) == tuple(shape)




def _int_matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, alpha: float, beta: float,
                out: torch.Tensor | None, batched: bool) -> Any:
    """An integer product: the fp32 kernels, when the operands' magnitudes (checked on the device) bound every
    partial sum below 2^24 and below the dtype's range, so the fp32 result is the exact integer (and no integer
    sum wraps); otherwise declined (the CPU computes it)."""
    if not (U.is_trn(a) and U.is_trn(b)) or a.dtype != b.dtype or (bias is not None and bias.dtype != a.dtype):
        return decline("integer operands of different dtypes, or not on trn")
    alpha, beta = float(math.trunc(alpha)), float(math.trunc(beta))  # torch casts them to the integer type
    if out is not None and (not U.is_trn(out) or out.dtype != a.dtype):
        return decline(_BAD_OUT)
    if beta == 0.0:
        bias = None  # torch ignores self when beta == 0 (mv passes its uninitialised output)
    k = a.shape[-1] if a.dim() else 0
    from stdlib_kernels.elementwise.pointwise import int_maxabs as mag

    per = mag(a) * mag(b)
    total = abs(alpha) * per * k + (abs(beta) * mag(bias) if bias is not None else 0)
    if total >= 2**24:
        return _int_matmul_chunked(a, b, bias, alpha, beta, out, batched, per)
    fb = bias.float() if bias is not None else None
    r = _matmul(a.float(), b.float(), fb, alpha, beta, None, batched)
    if r is NotImplemented:
        return r
    if total >= torch.iinfo(a.dtype).max + 1:  # exact in int32, then wrapped into the narrow dtype as torch's sum
        r = r.to(torch.int32).to(a.dtype)
    return _into(out, r, a.dtype)


#: Most fp32 products over contraction chunks an exact integer product takes (:func:`_int_matmul_chunked`).
MAX_INT_CHUNKS = 1024


def _int_matmul_chunked(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, alpha: float, beta: float,
                        out: torch.Tensor | None, batched: bool, per: int) -> Any:
    """An integer product whose sums pass 2^24: the contraction cut into chunks whose fp32 sums stay below 2^24
    (exact), the chunk results summed in int64 (exact, wrapping modulo 2^64 as torch's int64), then ``alpha`` and
    ``beta * bias`` in int64 and the result wrapped into the dtype as torch's integer sums wrap."""
    k = a.shape[-1]
    chunk = (2**24 - 1) // per if per else k
    if chunk < 1 or -(-k // chunk) > MAX_INT_CHUNKS:
        return decline("integer products whose sums may be inexact in fp32 (operands too large to cut the "
                       "contraction into few exact chunks)")
    acc = None
    for lo in range(0, k, chunk):
        part = _matmul(a[..., lo:lo + chunk].float(), b[..., lo:lo + chunk, :].float(), None, 1.0, 1.0, None,
                       batched)
        if part is NotImplemented:
            return part
        part = part.to(torch.int64)
        acc = part if acc is None else acc + part
    if acc is None:
        return decline("an empty contraction")
    if alpha != 1.0:
        acc = acc * int(alpha)
    if bias is not None:
        acc = acc + (bias.to(torch.int64) * int(beta) if beta != 1.0 else bias.to(torch.int64))
    return _into(out, acc.to(a.dtype), a.dtype)


def _into(out: torch.Tensor | None, r: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``r`` as the result: a new ``dtype`` tensor, or copied into ``out`` (resized when empty, as torch does)."""
    if out is None:
        return r.to(dtype)
    return U.into_out(r, out, ())  # resized as torch does (its warning unless empty)


def _complex_matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, alpha: float, beta: float,
                    out: torch.Tensor | None, batched: bool) -> Any:
    """A complex64 product on real/imaginary planes: ``(ar br - ai bi) + i (ar bi + ai br)``, four fp32 products
    (the FFT's representation); then ``beta * bias + alpha * product`` with real ``alpha``/``beta``."""
    ops = [a, b] + ([bias] if bias is not None else [])
    if not all(U.is_trn(t) and t.dtype == torch.complex64 for t in ops) or (out is not None and (
            not U.is_trn(out) or out.dtype != torch.complex64)):
        return decline("complex64 operands mixed with other dtypes, or an out= of another dtype")
    a, b = a.resolve_conj().resolve_neg(), b.resolve_conj().resolve_neg()
    ar, ai, br, bi = a.real.contiguous(), a.imag.contiguous(), b.real.contiguous(), b.imag.contiguous()
    parts = [_matmul(x, y, None, 1.0, 1.0, None, batched) for x, y in ((ar, br), (ai, bi), (ar, bi), (ai, br))]
    if any(p is NotImplemented for p in parts):
        return decline("a plane product the fp32 kernels declined")
    prod = torch.complex(parts[0].sub_(parts[1]), parts[2].add_(parts[3]))
    if bias is not None and beta != 0.0:
        prod = torch.add(bias * beta if beta != 1.0 else bias, prod * alpha if alpha != 1.0 else prod)
    elif alpha != 1.0:
        prod = prod * alpha
    return _into(out, prod, torch.complex64)


def _matmul(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, alpha: float, beta: float,
            out: torch.Tensor | None, batched: bool) -> Any:
    if a.dtype in _INT_MM:
        return _int_matmul(a, b, bias, alpha, beta, out, batched)
    if a.dtype == torch.complex64:
        return _complex_matmul(a, b, bias, alpha, beta, out, batched)
    rank = 3 if batched else 2
    if not (U.is_trn(a) and U.is_trn(b)) or a.dim() != rank or b.dim() != rank:
        return decline(f"operands not {rank}-D trn tensors: torch raises for other ranks")
    if a.dtype != b.dtype or a.is_conj() or b.is_conj() or a.is_neg() or b.is_neg():
        return decline("operands of different dtypes, or a conj/neg bit")
    if a.shape[-1] != b.shape[-2] or (batched and a.shape[0] != b.shape[0]):
        return decline("shapes that cannot be multiplied: torch raises")
    shape = (*a.shape[:-1], b.shape[-1])
    if bias is not None and not _bias_ok(bias, a.dtype, shape):
        return decline("a bias that is not a plain trn tensor of the operands' dtype broadcasting to the result")
    if out is None:  # a fresh tensor: nothing to check
        out = U.new_output(shape, a.dtype)
    else:
        if tuple(out.shape) != shape and U.is_trn(out) and out.dtype == a.dtype \
                and not any(t is not None and U.overlaps(out, t) for t in (a, b, bias)):
            U.resize_out(out, shape)  # as torch: silently when empty, else with its warning
        if not U.is_trn(out) or tuple(out.shape) != shape or out.dtype != a.dtype or U.has_internal_overlap(out):
            return decline(_BAD_OUT)
        if U.overlaps(out, a) or U.overlaps(out, b):
            return decline("out= overlapping an operand")
        if bias is not None and U.overlaps(out, bias) and not U.same_view(out, bias):  # addmm_: bias is out
            return decline("out= partly overlapping the bias")
    if out.numel() == 0:
        return out
    if bias is not None and beta == 0.0:
        bias = None  # torch ignores self when beta == 0 (NaNs included)
    return _product(a, b, bias, out, alpha, beta)


def _product(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor, alpha: float,
             beta: float) -> torch.Tensor:
    """``out = beta * bias + alpha * (a @ b)`` into a checked, non-empty ``out`` (``bias`` None: no bias term)."""
    bview = bias.expand(out.shape) if bias is not None else None
    if a.shape[-1] == 0:  # empty contraction: beta * bias, or zeros
        if bview is None:
            return out.zero_()
        out.copy_(bview)
        return out.mul_(beta) if beta != 1.0 else out
    if bias is not None and bview is not None and alpha == 1.0 and out.dtype == torch.float32 \
            and a.dtype == torch.float32:
        # the bias goes into the output first, then one gemm adds the product (the tile loops fold; a bias epilogue
        # keeps them: 512 x 512 x 1536 addmm cost 0.5-0.9 ms over mm with it, 0.16-0.25 ms this way), in the same
        # launch (each thread's block: no copy op of its own)
        if U.same_view(out, bias):  # addmm_: the output holds the bias already
            if beta != 1.0:
                out.mul_(beta)
            _launch_split(a, b, None, out, 1.0, 1.0, adds=True)
        else:
            _launch_split(a, b, bview, out, 1.0, beta, adds=True)
        return out
    _launch_split(a, b, bview, out, alpha, beta)
    return out


#: Column blocks of a product split by columns are multiples of this (the widest gemm micro-tile, avx512's 64): 1408
#: columns (Llama's MLP) split 704 / 704, not 640 / 768 as with 128.
_COL_ALIGN = 64
#: Smallest product (multiply-adds) split across threads: about 50 us of gemm, well above the cost of a split
#: (binding the launches and waking a native worker: ~10 us).
SPLIT_MIN_MACS = 1 << 22


def _launch_split(a: torch.Tensor, b: torch.Tensor, bview: torch.Tensor | None, out: torch.Tensor, alpha: float,
                  beta: float, adds: bool = False) -> None:
    """One ``matmul`` launch, or one per thread on disjoint row blocks of ``out`` (batches for 3-D) when big
    (``adds``: the launches add the product to ``out``)."""
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    batch = a.shape[0] if a.dim() == 3 else 1
    threads = U.num_threads()
    if threads == 1 or batch * m * k * n < SPLIT_MIN_MACS:
        matmul(a, b, bview, out, alpha, beta, adds)
        return
    if a.dim() == 3 and batch >= threads:
        parts = [(slice(lo, hi), slice(None)) for lo, hi in U.chunks(batch, threads, 1)]
    elif a.dim() == 2 and n > m and n >= 2 * 128:
        # every part packs the whole of the operand it does not split: split the bigger one (nn.Linear's weight
        # when there are fewer rows than output features)
        U.run_parallel([_cols_part(a, b, bview, out, alpha, beta, lo, hi, adds)
                        for lo, hi in U.chunks(n, threads, _COL_ALIGN)])
        return
    else:
        parts = [(slice(None), slice(lo, hi)) for lo, hi in U.chunks(m, threads, 128)]

    def part(bs: slice, rs: slice) -> Any:
        if a.dim() == 3:
            if rs == slice(None):  # batch blocks: pieces (no torch views)
                return U.launch(matmul, U.rows_piece(a, bs), U.rows_piece(b, bs),
                                U.rows_piece(bview, bs) if bview is not None else None, U.rows_piece(out, bs),
                                alpha, beta, adds)
            return U.launch(matmul, a[bs, rs], b[bs], bview[bs, rs] if bview is not None else None, out[bs, rs],
                            alpha, beta, adds)
        return U.launch(matmul, U.rows_piece(a, rs), b, U.rows_piece(bview, rs) if bview is not None else None,
                        U.rows_piece(out, rs), alpha, beta, adds)

    U.run_parallel([part(bs, rs) for bs, rs in parts])


def _cols_part(a: torch.Tensor, b: torch.Tensor, bview: torch.Tensor | None, out: torch.Tensor, alpha: float,
               beta: float, lo: int, hi: int, adds: bool = False) -> Any:
    """The launch of columns ``[lo, hi)`` of a 2-D product (pieces: no torch views)."""
    def cols(t: torch.Tensor) -> Any:
        return U.piece(t, (t.shape[0], hi - lo), t.stride(), t.storage_offset() + lo * t.stride(1))

    return U.launch(matmul, a, cols(b), cols(bview) if bview is not None else None, cols(out), alpha, beta, adds)


@lowering("aten::addmv", dtypes=_MM_DTYPES, accepts=Accepts(tensors=("self", "mat", "vec")))
def addmv(self: torch.Tensor, mat: torch.Tensor, vec: torch.Tensor, *, beta: Any = 1, alpha: Any = 1,
          out: torch.Tensor | None = None) -> Any:
    """``beta * self + alpha * (mat @ vec)`` (``torch.mv`` lands here): the vector is a one-column matrix."""
    a, b = _scalar(alpha, mat), _scalar(beta, mat)
    if a is None or b is None:
        return decline(_NOT_REAL)
    if mat.dim() != 2 or vec.dim() != 1:
        return decline("mat not 2-D or vec not 1-D: torch raises")
    m = mat.shape[0]
    if out is None:
        out = torch.empty((m,), dtype=mat.dtype, device="trn")
    elif U.is_trn(out) and tuple(out.shape) != (m,) and not any(U.overlaps(out, t) for t in (self, mat, vec)):
        U.resize_out(out, (m,))  # as torch: silently when empty, else with its warning
    if not U.is_trn(out) or out.dim() != 1 or out.shape[0] != m:
        return decline("out= not a trn vector of the result's length")
    try:
        bias = self.expand((m,)).unsqueeze(1)
    except RuntimeError:
        return decline("self does not broadcast to the result: torch raises")
    r = _matmul(mat, vec.unsqueeze(1), bias, a, b, out.unsqueeze(1), batched=False)
    return NotImplemented if r is NotImplemented else out


@lowering("aten::dot", dtypes=_MM_DTYPES)
def dot(self: torch.Tensor, tensor: torch.Tensor, *, out: torch.Tensor | None = None) -> Any:
    """Inner product of two vectors: ``[1, K] @ [K, 1]``."""
    if self.dim() != 1 or tensor.dim() != 1 or self.shape != tensor.shape:
        return decline("not two 1-D tensors of the same length: torch raises")
    if out is None:
        out = torch.empty((), dtype=self.dtype, device="trn")
    if not U.is_trn(out) or out.dim() != 0:
        return decline("out= not a 0-dim trn tensor")
    r = _matmul(self.unsqueeze(0), tensor.unsqueeze(1), None, 1.0, 1.0, out.view(1, 1), batched=False)
    return NotImplemented if r is NotImplemented else out


@lowering("aten::vdot", dtypes=_MM_DTYPES)
def vdot(self: torch.Tensor, other: torch.Tensor, *, out: torch.Tensor | None = None) -> Any:
    """``vdot``: ``dot`` of the conjugated first vector (no conjugation for real dtypes)."""
    return dot(self.conj() if self.is_complex() else self, other, out=out)


def _addr_scalar_checks(dtype: torch.dtype, beta: Any, alpha: Any) -> None:
    """torch's checks of addr's ``beta`` / ``alpha`` against the operands' dtype, its words, beta first."""
    for name, v in (("beta", beta), ("alpha", alpha)):
        if isinstance(v, bool) and dtype != torch.bool:
            raise RuntimeError(f"Boolean {name} only supported for Boolean results.")
        if not (dtype.is_floating_point or dtype.is_complex) and isinstance(v, (float, complex)):
            raise RuntimeError(f"For integral input tensors, argument {name} must not be a floating point number.")


@lowering("aten::addr", dtypes=(*_MM_DTYPES, torch.bool),  # one fp32 rounding (the CPU rounds bf16 intermediates)
          accepts=Accepts(tensors=("self", "vec1", "vec2")))
def addr(self: torch.Tensor, vec1: torch.Tensor, vec2: torch.Tensor, *, beta: Any = 1, alpha: Any = 1,
         out: torch.Tensor | None = None) -> Any:
    """``beta * self + alpha * outer(vec1, vec2)``: a K=1 matmul, rounded once like the CPU's fused kernel (bool:
    ``(beta and self) or (alpha and outer)``, as torch's logical form)."""
    _addr_scalar_checks(torch.result_type(vec1, vec2), beta, alpha)
    if vec1.dtype == torch.bool and vec2.dtype == torch.bool and self.dtype == torch.bool:
        if vec1.dim() != 1 or vec2.dim() != 1:
            return decline("vec1 or vec2 not 1-D: torch raises")
        prod = torch.logical_and(vec1.unsqueeze(1), vec2.unsqueeze(0))
        if not alpha:
            prod = torch.zeros_like(prod)
        res = torch.logical_or(self, prod) if beta else torch.logical_or(torch.zeros_like(self), prod)
        return U.into_out(res, out, (self, vec1, vec2))
    ts = (self, vec1, vec2)
    dt = torch.promote_types(torch.promote_types(self.dtype, vec1.dtype), vec2.dtype)
    if any(t.dtype != dt for t in ts) and all(U.is_trn(t) for t in ts):  # mixed dtypes: torch promotes first
        if dt in (torch.float64, torch.complex128):
            return decline("a float64/complex128 result")
        return addr(*(t.to(dt) for t in ts), beta=beta, alpha=alpha, out=out)
    a, b = _scalar(alpha, vec1), _scalar(beta, vec1)
    if a is None or b is None:
        return decline(_NOT_REAL)
    if vec1.dim() != 1 or vec2.dim() != 1:
        return decline("vec1 or vec2 not 1-D: torch raises")
    if dt in (torch.float16, torch.bfloat16) and not isinstance(a, complex) and not isinstance(b, complex):
        return _addr_half(self, vec1, vec2, a, b, out)
    return _matmul(vec1.unsqueeze(1), vec2.unsqueeze(0), self, a, b, out, batched=False)


def _broadcasts_to(t: torch.Tensor, shape: tuple[int, ...]) -> bool:
    """``t`` broadcasts to exactly ``shape`` (a bias of addr/addbmm)."""
    try:
        return torch.broadcast_shapes(t.shape, shape) == torch.Size(shape)
    except RuntimeError:
        return False


def _addr_half(self: torch.Tensor, vec1: torch.Tensor, vec2: torch.Tensor, alpha: float, beta: float,
               out: torch.Tensor | None) -> Any:
    """float16/bfloat16 addr as the CPU's kernel computes it in its Half/BFloat16 arithmetic: the coefficients
    rounded to the dtype, then ``((alpha * vec1) * vec2) + (beta * self)``, each operation rounded (a fused fp32
    form differs from it in the last bit on about a quarter of the elements)."""
    shape = (vec1.shape[0], vec2.shape[0])
    if not _broadcasts_to(self, shape):
        return decline("self does not broadcast to the result: torch raises")
    al, be = (float(torch.tensor(v, dtype=vec1.dtype)) for v in (alpha, beta))
    prod = (vec1 * al if al != 1.0 else vec1).unsqueeze(1) * vec2.unsqueeze(0)
    res = prod + (self * be if be != 1.0 else self) if beta != 0 else prod  # beta == 0: self ignored, NaN too
    return U.into_out(res.expand(shape), out, (self, vec1, vec2))


@trn.kernel
def batch_sum_matmul(a, b, bias, out, alpha, beta):
    """``out = beta * bias + alpha * sum_b a[b] @ b[b]`` for ``a [B, M, K]``, ``b [B, K, N]`` (``addbmm``);
    ``bias``: None or a view like ``out``.

    fp32: the batch is one more contraction loop accumulated in the same PSUM bank. Narrower dtypes round the
    running result to the output dtype after every batch, as torch's CPU kernel (one ``addmm_`` per batch) does.
    """
    batch, m_dim, k_dim = a.shape
    n_dim = b.shape[-1]
    tm, tk, tn = tile_extent(m_dim, 128), tile_extent(k_dim, 128), tile_extent(n_dim, 512)
    low = out.dtype if out.dtype != tl.float32 else None
    for m in tl.affine_range(tl.cdiv(m_dim, tm)):
        for n in tl.affine_range(tl.cdiv(n_dim, tn)):
            im = m * tm + tl.arange(tm)[:, None]
            jn = n * tn + tl.arange(tn)[None, :]
            mo = (im < m_dim) & (jn < n_dim)
            if bias is not None:
                bt = tl.load(bias[im, jn], mask=mo).astype(tl.float32)
                res = bt * beta if beta != 1.0 else bt
            else:
                res = tl.zeros((tm, tn), tl.float32)
            if low is None:
                acc = tl.zeros((tm, tn), tl.float32, buffer=tl.psum)
                for bi in tl.affine_range(batch):
                    for k in tl.affine_range(tl.cdiv(k_dim, tk)):
                        kk = k * tk + tl.arange(tk)[None, :]
                        ik = k * tk + tl.arange(tk)[:, None]
                        at = tl.load(a[bi, im, kk], mask=(im < m_dim) & (kk < k_dim))
                        bt = tl.load(b[bi, ik, jn], mask=(ik < k_dim) & (jn < n_dim))
                        acc += tl.matmul(at, bt)
                res = res + (tl.copy(acc) * alpha if alpha != 1.0 else tl.copy(acc))
            else:
                run = tl.zeros((tm, tn), tl.float32)
                run[...] = res
                for bi in tl.sequential_range(batch):
                    acc = tl.zeros((tm, tn), tl.float32, buffer=tl.psum)
                    for k in tl.affine_range(tl.cdiv(k_dim, tk)):
                        kk = k * tk + tl.arange(tk)[None, :]
                        ik = k * tk + tl.arange(tk)[:, None]
                        at = tl.load(a[bi, im, kk], mask=(im < m_dim) & (kk < k_dim))
                        bt = tl.load(b[bi, ik, jn], mask=(ik < k_dim) & (jn < n_dim))
                        acc += tl.matmul(at, bt)
                    prod = tl.copy(acc) * alpha if alpha != 1.0 else tl.copy(acc)
                    run[...] = (run + prod).astype(low).astype(tl.float32)
                res = run
            tl.store(out[im, jn], res, mask=mo)


@lowering("aten::addbmm", dtypes=(*U.FLOAT_DTYPES, *_INT_MM, torch.complex64),
          accepts=Accepts(tensors=("self", "batch1", "batch2"), same_dtype=True))
def addbmm(self: torch.Tensor, batch1: torch.Tensor, batch2: torch.Tensor, *, beta: Any = 1, alpha: Any = 1,
           out: torch.Tensor | None = None) -> Any:
    """``beta * self + alpha * sum_b batch1[b] @ batch2[b]``: one kernel, the batch summed in PSUM.

    >>> x = torch.ones(3, 2, 4, device="trn")
    >>> torch.addbmm(torch.zeros(2, 2, device="trn"), x, x.mT).cpu()[0]
    tensor([12., 12.])
    """
    a, b = _scalar(alpha, batch1), _scalar(beta, batch1)
    if a is None or b is None:
        return decline(_NOT_REAL)
    if batch1.dim() != 3 or batch2.dim() != 3 or batch1.shape[0] != batch2.shape[0] or \
            batch1.shape[2] != batch2.shape[1]:
        return decline("batches that are not 3-D or cannot be multiplied: torch raises")
    if batch1.dtype in (*_INT_MM, torch.complex64):  # one addmm over the batch-concatenated contraction ([n, B k] @
        # [B k, p]): the integer and complex64 products
        nb, n, k = batch1.shape
        return torch.addmm(self, batch1.transpose(0, 1).reshape(n, nb * k), batch2.reshape(nb * k, batch2.shape[2]),
                           beta=beta, alpha=alpha, out=out)
    shape = (batch1.shape[1], batch2.shape[2])
    if not _broadcasts_to(self, shape):
        return decline("self does not broadcast to the result: torch raises")
    if out is None:
        out = torch.empty(shape, dtype=self.dtype, device="trn")
    elif out.numel() == 0 and tuple(out.shape) != shape and U.is_trn(out):
        out.resize_(shape)
    if not U.is_trn(out) or tuple(out.shape) != shape or out.dtype != self.dtype or U.has_internal_overlap(out):
        return decline(_BAD_OUT)
    if U.overlaps(out, batch1) or U.overlaps(out, batch2) or (U.overlaps(out, self) and not U.same_view(out, self)):
        return decline("out= overlapping an operand")
    if out.numel() == 0:
        return out
    bias = None if b == 0.0 else self.expand(shape)  # beta == 0: self is ignored (NaNs included), as torch
    if batch1.shape[0] == 0 or batch1.shape[2] == 0:
        if bias is None:
            return out.zero_()
        out.copy_(bias)
        return out.mul_(b) if b != 1.0 else out
    batch_sum_matmul(batch1, batch2, bias, out, a, b)
    return out


@lowering("aten::_compute_linear_combination", dtypes=_MM_DTYPES)
def compute_linear_combination(input: torch.Tensor, coefficients: torch.Tensor, *,
                               out: torch.Tensor | None = None) -> Any:
    """``out[i] = sum_j coefficients[i, j] * input[j]`` (``matrix_exp``'s polynomial step) as one product
    ``coefficients @ input[:n].reshape(n, -1)``, in ``input``'s dtype; with ``out=`` the result is *added* to ``out``,
    as torch's kernel accumulates.

    Example:
        >>> x = torch.eye(2, device="trn").expand(3, 2, 2)                                 # doctest: +SKIP
        >>> torch._compute_linear_combination(x, torch.ones(1, 3, device="trn")).cpu()      # doctest: +SKIP
        tensor([[[3., 0.],
                 [0., 3.]]])
    """
    if input.dim() < 1 or coefficients.dim() != 2 or coefficients.shape[1] > input.shape[0] \
            or not U.is_trn(coefficients):
        return decline("a 0-dim input (torch raises), or coefficients not [m, n] trn with n <= input.shape[0]")
    if input.numel() == 0:
        return decline("an empty input: torch raises")
    m, n = coefficients.shape
    shape = (m, *input.shape[1:])
    if out is not None and (not U.is_trn(out) or out.dtype != input.dtype or tuple(out.shape) != shape):
        return decline("out= not a trn tensor of input's dtype and the result's shape")
    c = coefficients.to(input.dtype)
    res = (c @ input[:n].reshape(n, -1)).reshape(shape)  # torch reads the first n summands
    return res if out is None else out.add_(res)
