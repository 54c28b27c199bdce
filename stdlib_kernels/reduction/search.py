"""Binary search and histograms: ``searchsorted`` / ``bucketize``, ``repeat_interleave(repeats)``, ``histc``,
``histogram`` (bin count or bin edges) and ``histogramdd``.

:func:`bsearch` runs torch's own binary search on every value at once: ``lo``/``hi`` tiles, ``M.bit_length()``
steps, each gathering ``sorted[(sorter[]) mid]`` by indirect DMA (``left``: advance while
``!(mid >= v)``, ``right``: while ``!(mid > v)``, so NaN values and NaN boundaries land exactly where the
CPU puts them). Batched boundaries ``[B, M]`` search row ``b`` for the values of row ``b``.

Histograms follow the CPU kernel (``aten/src/ATen/native/cpu/HistogramKernel.cpp``): values outside
``[leftmost, rightmost]`` (and NaN) are skipped; the bin is ``trunc((x - left) * bins / (right - left))``
in the input dtype (bf16/fp16 round after every operation, as c10's scalar types do); ``histogram``
with a bin count corrects it by ``upper_bound`` over the three neighbouring edges, with edge tensors by
``upper_bound`` over all edges; a value equal to the rightmost edge goes in the last bin.
:func:`bin_pos` adds ``bin * stride`` per dimension into a flat bin index (-1 = skipped) and
:func:`hist_add` accumulates weights (or ones) into the histogram by an accumulating indirect DMA.
``histc``'s range: ``[min, max]``, or the data's extrema when ``min == max``, widened by 1 if still
equal; ``histogram``'s: ``range``, or the data's extrema widened by 0.5 when equal.

Example:
    >>> s = torch.randn(1000).sort().values.to("trn")
    >>> torch.searchsorted(s, torch.randn(64, 64).to("trn"), right=True)  # doctest: +SKIP
    >>> torch.histc(torch.randn(10000).to("trn"), bins=50, min=-3, max=3)  # doctest: +SKIP
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Sequence

import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels import _util as U
from trnlang.device import decline, lowering

#: Positions are computed in fp32: exact below this.
MAX_LEN = 2 ** 24
_SEARCH_DTYPES = U.FLOAT_DTYPES
#: Integer dtypes searched in fp32 (int32/int64 only when every value is exact there: a device check).
_INT_DTYPES = (torch.int8, torch.int16, torch.uint8, torch.int32, torch.int64)


@trn.kernel
def bsearch(bd, sorter, vals, out, m_len, right, shared, vofs):
    """``out[r, c]`` = insertion point of ``vals[r, c]`` in boundaries row ``r`` (``bd``: flat ``[B * M]``;
    ``shared``: one row for all values). ``sorter`` (flat, or None): the row's sorting permutation.
    ``vals`` None: the value is the flat output position ``vofs + r * C + c`` (``repeat_interleave``).
    """
    r_dim, c_dim = out.shape
    p = min(128, r_dim)
    f = min(c_dim, U.FREE_CHUNK)
    steps = m_len.bit_length()
    for i in tl.affine_range(tl.cdiv(r_dim, p)):
        rows = i * p + tl.arange(p)[:, None]
        for j in tl.affine_range(tl.cdiv(c_dim, f)):
            cols = j * f + tl.arange(f)[None, :]
            msk = (rows < r_dim) & (cols < c_dim)
            if vals is not None:
                v = tl.load(vals[rows, cols], mask=msk).astype(tl.float32)
            else:
                v = isa.iota(vofs + rows * c_dim + cols, tl.float32)
            lo = tl.zeros((p, f), tl.float32)
            hi = tl.full((p, f), float(m_len), tl.float32)
            base = None if shared else isa.iota(rows * m_len + 0 * cols, tl.int32)
            for _ in tl.sequential_range(steps):  # a runtime loop: unrolled, long searches compiled for minutes
                mid = tl.floor((lo + hi) * 0.5)
                gi = tl.minimum(mid, float(m_len - 1)).astype(tl.int32)
                if base is not None:
                    gi = gi + base
                if sorter is not None:
                    gi = tl.load(sorter[gi])
                    if base is not None:
                        gi = gi + base
                mv = tl.load(bd[gi]).astype(tl.float32)
                stay = (mv > v) if right else (mv >= v)
                act = lo < hi
                lo[...] = tl.where(act & ~stay, mid + 1.0, lo)
                hi[...] = tl.where(act & stay, mid, hi)
            tl.store(out[rows, cols], lo.astype(tl.int32), mask=msk)


@trn.kernel
def words_bad(lo, hi, out, lo_b, hi_b):
    """``out[0, 0] += #`` int64 elements (low/high int32 words ``[R, C]``) outside ``[lo_b, hi_b)``."""
    r_dim, c_dim = lo.shape
    p = min(128, r_dim)
    f = min(c_dim, U.FREE_CHUNK)
    ones = tl.full((p, 1), 1.0, tl.float32)
    for i in tl.affine_range(tl.cdiv(r_dim, p)):
        rows = i * p + tl.arange(p)[:, None]
        acc = tl.zeros((p, 1), tl.float32)
        for j in tl.sequential_range(tl.cdiv(c_dim, f)):
            cols = j * f + tl.arange(f)[None, :]
            msk = (rows < r_dim) & (cols < c_dim)
            a = tl.load(lo[rows, cols], mask=msk, other=lo_b)
            b = tl.load(hi[rows, cols], mask=msk)
            ok = (b == 0) & (a >= lo_b) & (a < hi_b)
            acc[...] = acc + tl.sum(1.0 - ok.astype(tl.float32), axis=1, keepdims=True)
        tl.store(out[0:1, 0:1], tl.copy(tl.matmul(ones, acc, transpose_x=True)), accumulate="add")


