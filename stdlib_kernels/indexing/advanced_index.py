"""Advanced indexing on ``trn``: ``x[idx0, idx1, ...]`` (``index.Tensor``, ``_unsafe_index``),
``index_put`` / ``index_put_`` / ``_index_put_impl_`` / ``_unsafe_index_put`` (with and without
``accumulate``) and ``nonzero``.

Integer index tensors broadcast against each other; up to three dims may be indexed, adjacent or not
(torch puts the broadcast dims first when they are not adjacent: the indexed dims are permuted to the
front). The indexed dims become one linear index computed on chip, and the rows move through the
indirect-DMA ``gather_scatter`` kernel of :mod:`stdlib_kernels.indexing.engine` (a gather for ``x[idx]``, a
store or accumulating DMA for ``index_put``; negative indices wrap, out-of-range ones decline to the
CPU for torch's error).

Boolean masks go through :func:`nonzero`: a count kernel, one host sync for the size, then a
prefix-sum kernel that scatters the coordinates (per-partition ``cumsum`` plus a cross-partition
prefix done as a triangular matmul).

Example:
    >>> import torch, trnlang  # doctest: +SKIP
    >>> x = torch.randn(8, 5, 6, device="trn")
    >>> i = torch.tensor([0, -1, 3], device="trn")
    >>> x[i, :, i].shape, x[x > 0].shape[0] == int((x > 0).sum())
    (torch.Size([3, 5]), True)
    >>> x.index_put_((i,), torch.ones(5, 6, device="trn"), accumulate=True).shape
    torch.Size([8, 5, 6])
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.indexing.engine import Move, _Bounds, _fits, _ok_data, _run, _to_out
from trnlang.device import decline, lowering
from trnlang.device.registry import scalar_type_name, warn_like_torch

# ------------------------------------------------------------------------------ advanced indexing


def _expand_indices(self: torch.Tensor, indices: Sequence[Any]) -> list[torch.Tensor | None] | None:
    """Boolean masks -> their nonzero coordinates (one long index per masked dim); None where unusable.

    Indices torch refuses raise torch's ``IndexError`` here, natively (a float index, a mask whose shape
    is not the indexed dims', more indices than dims).
    """
    res: list[torch.Tensor | None] = []
    for t in indices:
        if t is None:
            res.append(None)
            continue
        if isinstance(t, torch.Tensor) and t.dtype not in (torch.bool, torch.uint8, torch.int64, torch.int32):
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")
        if isinstance(t, torch.Tensor) and t.device.type == "cpu":
            t = t.to("trn")  # CPU index tensors are allowed (as on CUDA): one host -> device copy
        if not U.is_trn(t):
            return None
        if t.dtype in (torch.bool, torch.uint8):
            k = len(res)
            if t.dim() == 0:
                return None
            if k + t.dim() > self.dim():
                raise IndexError(f"too many indices for tensor of dimension {self.dim()}")
            for j in range(t.dim()):
                if t.shape[j] != self.shape[k + j]:
                    raise IndexError(f"The shape of the mask {list(t.shape)} at index {j} does not match the shape "
                                     f"of the indexed tensor {list(self.shape)} at index {k + j}")
            nz = nonzero(t)
            if nz is NotImplemented:
                return None
            res.extend(nz.select(1, j) for j in range(t.dim()))
        else:
            res.append(t)
    return res


def _raise_out_of_range(x: torch.Tensor, dims: Sequence[int], ivs: Sequence[Any]) -> None:
    """torch's ``IndexError`` for the first index out of range (after the kernel's bounds check fired)."""
    for i, (d, (t, _)) in enumerate(zip(dims, ivs)):  # torch numbers the dim among the indexed ones
        n = x.shape[d]
        bad = (t >= n).logical_or_(t < -n)
        if bool(bad.any()):
            v = int(t[bad].reshape(-1)[0].item())
            raise IndexError(f"index {v} is out of bounds for dimension {i} with size {n}")


def _raise_empty_dim(sizes: Sequence[int]) -> None:
    """torch's ``IndexError`` for a non-empty index into a dim of size 0."""
    if any(n == 0 for n in sizes):
        raise IndexError("index is out of bounds for dimension with size 0")


