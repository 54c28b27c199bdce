"""Scans along one dim: ``cumsum``, ``cumprod``, ``cummax`` / ``cummin`` (values and int64 indices),
``logcumsumexp``.

The scanned dim is the free axis of a strided view (``movedim``; a leading dim is a strided DMA,
never a transpose); the other dims are rows tiled by 128 partitions. Each row tile walks the
scanned dim in chunks with one Vector-engine ``tensor_tensor_scan`` per chunk, seeded with the
last column of the previous chunk (the carry). The scan runs in fp32 and the store rounds to the
output dtype.

``cummax`` indices follow torch's rule (the latest position whose element is ``>=`` the running
maximum, NaN wins): a position is a *record* when its element equals the running maximum (or is
NaN); the index is a running max of ``where(record, position, -1)``, a second scan. The int32
tile is stored into the int64 ``indices`` tensor (the DMA widens).

Example:
    >>> x = torch.randn(4096, 1024).to("trn")
    >>> x.cumsum(1), x.cumprod(0), x.cummax(1)  # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Any

import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.elementwise.complex_fns import complex_logaddexp
from stdlib_kernels.tiling import col_chunks, polymorphic, row_tiles
from trnlang.device import decline, lowering

#: op -> (scan op0, scan operand a is the data?, initial carry). Scan: ``acc = (acc op0 a) op1 b``.
_INIT = {"sum": 0.0, "prod": 1.0, "max": -math.inf, "min": math.inf}


def _scan_rows(x: Any) -> Any:
    """Yield ``(b, rows, row mask, C)`` for each row tile of a ``[(A,) R, C]`` scan input (trace time)."""
    a = x.shape[0] if x.ndim == 3 else 1
    r_dim, c_dim = x.shape[-2], x.shape[-1]
    for b in tl.affine_range(a):
        for rows, rm in row_tiles(r_dim):
            yield b, rows, rm, c_dim


def _at(t: Any, b: Any, rows: Any, cols: Any) -> Any:
    return t[b, rows, cols] if t.ndim == 3 else t[rows, cols]


#: Chunk width of a scan whose length is a runtime size (its last chunk masked).
SCAN_CHUNK = 512


def _scan_chunks(c_dim: Any, rm: Any) -> Any:
    """``col_chunks`` along the scanned dim, in order (a sequential loop: the carry); a runtime length walks
    ``SCAN_CHUNK``-wide chunks, then one masked chunk for the rest (a prefix scan: lanes past the end never
    reach the stored ones)."""
    if isinstance(c_dim, int):
        yield from col_chunks(c_dim, U.FREE_CHUNK, rm, loop=tl.sequential_range)
        return
    for j in tl.sequential_range(c_dim // SCAN_CHUNK):
        yield j * SCAN_CHUNK + tl.arange(SCAN_CHUNK)[None, :], rm
    c0 = (c_dim // SCAN_CHUNK) * SCAN_CHUNK
    for _ in tl.sequential_range(tl.cdiv(c_dim - c0, SCAN_CHUNK)):
        cols = c0 + tl.arange(SCAN_CHUNK)[None, :]
        yield cols, (cols < c_dim) if rm is None else rm & (cols < c_dim)


def _step(t: Any, carry: Any, op: str) -> Any:
    """One chunk's inclusive scan of ``t`` seeded with ``carry [P, 1]``."""
    if op == "sum":
        return isa.tensor_tensor_scan(1.0, t, carry, "multiply", "add")
    alu = {"prod": "multiply", "max": "maximum", "min": "minimum"}[op]
    return isa.tensor_tensor_scan(t, 0.0, carry, alu, "add")