def _rnd(t: Any, dt: Any) -> Any:
    """Round an fp32 tile to ``dt`` and back (c10's bf16/fp16 scalar arithmetic), fp32 unchanged."""
    return t if dt is None else t.astype(dt).astype(tl.float32)


class BinSearch(U.Mode):
    """How :func:`bin_pos` finds a value's bin (a compile-time constant of the kernel)."""

    LINEAR = "linear"  #: from the bin width alone (histc: evenly spaced edges)
    LOCAL = "local"    #: the linear guess, then upper_bound over the 3 neighbouring edges (linspace edges)
    BINARY = "binary"  #: upper_bound over all ``nbins + 1`` edges (arbitrary edges)


@trn.kernel
def bin_pos(x, edges, e0, e1, acc, nbins, nbf, stride, algo, rdt, first):
    """Bin of every value of ``x [R, C]`` along one histogram dimension, added as ``bin * stride`` into the
    flat index ``acc`` (-1: skipped, sticky). ``e0``/``e1``: ``[1, 1]`` leftmost/rightmost edges;
    ``algo``: a :class:`BinSearch`; ``nbf``: the bin count as the input dtype
    holds it; ``rdt``: the input's low-precision dtype (None for fp32)."""
    r_dim, c_dim = x.shape
    p = min(128, r_dim)
    f = min(c_dim, U.FREE_CHUNK)
    lo_e = tl.load(e0[0:1, 0:1]).astype(tl.float32)
    hi_e = tl.load(e1[0:1, 0:1]).astype(tl.float32)
    width = _rnd(hi_e - lo_e, rdt)
    for i in tl.affine_range(tl.cdiv(r_dim, p)):
        rows = i * p + tl.arange(p)[:, None]
        for j in tl.affine_range(tl.cdiv(c_dim, f)):
            cols = j * f + tl.arange(f)[None, :]
            msk = (rows < r_dim) & (cols < c_dim)
            v = tl.load(x[rows, cols], mask=msk).astype(tl.float32)
            valid = (v >= lo_e) & (v <= hi_e)
            if algo is BinSearch.BINARY:
                lo = tl.zeros((p, f), tl.float32)
                hi = tl.full((p, f), float(nbins + 1), tl.float32)
                steps = (nbins + 1).bit_length()
            else:
                q = _rnd(_rnd(_rnd(v - lo_e, rdt) * nbf, rdt) / width, rdt)
                pos = tl.minimum(tl.maximum(tl.where(valid, q, 0.0).astype(tl.int32).astype(tl.float32), 0.0),
                                 float(nbins))
                lo = tl.maximum(pos - 1.0, 0.0)
                hi = tl.minimum(pos + 2.0, float(nbins + 1))
                steps = 2 if algo is BinSearch.LOCAL else 0
            for _ in tl.static_range(steps):  # std::upper_bound over edges[lo:hi]
                mid = tl.floor((lo + hi) * 0.5)
                mv = tl.load(edges[tl.minimum(mid, float(nbins)).astype(tl.int32)]).astype(tl.float32)
                stay = mv > v
                act = lo < hi
                lo[...] = tl.where(act & ~stay, mid + 1.0, lo)
                hi[...] = tl.where(act & stay, mid, hi)
            b = (lo - 1.0) if steps else pos
            b = tl.where(b >= float(nbins), float(nbins - 1), b)
            if first:
                new = tl.where(valid, b * float(stride), -1.0)
            else:
                old = tl.load(acc[rows, cols], mask=msk)
                new = tl.where(valid & (old >= 0.0), old + b * float(stride), -1.0)
            tl.store(acc[rows, cols], new, mask=msk)