def _merge_masks(self: torch.Tensor, indices: Sequence[Any]) -> tuple[torch.Tensor, list[Any]]:
    """A boolean mask over several dims of ``self`` that a view can merge into one -> a 1-D mask of that view.

    ``x[mask]`` with a 4-D mask would index 4 dims through 4 nonzero columns; over the merged dim it is one
    (the result is the same: the masked dims become one dim of the selected count, in row-major order).
    """
    out: list[Any] = []
    k = 0  # the dim of ``self`` the next index applies to
    for t in indices:
        if isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8) and t.dim() > 1 \
                and list(t.shape) == list(self.shape[k:k + t.dim()]):
            merged = [*self.shape[:k], U.prod(t.shape), *self.shape[k + t.dim():]]
            try:
                self = self.view(merged)
            except RuntimeError:  # the masked dims are not mergeable in a view: keep the mask as it is
                pass
            else:
                out.append(t.reshape(-1))
                k += 1
                continue
        out.append(t)
        k += t.dim() if isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8) else 1
    return self, out


def _plan(self: torch.Tensor, indices: Sequence[Any]) -> Any:
    """Indexed dims, broadcast index views and the result shape of ``self[indices]`` (a string: why declined)."""
    self, indices = _merge_masks(self, indices)
    idx = _expand_indices(self, indices)
    if idx is None:
        return "an index not a trn int/bool tensor, a mask not matching self's shape, or 2^24+ mask elements"
    if len(idx) > self.dim():
        raise IndexError(f"too many indices for tensor of dimension {self.dim()}")
    idx = idx + [None] * (self.dim() - len(idx))
    dims = [d for d, t in enumerate(idx) if t is not None]
    if not dims or len(dims) > 3:
        return "no index tensor, or more than 3 indexed dims"
    try:
        bshape = list(torch.broadcast_shapes(*[idx[d].shape for d in dims]))
    except RuntimeError:
        raise IndexError("shape mismatch: indexing tensors could not be broadcast together with shapes "
                         + ", ".join(str(list(idx[d].shape)) for d in dims)) from None
    adjacent = dims == list(range(dims[0], dims[-1] + 1))
    if not adjacent:  # torch puts the broadcast dims first: permute the indexed dims to the front
        perm = dims + [d for d in range(self.dim()) if d not in dims]
        self = self.permute(perm)
        idx = [idx[d] for d in perm]
        dims = list(range(len(dims)))
    before = list(self.shape[:dims[0]])
    after = list(self.shape[dims[-1] + 1:])
    dense = before + bshape + after
    nb = len(bshape)
    ivs = []
    for d in dims:
        t = idx[d]
        st = U.broadcast_strides(t, bshape) if bshape else []
        ivs.append((t, [0] * len(before) + st + [0] * len(after)))
    sizes = [self.shape[d] for d in dims]
    steps = [self.stride(d) for d in dims]
    span = sum((n - 1) * s for n, s in zip(sizes, steps)) + 1
    if any(n == 0 for n in sizes):
        span = 0
    xs = [self.stride(d) for d in range(dims[0])] + [0] * nb + [self.stride(d) for d in range(dims[-1] + 1,
                                                                                                self.dim())]
    # the largest on-chip linear index: in range below span; an out-of-range index adds at most span + its step
    reach = sizes[0] if len(dims) == 1 else len(dims) * (span + max(steps))
    if not _fits(reach, U.prod(dense), self.numel()):
        return "2^30 or more elements or linear positions"
    return self, dims, ivs, sizes, steps, span, xs, dense, (len(before), len(before) + nb)


def _x_view(self: torch.Tensor, steps: Sequence[int]) -> tuple[int, list[int]]:
    if len(steps) == 1:
        return steps[0], [1]
    return 1, list(steps)


def _warn_uint8(indices: Sequence[Any]) -> None:
    """torch's deprecation warning, once per uint8 mask, on the paths that run the op natively."""
    for t in indices:
        if isinstance(t, torch.Tensor) and t.dtype == torch.uint8:
            warn_like_torch("indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool "
                            "instead.")


