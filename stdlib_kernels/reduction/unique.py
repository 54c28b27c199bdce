"""``unique`` (flat and along a dim) and ``unique_consecutive``: sort, mark group starts, prefix-sum.

The keys are a ``[K, n]`` view: ``n`` items (elements, or slices along ``dim``) of ``K`` values each.
``unique`` first sorts the items (the flat case by the stable bitonic sort of
:mod:`stdlib_kernels.reduction.sort`; slices lexicographically, by stable sorts of one key column at a time,
last column first); ``unique_consecutive`` keeps the input order. Then two kernels:

- :func:`diff_flags`: ``flag[i] = 1`` where item ``i`` differs from item ``i - 1`` in any of its ``K``
  values (a ``!=`` per value, summed over the partitions by a ones-vector matmul); NaN differs from
  everything, so every NaN is its own group, as on the CPU;
- :func:`group_scan`: one row scanned in chunks: the group id is the running sum of the flags minus
  one; each group's first item (its original position, through the sort permutation) and its size
  (at its last item: position minus the running max of group starts, plus one) are stored by
  indirect DMA at the group id (other items write a scratch slot past the end); the inverse map
  scatters the group ids through the permutation; the number of groups is read back (one host sync).

Values are then gathered from the input by ``index_select`` with the first positions. torch sorts
even with ``sorted=False`` on the CPU (and so does this). Integer inputs are sorted as fp32 when a
device check bounds them below 2^24 (exact); items are counted in fp32 (fewer than 2^24).
Declined (CPU fallback): flat ``unique`` of inputs holding more than one NaN (the CPU's unstable sort
orders NaNs unpredictably, which shows in the inverse map) and ``unique(dim=...)`` of inputs holding
NaN (its lexicographic comparator does not order them).

Example:
    >>> x = torch.randint(0, 10, (1000,)).float().to("trn")
    >>> torch.unique(x, return_inverse=True, return_counts=True)  # doctest: +SKIP
    >>> torch.unique_consecutive(x.view(10, 100), dim=1)  # doctest: +SKIP
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

_MM = 512  # free size of the matmul that ORs the flags over the partitions
#: Items are counted / positioned in fp32: exact below this.
MAX_ITEMS = 2 ** 24


@trn.kernel
def diff_flags(keys, flags):
    """``flags[0, i] = any_k(keys[k, i] != keys[k, i - 1])`` (1 for ``i = 0``) for ``keys [K, n]``."""
    k_dim, n = keys.shape
    p = min(128, k_dim)
    f = min(n, _MM)
    ones = tl.full((p, 1), 1.0, tl.float32)
    row0 = tl.arange(1)[:, None]
    for j in tl.affine_range(tl.cdiv(n, f)):
        cols = j * f + tl.arange(f)[None, :]
        acc = tl.zeros((1, f), tl.float32, buffer=tl.psum)
        for kk in tl.affine_range(tl.cdiv(k_dim, p)):
            krows = kk * p + tl.arange(p)[:, None]
            t = tl.load(keys[krows, cols], mask=(krows < k_dim) & (cols < n))
            tp = tl.load(keys[krows, cols - 1], mask=(krows < k_dim) & (cols >= 1) & (cols < n))
            acc += tl.matmul(ones, (t != tp).astype(tl.float32), transpose_x=True)
        fl = tl.where(cols < 1, 1.0, (acc > 0.5).astype(tl.float32))
        tl.store(flags[row0, cols], fl, mask=cols < n)


@trn.kernel
def group_scan(flags, perm, first, counts, inv, total):
    """Groups of a flag row ``flags [1, n]`` (1 = a group starts): ``first[g]`` = original position of the
    group's first item (``perm[i]``, or ``i`` without a permutation), ``counts[g]`` = its size,
    ``inv[perm[i]] = g``, ``total[0, 0]`` = number of groups. ``first`` / ``counts`` have ``n + 1``
    slots (slot ``n`` takes the other items' writes); ``counts`` / ``inv`` may be None.
    """
    n = flags.shape[1]
    f = min(n, U.FREE_CHUNK)
    row0 = tl.arange(1)[:, None]
    csum = tl.zeros((1, 1), tl.float32)
    start = tl.zeros((1, 1), tl.float32)
    for j in tl.sequential_range(tl.cdiv(n, f)):
        cols = j * f + tl.arange(f)[None, :]
        m = cols < n
        fl = tl.load(flags[row0, cols], mask=m)
        fln = tl.load(flags[row0, cols + 1], mask=cols + 1 < n, other=1.0)
        pos = isa.iota(cols + 0 * row0, tl.float32)
        cs = isa.tensor_tensor_scan(1.0, fl, csum, "multiply", "add")
        gid = (cs - 1.0).astype(tl.int32)
        src = tl.load(perm[cols], mask=m) if perm is not None else pos.astype(tl.int32)
        tl.store(first[tl.where(fl > 0.5, gid, n)], src, mask=m)
        if counts is not None:
            st = isa.tensor_tensor_scan(tl.where(fl > 0.5, pos, -1.0), 0.0, start, "maximum", "add")
            size = (pos - st + 1.0).astype(tl.int32)
            tl.store(counts[tl.where(fln > 0.5, gid, n)], size, mask=m)
            start[...] = st[:, f - 1:f]
        if inv is not None:
            tl.store(inv[src], gid, mask=m)
        csum[...] = cs[:, f - 1:f]
    tl.store(total[0:1, 0:1], csum.astype(tl.int32))


# ------------------------------------------------------------------------------------------ host side

_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)
_DTYPES = (*U.FLOAT_DTYPES, *_INT_DTYPES)


def _sortable(x: torch.Tensor) -> torch.Tensor | None:
    """``x`` as a dtype the sort kernel takes: floats as they are, integers as exact fp32 (else None)."""
    if x.dtype in U.FLOAT_DTYPES:
        return x
    if x.dtype in (torch.int64, torch.int32):
        from stdlib_kernels.elementwise.pointwise import int64_ok

        if not int64_ok(x if x.dtype == torch.int64 else x.to(torch.int64), MAX_ITEMS):
            return None
    return x.to(torch.float32)


def _groups(keys: torch.Tensor, perm: torch.Tensor | None, want_inv: bool,
            want_counts: bool) -> tuple[int, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """Launch the two kernels over sorted (or consecutive) ``keys [K, n]``: (groups, first, counts, inverse)."""
    n = keys.shape[1]
    flags = torch.empty((1, n), dtype=torch.float32, device="trn")
    diff_flags(keys, flags)
    first = torch.empty((n + 1,), dtype=torch.int64, device="trn")
    counts = torch.empty((n + 1,), dtype=torch.int64, device="trn") if want_counts else None
    inv = torch.empty((n,), dtype=torch.int64, device="trn") if want_inv else None
    total = torch.empty((1, 1), dtype=torch.int32, device="trn")
    group_scan(flags, perm, first, counts, inv, total)
    u = int(total.item())
    return u, first, counts, inv


def _empty_long(shape: Any = (0,)) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.int64, device="trn")


def _flat(self: Any, sort: bool, return_inverse: bool, return_counts: bool) -> Any:
    """(values, inverse, counts) of the flattened ``self`` (inverse/counts empty unless asked for)."""
    if not U.is_trn(self) or self.dtype not in _DTYPES or self.is_conj() or self.is_neg():
        return decline("not a trn tensor of a float, integer or bool dtype (or a conj/neg bit)")
    n = self.numel()
    if n >= MAX_ITEMS or (sort and n > S.MAX_SORT):
        return decline("2^24 or more elements, or more than 8192 to sort")
    inv_shape = tuple(self.shape)
    if n == 0:
        return (torch.empty((0,), dtype=self.dtype, device="trn"),
                _empty_long(inv_shape if return_inverse else (0,)), _empty_long())
    flat = self.reshape(-1)
    perm = None
    keys = flat
    if sort:
        if flat.dtype.is_floating_point and int(torch.isnan(flat).sum().item()) > 1:
            return decline("several NaNs: the CPU orders them unpredictably (an unstable sort)")
        sk = _sortable(flat)
        if sk is None:
            return decline("integer values beyond 2^24 (not exact in fp32)")
        sv = torch.empty((1, n), dtype=sk.dtype, device="trn")
        perm = torch.empty((1, n), dtype=torch.int64, device="trn")
        S.sort_rows(sk.view(1, n), sv, perm, False, max(0, (n - 1).bit_length()))
        keys, perm = sv.view(n), perm.view(n)
    elif keys.dtype not in U.FLOAT_DTYPES and keys.dtype != torch.int32:
        keys = _sortable(flat)  # compared as exact fp32
        if keys is None:
            return decline("integer values beyond 2^24 (not exact in fp32)")
    u, first, counts, inv = _groups(keys.view(1, n), perm, return_inverse, return_counts)
    values = flat.index_select(0, first[:u])
    inverse = inv.view(inv_shape) if inv is not None else _empty_long()
    cnt = counts[:u].clone() if counts is not None else _empty_long()
    return values, inverse, cnt


@lowering("aten::_unique2", dtypes=_DTYPES)
def unique2(self: torch.Tensor, sorted: bool = True, return_inverse: bool = False,  # noqa: A002
            return_counts: bool = False) -> Any:
    """``torch.unique(x)`` without ``dim``: sorted distinct values, inverse map, counts.

    Example: ``torch.unique(torch.tensor([3., 1., 3.]).to("trn"), return_counts=True)`` -> ``([1, 3], [1, 2])``.
    """
    return _flat(self, True, return_inverse, return_counts)


@lowering("aten::_unique", dtypes=_DTYPES)
def unique_(self: torch.Tensor, sorted: bool = True, return_inverse: bool = False) -> Any:  # noqa: A002
    """The older ``_unique``: (sorted distinct values, inverse map or an empty tensor)."""
    r = _flat(self, True, return_inverse, False)
    return r if r is NotImplemented else (r[0], r[1])


def _slices(self: torch.Tensor, dim: int) -> tuple[torch.Tensor, int] | None:
    """Keys ``[K, n]`` of the slices of ``self`` along ``dim`` (key ``k`` = element ``k`` of a slice)."""
    nd = self.dim()
    if not -max(nd, 1) <= dim < max(nd, 1) or nd == 0:
        return None
    d = dim % nd
    n = self.shape[d]
    xs = self.movedim(d, -1)
    k = U.prod(xs.shape[:-1])
    return xs.reshape(k, n), d


def _check_zero_dims(self: torch.Tensor, d: int) -> None:
    """torch's rule for ``unique`` along ``d`` of a tensor with zero-sized dims: only ``d`` may be zero-sized."""
    zeros = [i for i, n in enumerate(self.shape) if n == 0]
    if len(zeros) > 1:
        raise RuntimeError("Number of zero sized dimensions is more than one, so unique cannot be applied ")
    if zeros and zeros[0] != d:
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")


#: libstdc++'s std::sort insertion-sorts ranges of up to 16 elements (its introsort threshold).
_INSERTION_SORT_MAX = 16


def _nan_slices(self: torch.Tensor, keys: torch.Tensor, d: int) -> Any:
    """``unique(dim=d)`` of at most 16 slices some of which hold NaN, as the CPU computes it: its comparator (the
    first column where one slice is ``<`` or ``>`` the other decides; NaN decides nothing) is not an order, so
    the result is its insertion sort's. The comparisons run on the device (``[n, n]`` from ``[n, n, K]``), the
    insertion sort of ``n <= 16`` positions and the grouping (slices equal in every column) on the host."""
    a = keys.t()
    lt, gt = a[:, None, :] < a[None, :, :], a[:, None, :] > a[None, :, :]
    first = (lt | gt).to(torch.int32).argmax(-1, keepdim=True)
    less = ((lt | gt).any(-1) & lt.gather(-1, first).squeeze(-1)).cpu().tolist()
    same = (a[:, None, :] == a[None, :, :]).all(-1).cpu().tolist()
    order = list(range(a.shape[0]))
    for i in range(1, len(order)):  # libstdc++'s __insertion_sort
        v = order[i]
        if less[v][order[0]]:
            order[1:i + 1] = order[0:i]
            order[0] = v
            continue
        j = i
        while less[v][order[j - 1]]:
            order[j] = order[j - 1]
            j -= 1
        order[j] = v
    groups: list[list[int]] = []
    inv = [0] * len(order)
    for p in order:
        if groups and same[groups[-1][0]][p]:
            groups[-1].append(p)
        else:
            groups.append([p])
        inv[p] = len(groups) - 1
    dev = dict(dtype=torch.int64, device="trn")
    values = self.index_select(d, torch.tensor([g[0] for g in groups], **dev))
    return values, torch.tensor(inv, **dev), torch.tensor([len(g) for g in groups], **dev)


def _by_dim(self: Any, dim: int, sort: bool, return_inverse: bool, return_counts: bool) -> Any:
    """(values, inverse, counts) of the slices along ``dim`` (sorted lexicographically or consecutive)."""
    if not U.is_trn(self) or self.dtype not in _DTYPES or self.is_conj() or self.is_neg():
        return decline("not a trn tensor of a float, integer or bool dtype (or a conj/neg bit)")
    sl = _slices(self, dim)
    if sl is None:
        return decline("dim out of range (torch raises), or a 0-dim tensor")
    keys, d = sl
    _check_zero_dims(self, d)
    k, n = keys.shape
    if n >= MAX_ITEMS or (sort and n > S.MAX_SORT):
        return decline("2^24 or more slices, or more than 8192 to sort")
    if n == 0:
        return self.clone(), _empty_long(), _empty_long()
    if k == 0:
        return decline("zero-sized slices: torch raises")  # torch: "0 sized dimensions ... aren't selected" (its error)
    perm = None
    if keys.dtype not in U.FLOAT_DTYPES and keys.dtype != torch.int32:
        keys = _sortable(keys)
        if keys is None:
            return decline("integer values beyond 2^24 (not exact in fp32)")
    if sort:
        if keys.dtype.is_floating_point and bool(torch.isnan(keys).any().item()):
            if n > _INSERTION_SORT_MAX:
                return decline("NaN in a slice of more than 16 to sort: the CPU's order of NaN slices is its "
                               "introsort's")
            return _nan_slices(self, keys, d)
        perm = torch.arange(n, dtype=torch.int64, device="trn")
        nbits = max(0, (n - 1).bit_length())
        for c in range(k - 1, -1, -1):  # stable sorts, least significant key first
            col = keys[c].index_select(0, perm).view(1, n)
            sv = torch.empty((1, n), dtype=col.dtype, device="trn")
            p = torch.empty((1, n), dtype=torch.int64, device="trn")
            S.sort_rows(col, sv, p, False, nbits)
            perm = perm.index_select(0, p.view(n))
        keys = keys.index_select(1, perm)
    u, first, counts, inv = _groups(keys, perm, True, True)  # along a dim both are always returned
    values = self.index_select(d, first[:u])
    return values, inv, counts[:u].clone()


@lowering("aten::unique_dim", dtypes=_DTYPES)
def unique_dim(self: torch.Tensor, dim: int, sorted: bool = True, return_inverse: bool = False,  # noqa: A002
               return_counts: bool = False) -> Any:
    """``torch.unique(x, dim=d)``: distinct slices along ``d`` in lexicographic order (inverse and counts
    are always returned, as on the CPU)."""
    return _by_dim(self, dim, True, return_inverse, return_counts)


@lowering("aten::unique_consecutive", dtypes=_DTYPES)
def unique_consecutive(self: torch.Tensor, return_inverse: bool = False, return_counts: bool = False,
                       dim: int | None = None) -> Any:
    """Collapse runs of equal consecutive elements (or slices along ``dim``).

    Example: ``torch.unique_consecutive(torch.tensor([1., 1., 2., 1.]).to("trn"))`` -> ``[1, 2, 1]``.
    """
    if dim is None:
        return _flat(self, False, return_inverse, return_counts)
    return _by_dim(self, dim, False, return_inverse, return_counts)


@lowering("aten::unique_dim_consecutive", dtypes=_DTYPES)
def unique_dim_consecutive(self: torch.Tensor, dim: int, return_inverse: bool = False,
                           return_counts: bool = False) -> Any:
    """``unique_consecutive`` along ``dim``."""
    return _by_dim(self, dim, False, return_inverse, return_counts)