@trn.kernel
def row_scan(x, out, idx, op, ints):
    """Inclusive scan (``op``: sum/prod/max/min) of ``x [(A,) R, C]`` along C into ``out``.

    ``idx`` (max/min only, else None): the index of the running extremum, as torch's cummax/cummin.
    ``ints``: the output is an integer tensor (a count of a bool input; the fp32 scan is exact below 2^24).
    """
    for b, rows, rm, c_dim in _scan_rows(x):
        p = rows.shape[0]
        carry = tl.full((p, 1), _INIT[op], tl.float32)
        cidx = tl.full((p, 1), -1.0, tl.float32)
        for cols, m in _scan_chunks(c_dim, rm):
            f = cols.shape[1]
            t = tl.load(_at(x, b, rows, cols), mask=m).astype(tl.float32)
            s = _step(t, carry, op)
            tl.store(_at(out, b, rows, cols), s.astype(tl.int32) if ints else s, mask=m)
            if idx is not None:
                rec = (t == s) | (t != t)
                pos = isa.iota(cols + 0 * rows, tl.float32)
                si = isa.tensor_tensor_scan(tl.where(rec, pos, -1.0), 0.0, cidx, "maximum", "add")
                tl.store(_at(idx, b, rows, cols), si.astype(tl.int32), mask=m)
                cidx[...] = si[:, f - 1:f]
            carry[...] = s[:, f - 1:f]


#: :func:`row_scan` on 2-D ``[R, C]`` views with the scanned length ``C`` a runtime size (``R`` keyed): a
#: ``cumsum`` over a growing sequence reuses one variant.
row_scan_rt = polymorphic(row_scan.fn, static=(("x", 0), ("out", 0), ("idx", 0)))


@trn.kernel
def row_logcumsumexp(x, out):
    """Inclusive ``log(cumsum(exp(x)))`` of ``x [(A,) R, C]`` along C, computed stably (see the module doc)."""
    for b, rows, rm, c_dim in _scan_rows(x):
        p = rows.shape[0]
        mcar = tl.full((p, 1), -math.inf, tl.float32)
        scar = tl.zeros((p, 1), tl.float32)
        for cols, m in col_chunks(c_dim, U.FREE_CHUNK, rm, loop=tl.sequential_range):
            f = cols.shape[1]
            t = tl.load(_at(x, b, rows, cols), mask=m).astype(tl.float32)
            mx = isa.tensor_tensor_scan(t, 0.0, mcar, "maximum", "add")
            prev = tl.ndarray((p, f), tl.float32)
            prev[:, 0:1] = mcar
            if f > 1:
                prev[:, 1:f] = mx[:, 0:f - 1]
            fin = tl.abs(mx) < math.inf
            scale = tl.where(fin, tl.exp(prev - mx), 0.0)
            term = tl.where(fin, tl.exp(t - mx), 0.0)
            s = isa.tensor_tensor_scan(scale, term, scar, "multiply", "add")
            res = tl.where(fin, tl.log(s) + mx, mx)
            tl.store(_at(out, b, rows, cols), res, mask=m)
            mcar[...] = mx[:, f - 1:f]
            scar[...] = s[:, f - 1:f]


def _last(t: torch.Tensor, dim: int) -> torch.Tensor:
    if t.dim() == 0:
        return U.view(t, (1,), (1,), t.storage_offset())
    return t.movedim(dim, -1) if dim != t.dim() - 1 else t


def _scan(self: Any, dim: int, op: str, out: torch.Tensor, idx: torch.Tensor | None) -> Any:
    nd = max(self.dim(), 1)
    d = dim % nd
    ts = [self, out] + ([idx] if idx is not None else [])
    if self.numel() == 0:
        return out
    for vs in U.row_views([_last(t, d) for t in ts]):
        kern = row_scan_rt if vs[0].dim() == 2 else row_scan
        U.split_rows(kern, [vs[0], vs[1], vs[2] if idx is not None else None], op,
                     not out.dtype.is_floating_point)
    return out


def _ok(self: Any, dim: int) -> bool:
    nd = max(self.dim(), 1)
    return (U.is_trn(self) and self.dtype in U.FLOAT_DTYPES and not self.is_conj() and not self.is_neg()
            and -nd <= dim < nd)


