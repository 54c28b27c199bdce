"""Data movement on ``trn``: ``cat`` (and ``stack``), ``flip``, ``roll``, ``tril`` / ``triu``, reflection padding.

Everything is one strided-move kernel (:func:`move3`): ``out[b, r, c] = x[b', r', c']`` over 3-D (or 4-D) views,
where each source index may run backwards (``n - 1 - i``: a flip is an affine access pattern, not a
gather). The host side coalesces dims that are contiguous in both tensors and flipped alike, loops over
leading dims beyond four, and splits one long dim over the 128 partitions. ``cat`` moves each input into its
slice of the output, ``roll`` moves the two (per rolled dim) segments into place, ``flip`` is one move with
reversed dims. The store casts to the output dtype (``cat`` of mixed dtypes promotes like torch). 8-byte
dtypes (int64 token ids, float64) move bit-exactly as pairs of int32 words. ``tril``/``triu`` are one kernel
with an index predicate (``col - row <= k``) selecting between the input and zero.

Backward passes need nothing more: the gradient of ``cat`` is slicing (views), of ``flip`` a flip, of
``roll`` a roll; ``tril``/``triu`` are their own gradients.

Example:
    >>> import torch
    >>> x = torch.randn(3, 4, device="trn")                       # doctest: +SKIP
    >>> torch.cat([x, x.flip(0)], dim=1).roll(1, 0).tril()         # doctest: +SKIP
"""

from __future__ import annotations

import functools
import itertools
from typing import Any, Sequence

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.elementwise.pointwise import flat_pieces
from stdlib_kernels.tensor.copy import cast_copy_flat
from trnlang.device import decline, lowering, memory

#: Dtypes the movement kernels handle (8-byte ones only without a dtype change).
DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.bool, torch.int64, torch.float64,
          torch.int16, torch.int8, torch.uint8)
_KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.bool, torch.int16, torch.int8,
                  torch.uint8)
_WIDE = (torch.int64, torch.float64)
_BIG_1D = 4096


@trn.kernel
def move3(x, out, flips):
    """``out[b, r, c] = x[b', r', c']`` for same-shaped 3-D views; ``flips[k]``: index ``k`` runs backwards.
    4-D views (``flips`` of four) take one more outer loop: ``out[z, b, r, c] = x[z', b', r', c']``."""
    if out.ndim == 4:
        nz = out.shape[0]
        for z in tl.affine_range(nz):
            zs = (nz - 1 - z) if flips[0] else z
            _move_tiles(x, out, flips[1:], out.shape[1:], (zs,), (z,))
    else:
        _move_tiles(x, out, flips, out.shape, (), ())


def _move_tiles(x: Any, out: Any, flips: Any, shape: Any, xl: tuple[Any, ...], ol: tuple[Any, ...]) -> None:
    """The tiles of one ``[a, n, d]`` window of :func:`move3` (``xl`` / ``ol``: leading indices of ``x`` / ``out``)."""
    a, n, d = shape
    p = min(128, n)
    f = min(d, U.FREE_CHUNK)
    ragged = n % p != 0 or d % f != 0
    for b in tl.affine_range(a):
        bs = (a - 1 - b) if flips[0] else b
        for i in tl.affine_range(tl.cdiv(n, p)):
            rows = i * p + tl.arange(p)[:, None]
            rs = (n - 1 - rows) if flips[1] else rows
            for j in tl.affine_range(tl.cdiv(d, f)):
                cols = j * f + tl.arange(f)[None, :]
                cs = (d - 1 - cols) if flips[2] else cols
                m = ((rows < n) & (cols < d)) if ragged else None
                tl.store(out[(*ol, b, rows, cols)], tl.load(x[(*xl, bs, rs, cs)], mask=m), mask=m)


@trn.kernel
def tri3(x, out, k, upper):
    """``out = tril(x, k)`` (``triu`` if ``upper``) over ``[B, n, m]`` views: ``col - row <= k`` keeps ``x``."""
    a, n, d = out.shape
    p = min(128, n)
    f = min(d, U.FREE_CHUNK)
    ragged = n % p != 0 or d % f != 0
    for b in tl.affine_range(a):
        for i in tl.affine_range(tl.cdiv(n, p)):
            rows = i * p + tl.arange(p)[:, None]
            for j in tl.affine_range(tl.cdiv(d, f)):
                cols = j * f + tl.arange(f)[None, :]
                m = ((rows < n) & (cols < d)) if ragged else None
                t = tl.load(x[b, rows, cols], mask=m)
                keep = (cols - rows >= k) if upper else (cols - rows <= k)
                tl.store(out[b, rows, cols], tl.where(keep, t, tl.zeros_like(t)), mask=m)


