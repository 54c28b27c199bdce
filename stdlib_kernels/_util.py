"""Helpers shared by the lowerings: operand classification, strided views, scalars as device tensors.

Lowerings only use torch's public API on ``trn`` tensors (views are ``torch.as_strided``) and
launch kernels like a user would.
"""

from __future__ import annotations

import ctypes
import enum
import math
from collections import OrderedDict
from typing import Any, Sequence

import torch

from trnlang import config as _config
from trnlang.device import fastlane, memory
from trnlang.runtime import codecache
from trnlang.runtime.args import TensorPiece
from trnlang.runtime.launch import (  # noqa: F401 - the thread split, re-exported for the families
    PARALLEL_MIN_WORK,
    PLANS,
    Launch,
    chunks,
    num_threads,
    row_blocks,
    run_parallel,
    split_rows,
)

#: Tensor dtypes the elementwise kernels load and store natively.
NATIVE_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int32)
FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
#: Free-dimension chunk (elements per partition per instruction) of streaming kernels.
FREE_CHUNK = 2048


class Mode(enum.Enum):
    """Base of a kernel's mode enums (compile-time arguments, ``trnlang.runtime.args.is_spec``).

    Members hash by identity, in C: ``Enum.__hash__`` is Python code (~0.1 us a member), and a warm launch
    hashes its plan key whenever it is not the last key seen. Members are singletons, so identity is equality.
    (Reading a member off its class, ``Op.SUM``, is slow as well on Python 3.11: every attribute read on an Enum
    class runs EnumType's ``__getattr__`` hook, ~10x a global's read; code run per call keeps members in globals.)

    Example:
        >>> class Fill(Mode):
        ...     ZERO = 0
        >>> {Fill.ZERO: 1}[Fill.ZERO], type(Fill.ZERO).__hash__ is object.__hash__
        (1, True)
    """

    __hash__ = object.__hash__


_scalars: OrderedDict[tuple[Any, ...], torch.Tensor] = OrderedDict()


def scalar_tensor(value: Any, dtype: torch.dtype) -> torch.Tensor:
    """A cached ``[1, 1]`` device tensor holding ``value`` (never mutated; kernels only read it).

    Scalars are runtime operands, not compile-time constants, so a new value (an optimizer's
    step size, say) does not recompile the kernel.
    """
    if isinstance(value, float):  # -0.0 == 0.0 (and hashes alike): the sign is part of the key (x / -0.0 is -inf)
        key: tuple[Any, ...] = ("nan", dtype) if math.isnan(value) else (float, value, dtype, math.copysign(1.0, value))
    else:
        key = (type(value), value, dtype)
    t = _scalars.get(key)
    if t is None:
        t = fastlane.freeze(torch.full((1, 1), value, dtype=dtype, device="trn"))  # lanes may keep it (never written)
        _scalars[key] = t
        if len(_scalars) > 512:
            fastlane.unfreeze(_scalars.popitem(last=False)[1])
    else:
        _scalars.move_to_end(key)
    return t


def is_trn(x: Any) -> bool:
    """A tensor on the ``trn`` device."""
    return isinstance(x, torch.Tensor) and x.device.type == "trn"


def scalar_value(x: Any) -> Any:
    """The Python value of a number or a CPU 0-dim tensor; None for anything else."""
    if isinstance(x, (bool, int, float)):
        return x
    if isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dim() == 0:
        return x.item()
    return None


def has_internal_overlap(t: torch.Tensor) -> bool:
    """More than one element of ``t`` maps to the same memory (expanded dims); never for an empty ``t`` (numpy's
    empty arrays carry zero strides)."""
    return any(st == 0 and n > 1 for n, st in zip(t.shape, t.stride())) and t.numel() > 0


def byte_span(t: torch.Tensor) -> tuple[int, int]:
    """[start, end) addresses ``t`` can touch."""
    if t.numel() == 0:
        return (t.data_ptr(), t.data_ptr())
    last = sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    return (t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size())