@trn.kernel
def hist_add(acc, w, hist):
    """``hist[acc] += w`` (1 without weights) for the non-negative flat bin indices ``acc [R, C]``."""
    r_dim, c_dim = acc.shape
    p = min(128, r_dim)
    f = min(c_dim, U.FREE_CHUNK)
    for i in tl.affine_range(tl.cdiv(r_dim, p)):
        rows = i * p + tl.arange(p)[:, None]
        for j in tl.affine_range(tl.cdiv(c_dim, f)):
            cols = j * f + tl.arange(f)[None, :]
            msk = (rows < r_dim) & (cols < c_dim)
            a = tl.load(acc[rows, cols], mask=msk, other=-1.0)
            one = tl.load(w[rows, cols], mask=msk).astype(tl.float32) if w is not None else 1.0
            val = tl.where(a >= 0.0, one, 0.0)
            tl.store(hist[tl.maximum(a, 0.0).astype(tl.int32)], val, mask=msk, accumulate="add")


# ------------------------------------------------------------------------------------------ host side


def _parts(t: torch.Tensor) -> list[torch.Tensor]:
    """2-D ``[R, C]`` views covering a 1-D (strided) tensor: ``[128, n // 128]`` plus a ``[1, rest]`` tail."""
    n, st, off = t.shape[0], t.stride(0), t.storage_offset()
    if n == 0:
        return []
    if n < 256:
        return [U.view(t, (1, n), (n * st, st), off)]
    c = n // 128
    views = [U.view(t, (128, c), (c * st, st), off)]
    if n - 128 * c:
        views.append(U.view(t, (1, n - 128 * c), (0, st), off + 128 * c * st))
    return views


def _range_ok(t: torch.Tensor, lo: int, hi: int) -> bool:
    """Every element of a ``trn`` int64 tensor lies in ``[lo, hi)`` (checked on the device; one host sync)."""
    if t.numel() == 0:
        return True
    flat = t.reshape(-1)
    if flat.stride(0) != 1:
        flat = flat.contiguous()
    words = flat.view(torch.int32)  # the same bytes as (low, high) int32 pairs
    lo_w = U.view(words, (flat.numel(),), (2,), words.storage_offset())
    hi_w = U.view(words, (flat.numel(),), (2,), words.storage_offset() + 1)
    out = torch.zeros((1, 1), dtype=torch.float32, device="trn")
    for a, b in zip(_parts(lo_w), _parts(hi_w)):
        words_bad(a, b, out, int(lo), int(hi))
    return float(out.item()) == 0.0


def _operands_unfit(bd: Any, vals: Any) -> str | None:
    """Why the search kernel cannot take these boundaries and values (None: it can)."""
    if not (U.is_trn(bd) and U.is_trn(vals)) or bd.dtype not in (*_SEARCH_DTYPES, *_INT_DTYPES) \
            or vals.dtype != bd.dtype:
        return "not trn tensors of one real dtype (float32/bfloat16/float16 or an integer dtype)"
    if bd.dtype in _INT_DTYPES:
        from stdlib_kernels.reduction.sort import fp32_exact

        if not (fp32_exact(bd) and fp32_exact(vals)):
            return "int32/int64 values beyond +-2^24 (the search compares in fp32)"
    return None


def _common_dtype(bd: Any, vals: Any) -> tuple[Any, Any]:
    """Boundaries and values of different dtypes converted to their common one (the CPU's rule), where the
    kernel takes it; otherwise unchanged."""
    if U.is_trn(bd) and U.is_trn(vals) and bd.dtype != vals.dtype and not (bd.is_neg() or vals.is_neg()):
        common = torch.promote_types(bd.dtype, vals.dtype)
        if common in (*_SEARCH_DTYPES, *_INT_DTYPES):
            return bd.to(common), vals.to(common)
    return bd, vals