def _coalesce(shape: Sequence[int], sts: list[list[int]], flips: list[bool]) -> tuple[list[int], list[list[int]],
                                                                                          list[bool]]:
    dims = [i for i, n in enumerate(shape) if n != 1]
    sh = [int(shape[i]) for i in dims]
    st = [[s[i] for i in dims] for s in sts]
    fl = [flips[i] for i in dims]
    i = len(sh) - 2
    while i >= 0:
        if fl[i] == fl[i + 1] and all(s[i] == s[i + 1] * sh[i + 1] for s in st):
            sh[i] *= sh[i + 1]
            for s in st:
                s[i] = s[i + 1]
                del s[i + 1]
            del sh[i + 1]
            del fl[i + 1]
        i -= 1
    return sh, st, fl


def move(dst: torch.Tensor, src: torch.Tensor, flip_dims: Sequence[int] = ()) -> None:
    """``dst[...] = src.flip(flip_dims)`` for same-shaped device tensors (casting to ``dst``'s dtype)."""
    if dst.numel() == 0:
        return
    if src.dtype in _WIDE or dst.dtype in _WIDE:
        assert src.dtype == dst.dtype
        dst, src = U.int32_words(dst), U.int32_words(src)
    move_window(dst, tuple(dst.shape), dst.stride(), dst.storage_offset(), src, flip_dims)


def move_window(dst: torch.Tensor, shape: tuple[int, ...], strides: Sequence[int], offset: int, src: torch.Tensor,
                flip_dims: Sequence[int] = ()) -> None:
    """:func:`move` into the window ``(shape, strides, offset)`` of ``dst``'s storage (no torch view of it: a view
    of a ``trn`` tensor is a dispatch), ``src`` of that shape; dtypes of at most 4 bytes. The window must lie in
    ``dst``'s memory (each launch's pieces are checked against the storage)."""
    flips = [d in flip_dims for d in range(len(shape))]
    sh, (ss, ds), fl = _coalesce(shape, [list(src.stride()), list(strides)], flips)
    if not sh:
        sh, ss, ds, fl = [1], [1], [1], [False]
    so, do = src.storage_offset(), offset
    shared = src.untyped_storage().data_ptr() == dst.untyped_storage().data_ptr()
    if len(sh) == 1 and ss[0] == 1 and ds[0] == 1 and not fl[0]:  # one run of elements: a flat copy
        _move_flat(src, dst, sh[0], so, do, shared)
        return
    if len(sh) == 1 and sh[0] >= _BIG_1D:  # one long dim: [rows, cols] (all 128 partitions, U.ROW_1D-long rows)
        n = sh[0]
        cols = n // 128 if n <= 128 * U.ROW_1D else U.ROW_1D
        rows = n // cols
        rem = n - rows * cols
        rev = fl[0]
        s_main = so + (rem * ss[0] if rev else 0)  # reversed: the last rows * cols elements, both dims flipped
        _move3_rows(src, dst, (1, rows, cols), (0, cols * ss[0], ss[0]), s_main, (0, cols * ds[0], ds[0]), do,
                    (False, rev, rev), shared)
        if rem:
            s_tail = so + (0 if rev else rows * cols * ss[0])
            move3(U.view(src, (1, 1, rem), (0, 0, ss[0]), s_tail),
                  U.view(dst, (1, 1, rem), (0, 0, ds[0]), do + rows * cols * ds[0]), (False, False, rev))
        return
    while len(sh) < 3:
        sh, ss, ds, fl = [1, *sh], [0, *ss], [0, *ds], [False, *fl]
    lead = len(sh) - (4 if len(sh) >= 4 else 3)  # 4-D windows: one launch (the runtime splits its outer loop)
    for idx in itertools.product(*[range(n) for n in sh[:lead]]):
        soff = so + sum(((sh[k] - 1 - i) if fl[k] else i) * ss[k] for k, i in enumerate(idx))
        doff = do + sum(i * ds[k] for k, i in enumerate(idx))
        if len(sh) - lead == 4:
            move3(U.piece(src, sh[lead:], ss[lead:], soff), U.piece(dst, sh[lead:], ds[lead:], doff),
                  tuple(fl[lead:]))
            continue
        _move3_rows(src, dst, sh[lead:], ss[lead:], soff, ds[lead:], doff, tuple(fl[lead:]), shared)


def _move_flat(src: torch.Tensor, dst: torch.Tensor, n: int, so: int, do: int, shared: bool) -> None:
    """``dst[do:do + n] = src[so:so + n]`` (storage offsets, unit strides): ``cast_copy_flat``, one variant for
    every length; one launch per thread when big, unless the two share storage."""
    pieces = flat_pieces((src, dst), n, (so, do), split=not shared)
    U.run_parallel([U.launch(cast_copy_flat, a, b, True) for a, b in pieces])


