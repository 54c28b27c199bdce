"""Sorting along one dim: ``sort`` (stable, ascending/descending; hence ``argsort``) and ``topk``.

Each row (the sorted dim is the free axis of a strided view; other dims are rows tiled by 128
partitions) is sorted on chip by a bitonic network over ``n = next_pow2(C)`` elements. The row is
held as a tile of shape ``[P, 2, 2, ..., 2]`` (one free dim per bit of the position), so the two
halves of every compare-exchange step are plain sub-tile views (one index fixed per bit) and a step
is a handful of whole-tile Vector instructions, no data-dependent addressing.

The network sorts ``(key1, key2)`` pairs lexicographically, which makes it stable and puts NaN
where torch does:

- ascending: ``key1 = x`` (NaN -> +inf), ``key2 = position + 2^23 * isnan`` (NaN after +inf);
- descending: ``key1 = -x`` (NaN -> -inf), ``key2 = position + 2^23 * (not isnan)`` (NaN first);
- padding: ``key1 = +inf, key2 = 2^24`` (always last).

Values and indices are decoded from the sorted keys (``2^23`` flags the NaNs); indices are stored
as int32 tiles into the int64 outputs. int32/int64 values beyond ``+-2^24`` (not exact as fp32 keys) sort
by their 16-bit digits, one stable pass per digit (:func:`_radix_sort_rows`).
Rows longer than :data:`MAX_SORT` sort as chunks merged by rank
(:func:`_merge_sort_rows`; with NaN they are declined).

Example:
    >>> x = torch.randn(4096, 1024).to("trn")
    >>> x.sort(1, descending=True), x.topk(8, 1), x.argsort(0)  # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Any

import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from stdlib_kernels import _util as U
from trnlang.device import decline, lowering

#: Longest row sorted on chip (two fp32 keys and temporaries per element fit SBUF).
MAX_SORT = 8192
_FLAG = float(2 ** 23)
_PAD = float(2 ** 24)
_BIG = float(2 ** 30)


def _at(t: Any, b: Any, rows: Any, cols: Any) -> Any:
    return t[b, rows, cols] if t.ndim == 3 else t[rows, cols]


def _exchange(k1: Any, k2: Any, p: int, n: int, s: int, jb: int, nbits: int) -> tuple[Any, Any]:
    """One bitonic step: compare-exchange positions ``i`` and ``i + 2^jb`` within blocks of ``2^(jb+1)``.

    The keys are reshaped to ``[P, n / 2j, 2j]`` so the two halves are slices; blocks whose bit ``s``
    is set sort descending (a ``[P, n / 2j, 1]`` iota flips their swap condition).
    """
    j = 2 ** jb
    m = n // (2 * j)
    k1 = tl.reshape(k1, (p, m, 2 * j))
    k2 = tl.reshape(k2, (p, m, 2 * j))
    a1, b1, a2, b2 = k1[:, :, 0:j], k1[:, :, j:2 * j], k2[:, :, 0:j], k2[:, :, j:2 * j]
    swap = (a1 > b1) | ((a1 == b1) & (a2 > b2))
    if s < nbits:  # bit s of the position of block mm is bit (s - jb - 1) of mm
        q = 2 ** (s - jb - 1)
        desc = isa.iota((tl.arange(m)[None, :, None] // q) % 2 + 0 * tl.arange(p)[:, None, None], tl.float32)
        swap = swap.astype(tl.float32) != desc
    n1a, n1b = tl.where(swap, b1, a1), tl.where(swap, a1, b1)
    n2a, n2b = tl.where(swap, b2, a2), tl.where(swap, a2, b2)
    k1[:, :, 0:j] = n1a
    k1[:, :, j:2 * j] = n1b
    k2[:, :, 0:j] = n2a
    k2[:, :, j:2 * j] = n2b
    return k1, k2


@trn.kernel(interpret=True)
def sort_rows(x, vals, idx, descending, nbits):
    """Sort each row of ``x [(A,) R, C]`` (stable); write the first ``K`` (``vals.shape[-1]``) values/indices."""
    a = x.shape[0] if x.ndim == 3 else 1
    r_dim, c_dim = x.shape[-2], x.shape[-1]
    k_out = vals.shape[-1]
    n = 2 ** nbits
    p = min(128, r_dim)
    for b in tl.affine_range(a):
        for i in tl.affine_range(tl.cdiv(r_dim, p)):
            rows = i * p + tl.arange(p)[:, None]
            cols = tl.arange(n)[None, :]
            t = tl.load(_at(x, b, rows, cols), mask=(rows < r_dim) & (cols < c_dim)).astype(tl.float32)
            isn = (t != t).astype(tl.float32)
            pos = isa.iota(cols + 0 * rows, tl.float32)
            if descending:
                key1 = tl.where(t != t, -math.inf, -t)
                key2 = pos + (1.0 - isn) * _FLAG
            else:
                key1 = tl.where(t != t, math.inf, t)
                key2 = pos + isn * _FLAG
            if n > c_dim:
                key1 = tl.where(cols < c_dim, key1, math.inf)
                key2 = tl.where(cols < c_dim, key2, _PAD)
            if nbits > 0:
                for s in range(1, nbits + 1):
                    for jb in range(s - 1, -1, -1):
                        key1, key2 = _exchange(key1, key2, p, n, s, jb, nbits)
                key1 = tl.reshape(key1, (p, n))
                key2 = tl.reshape(key2, (p, n))
            o1 = key1[:, 0:k_out]
            o2 = key2[:, 0:k_out]
            flag = o2 >= _FLAG
            if descending:
                v = tl.where(flag, -o1, math.nan)
            else:
                v = tl.where(flag, math.nan, o1)
            ix = o2 - flag.astype(tl.float32) * _FLAG
            ocols = tl.arange(k_out)[None, :]
            om = (rows < r_dim) if r_dim % p else None
            tl.store(_at(vals, b, rows, ocols), v, mask=om)
            tl.store(_at(idx, b, rows, ocols), ix.astype(tl.int32), mask=om)


#: ``topk(largest=True)`` with ``k`` up to this many runs by repeated extraction instead of a full sort.
TOPK_EXTRACT = 16


@trn.kernel
def topk_extract(x, vals, idx):
    """The ``K = vals.shape[1]`` largest of each row of ``x [R, C]``, largest first (NaN first, ties by index).

    A real loop of ``K`` steps over the row held on chip: the max of the elements not taken yet, the
    first not-taken position holding it (the min of a masked position tile), then that position is
    marked taken. ``K * ~9`` Vector instructions over ``C`` per row tile.
    """
    r_dim, c_dim = x.shape
    k_out = vals.shape[1]
    p = min(128, r_dim)
    rr = r_dim % p != 0
    for i in tl.affine_range(tl.cdiv(r_dim, p)):
        rows = i * p + tl.arange(p)[:, None]
        cols = tl.arange(c_dim)[None, :]
        t = tl.load(x[rows, cols], mask=(rows < r_dim) if rr else None).astype(tl.float32)
        # taken positions hold -inf in ``cur`` and _BIG in ``posav``: the first untaken position holding the
        # max is the min of the positions that hit it (a taken -inf can never win over an untaken one)
        cur = tl.copy(t)
        posav = isa.iota(cols + 0 * rows, tl.float32)
        for kk in tl.sequential_range(k_out):
            v = tl.max(cur, axis=1, keepdims=True)
            hit = (cur == v) | (cur != cur)
            j = tl.min(tl.where(hit, posav, _BIG), axis=1, keepdims=True)
            ocol = kk + tl.arange(1)[None, :]
            tl.store(vals[rows, ocol], v, mask=(rows < r_dim) if rr else None)
            tl.store(idx[rows, ocol], j.astype(tl.int32), mask=(rows < r_dim) if rr else None)
            sel = posav == j
            cur[...] = tl.where(sel, -math.inf, cur)
            posav[...] = tl.where(sel, _BIG, posav)


def _last(t: torch.Tensor, dim: int) -> torch.Tensor:
    if t.dim() == 0:
        return U.view(t, (1,), (1,), t.storage_offset())
    return t.movedim(dim, -1) if dim != t.dim() - 1 else t


#: Integer dtypes whose every value is exact as an fp32 key.
_SMALL_INTS = (torch.int8, torch.int16, torch.uint8, torch.bool)
#: Integer dtypes sorted on chip when their values lie in ``[-2^24, 2^24]`` (exact fp32 keys; a device check).
_WIDE_INTS = (torch.int32, torch.int64)
_KEY_EXACT = 2 ** 24


def fp32_exact(self: torch.Tensor) -> bool:
    """Every value of a ``trn`` tensor is exact in fp32 (always for floats and small ints; int32/int64 values
    within ``[-2^24, 2^24]``: one device check, one host sync).

    Example:
        >>> fp32_exact(torch.tensor([2**24 + 1], device="trn"))  # doctest: +SKIP
        False
    """
    if self.dtype not in _WIDE_INTS or self.numel() == 0:
        return True
    if self.dtype == torch.int64:
        from stdlib_kernels.elementwise.pointwise import int64_ok

        return int64_ok(self, _KEY_EXACT + 1)
    lo, hi = torch.aminmax(self)
    return -_KEY_EXACT <= int(lo.item()) and int(hi.item()) <= _KEY_EXACT


def _merge_sort_rows(x: torch.Tensor, descending: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Stable sort of rows ``x [R, C]`` longer than :data:`MAX_SORT` (no NaN; fp32-exact values).

    Chunks of ``MAX_SORT`` (a power-of-two count of them, the tail padded with +inf keys that sort last) are
    sorted on chip by :func:`sort_rows`; then pairs of sorted runs ``A``, ``B`` (``A`` earlier in the row)
    merge by rank: ``A[i]`` lands at ``i + #(B < A[i])``, ``B[j]`` at ``j + #(A <= B[j])`` (two
    searchsorted calls, so equal keys keep their order), scattered with their positions. Descending sorts
    the negated keys. The values are gathered from ``x`` by the final positions (-0.0 stays -0.0).
    """
    r, c = x.shape
    m = 1 << max(0, (-(-c // MAX_SORT) - 1).bit_length())  # chunks: a power of two
    keys = torch.full((r, m * MAX_SORT), math.inf, dtype=torch.float32, device="trn")
    keys[:, :c].copy_(x)
    if descending:
        keys[:, :c].neg_()
    kv = torch.empty((r * m, MAX_SORT), dtype=torch.float32, device="trn")
    iv = torch.empty((r * m, MAX_SORT), dtype=torch.int64, device="trn")
    U.split_rows(sort_rows, [keys.view(r * m, MAX_SORT), kv, iv], False, (MAX_SORT - 1).bit_length())
    iv += torch.arange(0, m * MAX_SORT, MAX_SORT, device="trn").repeat(r).view(r * m, 1)  # chunk -> row position
    run = MAX_SORT
    while run < m * MAX_SORT:
        ka, kb = kv.view(-1, 2, run).unbind(1)
        ia, ib = iv.view(-1, 2, run).unbind(1)
        step = torch.arange(run, device="trn").expand(ka.shape[0], run)
        pa = torch.searchsorted(kb.contiguous(), ka.contiguous(), side="left") + step
        pb = torch.searchsorted(ka.contiguous(), kb.contiguous(), side="right") + step
        kv, iv = torch.empty((ka.shape[0], 2 * run), dtype=torch.float32, device="trn"), \
            torch.empty((ka.shape[0], 2 * run), dtype=torch.int64, device="trn")
        kv.scatter_(1, pa, ka).scatter_(1, pb, kb)
        iv.scatter_(1, pa, ia).scatter_(1, pb, ib)
        run *= 2
    idx = iv.view(r, -1)[:, :c].contiguous()
    return x.gather(1, idx), idx


def _digit_keys(x: torch.Tensor) -> list[torch.Tensor]:
    """fp32 keys of the 16-bit digits of int32/int64 rows ``x [R, C]``, least significant first.

    Each key is exact in fp32: a low digit ``w & 0xFFFF``, or a high digit kept in place (``w & -65536``,
    a multiple of 2^16). The top digit is signed; an int64's low word is unsigned (negative keys + 2^32).
    int64 values that fit int32 (a device check) are narrowed first: two digits instead of four.
    """
    if x.dtype == torch.int64:
        from stdlib_kernels.elementwise.pointwise import int64_ok

        if int64_ok(x, 2**31):
            x = x.to(torch.int32)
    if x.dtype == torch.int32:
        words = [(x, True)]
    else:
        v = x.contiguous().reshape(-1).view(torch.int32).view(x.shape[0], x.shape[1], 2)  # (low, high) words
        words = [(v[..., 0].contiguous(), False), (v[..., 1].contiguous(), True)]
    keys = []
    for w, signed in words:
        keys.append((w & 0xFFFF).to(torch.float32))
        top = (w & -65536).to(torch.float32)
        keys.append(top if signed else torch.where(top < 0, top + 2.0**32, top))
    return keys


def _radix_sort_rows(x: torch.Tensor, descending: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Stable sort of int32/int64 rows ``x [R, C]`` of any values: one stable fp32-key sort per 16-bit digit,
    least significant first, each pass ordering the previous pass's permutation (LSD radix; equal values keep
    their order, descending too)."""
    perm: torch.Tensor | None = None
    for key in _digit_keys(x):
        if perm is not None:
            key = key.gather(1, perm)
        _, p = _sorted(key, 1, key.shape[1], descending)
        perm = p if perm is None else perm.gather(1, p)
    assert perm is not None
    return x.gather(1, perm), perm


def _nan_sort_rows(x: torch.Tensor, descending: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Stable merge sort of float rows holding NaN, NaN as the largest value (after +inf; first when descending,
    each run of NaNs in index order): a stable pass on the NaN flag, then one on the values with NaN as +inf
    (equal keys, +inf and NaN, keep the first pass's order)."""
    isnan = x.isnan()
    _, p1 = _merge_sort_rows(isnan.to(torch.float32), descending)
    _, p2 = _merge_sort_rows(torch.where(isnan, math.inf, x).gather(1, p1), descending)
    perm = p1.gather(1, p2)
    return x.gather(1, perm), perm


def _sorted(self: Any, dim: int, k: int, descending: bool, extract: bool = False) -> Any:
    """``(values, indices)`` of the first ``k`` of each sorted row along ``dim``; NotImplemented to decline."""
    ok = (*U.FLOAT_DTYPES, *_SMALL_INTS, *_WIDE_INTS)
    if not U.is_trn(self) or self.dtype not in ok or self.is_conj() or self.is_neg():
        return decline("not a real trn tensor (float32/bfloat16/float16 or an integer/bool dtype, no conj/neg bit)")
    wide = not fp32_exact(self)  # int32/int64 values beyond +-2^24: sorted digit by digit
    nd = max(self.dim(), 1)
    if not -nd <= dim < nd:
        return decline("dim out of range: torch raises")
    d = dim % nd
    c = self.shape[d] if self.dim() else 1
    if not 0 <= k <= c:
        return decline("k outside [0, size]: torch raises")
    long = c > MAX_SORT and not extract
    nan = long and self.is_floating_point() and bool(self.isnan().any())
    xs = _last(self, d)
    lead = list(xs.shape[:-1])
    r = U.prod(lead)
    vw = torch.empty((r, k), dtype=self.dtype, device="trn")
    iw = torch.empty((r, k), dtype=torch.int64, device="trn")
    if r and k and wide:
        vs, ix = _radix_sort_rows(xs.reshape(r, c), bool(descending))
        vw.copy_(vs[:, :k])
        iw.copy_(ix[:, :k])
    elif r and k and long:
        vs, ix = (_nan_sort_rows if nan else _merge_sort_rows)(xs.reshape(r, c), bool(descending))
        vw.copy_(vs[:, :k])
        iw.copy_(ix[:, :k])
    elif r and k and extract:
        U.split_rows(topk_extract, [xs.reshape(r, c), vw, iw])
    elif r and k:
        U.split_rows(sort_rows, [xs.reshape(r, c), vw, iw], bool(descending), max(0, (c - 1).bit_length()))
    if not self.dim():
        return vw.view(()), iw.view(())
    return (vw.view(lead + [k]).movedim(-1, d).contiguous(), iw.view(lead + [k]).movedim(-1, d).contiguous())


@lowering("aten::sort.stable", dtypes=None)
def sort(self: torch.Tensor, *, stable: bool | None = None, dim: int = -1, descending: bool = False) -> Any:
    """Stable sort along ``dim`` (NaN last ascending, first descending, as torch); also serves ``argsort``.

    Example: ``torch.tensor([3., 1., 2.]).to("trn").sort()`` -> ``([1, 2, 3], [1, 2, 0])``.
    """
    c = self.shape[dim] if U.is_trn(self) and self.dim() and -self.dim() <= dim < self.dim() else 1
    return _sorted(self, dim, c, descending)


@lowering("aten::topk", dtypes=None)
def topk(self: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> Any:
    """The ``k`` largest (``largest=False``: smallest) along ``dim``, in sorted order, ties by lower index."""
    k = int(k)
    return _sorted(self, dim, k, largest, extract=largest and k <= TOPK_EXTRACT)