#: the non-contiguity warnings torch's searchsorted gives once per process, given once by trn's too (a fallback's
#: CPU call shares the CPU's once-flags, so a program that searched on the CPU first would not see them)
_WARNED: set[str] = set()


def _warn_non_contiguous(bd: Any, vals: Any, sorter: Any) -> None:
    for what, t in (("input value tensor", vals), ("boundary tensor", bd), ("sorter tensor", sorter)):
        if isinstance(t, torch.Tensor) and t.dim() and not t.is_contiguous() and what not in _WARNED:
            _WARNED.add(what)
            warnings.warn(f"torch.searchsorted(): {what} is non-contiguous, this will lower the performance due to "
                          f"extra data copy when converting non-contiguous tensor to contiguous, please use "
                          f"contiguous {what} if possible. This message will only appear once per program.",
                          UserWarning, stacklevel=3)


def _search(bd: Any, vals: torch.Tensor, out_int32: bool, right: bool, side: str | None,
            sorter: Any) -> Any:
    """``torch.searchsorted(bd, vals, ...)``; NotImplemented for anything torch would reject. Boundaries and values
    of different dtypes are both converted to their common dtype first, as the CPU's kernel does."""
    _warn_non_contiguous(bd, vals, sorter)
    bd, vals = _common_dtype(bd, vals)
    why = _operands_unfit(bd, vals)
    if why:
        return decline(why)
    if bd.is_neg() or vals.is_neg() or side not in (None, "left", "right") or (side == "left" and right):
        return decline("a neg bit, or an invalid side (torch raises)")
    right = side == "right" if side is not None else bool(right)
    if bd.dim() == 0:
        return decline("0-dim boundaries: torch raises")
    m = bd.shape[-1]
    shared = bd.dim() == 1
    if not shared and (vals.dim() != bd.dim() or vals.shape[:-1] != bd.shape[:-1]):
        return decline("boundaries and values with mismatched leading dims: torch raises")  # torch's shape error
    if m >= MAX_LEN or bd.numel() >= 2 ** 31:
        return decline("2^24 or more boundaries per row, or 2^31 or more in all")
    if sorter is not None:
        if not U.is_trn(sorter) or sorter.dtype != torch.int64 or sorter.shape != bd.shape:
            return decline("sorter not an int64 trn tensor of the boundaries' shape")
        if not _range_ok(sorter, 0, m):
            return decline("sorter index out of range: torch raises")  # torch: "sorter index out of range"
        sorter = sorter.reshape(-1).contiguous()
    out = torch.empty(vals.shape, dtype=torch.int32 if out_int32 else torch.int64, device="trn")
    if vals.numel() == 0:
        return out
    if m == 0:
        return out.zero_()
    bdf = bd.reshape(-1).contiguous()
    if shared:
        vflat = vals.reshape(-1)
        pairs = list(zip(_parts(vflat), _parts(out.view(-1))))
    else:
        b = U.prod(bd.shape[:-1])
        pairs = [(vals.reshape(b, vals.shape[-1]), out.view(b, vals.shape[-1]))]
    try:
        for v2, o2 in pairs:
            bsearch(bdf, sorter, v2, o2, m, right, shared, 0)
    except trn.BoundsError:
        return decline("an out-of-range read in the search kernel (its bounds check)")
    return out


@lowering("aten::searchsorted.Tensor", dtypes=(*_SEARCH_DTYPES, *_INT_DTYPES, torch.float64))
def searchsorted(sorted_sequence: torch.Tensor, self: torch.Tensor, *, out_int32: bool = False, right: bool = False,
                 side: str | None = None, sorter: torch.Tensor | None = None, out: torch.Tensor | None = None) -> Any:
    """Insertion points of ``self`` in the sorted last dim of ``sorted_sequence`` (torch's binary search).

    Example: ``torch.searchsorted(torch.tensor([1., 2., 3.]).to("trn"), torch.tensor([2.5]).to("trn"))`` -> ``[2]``.
    """
    return _into_out(_search(sorted_sequence, self, out_int32, right, side, sorter), out, out_int32)