def _move3_rows(src: torch.Tensor, dst: torch.Tensor, sh: Sequence[int], ss: Sequence[int], soff: int,
                ds: Sequence[int], doff: int, fl: tuple[bool, ...], shared: bool) -> None:
    """One ``move3`` over ``[a, n, d]`` windows; a big one split into row blocks, one launch per thread.

    Destination rows ``[lo, hi)`` read source rows ``[lo, hi)``, or ``[n - hi, n - lo)`` when the row
    dim is flipped (the block's own flip reverses them). Not split when the two tensors share storage:
    the launches would run concurrently on memory one of them may write.
    """
    a, n, d = sh
    blocks = U.row_blocks(n, a * n * d)
    if shared or len(blocks) == 1:  # pieces, not torch views: two as_strided calls cost more than a small move
        move3(U.piece(src, sh, ss, soff), U.piece(dst, sh, ds, doff), fl)
        return
    calls = []
    for blk in blocks:
        lo, hi = blk.start, blk.stop
        first = (n - hi) if fl[1] else lo
        calls.append(U.launch(move3, U.piece(src, (a, hi - lo, d), ss, soff + first * ss[1]),
                              U.piece(dst, (a, hi - lo, d), ds, doff + lo * ds[1]), fl))
    U.run_parallel(calls)


def _movable(src: torch.Tensor, dst_dtype: torch.dtype) -> bool:
    if not U.is_trn(src) or src.dtype not in DTYPES or src.is_conj() or src.is_neg():
        return False
    if src.dtype in _WIDE or dst_dtype in _WIDE:
        return src.dtype == dst_dtype
    if src.dtype.is_floating_point and not dst_dtype.is_floating_point and dst_dtype != torch.bool:
        return False
    if dst_dtype == torch.bool and src.dtype != torch.bool:
        return False
    return dst_dtype in _KERNEL_DTYPES


def _check_out(out: torch.Tensor, shape: Sequence[int], dtype: torch.dtype, inputs: Sequence[torch.Tensor]) -> bool:
    if not U.is_trn(out) or out.dtype != dtype or U.has_internal_overlap(out):
        return False
    if tuple(out.shape) != tuple(shape):
        if out.numel() != 0:
            return False
        out.resize_(tuple(shape))
    return not any(U.overlaps(out, t) for t in inputs if t.numel())


@lowering("aten::cat", dtypes=(*DTYPES, torch.complex64, torch.complex32))
def cat(tensors: Sequence[torch.Tensor], dim: int = 0, *, out: torch.Tensor | None = None) -> Any:
    """``torch.cat``: each input moved into its slice of the output (legacy ``(0,)`` tensors skipped); complex64
    inputs as their real/imaginary planes.

    Example:
        >>> torch.cat([torch.ones(2, 3, device="trn"), torch.zeros(1, 3, device="trn")])  # doctest: +SKIP
    """
    tensors = list(tensors)
    if not tensors or not all(U.is_trn(t) for t in tensors):
        return decline("no tensors, or a tensor not on trn")
    if any(t.dtype == torch.complex64 for t in tensors):
        return _cat_complex(tensors, dim, out)
    if all(t.dtype == torch.complex32 for t in tensors):
        return _cat_complex32(tensors, dim, out)
    dtype = functools.reduce(torch.promote_types, [t.dtype for t in tensors])
    live = [t for t in tensors if not (t.dim() == 1 and t.numel() == 0)]
    if not live:
        shape: tuple[int, ...] = (0,)
    else:
        ref = live[0]
        if ref.dim() == 0 or not -ref.dim() <= dim < ref.dim():
            return decline("dim out of range or a 0-dim tensor: torch raises")
        d = dim % ref.dim()
        for t in live:
            if t.dim() != ref.dim() or any(a != b for k, (a, b) in enumerate(zip(t.shape, ref.shape)) if k != d):
                return decline("tensors whose shapes differ outside dim: torch raises")
        shape = tuple(ref.shape[:d]) + (sum(t.shape[d] for t in live),) + tuple(ref.shape[d + 1:])
    if out is None:
        fmt = _cat_format(live)
        if U.prod(shape) == 0:  # torch's strides of empty layouts (channels-last multiplies in the zero sizes)
            out = torch.empty(shape, dtype=dtype, device="trn", memory_format=fmt)
        else:  # the device allocator directly: no dispatcher round trip
            order = _FORMAT_ORDER.get(fmt, range(len(shape) - 1, -1, -1))
            out = memory.empty_strided(shape, U.strides_in_order(shape, order), dtype)
    elif not _check_out(out, shape, out.dtype, tensors) or not torch.can_cast(dtype, out.dtype):
        return decline("out= not a trn tensor of the result's shape and a castable dtype, or expanded/overlapping")
    # a cast the move kernels do not do (int64 into float32, say) goes through the device's copy_
    by_copy = [not _movable(t, out.dtype) for t in live]
    if any(b and not _copyable(t, out.dtype) for t, b in zip(live, by_copy)):
        return decline("an input of an unsupported dtype (or conj/neg bit), or a cast the device kernels do not do")
    if live:
        _cat_into(out, live, by_copy, d)
    return out