def _linear_index(self: torch.Tensor, indices: Sequence[Any]) -> Any:
    """More than three indexed dims as one: ``(x, first, sizes, lin)`` with ``x`` a view of ``self`` whose indexed
    dims (moved to the front when not adjacent, as torch orders the result) start at ``first``, and ``lin`` their
    row-major linear index over ``sizes`` (native int64 arithmetic after one bounds check on the device; an
    out-of-range index raises torch's IndexError). None: not such a call."""
    x, inds = _merge_masks(self, indices)
    idx = _expand_indices(x, inds)
    if idx is None or len(idx) > x.dim():
        return None
    idx = idx + [None] * (x.dim() - len(idx))
    dims = [d for d, t in enumerate(idx) if t is not None]
    if len(dims) <= 3:
        return None
    orig = list(dims)  # self's dims, for torch's error message
    if dims != list(range(dims[0], dims[-1] + 1)):
        perm = dims + [d for d in range(x.dim()) if d not in dims]
        x, idx, dims = x.permute(perm), [idx[d] for d in perm], list(range(len(dims)))
    try:
        bshape = torch.broadcast_shapes(*[idx[d].shape for d in dims])
    except RuntimeError:
        return None
    sizes = [x.shape[d] for d in dims]
    if U.prod(sizes) >= 1 << 30:
        return None
    ts = [idx[d].to(torch.int64).expand(bshape) for d in dims]
    bad = None
    for t, n in zip(ts, sizes):
        b = (t >= n) | (t < -n)
        bad = b if bad is None else bad | b
    if bad is not None and bad.numel() and bool(bad.any()):  # torch's IndexError, for the first such index
        for t, n, d in zip(ts, sizes, orig):
            if bool(((t >= n) | (t < -n)).any()):
                v = int(t[(t >= n) | (t < -n)].reshape(-1)[0])
                raise IndexError(f"index {v} is out of bounds for dimension {d} with size {n}")
    lin = None
    for t, n in zip(ts, sizes):
        t = torch.where(t < 0, t + n, t)
        lin = t if lin is None else lin * n + t
    return x, dims[0], sizes, lin


def _merged(x: torch.Tensor, first: int, sizes: Sequence[int]) -> list[int]:
    return [*x.shape[:first], U.prod(sizes), *x.shape[first + len(sizes):]]


def _index_many(self: torch.Tensor, indices: Sequence[Any]) -> torch.Tensor | None:
    """``self[indices]`` with more than three indexed dims, through :func:`_linear_index`. None: not such a call."""
    r = _linear_index(self, indices)
    if r is None:
        return None
    x, first, sizes, lin = r
    return x.reshape(_merged(x, first, sizes))[(slice(None),) * first + (lin,)]


def _index_put_many(self: torch.Tensor, indices: Sequence[Any], values: torch.Tensor, accumulate: bool) -> Any:
    """In-place ``self[indices] = values`` with more than three indexed dims, through :func:`_linear_index`: on a
    view merging them, or (when ``self``'s layout cannot merge them) on a contiguous copy written back. None: not
    such a call."""
    r = _linear_index(self, indices)
    if r is None:
        return None
    x, first, sizes, lin = r
    shape = _merged(x, first, sizes)
    try:
        work, copy = x.view(shape), False
    except RuntimeError:
        work, copy = x.contiguous().view(shape), True
    res = work.index_put_((None,) * first + (lin,), values, accumulate)  # type: ignore[arg-type]
    if res is NotImplemented:
        return res
    if copy:
        x.copy_(work.view(x.shape))
    return self