def _into_out(res: Any, out: torch.Tensor | None, out_int32: bool) -> Any:
    """``res`` written into ``out=`` (torch's dtype rule: int32 exactly when ``out_int32``, else int64)."""
    if out is None:
        return res
    if out.dtype != (torch.int32 if out_int32 else torch.int64):
        return decline("out= dtype other than out_int32's: torch raises")  # torch's own error (the fallback)
    if res is NotImplemented:
        return res
    if out.shape != res.shape:
        out.resize_(res.shape)
    return out.copy_(res)


def _scalar_as(value: Any, like: Any) -> torch.Tensor | None:
    v = U.scalar_value(value)
    if v is None or isinstance(v, complex) or not U.is_trn(like):
        return None
    return torch.full((), v, dtype=like.dtype, device="trn")  # the CPU converts the scalar to this dtype too


@lowering("aten::searchsorted.Scalar", dtypes=(*_SEARCH_DTYPES, *_INT_DTYPES))
def searchsorted_scalar(sorted_sequence: torch.Tensor, self: Any, *, out_int32: bool = False, right: bool = False,
                        side: str | None = None, sorter: torch.Tensor | None = None,
                        out: torch.Tensor | None = None) -> Any:
    """Insertion point of a Python number in a 1-D sorted sequence (0-dim result)."""
    if not U.is_trn(sorted_sequence) or sorted_sequence.dim() != 1:
        return decline("sorted_sequence not a 1-D trn tensor")
    v = _scalar_as(self, sorted_sequence)
    if v is None:
        return decline("a value that is not a real number")
    return _into_out(_search(sorted_sequence, v, out_int32, right, side, sorter), out, out_int32)


@lowering("aten::bucketize.Tensor", dtypes=(*_SEARCH_DTYPES, *_INT_DTYPES, torch.float64))
def bucketize(self: torch.Tensor, boundaries: torch.Tensor, *, out_int32: bool = False, right: bool = False,
              out: torch.Tensor | None = None) -> Any:
    """Bucket index of every element of ``self`` (1-D ``boundaries``)."""
    if not U.is_trn(boundaries) or boundaries.dim() != 1:
        return decline("boundaries not a 1-D trn tensor")
    return _into_out(_search(boundaries, self, out_int32, right, None, None), out, out_int32)


@lowering("aten::bucketize.Scalar", dtypes=(*_SEARCH_DTYPES, *_INT_DTYPES))
def bucketize_scalar(self: Any, boundaries: torch.Tensor, *, out_int32: bool = False, right: bool = False,
                     out: torch.Tensor | None = None) -> Any:
    """Bucket index of a Python number (0-dim result)."""
    if not U.is_trn(boundaries) or boundaries.dim() != 1:
        return decline("boundaries not a 1-D trn tensor")
    v = _scalar_as(self, boundaries)
    if v is None:
        return decline("a value that is not a real number")
    return _into_out(_search(boundaries, v, out_int32, right, None, None), out, out_int32)


# ----------------------------------------------------------------------------------- repeat_interleave


@lowering("aten::repeat_interleave.Tensor", dtypes=(torch.int64, torch.int32))
def repeat_interleave(repeats: torch.Tensor, *, output_size: int | None = None) -> Any:
    """``repeat_interleave(repeats)``: ``i`` repeated ``repeats[i]`` times, i.e. the upper bound of every
    output position in the prefix sums of ``repeats`` (two host syncs: the range check and the total).

    Example: ``torch.repeat_interleave(torch.tensor([1, 0, 2]).to("trn"))`` -> ``[0, 2, 2]``.
    """
    if not U.is_trn(repeats) or repeats.dim() != 1:
        return decline("repeats not a 1-D trn tensor")
    n = repeats.shape[0]
    r64 = repeats if repeats.dtype == torch.int64 else repeats.to(torch.int64)
    if n >= MAX_LEN or not _range_ok(r64, 0, MAX_LEN):
        return decline("2^24 or more repeats, or a repeat that is negative (torch raises) or 2^24 or more")
    cs = torch.cumsum(r64, 0)
    total = int(cs[-1].item()) if n else 0
    if total >= MAX_LEN or (output_size is not None and int(output_size) != total):
        return decline("a total of 2^24 or more, or output_size not the total (torch raises)")
    out = torch.empty((total,), dtype=repeats.dtype, device="trn")
    ofs = 0
    for o2 in _parts(out):
        bsearch(cs, None, None, o2, n, True, True, ofs)
        ofs += o2.numel()
    return out