def _cat_into(out: torch.Tensor, live: list[torch.Tensor], by_copy: list[bool], d: int) -> None:
    """Each input into its slice of ``out`` along ``d``: through ``copy_`` (a cast the move kernels do not do), a
    narrowed view (8-byte dtypes, moved as int32 words), else straight into the output's window."""
    off = 0
    st, base = out.stride(), out.storage_offset()
    for t, b in zip(live, by_copy):
        n = t.shape[d]
        if n and t.numel():
            if b:
                out.narrow(d, off, n).copy_(t)
            elif out.dtype in _WIDE or t.dtype in _WIDE:
                move(out.narrow(d, off, n), t)
            else:  # no narrow view: a view of a trn tensor is a dispatch
                move_window(out, tuple(t.shape), st, base + off * st[d], t)
        off += n


_FORMAT_ORDER = {torch.channels_last: (1, 3, 2, 0), torch.channels_last_3d: (1, 4, 3, 2, 0)}


@lowering("aten::clone", dtypes=None, variants=False)
def clone(self: torch.Tensor, *, memory_format: torch.memory_format | None = None) -> Any:
    """``self.clone()``: a new tensor laid out as torch lays it out (a dense ``self``'s own strides, else the dense
    strides in its dim order, or the requested format), filled by one move; other cases (conj/neg bits, dtypes the
    move kernels do not carry, channels-last of a non-4/5-D tensor) as torch's own composite does it:
    ``empty_like`` and ``copy_``.

    Example:
        >>> torch.randn(4, 3, device="trn").t().clone().stride()  # doctest: +SKIP
        (1, 4)
    """
    fmt = torch.preserve_format if memory_format is None else memory_format
    if not U.is_trn(self) or self.is_conj() or self.is_neg() or self.dtype not in DTYPES or self.numel() == 0 \
            or fmt not in (torch.preserve_format, torch.contiguous_format):
        return torch.empty_like(self, memory_format=fmt).copy_(self)
    shape = tuple(self.shape)
    if fmt == torch.contiguous_format:
        out = memory.empty(shape, self.dtype)
    else:
        out = memory.empty_strided(shape, U.empty_like_strides(shape, tuple(self.stride())), self.dtype)
    move(out, self)
    return out


def _cat_complex32(tensors: list[torch.Tensor], dim: int, out: torch.Tensor | None) -> Any:
    """``cat`` of complex32 tensors as their float16 (real, imaginary) planes."""
    live = [t for t in tensors if not (t.dim() == 1 and t.numel() == 0)]
    if any(t.is_conj() or t.is_neg() for t in tensors) or (out is not None and out.dtype != torch.complex32) \
            or not live or not live[0].dim() or not -live[0].dim() <= dim < live[0].dim():
        return decline("a conj/neg bit, an out= of another dtype, only empty vectors, or a dim out of range")
    planes = cat([torch.view_as_real(t) for t in live], dim % live[0].dim(),
                 out=torch.view_as_real(out) if out is not None else None)
    if planes is NotImplemented or out is not None:
        return planes if planes is NotImplemented else out
    return torch.view_as_complex(planes)


def _suggested_format(t: torch.Tensor) -> torch.memory_format:
    """torch's ``suggest_memory_format`` of ``t``: channels-last (3d) when its strides grow along the channels-last
    dim order (C, W, H, N / C, W, H, D, N), each at least the previous stride times its size, none of size 0, not
    with a 0 channel stride, and N's stride not equal to C's (the ambiguous N111 case stays contiguous)."""
    nd = t.dim()
    if nd not in (4, 5):
        return torch.contiguous_format
    shape, st = t.shape, t.stride()
    low = 0
    if st[1] == 0:
        return torch.contiguous_format
    for d in ((1, 3, 2, 0) if nd == 4 else (1, 4, 3, 2, 0)):
        if shape[d] == 0 or st[d] < low or (d == 0 and low == st[1]):
            return torch.contiguous_format
        low = st[d] * shape[d]
    return torch.channels_last if nd == 4 else torch.channels_last_3d


def _cat_format(live: list[torch.Tensor]) -> torch.memory_format:
    """cat's output layout, as torch's: the inputs' common suggested memory format, else contiguous."""
    fmts = {_suggested_format(t) for t in live}
    return fmts.pop() if len(fmts) == 1 else torch.contiguous_format