def same_view(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Identical views (same address, sizes, strides, dtype)."""
    return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
            and a.dtype == b.dtype)


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The byte ranges of two tensors intersect (a conservative aliasing test)."""
    sa, ea = byte_span(a)
    sb, eb = byte_span(b)
    return sa < eb and sb < ea


#: torch's messages for the memory-overlap checks of in-place / out= ops (``at::assert_no_*overlap``)
OVERLAP_MSG = ("unsupported operation: some elements of the input tensor and the written-to tensor refer to a single "
               "memory location. Please clone() the tensor before performing the operation.")
INTERNAL_OVERLAP_MSG = ("unsupported operation: more than one element of the written-to tensor refers to a single "
                        "memory location. Please clone() the tensor before performing the operation.")


def overlap_status(a: torch.Tensor, b: torch.Tensor) -> str:
    """How two tensors share memory, as torch's ``get_overlap_status``: "no", "full", "partial" or "too_hard".

    "full": the same bytes with the same strides; "too_hard": one of them is not non-overlapping and
    dense (torch does not check those further).
    """
    if a is b:
        return "full"
    if a.numel() == 0 or b.numel() == 0:
        return "no"
    if not (_dense(a) and _dense(b)):
        return "too_hard"
    if a.device != b.device or a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return "no"
    a0, b0 = a.data_ptr(), b.data_ptr()
    a1, b1 = a0 + a.numel() * a.element_size(), b0 + b.numel() * b.element_size()
    if a0 == b0 and a1 == b1:
        return "full" if a.stride() == b.stride() else "partial"
    return "partial" if a0 < b1 and b0 < a1 else "no"


def assert_no_partial_overlap(written: torch.Tensor, other: torch.Tensor) -> None:
    """torch's check of a TensorIterator input against its output (``copy_``): a partial overlap raises."""
    if overlaps(written, other) and overlap_status(written, other) == "partial":  # the byte spans first: cheap
        raise RuntimeError(OVERLAP_MSG)


def resize_out(out: torch.Tensor, shape: Sequence[int]) -> None:
    """Resize an ``out=`` tensor as torch does (:func:`trnlang.device.registry.resize_out`: silently when empty,
    else with torch's deprecation warning)."""
    from trnlang.device.registry import resize_out as _resize

    _resize(out, shape)


def into_out(res: Any, out: torch.Tensor | None, inputs: Sequence[Any]) -> Any:
    """``res``, or ``out=`` holding it (cast by the copy; resized as torch resizes it unless it is also an input:
    then declined, and torch raises); NotImplemented passes through.

    Example:
        >>> into_out(torch.ones(2), None, ())
        tensor([1., 1.])
    """
    if out is None or res is NotImplemented:
        return res
    if tuple(out.shape) != tuple(res.shape):
        if any(isinstance(t, torch.Tensor) and overlaps(out, t) for t in inputs):
            from trnlang.device import decline

            return decline("out= of another shape overlapping an input: torch raises")
        resize_out(out, res.shape)
    return out.copy_(res)


def assert_no_overlap(written: torch.Tensor, other: torch.Tensor) -> None:
    """torch's check of ops that may not read what they write (``index_copy_``): any shared element raises."""
    if overlaps(written, other) and overlap_status(written, other) in ("partial", "full"):
        raise RuntimeError(OVERLAP_MSG)


def assert_no_internal_overlap(written: torch.Tensor) -> None:
    """torch's check that no two elements of an op's output share memory (an expanded output raises)."""
    if has_internal_overlap(written):
        raise RuntimeError(INTERNAL_OVERLAP_MSG)


def out_strides_like(shape: Sequence[int], operands: Sequence[torch.Tensor]) -> tuple[int, ...] | None:
    """Strides of a new output: those of the first dense full-shape operand (None when it is contiguous: TensorIterator
    orders dims by the first operand whose strides tell them apart); else, when a full-shape operand is neither
    contiguous nor dense (overlapping or gapped), the layout TensorIterator gives (its dim order from every operand's
    strides, via torch's own ``compute_elementwise_output_strides``); else None (contiguous)."""
    odd = False
    for t in operands:
        if tuple(t.shape) == tuple(shape):
            if t.is_contiguous():
                if not odd:
                    return None
            elif _dense(t) and not odd:
                return tuple(t.stride())
            else:
                odd = True
    if not odd:
        return None
    st = elementwise_strides(tuple(int(s) for s in shape),
                             [expand_strides(t, shape) for t in operands
                              if not (t.dim() == 0 and t.device.type == "cpu")
                              and broadcast_shape(t.shape, shape) == tuple(shape)])
    return None if st == tuple(contiguous_strides_of(shape)) else st


def empty_like_strides(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...]:
    """The strides ``empty_like`` (and ``clone``) give a tensor of this layout with the preserve format: its own when
    it is non-overlapping and dense (c10's rule, dims of size 0/1 ignored), else the dense strides of its dim order.

    Example:
        >>> empty_like_strides((1, 3), (4, 1)), empty_like_strides((4, 3), (1, 8))
        ((4, 1), (1, 4))
    """
    if _dense_strides(shape, strides):
        return tuple(strides)
    return elementwise_strides(shape, [strides])


def expand_strides(t: torch.Tensor, shape: Sequence[int]) -> tuple[int, ...]:
    """``t.expand(shape).stride()`` without the dispatch: 0 for new and stretched dims; a size-1 dim that stays size 1
    keeps its stride (``broadcast_strides`` zeroes it: the launches' view, where it does not matter).

    Example:
        >>> expand_strides(torch.empty(3, 1, 2), (4, 3, 1, 2)), broadcast_strides(torch.empty(3, 1, 2), (4, 3, 1, 2))
        ((0, 2, 2, 1), [0, 2, 0, 1])
    """
    lead = len(shape) - t.dim()
    st = t.stride()
    return (0,) * lead + tuple(0 if n != int(shape[lead + i]) else st[i] for i, n in enumerate(t.shape))


def elementwise_strides(shape: tuple[int, ...], strides: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """The strides TensorIterator gives a new output of an elementwise op over operands of these (broadcast)
    strides: contiguous when every operand is (dims of size 1 ignored), channels-last when every 4-D operand is, the
    operands' own strides when they all have the same dense ones; else dense strides whose dims are ordered
    innermost-first by the operands' strides (the first operand that tells two dims apart decides; a 0 stride tells
    nothing; equal strides put the shorter dim inside), a stable insertion sort from the contiguous order. Plain
    integers: a few us, where ``torch._prims_common.compute_elementwise_output_strides`` takes ~80.

    Example:
        >>> elementwise_strides((2, 3), [(1, 2)]), elementwise_strides((2, 3, 4), [(12, 4, 1), (1, 8, 2)])
        ((1, 2), (12, 4, 1))
    """
    nd = len(shape)
    if nd <= 1 or not strides:
        return (1,) * nd
    if all(_is_contiguous(shape, s) for s in strides):
        return tuple(contiguous_strides_of(shape))
    if nd == 4 and all(contiguous_in(shape, s, (1, 3, 2, 0)) for s in strides):
        return strides_in_order(shape, [1, 3, 2, 0])
    if all(s == strides[0] for s in strides) and _dense_strides(shape, strides[0]):
        return tuple(strides[0])

    def swap(a: int, b: int) -> int:  # > 0: dim a goes outside dim b
        for s in strides:
            sa, sb = s[a], s[b]
            if sa == 0 or sb == 0:
                continue
            if sa != sb:
                return -1 if sa < sb else 1
            if shape[a] > shape[b]:
                return 1
        return 0

    perm = list(range(nd - 1, -1, -1))  # innermost first
    for i in range(1, nd):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            c = swap(perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    return strides_in_order(shape, perm)


def contiguous_in(shape: Sequence[int], strides: Sequence[int], inner_first: Sequence[int]) -> bool:
    """The layout is dense with its dims nested in this order (innermost first), dims of size 1 ignored: torch's
    ``is_contiguous(memory_format=...)`` rule (``(1, 3, 2, 0)``: channels-last).

    Example:
        >>> contiguous_in((2, 3, 4, 5), (60, 1, 15, 3), (1, 3, 2, 0)), contiguous_in((2, 3), (3, 1), (0, 1))
        (True, False)
    """
    expected = 1
    for d in inner_first:
        if shape[d] != 1:
            if strides[d] != expected:
                return False
            expected *= shape[d]
    return True


def strides_in_order(shape: Sequence[int], inner_first: Sequence[int]) -> tuple[int, ...]:
    """Dense strides with the dims nested in this order (innermost first).

    Example:
        >>> strides_in_order((2, 3, 4, 5), (1, 3, 2, 0))
        (60, 1, 15, 3)
    """
    out, acc = [0] * len(shape), 1
    for d in inner_first:
        out[d] = acc
        acc *= max(shape[d], 1)
    return tuple(out)


def _is_contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """torch's contiguity: row-major strides, ignoring dims of size 1 (and anything with fewer than 2 elements)."""
    return math.prod(shape) < 2 or contiguous_in(shape, strides, range(len(shape) - 1, -1, -1))


def _dense_strides(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Non-overlapping and dense in any dim order, by c10's rule (``memory.dense_layout``)."""
    return memory.dense_layout(shape, strides)


def contiguous_strides_of(shape: Sequence[int]) -> list[int]:
    """Row-major strides of ``shape``."""
    out, acc = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        out[i] = acc
        acc *= max(int(shape[i]), 1)
    return out


def _dense(t: torch.Tensor) -> bool:
    return _dense_strides(tuple(t.shape), t.stride())


def new_output(shape: Sequence[int], dtype: torch.dtype, like: Sequence[torch.Tensor] = ()) -> torch.Tensor:
    """Allocate an output on ``trn`` (strides follow a dense operand, like TensorIterator)."""
    st = out_strides_like(shape, like)
    if st is None:
        shape = tuple([int(s) for s in shape])
        if 0 < prod(shape) * dtype.itemsize <= fastlane.SMALL_MAX_BYTES:  # a small output: a pooled one, lent when free
            return fastlane.small_output(shape, dtype)
        return memory.empty(shape, dtype)  # the device allocator directly: no dispatcher round trip
    return memory.empty_strided(shape, st, dtype)


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...] | None:
    """The broadcast of ``shapes`` (torch's rules), or None when they do not broadcast: ``torch.broadcast_shapes``
    without its ~10 us of reference-implementation overhead, for the per-call paths.

    Example:
        >>> broadcast_shape((512, 1536), (1536,)), broadcast_shape((2, 1, 3), (4, 1)), broadcast_shape((2,), (3,))
        ((512, 1536), (2, 4, 3), None)
    """
    n = max((len(s) for s in shapes), default=0)
    out = [1] * n
    for s in shapes:
        off = n - len(s)
        for i, d in enumerate(s):
            d = int(d)
            if d != 1:
                o = out[off + i]
                if o == 1:
                    out[off + i] = d
                elif o != d:
                    return None
    return tuple(out)


def broadcast_strides(t: torch.Tensor, shape: Sequence[int]) -> list[int]:
    """Strides of ``t`` expanded to ``shape`` (0 along broadcast dims)."""
    r = len(shape)
    pad = r - t.dim()
    out = [0] * r
    for i, (n, st) in enumerate(zip(t.shape, t.stride())):
        out[pad + i] = st if n != 1 else 0
    return out


def order_dims(shape: Sequence[int], strides: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """The dims of an elementwise iteration space in the memory order of the last operand (the output: largest
    stride first, ties in dim order), every operand's strides permuted alike, as TensorIterator orders them. An op on
    transposed (or otherwise permuted) dense tensors then coalesces to one run of elements instead of a strided walk.

    Example:
        >>> order_dims((3, 4), [[1, 3], [1, 3]])
        ([4, 3], [[3, 1], [3, 1]])
    """
    out = strides[-1]
    perm = sorted(range(len(shape)), key=lambda d: -out[d] if shape[d] != 1 else 0)
    if perm == sorted(perm):
        return list(shape), [list(s) for s in strides]
    return [int(shape[d]) for d in perm], [[s[d] for d in perm] for s in strides]


def coalesce(shape: Sequence[int], strides: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """Merge adjacent dims that are contiguous with each other in every operand; drop size-1 dims."""
    dims = [i for i, n in enumerate(shape) if n != 1]
    sh = [int(shape[i]) for i in dims]
    sts = [[s[i] for i in dims] for s in strides]
    i = len(sh) - 2
    while i >= 0:
        if all(s[i] == s[i + 1] * sh[i + 1] for s in sts):
            sh[i] *= sh[i + 1]
            for s in sts:
                s[i] = s[i + 1]
                del s[i + 1]
            del sh[i + 1]
        i -= 1
    return sh, sts


def view(t: torch.Tensor, shape: Sequence[int], strides: Sequence[int], offset: int) -> torch.Tensor:
    """A strided view of ``t``'s storage (public API: ``torch.as_strided``)."""
    return torch.as_strided(t, tuple(shape), tuple(strides), offset)


def int32_words(t: torch.Tensor) -> torch.Tensor:
    """The (low, high) int32 words of an 8-byte tensor, as an int32 view of shape ``(*t.shape, 2)``.

    Works for every layout torch's ``.view(torch.int32)`` refuses: 0-dim tensors, non-unit and zero
    strides, storage offsets (strides and offset double, the last dim has stride 1). It aliases ``t``:
    writing the words writes ``t``. An empty ``t`` gets a fresh empty int32 tensor. Undo with
    :func:`from_int32_words`.

    Example:
        >>> import torch, trnlang  # doctest: +SKIP
        >>> w = int32_words(torch.tensor(-2, device="trn"))  # doctest: +SKIP
        >>> w.cpu().tolist()  # doctest: +SKIP
        [-2, -1]
    """
    if t.element_size() != 8:
        raise TypeError(f"int32_words: expected an 8-byte dtype, got {t.dtype}")
    shape = (*t.shape, 2)
    if t.numel() == 0:
        return torch.empty(shape, dtype=torch.int32, device=t.device)
    n = t.untyped_storage().nbytes() // 8
    base = torch.as_strided(t, (max(n, 1),), (1,), 0).view(torch.int32)  # the whole storage as int32
    return torch.as_strided(base, shape, (*(2 * s for s in t.stride()), 1), 2 * t.storage_offset())


def from_int32_words(w: torch.Tensor, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """The 8-byte tensor (``dtype``) whose (low, high) int32 words are ``w`` (shape ``(*shape, 2)``).

    Copies ``w`` when it is not contiguous; a 1-D ``w`` of 2 words gives a 0-dim result.

    Example:
        >>> import torch, trnlang  # doctest: +SKIP
        >>> from_int32_words(torch.tensor([-2, -1], dtype=torch.int32, device="trn")).cpu()  # doctest: +SKIP
        tensor(-2)
    """
    shape = tuple(w.shape[:-1])
    if w.numel() == 0:
        return torch.empty(shape, dtype=dtype, device=w.device)
    return w.contiguous().view(-1).view(dtype).view(shape)


def piece(t: torch.Tensor, shape: Sequence[int], strides: Sequence[int], offset: int) -> TensorPiece:
    """Like :func:`view`, for a kernel argument only: a ``TensorPiece`` (no torch view, no dispatch).

    Use it for launch pieces (``launch(kern, piece(...), ...)``); anything that needs a real tensor
    (another torch op, ``.fill_``, a return value) takes :func:`view`. ``t`` may itself be a piece (``offset`` is
    then in its base tensor's storage, as the piece's ``storage_offset()`` is).
    """
    if type(t) is TensorPiece:
        t = t.base
    return TensorPiece(t, tuple(shape), tuple(strides), offset)


def rows_piece(t: torch.Tensor, s: slice) -> TensorPiece:
    """``t[s]`` (a slice of the first dim, unit step) as a kernel argument (see :func:`piece`)."""
    start, stop, _ = s.indices(t.shape[0])
    stop = max(start, stop)
    st = t.stride()
    return TensorPiece(t, (stop - start, *t.shape[1:]), st, t.storage_offset() + start * st[0])


def read_scalar(t: torch.Tensor) -> Any:
    """The value of a one-element ``trn`` tensor, read from its memory (``t.item()`` without the dispatch): float32,
    int32 and int64 straight from the address (device memory is host memory), other dtypes through a passing CPU view
    (not cached on the storage, so a pooled output stays reusable)."""
    if t.numel() != 1:
        raise ValueError(f"read_scalar: expected one element, got {t.numel()}")
    ct = _SCALAR_CTYPES.get(t.dtype)
    if ct is not None and not (t.is_conj() or t.is_neg()):
        return ct.from_address(t.data_ptr()).value
    return memory.cpu_view(t, memory.block_of(t).cpu_storage()).item()


_SCALAR_CTYPES = {torch.float32: ctypes.c_float, torch.int32: ctypes.c_int32, torch.int64: ctypes.c_int64}


def as_1x1(t: torch.Tensor) -> torch.Tensor:
    """A one-element device tensor seen as ``[1, 1]``."""
    if t.dim() == 2:
        return t
    return torch.as_strided(t, (1, 1), (1, 1), t.storage_offset())


def prod(xs: Sequence[int]) -> int:
    """Product of ints (1 for an empty sequence)."""
    r = 1
    for x in xs:
        r *= int(x)
    return r


def row_views(ts: Sequence[torch.Tensor]) -> list[list[torch.Tensor]]:
    """Views of same-shaped tensors as ``[R, L]`` or ``[A, R, L]`` (the last dim kept as is).

    Leading dims are merged where every tensor allows it; more than two remaining leading dims
    are looped over on the host. Returns one list of views (one per tensor) per launch.
    """
    shape = tuple(ts[0].shape)
    last = shape[-1]
    lead_shape = shape[:-1]
    sh, sts = coalesce(lead_shape, [list(t.stride()[:-1]) for t in ts])
    lasts = [t.stride()[-1] for t in ts]
    if not sh:
        sh, sts = [1], [[0] for _ in ts]
    launches = []
    outer, inner = sh[:-2], sh[-2:]
    import itertools

    for idx in itertools.product(*[range(n) for n in outer]):
        vs = []
        for k, t in enumerate(ts):
            off = t.storage_offset() + sum(i * sts[k][d] for d, i in enumerate(idx))
            ist = sts[k][len(outer):]
            vs.append(view(t, (*inner, last), (*ist, lasts[k]), off))
        launches.append(vs)
    return launches


# --- host-side parallelism (trnlang/runtime/launch.py: run_parallel, split_rows, row_blocks, chunks) ----------
def launch(kern: Any, *args: Any) -> Launch:
    """A launch of ``kern(*args)`` prepared now (``KernelFn.bind``), for :func:`run_parallel`.

    Binding in the calling thread leaves a worker thread only the native call, so the launches of
    one op start together.
    """
    return kern.bind(*args)


class BoundLaunches:
    """The bound launches of a split op, reused while its addresses and layout repeat.

    Binding a launch (:func:`launch`) costs a few microseconds of key building per launch; a big
    row op made of two launches pays that on every call, after its kernels have flushed the host
    caches. A lowering that knows its operands' layout (shapes, dtypes, contiguity: what the
    launch's plan key would contain) keys the list of launches on those facts and the addresses,
    and skips the binds on a repeat (a caching allocator hands it the same blocks call after call).
    Only lists of native launches are kept (none while ``trn profile`` records: launches must reach
    the recorder), so a hit runs exactly what a fresh bind would. The key includes the settings a
    launch depends on (``trnlang.config.current.launch_key``). At most ``size`` keys. Every cache
    is emptied when compiled variants are evicted (``TRN_MAX_LOADED_KERNELS``): a kept launch holds
    its variant's code.

    Example:
        >>> cache = BoundLaunches()
        >>> cache.get(("k", 1), lambda: [print]) == [print]   # not native launches: made, not kept
        True
    """

    __slots__ = ("size", "entries")

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self.entries: dict[tuple[Any, ...], list[Any]] = {}
        _BOUND.append(self)

    def get(self, key: tuple[Any, ...], make: Any) -> list[Any]:
        """The launches for ``key`` (``make()`` on a miss; kept when all of them are native launches)."""
        if not PLANS.enabled:
            return make()
        k = (key, _config.current.launch_key)
        hit = self.entries.get(k)
        if hit is not None:
            for c in hit:
                c.touch()
            return hit
        calls = make()
        if all(type(c) is Launch and c.native for c in calls):
            if len(self.entries) >= self.size:
                self.entries.clear()
            self.entries[k] = calls
        return calls


_BOUND: list[BoundLaunches] = []


@codecache.on_evict
def _drop_bound(evicted: list[Any]) -> None:
    """Empty every BoundLaunches cache (a kept launch holds its variant's code; rebinding costs microseconds)."""
    for b in _BOUND:
        b.entries = {}


Part = tuple  # (shape, per-operand strides, per-operand element offsets) of one 1- to 3-D launch


def split_parts(parts: list[Part], work: int) -> list[Part]:
    """Split big launch pieces into one block per thread (disjoint index ranges of one dim).

    A ``[Z, A, N, D]`` piece splits ``Z`` (else ``A``, else ``N``), ``[A, N, D]`` splits ``A`` (else ``N``),
    ``[N, D]`` splits the partition dim ``N`` in multiples of 128 (else ``D`` in multiples of 512), ``[D]`` splits
    ``D``. Operands keep their strides (broadcast dims included); only the offsets move.
    """
    threads = num_threads()
    if threads == 1 or work < PARALLEL_MIN_WORK:
        return parts
    out: list[Part] = []
    for shape, strides, offs in parts:
        nd = len(shape)
        cands = {4: [(0, 1), (1, 1), (2, 128)], 3: [(0, 1), (1, 128)], 2: [(0, 128), (1, 512)],
                 1: [(0, 512)]}.get(nd, [])
        pick = next(((d, al) for d, al in cands if shape[d] >= 2 * al), None)
        if pick is None:
            out.append((shape, strides, offs))
            continue
        d, al = pick
        for lo, hi in chunks(int(shape[d]), threads, al):
            sh = list(shape)
            sh[d] = hi - lo
            out.append((sh, strides, [o + lo * st[d] for o, st in zip(offs, strides)]))
    return out


# --- 1- to 3-D launch pieces shared by the elementwise kernels ------------------------------------------------
def shape3(t: Any) -> tuple[int, int, int]:
    """``(batch, rows, cols)`` of a 1- to 3-D kernel argument (missing leading dims are 1)."""
    if t.ndim == 3:
        return t.shape
    if t.ndim == 2:
        return (1, t.shape[0], t.shape[1])
    return (1, 1, t.shape[0])


def at3(t: Any, b: Any, rows: Any, cols: Any) -> Any:
    """The access of ``t`` (1- to 3-D) at batch ``b``, partition rows ``rows``, free columns ``cols``."""
    if t.ndim == 3:
        return t[b, rows, cols]
    if t.ndim == 2:
        return t[rows, cols]
    return t[cols]


BIG_1D = 4096
#: Row length of a long 1-D launch split into rows: a ``[128, f]`` tile then covers 128 * f consecutive
#: elements (one linear stream for the host's prefetchers, not 128 far-apart runs).
ROW_1D = 1024


def launch_parts(sh: list[int], sts: list[list[int]], max_dims: int = 3) -> list[Part]:
    """1- to ``max_dims``-D launch pieces of a coalesced iteration space (``sh``, per-operand strides ``sts``).

    One long dim becomes ``[128, n // 128]`` (all partitions; ``[n // ROW_1D, ROW_1D]`` when longer) plus a
    tail; more than ``max_dims`` dims (3, or 4 for kernels taking 4-D views) loop over the leading ones on the
    host.
    """
    if not sh:
        sh, sts = [1], [[0] for _ in sts]
    parts: list[Part] = []
    if len(sh) == 1 and sh[0] >= BIG_1D:
        n = sh[0]
        cols = n // 128 if n <= 128 * ROW_1D else ROW_1D
        rows = n // cols
        rem = n - rows * cols
        parts.append(([rows, cols], [[s[0] * cols, s[0]] for s in sts], [0] * len(sts)))
        if rem:
            parts.append(([rem], [[s[0]] for s in sts], [rows * cols * s[0] for s in sts]))
        return parts
    import itertools

    lead, inner = sh[:-max_dims], sh[-max_dims:]
    for idx in itertools.product(*[range(n) for n in lead]):
        offs = [sum(i * s[k] for k, i in enumerate(idx)) for s in sts]
        parts.append((inner, [s[len(lead):] for s in sts], offs))
    return parts


def wrap_int(v: Any, dtype: torch.dtype) -> Any:
    """A Python int (of int64's range: torch refuses others) as torch converts it to an integer ``dtype``: modulo
    ``2**bits``, signed as two's complement (``uint8_tensor >= -1`` compares with 255); other values unchanged.

    >>> wrap_int(-1, torch.uint8), wrap_int(200, torch.int8), wrap_int(300, torch.int16), wrap_int(2.5, torch.uint8)
    (255, -56, 300, 2.5)
    """
    if isinstance(v, bool) or not isinstance(v, int) or not -(1 << 63) <= v < (1 << 63):
        return v
    bits = torch.iinfo(dtype).bits
    if dtype == torch.uint8:
        return v % (1 << bits)
    half = 1 << (bits - 1)
    return (v + half) % (1 << bits) - half


#: An int32 with only the sign bit: XOR with it makes signed int32 compares order unsigned words.
SIGN32 = -(1 << 31)


def s32(v: int) -> int:
    """The int32 holding the low 32 bits of the Python int ``v`` (two's complement).

    Example:
        >>> s32(2**32 - 1), s32(2**31), s32(5)
        (-1, -2147483648, 5)
    """
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def add64_words(lo: torch.Tensor, hi: torch.Tensor, c: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(lo, hi) + c`` on the int32 words of int64 values (wrapping as int64 does): the low words added, the
    carry read from their unsigned order, the high words added with it; all on the device."""
    nlo = lo + s32(c)
    carry = (torch.bitwise_xor(nlo, SIGN32) < torch.bitwise_xor(lo, SIGN32)).to(torch.int32)
    return nlo, hi + s32(c >> 32) + carry