# ------------------------------------------------------------------------------------------ histograms

_LOW = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16}


def _as_dtype(v: float, dtype: torch.dtype) -> float:
    """A Python float rounded to ``dtype`` (a scalar parameter, as the CPU kernel's ``input_t`` holds it)."""
    return float(torch.tensor(v, dtype=torch.float64).to(dtype).item())


def _hist(columns: Sequence[torch.Tensor], edges: Sequence[torch.Tensor | None], ends: Sequence[tuple[Any, Any]],
          nbins: Sequence[int], algo: BinSearch, weight: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
    """The (flattened) histogram of ``M`` points: ``columns[d]`` (1-D, length M) holds coordinate ``d``."""
    total = U.prod(nbins)
    hist = torch.zeros((max(total, 1),), dtype=dtype, device="trn")
    mpts = columns[0].shape[0] if columns else 0
    if mpts == 0 or total == 0:
        return hist[:total]
    acc = torch.empty((mpts,), dtype=torch.float32, device="trn")
    rdt = _LOW.get(dtype)
    stride = total
    for d, col in enumerate(columns):
        stride //= nbins[d]
        nbf = _as_dtype(float(nbins[d]), dtype)
        e0, e1 = ends[d]
        for xv, av in zip(_parts(col), _parts(acc)):
            bin_pos(xv, edges[d], e0, e1, av, nbins[d], nbf, stride, algo, rdt, d == 0)
    wv = _parts(weight) if weight is not None else [None] * len(_parts(acc))
    for av, w in zip(_parts(acc), wv):
        hist_add(av, w, hist)
    return hist


def _ok_float(self: Any, *ts: Any) -> bool:
    return (U.is_trn(self) and self.dtype in U.FLOAT_DTYPES and not self.is_neg()
            and all(t is None or (U.is_trn(t) and t.dtype == self.dtype) for t in ts))


@lowering("aten::histc", dtypes=U.FLOAT_DTYPES)
def histc(self: torch.Tensor, bins: int = 100, min: Any = 0, max: Any = 0) -> Any:  # noqa: A002
    """``torch.histc``: ``bins`` equal bins over ``[min, max]`` (the data's range when equal); values
    outside are ignored, the max value goes in the last bin.

    Example: ``torch.histc(torch.tensor([1., 2., 1.]).to("trn"), bins=4, min=0, max=3)`` -> ``[0, 2, 1, 0]``.
    """
    if not _ok_float(self) or int(bins) <= 0:
        return decline("not a float trn tensor (or a neg bit), or bins <= 0 (torch raises)")
    lo, hi = U.scalar_value(min), U.scalar_value(max)
    if lo is None or hi is None:
        return decline("min/max not numbers")
    lo, hi = float(lo), float(hi)
    if lo == hi and self.numel() > 0:
        lo, hi = float(torch.amin(self).item()), float(torch.amax(self).item())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if not (math.isfinite(lo) and math.isfinite(hi)) or not lo < hi:
        return decline("a non-finite or empty range: torch raises")  # torch's range errors
    e0, e1 = U.scalar_tensor(_as_dtype(lo, self.dtype), self.dtype), U.scalar_tensor(_as_dtype(hi, self.dtype),
                                                                                     self.dtype)
    return _hist([self.reshape(-1)], [None], [(e0, e1)], [int(bins)], BinSearch.LINEAR, None, self.dtype)


def _outer_edges(x2: torch.Tensor, rng: Sequence[float] | None) -> list[tuple[float, float]] | None:
    """Per-dimension (leftmost, rightmost) of ``histogramdd``'s points ``x2 [M, D]`` (None: torch raises)."""
    d = x2.shape[1]
    if rng is not None:
        if len(rng) != 2 * d:
            return None
        pairs = [(float(rng[2 * k]), float(rng[2 * k + 1])) for k in range(d)]
    elif x2.numel() > 0:
        mins, maxs = torch.amin(x2, 0).tolist(), torch.amax(x2, 0).tolist()
        pairs = list(zip(mins, maxs))
    else:
        pairs = [(0.0, 1.0)] * d
    out = []
    for lo, hi in pairs:
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
            return None
        out.append((lo - 0.5, hi + 0.5) if lo == hi else (lo, hi))
    return out


def _ends(e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n = e.shape[0]
    return U.view(e, (1, 1), (1, 1), e.storage_offset()), U.view(e, (1, 1), (1, 1), e.storage_offset() + n - 1)


def _density(hist: torch.Tensor, edges: Sequence[torch.Tensor]) -> torch.Tensor:
    hist = hist / hist.sum()
    for d, e in enumerate(edges):
        shape = [1] * len(edges)
        shape[d] = e.shape[0] - 1
        hist = hist / (e[1:] - e[:-1]).reshape(shape)
    return hist


def _dd(self: Any, bins: Any, rng: Any, weight: Any, density: bool, with_hist: bool) -> Any:
    """histogramdd with bin counts (``bins``: ints) or edge tensors: (hist or None, edges) or NotImplemented."""
    if not _ok_float(self, weight) or self.dim() < 1 or self.dtype != torch.float32:
        return decline("not a float32 trn tensor (or a neg bit), weight of another dtype, or 0-dim")
    d = self.shape[-1]
    x2 = self.reshape(-1, d)
    if len(bins) != d:
        return decline("bin count list not matching the point dimension: torch raises")
    if all(isinstance(b, int) for b in bins):
        if any(b <= 0 for b in bins):
            return decline("a bin count <= 0: torch raises")
        outer = _outer_edges(x2, rng)
        if outer is None:
            return decline("an invalid range: torch raises")
        edges = [torch.linspace(lo, hi, b + 1, dtype=self.dtype, device="trn") for (lo, hi), b in zip(outer, bins)]
        algo = BinSearch.LOCAL
    else:
        if any(not (U.is_trn(b) and b.dtype == self.dtype and b.dim() == 1 and b.numel() > 0) for b in bins):
            return decline("bin edges not non-empty 1-D trn tensors of the input dtype")
        edges = [b.contiguous() for b in bins]
        algo = BinSearch.BINARY
    if not with_hist:
        return None, edges
    if weight is not None and tuple(weight.shape) != (tuple(self.shape[:-1]) or (1,)):
        return decline("weight of the wrong shape: torch raises")
    nb = [e.shape[0] - 1 for e in edges]
    if any(b <= 0 for b in nb) or U.prod(nb) >= MAX_LEN:
        return decline("no bins, or 2^24 or more bins in all")
    w = weight.reshape(-1) if weight is not None else None
    hist = _hist([x2[:, k] for k in range(d)], edges, [_ends(e) for e in edges], nb, algo, w, self.dtype)
    hist = hist.view(nb)
    if density:
        hist = _density(hist, edges)
    return hist, edges


@lowering("aten::histogram.bin_ct", dtypes=(torch.float32,))
def histogram_bin_ct(self: torch.Tensor, bins: int = 100, *, range: Sequence[float] | None = None,  # noqa: A002
                     weight: torch.Tensor | None = None, density: bool = False) -> Any:
    """``torch.histogram(x, bins=n)``: ``(hist, bin_edges)`` with ``n`` equal bins.

    Example: ``torch.histogram(torch.tensor([1., 2., 1.]).to("trn"), 2)`` -> ``([2, 1], [1, 1.5, 2])``.
    """
    if not U.is_trn(self):
        return decline("not a trn tensor")
    r = _dd(self.reshape(-1, 1), [int(bins)], range, weight.reshape(-1) if U.is_trn(weight) else weight, density,
            True)
    return r if r is NotImplemented else (r[0], r[1][0])


@lowering("aten::histogram.bins_tensor", dtypes=(torch.float32,))
def histogram_bins_tensor(self: torch.Tensor, bins: torch.Tensor, *, weight: torch.Tensor | None = None,
                          density: bool = False) -> Any:
    """``torch.histogram(x, bins=edges)``: ``(hist, bin_edges)`` for explicit increasing edges."""
    if not U.is_trn(self):
        return decline("not a trn tensor")
    r = _dd(self.reshape(-1, 1), [bins], None, weight.reshape(-1) if U.is_trn(weight) else weight, density, True)
    return r if r is NotImplemented else (r[0], bins.clone())


@lowering("aten::_histogramdd_bin_edges", dtypes=(torch.float32,))
def histogramdd_bin_edges(self: torch.Tensor, bins: Sequence[int], *, range: Sequence[float] | None = None,  # noqa: A002
                          weight: torch.Tensor | None = None, density: bool = False) -> Any:
    """The bin edges ``histogramdd`` uses for bin counts (linspace over each dimension's range)."""
    if not U.is_trn(self) or self.dim() < 2:
        return decline("not a trn tensor, or fewer than 2 dims")
    r = _dd(self, [int(b) for b in bins], range, weight, density, False)
    return r if r is NotImplemented else r[1]


@lowering("aten::_histogramdd_from_bin_cts", dtypes=(torch.float32,))
def histogramdd_from_bin_cts(self: torch.Tensor, bins: Sequence[int], *, range: Sequence[float] | None = None,  # noqa: A002
                             weight: torch.Tensor | None = None, density: bool = False) -> Any:
    """``histogramdd`` with bin counts per dimension."""
    if not U.is_trn(self) or self.dim() < 2:
        return decline("not a trn tensor, or fewer than 2 dims")
    r = _dd(self, [int(b) for b in bins], range, weight, density, True)
    return r if r is NotImplemented else r[0]


@lowering("aten::_histogramdd_from_bin_tensors", dtypes=(torch.float32,))
def histogramdd_from_bin_tensors(self: torch.Tensor, bins: Sequence[torch.Tensor], *,
                                 weight: torch.Tensor | None = None, density: bool = False) -> Any:
    """``histogramdd`` with explicit edges per dimension."""
    if not U.is_trn(self) or self.dim() < 2:
        return decline("not a trn tensor, or fewer than 2 dims")
    r = _dd(self, list(bins), None, weight, density, True)
    return r if r is NotImplemented else r[0]


_BINCOUNT_INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


@lowering("aten::bincount", dtypes=(*_BINCOUNT_INTS, torch.float32, torch.bool))  # float32/bool: the weights
def bincount(self: torch.Tensor, weights: torch.Tensor | None = None, minlength: int = 0) -> Any:
    """``torch.bincount``: counts (int64) of each value of a 1-D non-negative integer tensor, or sums of float32
    ``weights`` per value (accumulated in input order, as the CPU does), over ``max(max + 1, minlength)`` bins.

    Example: ``torch.bincount(torch.tensor([1, 1, 3]).to("trn"), minlength=5)`` -> ``[0, 2, 0, 1, 0]``.
    """
    if U.is_trn(self) and self.dtype in _BINCOUNT_INTS:  # torch's argument errors, word for word
        if self.dim() != 1:
            raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
        if minlength < 0:
            raise RuntimeError("minlength should be >= 0")
        if isinstance(weights, torch.Tensor) and (weights.dim() != 1 or weights.shape[0] != self.shape[0]):
            raise RuntimeError("weights should be 1-d and have the same length as input")
    if not U.is_trn(self) or self.dtype not in _BINCOUNT_INTS:
        return decline("not an integer trn tensor (torch raises for floats)")
    wide = weights is not None and weights.dtype in (*_BINCOUNT_INTS, torch.bool)  # torch sums these in float64
    if weights is not None and (not U.is_trn(weights) or weights.dtype != torch.float32 and not wide
                                or weights.shape != self.shape):
        return decline("weights neither float32 nor integer trn tensors of the input's shape (float64 sums of "
                       "floating weights are the CPU's)")
    if wide and weights.numel() and float(weights.to(torch.float32).abs().sum()) >= 1 << 24:
        return decline("integer weights whose sums may pass 2^24 (fp32 sums would not be exact)")
    if self.numel() >= 1 << 24:
        return decline("2^24 or more values (fp32 counts would not be exact)")
    if self.numel() == 0:  # torch: int64 zeros, weights or not
        return torch.zeros(int(minlength), dtype=torch.int64, device="trn")
    if int(self.min()) < 0:  # torch's error (raised here: a strict fallback mode must not turn it into another)
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    acc = torch.zeros(max(int(self.max()) + 1, int(minlength)), dtype=torch.float32, device="trn")
    idx = self if self.dtype in (torch.int64, torch.int32) else self.to(torch.int32)
    w = torch.ones(self.shape, device="trn") if weights is None else weights.to(torch.float32) if wide else weights
    acc.scatter_add_(0, idx, w)
    if weights is None:
        return acc.to(torch.int64)
    return acc.to(torch.float64) if wide else acc  # integer weights: exact sums, float64 as torch returns them