def _cat_complex(tensors: list[torch.Tensor], dim: int, out: torch.Tensor | None) -> Any:
    """``cat`` of complex64 tensors: of their ``[..., 2]`` real/imaginary planes (a trailing dim, so ``dim`` keeps
    its meaning), viewed back as complex64. Real tensors promote to complex64 first (a zero imaginary plane), as
    torch's cat promotes them, when the common dtype is complex64."""
    rdt = functools.reduce(torch.promote_types, [t.dtype for t in tensors])
    if rdt == torch.complex64 and all(U.is_trn(t) for t in tensors):
        from stdlib_kernels.elementwise.compare import promoted_planes

        def up(t: torch.Tensor) -> Any:
            if t.dtype == torch.complex64 and (t.is_conj() or t.is_neg()):  # a lazy conj/neg view: made physical
                return t.resolve_conj().resolve_neg()
            p = promoted_planes(t) if not t.is_complex() and t.dtype != torch.float64 else None
            return torch.view_as_complex(p.contiguous()) if p is not None else t

        tensors = [up(t) for t in tensors]
    live = [t for t in tensors if not (t.dim() == 1 and t.numel() == 0)]
    if not live and out is None and all(t.dtype == torch.complex64 for t in tensors):  # only legacy empty vectors
        return torch.empty((0,), dtype=torch.complex64, device="trn")
    if not all(t.dtype == torch.complex64 and not t.is_conj() and not t.is_neg() for t in tensors) \
            or (out is not None and out.dtype != torch.complex64) or not live:
        return decline("complex64 mixed with other dtypes, a conj/neg bit, or an out= of another dtype")
    nd = live[0].dim()
    if nd == 0 or not -nd <= dim < nd:
        return decline("dim out of range or a 0-dim tensor: torch raises")
    planes = cat([torch.view_as_real(t) for t in live], dim % nd,
                 out=torch.view_as_real(out) if out is not None else None)
    if planes is NotImplemented:
        return planes
    return out if out is not None else torch.view_as_complex(planes)


def _copyable(t: torch.Tensor, dst_dtype: torch.dtype) -> bool:
    """``copy_`` casts ``t`` into ``dst_dtype`` natively where the move kernels (which carry 8-byte dtypes only
    unchanged) do not: an int64 input into a float output, a narrower integer or bool input into an int64 one."""
    if not U.is_trn(t) or t.dtype not in DTYPES or t.dtype == torch.float64 or t.is_conj() or t.is_neg():
        return False
    if dst_dtype == torch.int64:
        return not t.dtype.is_floating_point
    return dst_dtype in _KERNEL_DTYPES and dst_dtype.is_floating_point


def _wrap_dims(dims: Sequence[int], nd: int) -> list[int] | None:
    r = []
    for x in dims:
        if not -max(nd, 1) <= x < max(nd, 1):
            return None
        r.append(x % max(nd, 1))
    return r


@lowering("aten::flip", dtypes=(*DTYPES, torch.complex64))
def flip(self: torch.Tensor, dims: Sequence[int], *, out: torch.Tensor | None = None) -> Any:
    """``torch.flip``: one move with reversed indices along ``dims`` (complex64: of its real/imaginary planes).

    Example:
        >>> torch.arange(6., device="trn").view(2, 3).flip(1)   # doctest: +SKIP
    """
    wd = _wrap_dims(dims, self.dim())
    if self.dtype == torch.complex64 and U.is_trn(self) and wd is not None and not self.is_conj() \
            and not self.is_neg():
        planes = torch.view_as_real(out) if out is not None and out.dtype == torch.complex64 else None
        if self.dim() == 0:
            wd = []  # nothing to flip (a 0-dim tensor's dim 0 would be the planes' dim)
        r = flip(torch.view_as_real(self), wd, out=planes)
        return r if r is NotImplemented else out if planes is not None else torch.view_as_complex(r)
    if wd is None or len(set(wd)) != len(wd) or not _movable(self, self.dtype):
        return decline("dims out of range or repeated, or not a trn tensor of a supported dtype")
    if out is None:
        out = torch.empty(self.shape, dtype=self.dtype, device="trn")
    elif not _check_out(out, self.shape, self.dtype, [self]):
        return decline("out= not a trn tensor of self's shape and dtype, expanded, or overlapping self")
    if self.dim() == 0:
        move(out.view(1), self.view(1))
    else:
        move(out, self, wd)
    return out


def _roll_complex(self: torch.Tensor, shifts: list[int], dims: list[int], out: torch.Tensor | None) -> Any:
    """A complex64 roll: its (real, imaginary) planes view rolled along the same dims (flattened first without
    dims)."""
    if not dims:
        if len(shifts) != 1 or out is not None:
            return decline("several shifts without dims (torch raises), or out= without dims")
        return _roll_complex(self.reshape(-1), shifts, [0], None).view(self.shape)
    if any(not -self.dim() <= d < self.dim() for d in dims) or len(shifts) != len(dims):
        return decline("dims out of range or shifts and dims of different lengths: torch raises")
    r = roll(torch.view_as_real(self), shifts, [d % self.dim() for d in dims])
    if r is NotImplemented:
        return r
    r = torch.view_as_complex(r)
    return r if out is None else out.copy_(r)