@lowering("aten::index.Tensor")
def index(self: torch.Tensor, indices: Sequence[Any], *, out: torch.Tensor | None = None) -> Any:
    """``self[idx0, idx1, ...]`` (integer tensors with broadcasting, boolean masks via nonzero).

    Negative indices wrap; up to three indexed dims in one gather (adjacent or not, as torch orders the result),
    more through a linear index (:func:`_index_many`); complex64 is gathered as its (real, imaginary) planes.
    """
    cplx = self.dtype == torch.complex64 and U.is_trn(self) and not (self.is_conj() or self.is_neg())
    if not (cplx or _ok_data(self, move=True)) or self.dim() == 0:
        return decline("self not a trn tensor of a supported dtype (or a conj/neg bit), or 0-dim")
    plan = _plan(_planes(self), indices)
    if isinstance(plan, str):
        many = _index_many(self, indices) if plan.startswith("no index tensor") else None
        return decline(plan) if many is None else _to_out(many, out)
    x, dims, ivs, sizes, steps, span, xs, dense, groups = plan
    planes = torch.empty(dense, dtype=x.dtype, device="trn")
    res = torch.view_as_complex(planes) if cplx else planes
    if res.numel():
        if span == 0:
            _raise_empty_dim(sizes)
        s_stride, st = _x_view(x, steps)
        try:
            _run(x, xs, span if len(steps) > 1 else sizes[0], s_stride, planes, list(planes.stride()), None,
                 [t for t, _ in ivs], [s for _, s in ivs], sizes, st, dense, groups, Move.GATHER, True)
        except _Bounds as e:
            _raise_out_of_range(x, dims, ivs)
            return decline(str(e))
    _warn_uint8(indices)
    return _to_out(res, out)


@lowering("aten::_unsafe_index.Tensor")
def unsafe_index(self: torch.Tensor, indices: Sequence[Any]) -> Any:
    """``aten::_unsafe_index`` (what decompositions emit): the same kernel as ``index`` (still bounds-checked)."""
    return index(self, indices)


def _planes(t: torch.Tensor) -> torch.Tensor:
    """A complex64 tensor as its float32 [..., 2] (real, imaginary) view; other tensors as they are."""
    return torch.view_as_real(t) if t.is_complex() else t


def _index_put(self: torch.Tensor, indices: Sequence[Any], values: torch.Tensor, accumulate: bool) -> Any:
    """In-place ``self[indices] = values`` (``+=`` with accumulate, repeated indices all add).

    complex64 moves and adds on its (real, imaginary) planes; bool with accumulate is an OR (torch's
    saturating add), built from an int32 count scattered the same way.
    """
    plain = self.dtype == torch.complex64 and values.dtype == self.dtype and U.is_trn(self) and U.is_trn(values) \
        and not (self.is_conj() or values.is_conj() or self.is_neg() or values.is_neg())
    if not (plain or _ok_data(self, values, move=True)) or self.dim() == 0:
        return decline("self/values not trn tensors of a supported dtype, or 0-dim self")
    if U.has_internal_overlap(self):
        return decline("self with overlapping elements (expanded)")
    target = _planes(self)
    plan = _plan(target, indices)
    if isinstance(plan, str) and plan.startswith("2^30") and _leading_indices(self, indices):
        return _index_put_rows_in_chunks(self, indices, values, accumulate)
    if isinstance(plan, str) and plan.startswith("no index tensor"):
        many = _index_put_many(self, indices, values, accumulate)
        return decline(plan) if many is None else many
    if isinstance(plan, str):
        return decline(plan)
    dense = plan[7][:-1] if self.is_complex() else plan[7]
    if values.dim() > len(dense) or not all(a in (1, b) for a, b in zip(values.shape[::-1], dense[::-1])):
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(values.shape)} cannot be broadcast to "
                           f"indexing result of shape {list(dense)}")
    if values.dtype != self.dtype:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{scalar_type_name(self.dtype)} for the destination and {scalar_type_name(values.dtype)} "
                           f"for the source.")
    if accumulate and self.dtype == torch.int64:
        return _int64_accumulate(self, indices, values)
    if accumulate and self.dtype == torch.bool:  # OR: count the True values landing on each element
        hits = torch.zeros(self.shape, dtype=torch.int32, device="trn")
        r = _index_put(hits, indices, values.to(torch.int32), True)
        return r if r is NotImplemented else self.logical_or_(hits.ne(0))
    vals = _planes(values)
    if self.is_complex() and values.dim() < len(dense):  # align the planes dim past the broadcast dims
        vals = vals.reshape([1] * (len(dense) - values.dim()) + list(vals.shape))
    return _scatter(plan, indices, vals, accumulate, self)


