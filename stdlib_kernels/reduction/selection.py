"""Sort-based selection: ``kthvalue``, ``median`` / ``nanmedian`` (with and without ``dim``), ``mode``;
also ``equal`` and ``nonzero_static``. Unique / search / histograms live in :mod:`stdlib_kernels.reduction.unique`
and :mod:`stdlib_kernels.reduction.search` (imported at the end of this module, so this family registers them).

Each row (the reduced dim is the free axis of a ``[R, n]`` view) is sorted by the bitonic network of
:mod:`stdlib_kernels.reduction.sort` (stable: ties keep their index order, NaN last), then a selection kernel
picks one position per row and gathers the value and the original index with an indirect DMA.

Which index torch's CPU kernels return decides the rule per op (checked against torch 2.13):

- ``median(dim)``: ``nth_element`` with an index tie-break, i.e. the stable sorted position
  ``(n - 1) // 2``; a row holding NaN gives NaN and the first NaN's index.
- ``nanmedian(dim)``: the stable position ``(m - 1) // 2`` among the ``m`` non-NaN elements. A row that
  is all NaN gives NaN and the index libstdc++'s ``nth_element`` leaves at position 0 when every
  comparison is false: a function of ``n`` alone, replayed on the host (:func:`_allnan_index`).
- ``kthvalue``: a quickselect whose choice among *equal* elements depends on the data; rows whose
  k-th value is tied are detected on the device and the call is declined (CPU fallback).
- ``mode``: ``std::sort`` then the longest run (the smallest value among equally long runs), index
  of the run's last element. For ``n <= 16`` std::sort is an insertion sort (stable): the last
  occurrence; for longer rows the order of equal elements is unspecified, so rows with a repeated
  mode (or any NaN, which std::sort does not order) are declined.

Rows longer than :data:`stdlib_kernels.reduction.sort.MAX_SORT` are declined.

Example:
    >>> x = torch.randn(64, 301).to("trn")
    >>> x.median(1), x.nanmedian(0), x.kthvalue(3, 1), x.mode(1)  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.reduction import sort as S
from trnlang.device import decline, lowering

_BIG = float(2 ** 30)
_NAN = float("nan")


class Pick(U.Mode):
    """Which element :func:`select_rows` picks from each sorted row (a compile-time constant of the kernel)."""

    KTH = "kth"              #: the k-th smallest (``kthvalue``); flags rows where it occurs more than once
    MEDIAN = "median"        #: the lower median; NaN (and the first NaN's index) where the row has one
    NANMEDIAN = "nanmedian"  #: the lower median of the non-NaN elements


@trn.kernel
def select_rows(x, sv, si, vals, idx, flag, kind, k, allnan):
    """One element per row of ``x [R, n]`` from its stable sort ``sv`` / ``si`` (``kind``: a :class:`Pick`).

    Pass 1 counts each row's NaNs and finds the first one; the target position is ``k`` (kth,
    median) or ``(m - 1) // 2`` over the ``m`` non-NaN elements (nanmedian); the value and index are
    gathered from the sorted rows. ``flag`` (kth only): 1 where the k-th value occurs more than once.
    """
    r_dim, n = x.shape
    p = min(128, r_dim)
    f = min(n, U.FREE_CHUNK)
    one = tl.arange(1)[None, :]
    for i in tl.affine_range(tl.cdiv(r_dim, p)):
        rows = i * p + tl.arange(p)[:, None]
        rm = (rows < r_dim) if r_dim % p else None
        nn = tl.zeros((p, 1), tl.float32)
        fnan = tl.full((p, 1), _BIG, tl.float32)
        if kind is not Pick.KTH:
            for j in tl.sequential_range(tl.cdiv(n, f)):
                cols = j * f + tl.arange(f)[None, :]
                t = tl.load(x[rows, cols], mask=(rows < r_dim) & (cols < n)).astype(tl.float32)
                pos = isa.iota(cols + 0 * rows, tl.float32)
                nn[...] = nn + tl.sum((t != t).astype(tl.float32), axis=1, keepdims=True)
                fnan[...] = tl.minimum(fnan, tl.min(tl.where(t != t, pos, _BIG), axis=1, keepdims=True))
        if kind is Pick.NANMEDIAN:
            tpos = tl.maximum(tl.floor((float(n - 1) - nn) * 0.5), 0.0)
        else:
            tpos = tl.full((p, 1), float(k), tl.float32)
        ti = tpos.astype(tl.int32)
        v = tl.load(sv[rows, ti], mask=rm).astype(tl.float32)
        ix = tl.load(si[rows, ti], mask=rm).astype(tl.float32)
        if kind is Pick.MEDIAN:
            v = tl.where(nn > 0, _NAN, v)
            ix = tl.where(nn > 0, fnan, ix)
        if kind is Pick.NANMEDIAN:
            ix = tl.where(nn >= float(n), float(allnan), ix)
        if kind is Pick.KTH:
            cnt = tl.zeros((p, 1), tl.float32)
            for j in tl.sequential_range(tl.cdiv(n, f)):
                cols = j * f + tl.arange(f)[None, :]
                t = tl.load(x[rows, cols], mask=(rows < r_dim) & (cols < n)).astype(tl.float32)
                same = ((t == v) | ((t != t) & (v != v))).astype(tl.float32)
                cnt[...] = cnt + tl.sum(tl.where(cols < n, same, 0.0), axis=1, keepdims=True)
            tl.store(flag[rows, one], (cnt > 1.0).astype(tl.float32), mask=rm)
        tl.store(vals[rows, one], v, mask=rm)
        tl.store(idx[rows, one], ix.astype(tl.int32), mask=rm)


@trn.kernel
def mode_rows(sv, si, vals, idx, flag):
    """The mode of each sorted row ``sv [R, n]``: the longest run of equal values (the first such run),
    its value and the original index of its last element (``si``). ``flag``: 1 where the row holds a NaN
    (the CPU's result is not reproduced there).

    Runs are found along the row in chunks: a run starts where an element differs from its
    predecessor; a running max-scan of the start positions gives each element its run's start, so a
    run's length is read at its last element.
    """
    r_dim, n = sv.shape
    p = min(128, r_dim)
    f = min(n, U.FREE_CHUNK)
    one = tl.arange(1)[None, :]
    for i in tl.affine_range(tl.cdiv(r_dim, p)):
        rows = i * p + tl.arange(p)[:, None]
        rm = (rows < r_dim) if r_dim % p else None
        start = tl.zeros((p, 1), tl.float32)
        best = tl.zeros((p, 1), tl.float32)
        bpos = tl.zeros((p, 1), tl.float32)
        for j in tl.sequential_range(tl.cdiv(n, f)):
            cols = j * f + tl.arange(f)[None, :]
            t = tl.load(sv[rows, cols], mask=(rows < r_dim) & (cols < n)).astype(tl.float32)
            tp = tl.load(sv[rows, cols - 1], mask=(rows < r_dim) & (cols >= 1) & (cols < n)).astype(tl.float32)
            tn = tl.load(sv[rows, cols + 1], mask=(rows < r_dim) & (cols + 1 < n)).astype(tl.float32)
            pos = isa.iota(cols + 0 * rows, tl.float32)
            new = tl.where(cols < 1, 1.0, (t != tp).astype(tl.float32))
            last = tl.where(cols + 1 >= n, 1.0, (tn != t).astype(tl.float32))
            st = isa.tensor_tensor_scan(tl.where(new > 0, pos, -1.0), 0.0, start, "maximum", "add")
            ln = tl.where(last > 0, pos - st + 1.0, 0.0)
            ln = tl.where(cols < n, ln, 0.0)
            cm = tl.max(ln, axis=1, keepdims=True)
            cp = tl.min(tl.where(ln == cm, pos, _BIG), axis=1, keepdims=True)
            bpos[...] = tl.where(cm > best, cp, bpos)
            best[...] = tl.maximum(best, cm)
            start[...] = st[:, f - 1:f]
        bi = bpos.astype(tl.int32)
        v = tl.load(sv[rows, bi], mask=rm)
        ix = tl.load(si[rows, bi], mask=rm)
        lastv = tl.load(sv[rows, n - 1:n], mask=rm).astype(tl.float32)
        bad = (lastv != lastv).astype(tl.float32)
        tl.store(vals[rows, one], v, mask=rm)
        tl.store(idx[rows, one], ix, mask=rm)
        tl.store(flag[rows, one], bad, mask=rm)


@trn.kernel
def count_ne(a, b, out):
    """``out[0, 0] += #(a != b)`` over 2-D views ``[R, L]`` (8-byte data as int32 word pairs); NaN != NaN."""
    r_dim, l_dim = a.shape
    p = min(128, r_dim)
    f = min(l_dim, U.FREE_CHUNK)
    ones = tl.full((p, 1), 1.0, tl.float32)
    for i in tl.affine_range(tl.cdiv(r_dim, p)):
        rows = i * p + tl.arange(p)[:, None]
        acc = tl.zeros((p, 1), tl.float32)
        for j in tl.sequential_range(tl.cdiv(l_dim, f)):
            cols = j * f + tl.arange(f)[None, :]
            m = (rows < r_dim) & (cols < l_dim)
            ta = tl.load(a[rows, cols], mask=m)
            tb = tl.load(b[rows, cols], mask=m)
            acc[...] = acc + tl.sum((ta != tb).astype(tl.float32), axis=1, keepdims=True)
        tot = tl.copy(tl.matmul(ones, acc, transpose_x=True))
        tl.store(out[0:1, 0:1], tot, accumulate="add")


# ------------------------------------------------------------------------------------------ host side


def _allnan_index(n: int) -> int | None:
    """The index libstdc++'s ``std::nth_element(first, first, last, comp)`` leaves at ``first`` when
    ``comp`` is always false (an all-NaN row of ``nanmedian``): introselect's partitions then depend on
    ``n`` only. None if the replay would need the heap-select fallback (never for such input)."""
    a = list(range(n))
    first, last = 0, n
    depth = 2 * (n.bit_length() - 1)
    while last - first > 3:
        if depth == 0:
            return None
        depth -= 1
        mid = first + (last - first) // 2
        a[first], a[mid] = a[mid], a[first]  # median-of-three with no true comparison picks ``mid``
        lo, hi = first + 1, last
        while True:  # unguarded partition: every comparison false -> swap from both ends until they meet
            hi -= 1
            if not lo < hi:
                break
            a[lo], a[hi] = a[hi], a[lo]
            lo += 1
        if lo <= 0:  # the cut is after position 0 (nth = 0): keep the left part
            first = lo
        else:
            last = lo
    return a[0]


def _rows(self: torch.Tensor, dim: int) -> tuple[torch.Tensor, list[int], int] | None:
    """``self`` with ``dim`` last as a ``[R, n]`` tensor, the leading shape, and ``dim`` wrapped."""
    nd = max(self.dim(), 1)
    if not -nd <= dim < nd:
        return None
    d = dim % nd
    if self.dim() == 0:
        return U.view(self, (1, 1), (1, 1), self.storage_offset()), [], 0
    xs = self.movedim(d, -1) if d != self.dim() - 1 else self
    lead = list(xs.shape[:-1])
    return xs.reshape(U.prod(lead), xs.shape[-1]), lead, d


#: integer dtypes whose values, when within 2^24, select through exact float32 keys
_EXACT_INTS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
#: dtypes the registry lets through: float inputs (checked by :func:`_ok`), integers (:func:`_float_keys`) and the
#: int64 ``indices`` of ``out=``
_SELECT_DTYPES = (*U.FLOAT_DTYPES, *_EXACT_INTS)


def _float_keys(self: torch.Tensor) -> torch.Tensor | None:
    """A float32 copy of an integer ``trn`` tensor whose values all lie within 2^24 (exact in float32, so order,
    ties and the selected value are the integers'), checked on the device; None when some value does not."""
    if self.dtype in (torch.int8, torch.int16, torch.uint8) or self.numel() == 0:
        return self.to(torch.float32)
    if self.dtype == torch.int64:  # within int32 first (the int64 check reads both words), then the exact bounds
        from stdlib_kernels.elementwise.pointwise import int64_ok

        if not int64_ok(self, 2**24 + 1):
            return None
    ok = -(2**24) <= int(self.amin().item()) and int(self.amax().item()) <= 2**24
    return self.to(torch.float32) if ok else None


def _via_float_keys(self: torch.Tensor, fn: Any, *args: Any) -> Any:
    """``fn`` (a selection) of an integer tensor through float32 keys; the values come back in its dtype."""
    f = _float_keys(self)
    if f is None:
        return decline("integer values beyond 2^24 (float32 keys would round)")
    r = fn(f, *args)
    if r is NotImplemented:
        return r
    return r.to(self.dtype) if isinstance(r, torch.Tensor) else (r[0].to(self.dtype), r[1])


def _ok(self: Any) -> bool:
    return U.is_trn(self) and self.dtype in U.FLOAT_DTYPES and not self.is_conj() and not self.is_neg()


def _sort_rows(x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r, n = x2.shape
    sv = torch.empty((r, n), dtype=x2.dtype, device="trn")
    si = torch.empty((r, n), dtype=torch.int64, device="trn")
    S.sort_rows(x2, sv, si, False, max(0, (n - 1).bit_length()))
    return sv, si


def _finish(vals: torch.Tensor, idx: torch.Tensor, lead: list[int], d: int, keepdim: bool, nd: int) -> Any:
    shape = list(lead)
    if keepdim and nd:
        shape.insert(d, 1)
    return vals.view(shape), idx.view(shape)


def _select(self: Any, dim: int, keepdim: bool, kind: Pick, k: int = 0) -> Any:
    if U.is_trn(self) and self.dtype in _EXACT_INTS:
        return _via_float_keys(self, _select, dim, keepdim, kind, k)
    if not _ok(self):
        return decline("not a float trn tensor (float32/bfloat16/float16, no conj/neg bit)")
    rv = _rows(self, dim)
    if rv is None:
        return decline("dim out of range: torch raises")
    x2, lead, d = rv
    r, n = x2.shape
    if n == 0:
        raise IndexError(f"{'kthvalue' if kind is Pick.KTH else 'median'}(): Expected reduction dim {d} to have "
                         "non-zero size.")
    if n > S.MAX_SORT:
        return decline("more than 8192 elements along the dim")
    if kind is Pick.KTH and not 0 <= k < n:
        return decline("k out of range: torch raises")
    allnan = 0
    if kind is Pick.NANMEDIAN:
        a = _allnan_index(n)
        if a is None:
            return decline("the all-NaN index replay would need torch's heap-select path")
        allnan = a
    vals = torch.empty((r, 1), dtype=self.dtype, device="trn")
    idx = torch.empty((r, 1), dtype=torch.int64, device="trn")
    if r:
        sv, si = _sort_rows(x2)
        flag = torch.empty((r, 1), dtype=torch.float32, device="trn") if kind is Pick.KTH else None
        select_rows(x2, sv, si, vals, idx, flag, kind, (n - 1) // 2 if kind is Pick.MEDIAN else k, allnan)
        if flag is not None and float(flag.sum().item()) != 0.0:
            return decline("a tied k-th value: torch's quickselect picks the index")
    return _finish(vals, idx, lead, d, keepdim, self.dim())


@lowering("aten::kthvalue", dtypes=_SELECT_DTYPES)
def kthvalue(self: torch.Tensor, k: int, dim: int = -1, keepdim: bool = False) -> Any:
    """The ``k``-th smallest element along ``dim`` and its index (NaN counts as the largest).

    Example: ``torch.tensor([3., 1., 2.]).to("trn").kthvalue(2)`` -> ``(2., 2)``.
    """
    return _select(self, dim, keepdim, Pick.KTH, int(k) - 1)


@lowering("aten::median.dim", dtypes=_SELECT_DTYPES)
def median_dim(self: torch.Tensor, dim: int, keepdim: bool = False) -> Any:
    """Lower median along ``dim`` and its index (NaN if the row holds one, with the first NaN's index)."""
    return _select(self, dim, keepdim, Pick.MEDIAN)


@lowering("aten::nanmedian.dim", dtypes=_SELECT_DTYPES)
def nanmedian_dim(self: torch.Tensor, dim: int, keepdim: bool = False) -> Any:
    """Lower median of the non-NaN elements along ``dim`` and its index."""
    return _select(self, dim, keepdim, Pick.NANMEDIAN)


def _median_all(self: Any, kind: Pick) -> Any:
    if U.is_trn(self) and self.dtype in _EXACT_INTS:
        if self.numel() == 0:
            return decline("an empty integer tensor: torch raises")
        return _via_float_keys(self, _median_all, kind)
    if not _ok(self):
        return decline("not a float trn tensor (float32/bfloat16/float16, no conj/neg bit)")
    if self.numel() == 0:
        return torch.full((), _NAN, dtype=self.dtype, device="trn")
    flat = self.reshape(-1)
    if flat.numel() > S.MAX_SORT:  # one long row: the chunked merge sort, then the middle element
        nans = int(flat.isnan().sum().item())  # one host read: which element is the median
        if nans and kind == Pick.MEDIAN:
            return torch.full((), _NAN, dtype=self.dtype, device="trn")
        m = flat.numel() - nans  # NaN sorts last: the non-NaN elements come first
        if m == 0:
            return torch.full((), _NAN, dtype=self.dtype, device="trn")
        return flat.sort().values[(m - 1) // 2].clone()
    r = _select(flat, 0, False, kind)
    return r if r is NotImplemented else r[0]


@lowering("aten::median", dtypes=_SELECT_DTYPES)
def median(self: torch.Tensor) -> Any:
    """Lower median of all elements (NaN if any is NaN)."""
    return _median_all(self, Pick.MEDIAN)


@lowering("aten::nanmedian", dtypes=_SELECT_DTYPES)
def nanmedian(self: torch.Tensor) -> Any:
    """Lower median of the non-NaN elements (NaN if there are none)."""
    return _median_all(self, Pick.NANMEDIAN)


@lowering("aten::mode", dtypes=(*_SELECT_DTYPES, torch.bool))
def mode(self: torch.Tensor, dim: int = -1, keepdim: bool = False) -> Any:
    """The most frequent value along ``dim`` (the smallest among equally frequent ones) and an index of it: the
    last occurrence. That is the CPU's index for rows of up to 16 elements (libstdc++ insertion-sorts them, a
    stable order); longer rows the CPU sorts unstably, and its index is some occurrence of the value (torch
    promises only that, and CUDA's differs too).

    Example: ``torch.tensor([2., 1., 2., 1., 3.]).to("trn").mode()`` -> ``(1., 3)``.
    """
    if U.is_trn(self) and self.dtype in _EXACT_INTS:  # integers within 2^24: float32 keys, values cast back
        return _via_float_keys(self, mode, dim, keepdim)
    if U.is_trn(self) and self.dtype == torch.bool:  # as its 0/1 bytes
        r = mode(self.view(torch.uint8), dim, keepdim)
        return r if r is NotImplemented else (r[0].view(torch.bool), r[1])
    if not _ok(self):
        return decline("not a float trn tensor (float32/bfloat16/float16, no conj/neg bit)")
    rv = _rows(self, dim)
    if rv is None:
        return decline("dim out of range: torch raises")
    x2, lead, d = rv
    r, n = x2.shape
    if n == 0:
        raise IndexError(f"mode(): Expected reduction dim {d} to have non-zero size.")
    if n > S.MAX_SORT:
        return decline("more than 8192 elements along the dim")
    vals = torch.empty((r, 1), dtype=self.dtype, device="trn")
    idx = torch.empty((r, 1), dtype=torch.int64, device="trn")
    if r:
        sv, si = _sort_rows(x2)
        flag = torch.empty((r, 1), dtype=torch.float32, device="trn")
        mode_rows(sv, si, vals, idx, flag)
        if float(flag.sum().item()) != 0.0:
            return decline("NaN in a row (the CPU's order of NaNs is its own)")
    return _finish(vals, idx, lead, d, keepdim, self.dim())


# --------------------------------------------------------------------------------------- equal

_EQUAL_DTYPES = (*U.FLOAT_DTYPES, torch.int32, torch.int64, torch.bool, torch.uint8, torch.int8, torch.int16,
                 torch.complex64)


def _words2d(t: torch.Tensor) -> torch.Tensor:
    """A same-shape int32 view of an int64 tensor with a trailing dim of 2 (its two words)."""
    n = t.untyped_storage().nbytes() // 8
    base = torch.as_strided(t, (max(n, 1),), (1,), 0).view(torch.int32)
    return U.view(base, (*t.shape, 2), (*[2 * s for s in t.stride()], 1), 2 * t.storage_offset())


@lowering("aten::equal", dtypes=_EQUAL_DTYPES)
def equal(self: torch.Tensor, other: torch.Tensor) -> Any:
    """Same shape and equal elements (NaN is not equal to itself); one host sync for the answer.

    Example: ``torch.equal(torch.ones(3).to("trn"), torch.ones(3).to("trn"))`` -> ``True``.
    """
    if not (U.is_trn(self) and U.is_trn(other)) or self.dtype != other.dtype or self.is_neg() or other.is_neg():
        return decline("tensors not both on trn, of different dtypes, or with a neg bit")
    if self.dtype == torch.complex64:  # equal planes (a conj bit: not these planes)
        if self.is_conj() or other.is_conj():
            return decline("a complex tensor with a conj bit")
        return self.shape == other.shape and equal(torch.view_as_real(self), torch.view_as_real(other))
    if self.shape != other.shape:
        return False
    if self.numel() == 0:
        return True
    a, b = self, other
    if self.dim() == 0:
        a, b = (U.view(t, (1,), (1,), t.storage_offset()) for t in (a, b))
    if self.dtype == torch.int64:
        a, b = _words2d(a), _words2d(b)
    out = torch.zeros((1, 1), dtype=torch.float32, device="trn")
    for va, vb in U.row_views([a, b]):
        if va.dim() == 3:
            for q in range(va.shape[0]):
                count_ne(va[q], vb[q], out)
        else:
            count_ne(va, vb, out)
    return float(out.item()) == 0.0


# ------------------------------------------------------------------------------------- nonzero_static


@lowering("aten::nonzero_static", dtypes=None)
def nonzero_static(self: torch.Tensor, *, size: int, fill_value: int = -1) -> Any:
    """``nonzero`` truncated or padded (with ``fill_value``) to ``size`` rows.

    Example: ``torch.tensor([0., 2., 3.]).to("trn").nonzero_static(size=3)`` -> ``[[1], [2], [-1]]``.
    """
    from stdlib_kernels.indexing.advanced_index import nonzero

    size = int(size)
    if not U.is_trn(self) or size < 0:
        return decline("self not on trn, or a negative size")
    nz = nonzero(self)
    if nz is NotImplemented:
        return NotImplemented
    out = torch.full((size, self.dim()), int(fill_value), dtype=torch.int64, device="trn")
    c = min(size, nz.shape[0])
    if c and self.dim():
        out[:c].copy_(nz[:c])
    return out


from stdlib_kernels.reduction import search, unique  # noqa: E402,F401  (register searchsorted/histograms and unique)