@lowering("aten::roll", dtypes=(*DTYPES, torch.complex64))
def roll(self: torch.Tensor, shifts: Sequence[int], dims: Sequence[int] = (), *,
         out: torch.Tensor | None = None) -> Any:
    """``torch.roll``: per rolled dim the two segments move into place (``2^k`` moves for ``k`` dims).

    Example:
        >>> torch.arange(5., device="trn").roll(2)   # doctest: +SKIP
    """
    shifts, dims = list(shifts), list(dims)
    if U.is_trn(self) and self.dtype == torch.complex64 and not self.is_conj() and not self.is_neg():
        return _roll_complex(self, shifts, dims, out)
    if not _movable(self, self.dtype) or not shifts:
        return decline("not a trn tensor of a supported dtype (or a conj/neg bit), or no shifts")
    if not dims:
        if len(shifts) != 1 or out is not None:
            return decline("several shifts without dims (torch raises), or out= without dims")
        flat = self if self.is_contiguous() else self.contiguous()
        return roll(flat.view(-1), shifts, [0]).view(self.shape)
    if len(shifts) != len(dims):
        return decline("shifts and dims of different lengths: torch raises")
    wd = _wrap_dims(dims, self.dim())
    if wd is None or self.dim() == 0:
        return decline("dims out of range, or a 0-dim tensor")
    if out is None:
        out = torch.empty(self.shape, dtype=self.dtype, device="trn")
    elif not _check_out(out, self.shape, self.dtype, [self]):
        return decline("out= not a trn tensor of self's shape and dtype, expanded, or overlapping self")
    if self.numel() == 0:
        return out
    total: dict[int, int] = {}
    for s, d in zip(shifts, wd):
        total[d] = total.get(d, 0) + int(s)
    segs = []
    for d, s in total.items():
        n = self.shape[d]
        s %= n
        segs.append([(d, s, 0, n - s), (d, 0, n - s, s)] if s else [(d, 0, 0, n)])
    for combo in itertools.product(*segs):
        dv, sv = out, self
        for d, dst0, src0, length in combo:
            if length == 0:
                break
            dv = dv.narrow(d, dst0, length)
            sv = sv.narrow(d, src0, length)
        else:
            move(dv, sv)
    return out


def _tri(self: torch.Tensor, diagonal: int, out: torch.Tensor | None, upper: bool) -> Any:
    if self.dim() < 2 or self.dtype in _WIDE or not U.is_trn(self):
        return decline("fewer than 2 dims, an int64/float64 tensor, or not on trn")
    if out is None:
        out = torch.empty(self.shape, dtype=self.dtype, device="trn")
    elif not (U.is_trn(out) and out.dtype == self.dtype and tuple(out.shape) == tuple(self.shape)
              and not U.has_internal_overlap(out) and (U.same_view(out, self) or not U.overlaps(out, self))):
        return decline("out= not a trn tensor of self's shape and dtype, expanded, or partly overlapping self")
    if self.numel() == 0:
        return out
    n, m = self.shape[-2:]
    lead = tuple(self.shape[:-2])
    sh, (xs, os_) = U.coalesce(lead, [list(self.stride()[:-2]), list(out.stride()[:-2])])
    if not sh:
        sh, xs, os_ = [1], [0], [0]
    xr, xc = self.stride()[-2:]
    orr, oc = out.stride()[-2:]
    for idx in itertools.product(*[range(k) for k in sh[:-1]]):
        xo = self.storage_offset() + sum(i * xs[k] for k, i in enumerate(idx))
        oo = out.storage_offset() + sum(i * os_[k] for k, i in enumerate(idx))
        tri3(U.view(self, (sh[-1], n, m), (xs[-1], xr, xc), xo), U.view(out, (sh[-1], n, m), (os_[-1], orr, oc), oo),
             int(diagonal), upper)
    return out


_TRI_DTYPES = (*(d for d in DTYPES if d not in _WIDE), torch.int64, torch.complex64)


def _tri_wide(self: torch.Tensor, diagonal: int, out: torch.Tensor | None, upper: bool) -> Any:
    """tril/triu of an int64 tensor: the bool triangle of its last two dims, then a native int64 ``where``."""
    if self.dim() < 2:
        return decline("fewer than 2 dims: torch raises")
    if out is not None and not (U.is_trn(out) and out.dtype == self.dtype):
        return decline("out= not a trn tensor of self's dtype")
    n, m = self.shape[-2:]
    keep = torch.ones((n, m), dtype=torch.bool, device="trn")
    keep = keep.triu(int(diagonal)) if upper else keep.tril(int(diagonal))
    r = torch.where(keep, self, torch.zeros((), dtype=self.dtype, device="trn"))
    return r if out is None else out.copy_(r)