#: Rows of a tensor too large for one launch (2^30 linear positions) indexed per chunk of this many elements; at
#: most this many index values are read to the host to split them (a larger index tensor is declined).
_CHUNK_ELEMS = 1 << 29
_CHUNK_MAX_INDICES = 1 << 16


def _leading_indices(self: torch.Tensor, indices: Sequence[Any]) -> bool:
    """Integer index tensors for the leading dims only (none skipped), few enough to split on the host; a
    ``self`` those dims flatten into one by a view (contiguous, or a single index)."""
    if not indices or len(indices) > self.dim() or any(t is None for t in indices):
        return False
    if not all(U.is_trn(t) and t.dtype in (torch.int64, torch.int32) for t in indices):
        return False
    try:
        shape = torch.broadcast_shapes(*(t.shape for t in indices))
    except RuntimeError:
        return False
    return U.prod(shape) <= _CHUNK_MAX_INDICES and self.shape[0] > 0 and (len(indices) == 1 or self.is_contiguous())


def _index_put_rows_in_chunks(self: torch.Tensor, indices: Sequence[Any], values: torch.Tensor,
                              accumulate: bool) -> Any:
    """``self[indices] = values`` (``+=``) for a ``self`` of 2^30 or more positions, indexed on its leading dims:
    the index values (one host read) flattened to rows of those dims and split over row chunks of
    :data:`_CHUNK_ELEMS` elements, each chunk a launch of its own with rebased indices (torch's IndexError for an
    index out of range, before anything is written)."""
    k = len(indices)
    bshape = tuple(torch.broadcast_shapes(*(t.shape for t in indices)))
    lists = [t.expand(bshape).reshape(-1).cpu().tolist() for t in indices]
    rows = [0] * len(lists[0])
    for d in range(k):
        n_d = self.shape[d]
        for j, v in enumerate(lists[d]):
            if not -n_d <= v < n_d:
                raise IndexError(f"index {v} is out of bounds for dimension {d} with size {n_d}")
            rows[j] = rows[j] * n_d + (v + n_d if v < 0 else v)
    rest = tuple(self.shape[k:])
    flat = self if k == 1 else self.view(U.prod(self.shape[:k]), *rest)
    n = flat.shape[0]
    vals = values.expand(*bshape, *rest).reshape(len(rows), *rest)
    per = max(1, _CHUNK_ELEMS // max(1, U.prod(rest)))
    by_chunk: dict[int, list[int]] = {}
    for j, row in enumerate(rows):
        by_chunk.setdefault(row // per, []).append(j)
    for i, (c, js) in enumerate(sorted(by_chunk.items())):
        lo = c * per
        part = flat.narrow(0, lo, min(per, n - lo))
        local = torch.tensor([rows[j] - lo for j in js], dtype=torch.int64, device="trn")
        sel = vals.index_select(0, torch.tensor(js, dtype=torch.int64, device="trn"))
        res = _index_put(part, [local], sel, accumulate)
        if res is NotImplemented:
            if i == 0:
                return res  # declined (its reason recorded), nothing written yet: the CPU fallback does the whole call
            raise RuntimeError("trn: index_put_ declined a row chunk after writing earlier ones (the CPU fallback "
                               "would apply them twice); the tensor holds a partial result")
    return self


def _int64_accumulate(self: torch.Tensor, indices: Sequence[Any], values: torch.Tensor) -> Any:
    """int64 ``self[indices] += values`` (the kernels move 8-byte data but do not add it) through fp32, when the
    operands' magnitudes and the most contributions to one element bound every sum below 2^24 (checked on the
    device: a count scattered the same way)."""
    from stdlib_kernels.indexing.gather_scatter import _int_reduce

    def counts() -> torch.Tensor:
        hits = torch.zeros(self.shape, device="trn")
        r = _index_put(hits, indices, torch.ones(values.shape, device="trn"), True)
        return hits if r is not NotImplemented else torch.full((1,), float(1 << 24), device="trn")

    return _int_reduce(self, values, "sum", True, self, counts, lambda s_, v_: _index_put(s_, indices, v_, True))


def _scatter(plan: Any, indices: Sequence[Any], values: torch.Tensor, accumulate: bool, result: torch.Tensor) -> Any:
    """The kernel launch of :func:`_index_put` (the plan's target may be a real view of the complex ``result``)."""
    x, dims, ivs, sizes, steps, span, xs, dense, groups = plan
    vst = U.broadcast_strides(values, dense)
    if U.prod(dense) == 0:
        _warn_uint8(indices)
        return result
    if span == 0:
        _raise_empty_dim(sizes)
    if U.overlaps(values, x):
        values = values.clone()
        vst = U.broadcast_strides(values, dense)
    s_stride, st = _x_view(x, steps)
    try:
        _run(x, xs, span if len(steps) > 1 else sizes[0], s_stride, values, vst, None,
             [t for t, _ in ivs], [s for _, s in ivs], sizes, st, dense, groups, Move.SCATTER, True,
             "add" if accumulate else None)
    except _Bounds as e:
        _raise_out_of_range(x, dims, ivs)
        return decline(str(e))
    _warn_uint8(indices)
    return result


@lowering("aten::index_put_")
def index_put_(self: torch.Tensor, indices: Sequence[Any], values: torch.Tensor, accumulate: bool = False) -> Any:
    """``self.index_put_(indices, values, accumulate)``."""
    return _index_put(self, indices, values, accumulate)


@lowering("aten::_index_put_impl_")
def _index_put_impl_(self: torch.Tensor, indices: Sequence[Any], values: torch.Tensor, accumulate: bool = False,
                     unsafe: bool = False) -> Any:
    """``self[indices] = values`` as autograd (index backward) and ``__setitem__`` call it."""
    return _index_put(self, indices, values, accumulate)


@lowering("aten::index_put")
def index_put(self: torch.Tensor, indices: Sequence[Any], values: torch.Tensor, accumulate: bool = False) -> Any:
    """Out-of-place ``index_put``."""
    if not _ok_data(self, move=True):
        return decline("self not a trn tensor of a supported dtype (or a conj/neg bit)")
    res = self.clone()
    r = _index_put(res, indices, values, accumulate)
    return NotImplemented if r is NotImplemented else res


@lowering("aten::_unsafe_index_put")
def unsafe_index_put(self: torch.Tensor, indices: Sequence[Any], values: torch.Tensor,
                     accumulate: bool = False) -> Any:
    """``aten::_unsafe_index_put``: out-of-place ``index_put`` (still bounds-checked)."""
    return index_put(self, indices, values, accumulate)


# ------------------------------------------------------------------------------------------- nonzero


@trn.kernel
def count_nonzero_rows(m, out):
    """``out[p, 0] = #nonzero in m[p, :]`` for a ``[P, L]`` view (masked past ``n`` by the caller's zero pad)."""
    p_dim, l_dim = m.shape
    f = min(l_dim, 2048)
    acc = tl.zeros((p_dim, 1), tl.float32)
    rows = tl.arange(p_dim)[:, None]
    for j in tl.sequential_range(tl.cdiv(l_dim, f)):
        cols = j * f + tl.arange(f)[None, :]
        t = tl.load(m[rows, cols], mask=cols < l_dim) if l_dim % f else tl.load(m[rows, cols])
        acc[...] = acc + tl.sum((t != 0).astype(tl.float32), axis=1, keepdims=True)
    tl.store(out[rows, tl.arange(1)[None, :]], acc)


@trn.kernel
def nonzero_scatter(m, counts, out):
    """Flat positions of the nonzeros of a mask viewed as ``[P, L]`` (element ``p * L + l``) into rows of
    ``out`` (``[P * L + 1, 1]`` int32; the last row takes the zeros' writes).

    Each partition's start is the exclusive prefix sum of ``counts`` over partitions (a matmul with a
    strictly-triangular ones matrix); inside a partition positions come from ``cumsum``. Only positions
    are written (no shape, no count): the caller buckets ``P * L`` to a power of two, so one compiled
    variant serves every mask of a bucket, and unravels the positions into coordinates with torch ops.
    """
    p_dim, l_dim = m.shape
    rows = tl.arange(p_dim)[:, None]
    f = min(l_dim, 2048)
    cnt = tl.load(counts[rows, tl.arange(1)[None, :]])
    tri = tl.ndarray((p_dim, p_dim), tl.float32)
    tri[...] = (tl.arange(p_dim)[:, None] < tl.arange(p_dim)[None, :])
    base = tl.ndarray((p_dim, 1), tl.float32)
    base[...] = tl.copy(tl.matmul(tri, cnt, transpose_x=True))
    dump = out.shape[0] - 1
    for j in tl.sequential_range(tl.cdiv(l_dim, f)):
        cols = j * f + tl.arange(f)[None, :]
        t = tl.load(m[rows, cols], mask=cols < l_dim) if l_dim % f else tl.load(m[rows, cols])
        nz = (t != 0).astype(tl.float32)
        cs = tl.cumsum(nz, axis=1)
        pos = tl.where(nz > 0, base + cs - 1.0, float(dump)).astype(tl.int32)
        base[...] = base + tl.sum(nz, axis=1, keepdims=True)
        lin = tl.ndarray((p_dim, f), tl.int32)
        lin[...] = rows * l_dim + cols
        tl.store(out[pos, 0], lin, mask=cols < l_dim)


_NZ_LIMIT = 2**24  # positions are exact in fp32 below this


def _unravel(lin: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """Flat int32 positions -> ``[len, ndim]`` int64 coordinates in ``shape`` (trn int32 ops, shape-free)."""
    cols = []
    stride = 1
    for size in reversed(shape):
        q = torch.div(lin, stride, rounding_mode="floor") if stride != 1 else lin
        cols.append(q % size)
        stride *= size
    if not cols:
        return torch.empty((lin.shape[0], 0), dtype=torch.int64, device=lin.device)
    return torch.stack(cols[::-1], dim=1).to(torch.int64)


@lowering("aten::nonzero")
def nonzero(self: torch.Tensor, *, out: torch.Tensor | None = None) -> Any:
    """``torch.nonzero(self)``: ``[count, ndim]`` int64 coordinates in row-major order (one host sync)."""
    if out is not None and out.dtype != torch.int64:  # torch's check, before any work or fallback
        raise RuntimeError(f"nonzero: Expected out tensor to have scalar type Long but got scalar type"
                           f"{scalar_type_name(out.dtype)}")
    if U.is_trn(self) and self.dtype in (torch.int8, torch.int16, torch.int64, torch.complex64) \
            and not self.is_conj():  # the nonzeros of a native ``!= 0`` mask (complex: of either plane)
        mask = torch.view_as_real(self).ne(0).any(-1) if self.is_complex() else self.ne(0)
        return nonzero(mask, out=out)
    if not U.is_trn(self) or self.dtype not in (torch.bool, torch.float32, torch.bfloat16, torch.int32,
                                                  torch.uint8, torch.float16):
        return decline("not a trn tensor of bool, uint8, int32, float32, bfloat16 or float16")
    n = self.numel()
    if n >= _NZ_LIMIT or self.is_conj() or self.is_neg():
        return decline("2^24 or more elements, or a conj/neg bit")
    nd = self.dim()
    if n == 0:
        res = torch.empty((0, nd), dtype=torch.int64, device="trn")
    else:
        # padded to a power of two (at most 2x): the kernels compile once per size bucket, not per shape
        size = 1 << (n - 1).bit_length()
        flat = self.contiguous().view(-1)
        if size != n:
            pad = torch.zeros(size, dtype=self.dtype, device="trn")
            pad[:n].copy_(flat)
            flat = pad
        m2 = flat.view(min(128, size), -1)
        counts = torch.empty((m2.shape[0], 1), dtype=torch.float32, device="trn")
        count_nonzero_rows(m2, counts)
        total = int(counts.sum().item())
        buf = torch.empty((size + 1, 1), dtype=torch.int32, device="trn")
        nonzero_scatter(m2, counts, buf)
        res = _unravel(buf[:total, 0], tuple(self.shape))
    if out is not None:
        if not U.is_trn(out) or out.dtype != torch.int64:
            return decline("out= not an int64 trn tensor")
        if tuple(out.shape) != tuple(res.shape):  # same shape: keep its strides (a discontiguous out stays so)
            out.resize_(res.shape)
        return out.copy_(res)
    return res