#: integer dtypes scanned exactly by the fp32 scan when their values are small enough (checked on the device)
_INT_SCAN = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _int_scan(self: Any, dim: int, dtype: torch.dtype | None, op: str) -> Any:
    """cumsum/cumprod of an integer tensor (int64 result by default, as torch's) when every prefix stays below 2^24
    in magnitude and inside the output dtype (attention-mask positions, say): the fp32 scan is then exact. Device
    checks bound the values (and, for products, a first scan of ``|x|``); anything larger is declined. A float
    ``dtype=`` casts first, as torch does."""
    nd = max(self.dim(), 1)
    if not -nd <= dim < nd:
        return decline("dim out of range: torch raises")
    odt = dtype or torch.int64
    if odt in U.FLOAT_DTYPES:
        return _cum(self.to(odt), dim, None, op)
    if odt not in (torch.int64, torch.int32) and odt != self.dtype:
        return decline("an integer dtype= narrower than the input's (torch's wrap-around is not reproduced)")
    why = _int_scan_inexact(self, dim, op, min(1 << 24, torch.iinfo(odt).max + 1))
    if why is not None:
        return decline(why)
    return _scan(self, dim, op, torch.empty(self.shape, dtype=odt, device="trn"), None)


def _int_scan_inexact(self: torch.Tensor, dim: int, op: str, cap: int) -> str | None:
    """Why the fp32 scan of the integer ``self`` could be inexact below ``cap``, or None."""
    from stdlib_kernels.elementwise.pointwise import int_within as _within

    if op == "sum":
        n = self.shape[dim] if self.dim() else 1
        if not _within(self, max(1, cap // max(n, 1))):
            return ("integer values whose prefix sums may reach 2^24 or the output's range (the fp32 scan would not "
                    "be exact)")
        return None
    if not _within(self, cap):
        return "integer values of 2^24 or more (the fp32 scan would round them)"
    if self.numel() and float(_cum(self.to(torch.float32).abs(), dim, None, "prod").max()) >= cap:
        return "integer partial products that may reach 2^24 or the output's range (inexact in fp32)"
    return None


def _cum(self: Any, dim: int, dtype: torch.dtype | None, op: str) -> Any:
    if U.is_trn(self) and self.dtype in _INT_SCAN and op == "sum":
        return _int_scan(self, dim, dtype, op)
    if U.is_trn(self) and self.dtype == torch.bool and dtype in (None, torch.int64, torch.int32) and op == "sum":
        nd = max(self.dim(), 1)  # a running count: exact in the fp32 scan while the dim is < 2^24 long
        if not -nd <= dim < nd or (self.dim() and self.shape[dim] >= 2 ** 24):
            return decline("dim out of range, or a bool dim of 2^24 or more elements")
        return _scan(self, dim, op, torch.empty(self.shape, dtype=dtype or torch.int64, device="trn"), None)
    odt = dtype or self.dtype
    if not _ok(self, dim) or odt not in U.FLOAT_DTYPES:
        return decline("not a float trn tensor, dim out of range, or a non-float output dtype")
    out = torch.empty(self.shape, dtype=odt, device="trn")
    return _scan(self, dim, op, out, None)


@lowering("aten::cumsum", dtypes=(*U.FLOAT_DTYPES, torch.bool, *_INT_SCAN, torch.complex64))
def cumsum(self: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None) -> Any:
    """Inclusive prefix sum along ``dim`` (float inputs; bool ones as int64 counts; integers whose prefix sums
    stay below 2^24, checked on the device).

    Example: ``torch.arange(6.).to("trn").cumsum(0)`` -> ``[0, 1, 3, 6, 10, 15]``.
    """
    if U.is_trn(self) and self.dtype == torch.complex64 and dtype in (None, torch.complex64) \
            and not self.is_conj() and not self.is_neg() and -max(self.dim(), 1) <= dim < max(self.dim(), 1):
        if self.dim() == 0:
            return self.clone()
        r = _cum(torch.view_as_real(self), dim % self.dim(), None, "sum")  # each plane's prefix sums
        return r if r is NotImplemented else torch.view_as_complex(r)
    return _cum(self, dim, dtype, "sum")


@lowering("aten::cumprod", dtypes=(*U.FLOAT_DTYPES, *_INT_SCAN, torch.complex64))
def cumprod(self: torch.Tensor, dim: int, *, dtype: torch.dtype | None = None) -> Any:
    """Inclusive prefix product along ``dim`` (integers: exact when every partial product stays below 2^24;
    complex64: ``ceil(log2 n)`` rounds of native complex products of shifted slices, Hillis-Steele)."""
    if U.is_trn(self) and self.dtype == torch.complex64 and dtype in (None, torch.complex64) \
            and not self.is_conj() and not self.is_neg() and -max(self.dim(), 1) <= dim < max(self.dim(), 1):
        if self.dim() == 0:
            return self.clone()
        x = self.movedim(dim, -1).contiguous()
        k, n = 1, x.shape[-1]
        while k < n:
            y = x.clone()
            y[..., k:] = x[..., k:] * x[..., :-k]
            x, k = y, 2 * k
        return x.movedim(-1, dim).contiguous()
    if U.is_trn(self) and self.dtype in _INT_SCAN:
        return _int_scan(self, dim, dtype, "prod")
    return _cum(self, dim, dtype, "prod")


def _helper(self: Any, values: Any, indices: Any, dim: int, op: str) -> Any:
    if U.is_trn(self) and self.dtype in _INT_SCAN and U.is_trn(values) and values.dtype == self.dtype:
        # integers below 2^24 are exact in the fp32 scan (checked on the device); others go to the CPU
        from stdlib_kernels.elementwise.pointwise import int_within as _within

        nd = max(self.dim(), 1)
        if not -nd <= dim < nd or not _within(self, 1 << 24):
            return decline("integer values of 2^24 or more (the fp32 scan would round them), or dim out of range")
        ok = (U.is_trn(indices) and indices.dtype == torch.int64 and values.shape == self.shape
              and indices.shape == self.shape and not U.has_internal_overlap(values)
              and not U.has_internal_overlap(indices) and not U.overlaps(values, self)
              and not U.overlaps(indices, self) and not U.overlaps(values, indices))
        if not ok:
            return decline("values/indices out= of bad dtype/shape/overlap")
        _scan(self, dim, op, values, indices)
        return None
    if (not _ok(self, dim) or not U.is_trn(values) or not U.is_trn(indices) or values.dtype != self.dtype
            or indices.dtype != torch.int64 or values.shape != self.shape or indices.shape != self.shape
            or U.has_internal_overlap(values) or U.has_internal_overlap(indices)
            or U.overlaps(values, self) or U.overlaps(indices, self) or U.overlaps(values, indices)):
        return decline("not a float trn tensor, dim out of range, or values/indices out= of bad dtype/shape/overlap")
    _scan(self, dim, op, values, indices)
    return None


@lowering("aten::_cummax_helper", dtypes=None, variants=False)
def cummax_helper(self: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, dim: int) -> Any:
    """``torch.cummax``'s kernel: running maximum and the index where it was attained.

    Example: ``torch.tensor([1., 3., 2., 3.]).to("trn").cummax(0)`` -> ``([1, 3, 3, 3], [0, 1, 1, 3])``.
    """
    return _helper(self, values, indices, dim, "max")


@lowering("aten::_cummin_helper", dtypes=None, variants=False)
def cummin_helper(self: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, dim: int) -> Any:
    """``torch.cummin``'s kernel: running minimum and its index."""
    return _helper(self, values, indices, dim, "min")


def _c_logcumsumexp(self: torch.Tensor, dim: int) -> Any:
    """complex64 ``logcumsumexp`` as a Hillis-Steele scan: ``ceil(log2 n)`` rounds of :func:`complex_logaddexp` of each
    element and the one ``2^r`` before it (finite inputs; non-finite ones go to the CPU's special cases)."""
    if not bool(torch.isfinite(torch.view_as_real(self)).all()):
        return decline("NaN or inf in a complex64 input (the CPU's special cases)")
    s = self.clone()
    n = s.shape[dim] if s.dim() else 1
    step = 1
    while step < n:
        nxt = s.clone()
        later, earlier = s.narrow(dim, step, n - step), s.narrow(dim, 0, n - step)
        nxt.narrow(dim, step, n - step).copy_(complex_logaddexp(later, earlier))
        s, step = nxt, 2 * step
    return _cpu_branch(self, s, dim) if n > 1 else s


def _cpu_branch(x: torch.Tensor, s: torch.Tensor, dim: int) -> torch.Tensor:
    """The scan's results with imaginary parts moved by multiples of ``2 pi`` onto the branch the CPU's sequential
    recurrence ``s_k = M + log1p(exp(m - M))`` reaches (``M`` the operand of larger real part, ``x_k`` when
    ``Re x_k > Re s_{k-1}``): ``Im s_k`` is ``Im x_r`` plus the ``log1p`` phases since the last such ``r``; the
    phases come from the scan's own (branch-free) values, the sum of them picks the branch (a segmented cumsum)."""
    n = s.shape[dim]
    xr, si = torch.view_as_real(x), torch.view_as_real(s)[..., 1]
    prev = s.narrow(dim, 0, n - 1)
    cur = x.narrow(dim, 1, n - 1)
    reset = torch.cat((torch.ones_like(si.narrow(dim, 0, 1), dtype=torch.bool),
                       xr[..., 0].narrow(dim, 1, n - 1) > torch.view_as_real(prev)[..., 0]), dim)
    first = reset.narrow(dim, 1, n - 1)
    big, small = torch.where(first, cur, prev), torch.where(first, prev, cur)
    phase = torch.view_as_real(torch.log1p(torch.exp(small - big)))[..., 1]
    delta = torch.cat((torch.zeros_like(si.narrow(dim, 0, 1)), phase), dim)
    cum = torch.cumsum(delta, dim)
    pos = torch.arange(n, device="trn").reshape([n if d == dim else 1 for d in range(s.dim())])
    r = torch.where(reset, pos, -1).cummax(dim).values
    anchor = torch.where(reset, xr[..., 1], 0.0).gather(dim, r) + cum - (cum - delta).gather(dim, r)
    two_pi = 2.0 * math.pi
    im = si + torch.round((anchor - si) / two_pi) * two_pi
    return torch.complex(torch.view_as_real(s)[..., 0].contiguous(), im)


@lowering("aten::_logcumsumexp", dtypes=(*U.FLOAT_DTYPES, torch.complex64))
def logcumsumexp(self: torch.Tensor, dim: int) -> Any:
    """``log(cumsum(exp(x)))`` along ``dim`` without overflow (torch's ``-inf`` / ``inf`` / NaN handling).

    Example: ``torch.zeros(3).to("trn").logcumsumexp(0)`` -> ``[0, log 2, log 3]``.
    """
    nd = max(self.dim(), 1)
    if U.is_trn(self) and self.dtype == torch.complex64 and not (self.is_conj() or self.is_neg()) \
            and -nd <= dim < nd:
        return _c_logcumsumexp(self, dim % nd) if self.numel() else torch.empty_like(self)
    if not _ok(self, dim):
        return decline("not a float trn tensor (float32/bfloat16/float16), or dim out of range")
    out = torch.empty(self.shape, dtype=self.dtype, device="trn")
    if self.numel() == 0:
        return out
    d = dim % max(self.dim(), 1)
    for vs in U.row_views([_last(t, d) for t in (self, out)]):
        row_logcumsumexp(vs[0], vs[1])
    return out