def _tri_complex(self: torch.Tensor, diagonal: int, out: torch.Tensor | None, upper: bool) -> Any:
    """tril/triu of a complex64 tensor as the int64 bit patterns of its (real, imaginary) pairs (zero bits: 0+0j)."""
    if self.is_conj() or self.is_neg() or (out is not None and not (U.is_trn(out) and out.dtype == self.dtype)):
        return decline("a conj/neg bit, or out= not a complex64 trn tensor")
    r = _tri_wide(self.view(torch.int64), diagonal, None, upper)
    if r is NotImplemented:
        return r
    r = r.view(torch.complex64)
    return r if out is None else out.copy_(r)


@lowering("aten::tril", dtypes=_TRI_DTYPES)
def tril(self: torch.Tensor, diagonal: int = 0, *, out: torch.Tensor | None = None) -> Any:
    """``torch.tril``: keep ``col - row <= diagonal``, zero elsewhere (batched over leading dims)."""
    if U.is_trn(self) and self.dtype == torch.int64:
        return _tri_wide(self, diagonal, out, False)
    if U.is_trn(self) and self.dtype == torch.complex64:
        return _tri_complex(self, diagonal, out, False)
    return _tri(self, diagonal, out, False)


@lowering("aten::triu", dtypes=_TRI_DTYPES)
def triu(self: torch.Tensor, diagonal: int = 0, *, out: torch.Tensor | None = None) -> Any:
    """``torch.triu``: keep ``col - row >= diagonal``, zero elsewhere (batched over leading dims)."""
    if U.is_trn(self) and self.dtype == torch.int64:
        return _tri_wide(self, diagonal, out, True)
    if U.is_trn(self) and self.dtype == torch.complex64:
        return _tri_complex(self, diagonal, out, True)
    return _tri(self, diagonal, out, True)


# padding ---------------------------------------------------------------------------------------------------
def _pad_pairs(padding: Sequence[int], nd: int, x: torch.Tensor, mode: str) -> list[tuple[int, int, int]] | None:
    """``[(dim, left, right)]`` for the padded (trailing) dims, last dim first, or None if not handled.

    Output index ``o`` reads input ``i = o - left``, clamped to ``[0, n)`` (replicate) or reflected at the
    ends (reflect); negative pads crop. Reflected indices must stay inside the dim (otherwise the CPU raises
    torch's error).
    """
    pads = [int(p) for p in padding]
    if len(pads) != 2 * nd or x.dim() not in (nd + 1, nd + 2):
        return None
    if any(n == 0 for n in x.shape[x.dim() - nd - 1:]):  # only a batch dim may be empty (torch raises)
        return None
    pairs = [(x.dim() - 1 - k, pads[2 * k], pads[2 * k + 1]) for k in range(nd)]
    for d, lp, rp in pairs:
        n = x.shape[d]
        if n == 0 or n + lp + rp < 0:
            return None
        if mode == "reflect" and (lp >= n or rp >= n or any(i0 < 0 or i0 + ln > n for _, ln, i0, _ in
                                                            _segments(n, lp, rp, mode))):
            return None
    return pairs


def _segments(n: int, lp: int, rp: int, mode: str) -> list[tuple[int, int, int, str]]:
    """Pieces of one padded dim: ``(out_start, length, in_start, kind)``; kind ``copy`` (the kept middle),
    ``edge`` (replicate: input element ``in_start`` broadcast) or ``flip`` (reflect: input
    ``[in_start, in_start + length)`` reversed)."""
    total = n + lp + rp
    segs = []
    a, b = 0, min(max(lp, 0), total)
    if b > a:
        segs.append((a, b - a, 0, "edge") if mode == "replicate" else (a, b - a, lp - (b - 1), "flip"))
    a, b = max(lp, 0), min(lp + n, total)
    if b > a:
        segs.append((a, b - a, a - lp, "copy"))
    a = max(lp + n, 0)
    if total > a:
        segs.append((a, total - a, n - 1, "edge") if mode == "replicate" else
                    (a, total - a, 2 * (n - 1) - (total - 1 - lp), "flip"))
    return segs


def _pad(self: torch.Tensor, padding: Sequence[int], nd: int, mode: str) -> Any:
    """Reflection/replication padding: per padded dim up to three pieces (left border, kept middle, right
    border); every combination of pieces is one move from the input (borders: the edge broadcast with stride
    0, or a reversed slice). complex64 moves as the float64 bit patterns of its (real, imaginary) pairs."""
    if U.is_trn(self) and self.dtype == torch.complex64 and not (self.is_conj() or self.is_neg()):
        r = _pad(self.view(torch.float64), padding, nd, mode)
        return r if r is NotImplemented else r.view(torch.complex64)
    if not _movable(self, self.dtype):
        return decline("not a trn tensor of a supported dtype (or a conj/neg bit)")
    pairs = _pad_pairs(padding, nd, self, mode)
    if pairs is None:
        return decline("bad padding for the input (wrong length or rank, an empty dim, reflect pad >= size)")
    shape = list(self.shape)
    for d, lp, rp in pairs:
        shape[d] += lp + rp
    out = torch.empty(shape, dtype=self.dtype, device="trn")
    if out.numel() == 0:
        return out
    for combo in itertools.product(*[_segments(self.shape[d], lp, rp, mode) for d, lp, rp in pairs]):
        dst, src = out, self
        st = list(self.stride())
        flips = []
        for (d, _, _), (o0, length, i0, kind) in zip(pairs, combo):
            dst = dst.narrow(d, o0, length)
            src = src.narrow(d, i0, 1 if kind == "edge" else length)
            if kind == "edge":
                st[d] = 0
            elif kind == "flip":
                flips.append(d)
        move(dst, torch.as_strided(src, dst.shape, st, src.storage_offset()), flips)
    return out


def _pad_backward(grad_output: torch.Tensor, self: torch.Tensor, padding: Sequence[int], nd: int, mode: str) -> Any:
    """Fold the borders of ``grad_output`` back onto the input, one padded dim at a time (first dim first).

    complex64 folds its real and imaginary planes apart."""
    if U.is_trn(grad_output) and grad_output.dtype == torch.complex64 and not grad_output.is_conj():
        planes = torch.view_as_real(grad_output)
        re = _pad_backward(planes[..., 0], self, padding, nd, mode)
        im = _pad_backward(planes[..., 1], self, padding, nd, mode)
        return re if re is NotImplemented else torch.complex(re, im)
    if not U.is_trn(grad_output) or grad_output.dtype != torch.float32:
        return decline("grad not float32 on trn (bf16: the CPU accumulates the borders in bf16)")
    pairs = _pad_pairs(padding, nd, self, mode)
    if pairs is None:
        return decline("bad padding for the input (wrong length or rank, an empty dim, reflect pad >= size)")
    g = grad_output
    for d, lp, rp in reversed(pairs):
        n = self.shape[d]
        c = torch.empty([*g.shape[:d], n, *g.shape[d + 1:]], dtype=g.dtype, device="trn")
        if c.numel() == 0:
            g = c
            continue
        segs = _segments(n, lp, rp, mode)
        centre = [sg for sg in segs if sg[3] == "copy"]
        if not centre or centre[0][1] != n:
            c.zero_()
        for o0, length, i0, _ in centre:
            move(c.narrow(d, i0, length), g.narrow(d, o0, length))
        for o0, length, i0, kind in segs:
            if kind == "edge":
                c.narrow(d, i0, 1).add_(g.narrow(d, o0, length).sum(d, keepdim=True))
            elif kind == "flip":
                border = g.narrow(d, o0, length)
                tmp = torch.empty(border.shape, dtype=g.dtype, device="trn")
                move(tmp, border, (d,))
                c.narrow(d, i0, length).add_(tmp)
        g = c
    return g if g is not grad_output else grad_output.clone()


_PAD_DTYPES = (*DTYPES, torch.complex64)
for _nd in (1, 2, 3):
    for _mode, _name in (("reflect", "reflection"), ("replicate", "replication")):
        def _fwd(self: torch.Tensor, padding: Sequence[int], _nd: int = _nd, _mode: str = _mode) -> Any:
            return _pad(self, padding, _nd, _mode)

        def _bwd(grad_output: torch.Tensor, self: torch.Tensor, padding: Sequence[int], _nd: int = _nd,
                 _mode: str = _mode) -> Any:
            return _pad_backward(grad_output, self, padding, _nd, _mode)

        _fwd.__name__ = f"{_name}_pad{_nd}d"
        _fwd.__doc__ = f"``aten::{_name}_pad{_nd}d``: border moves from the output itself ({_mode} mode)."
        _bwd.__name__ = f"{_name}_pad{_nd}d_backward"
        _bwd.__doc__ = f"``aten::{_name}_pad{_nd}d_backward``: borders folded onto the centre (adds)."
        lowering(f"aten::{_name}_pad{_nd}d", dtypes=_PAD_DTYPES)(_fwd)
        lowering(f"aten::{_name}_pad{_nd}d_backward", dtypes=(torch.float32, torch.complex64))(_bwd)
