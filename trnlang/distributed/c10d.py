"""The ``trn`` c10d backend: collectives on ``trn`` tensors, carried by gloo over zero-copy host views.

``trn`` device memory is host memory, so a collective on ``trn`` tensors needs no copy: each tensor is seen
through a CPU tensor on the same bytes (:func:`trnlang.device.memory.cpu_view`) and gloo moves those bytes.

How a collective gets here (torch 2.13):

1. ``init_process_group`` asks the creator registered for ``"trn"`` (:func:`create_backend`) for the
   backend of the ``trn`` device. It returns a ``ProcessGroupGloo`` made from the same store, rank, size and
   timeout; the group registers it for ``trn``. Alongside it a *shadow* ``ProcessGroup`` that has that gloo
   backend registered for the CPU is kept in :data:`_SHADOWS`, keyed by the group's name.
2. ``dist.all_reduce(t)`` calls ``ProcessGroup.allreduce``, which dispatches the ``c10d::allreduce_`` op on
   the tensors' dispatch key. torch's own ``PrivateUse1`` kernels of the ``c10d`` ops would hand the ``trn``
   tensors to gloo, which rejects non-CPU tensors; :func:`register_kernels` replaces them (for the
   ``PrivateUse1`` key only) with one generic kernel, :func:`_collective`.
3. :func:`_collective` swaps every ``trn`` tensor argument for its CPU view and the group for its shadow,
   and calls the same ``c10d`` op again: it now dispatches to torch's CPU kernel, which runs gloo's
   implementation on the views, in place in device memory. The op's returned tensors are mapped back to the
   ``trn`` tensors; the ``Work`` is gloo's (``wait()`` raises gloo's errors; ``get_future().value()`` holds
   the CPU views, i.e. the same bytes, which is what DDP's reducer reads its bucket from).

Before each collective (not point-to-point ones) the ranks all-gather a fixed-size frame holding a short
description of the call (op, dtypes, shapes, reduce op) and all raise :class:`TrnDistributedError` when they
differ (:func:`check_enabled`, ``TRN_DIST_CHECK``); gloo itself would abort the process that receives the
wrong number of bytes. The frame also has a payload slot (1 KiB, or the size of the group's previous
agreed all-reduce up to 64 KiB, see :class:`_Group`): an all-reduce that fits it and whose result cannot
depend on the order of the reduction (integers; fp32/fp64/fp16/bf16 sum and product on 2 ranks) travels in
it and each rank reduces the gathered payloads itself, so such a checked all-reduce costs one round trip,
not two (:func:`_allreduce`).

Every reduction and dtype is gloo's: ``ReduceOp.AVG`` is gloo's sum-then-divide (so, as on the CPU, it
raises for integer tensors), bf16/fp16 are reduced by gloo natively and bool as bytes. Results therefore equal
gloo's on CPU tensors bit for bit. A ``trn`` collective given a CPU tensor raises :class:`TrnDistributedError`
instead of quietly moving host memory.

Example:
    >>> import torch, torch.distributed as dist
    >>> dist.init_process_group("cpu:gloo,trn:trn", rank=0, world_size=1,
    ...                         init_method="tcp://127.0.0.1:29599")  # doctest: +SKIP
    >>> t = torch.ones(4, device="trn"); dist.all_reduce(t); t.cpu().tolist()  # doctest: +SKIP
    [1.0, 1.0, 1.0, 1.0]
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
import warnings
import zlib
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroupGloo

from trnlang.device import memory
from trnlang.distributed.cost import ACTIVE as _COST_LOGS

__all__ = ["BACKEND", "TrnDistributedError", "create_backend", "register_kernels", "check_enabled", "C10D_OPS"]

#: The name of the backend (``init_process_group(backend=...)``) and of the device it serves.
BACKEND = "trn"

#: The ``c10d`` ops torch registers for ``PrivateUse1`` (torch 2.13): each gets the generic kernel.
C10D_OPS = (
    "allreduce_", "allreduce_coalesced_", "broadcast_", "reduce_", "allgather_", "_allgather_base_",
    "allgather_coalesced_", "allgather_into_tensor_coalesced_", "reduce_scatter_", "_reduce_scatter_base_",
    "reduce_scatter_tensor_coalesced_", "alltoall_", "alltoall_base_", "gather_", "scatter_", "send", "recv_",
    "recv_any_source_", "barrier",
)

#: Per op, the arguments whose dtypes and shapes must agree on every rank (checked before the collective
#: runs, see :func:`_check_agreement`); ``()``: only the op must agree. Point-to-point ops are not checked.
_AGREE: dict[str, tuple[int, ...]] = {
    "allreduce_": (0,), "allreduce_coalesced_": (0,), "broadcast_": (0,), "reduce_": (0,), "allgather_": (1,),
    "_allgather_base_": (0, 1), "allgather_coalesced_": (1,), "allgather_into_tensor_coalesced_": (0, 1),
    "reduce_scatter_": (0,), "_reduce_scatter_base_": (0, 1), "reduce_scatter_tensor_coalesced_": (0, 1),
    "alltoall_": (), "alltoall_base_": (), "gather_": (1,), "scatter_": (0,), "barrier": (),
}
_DESC_BYTES = 256
#: payload bytes a checked collective's frame carries after the description unless the group's previous call
#: was a larger all-reduce that rides (:meth:`_Group.next_slot`): an all-reduce this small is done by the
#: agreement exchange itself (:func:`_allreduce`). Small, because every checked call posts the whole frame
#: and gloo's all-gather costs CPU by the byte (with a 16 KiB frame a checked 1 KiB all-reduce cost 3x the
#: CPU of gloo's on the loaded 2-core host)
_INLINE_BYTES = 1024
#: the largest payload slot a frame grows to (a group that keeps all-reducing up to this many bytes gets them
#: carried in the exchange; larger all-reduces take the check's round trip, then gloo's, zero-copy). Above
#: it the copy into the frame and the reduction of every rank's row cost more CPU than a second round trip
#: (measured: 1 MiB and 4 MiB rode at half the speed of check + gloo on the loaded 2-core host)
_INLINE_MAX = 64 * 1024
_CPU = torch.device("cpu")
_lock = threading.Lock()
_LIBS: list[Any] = []


class _Group:
    """What a ``trn`` process group keeps between collectives: its gloo backend and shadow group, and the
    agreement frame (the payload slot's size and the buffers the exchange reuses).

    The slot's size is a function of the calls every rank has agreed on so far (see :meth:`next_slot`), so
    every rank posts frames of the same size whatever it is about to call: gloo aborts a process that
    receives a message of the wrong size, an exception can be raised on every rank."""

    __slots__ = ("gloo", "shadow", "size", "slot", "mine", "every", "busy", "vals")

    def __init__(self, gloo: Any, shadow: Any) -> None:
        self.gloo, self.shadow, self.size = gloo, shadow.boxed(), gloo.size()
        self.slot = _INLINE_BYTES
        self.mine = self.every = torch.empty(0, dtype=torch.uint8)
        self.busy = threading.Lock()  # the buffers are one call's at a time (another thread gets fresh ones)
        self.vals: tuple[Any, ...] = ()  # (dtype, shape, every's rows viewed as that payload), last used

    def frame_bytes(self) -> int:
        return _DESC_BYTES + self.slot

    def buffers(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The frame this rank posts and the buffer that gathers every rank's (reused while the slot stays)."""
        f = self.frame_bytes()
        if self.mine.numel() != f:
            self.mine = torch.empty(f, dtype=torch.uint8)
            self.every = torch.empty(self.size * f, dtype=torch.uint8)
            self.vals = ()
        return self.mine, self.every

    def next_slot(self, inline_bytes: int) -> None:
        """After an agreed checked call: the next frame's slot fits this call's payload if it was an all-reduce
        that can ride (``inline_bytes``, 0 otherwise), within [:data:`_INLINE_BYTES`, :data:`_INLINE_MAX`].
        A loop of same-sized all-reduces rides from its second call; any other call shrinks the slot back."""
        want = -(-inline_bytes // 64) * 64
        self.slot = _INLINE_BYTES if want <= _INLINE_BYTES or want > _INLINE_MAX else want


#: group name -> its :class:`_Group` (the gloo backend registered for trn, the shadow group serving it)
_SHADOWS: dict[str, _Group] = {}


class TrnDistributedError(RuntimeError):
    """A collective on ``trn`` tensors that cannot run as asked (e.g. ``trn`` and CPU tensors mixed).

    Example:
        >>> issubclass(TrnDistributedError, RuntimeError)
        True
    """


def _make_gloo(store: Any, rank: int, size: int, timeout: timedelta, options: Any) -> Any:
    if isinstance(options, ProcessGroupGloo._Options):  # type: ignore[attr-defined]  # pg_options from init_process_group / new_group
        options._timeout = timeout
        return ProcessGroupGloo(store, rank, size, options)
    return ProcessGroupGloo(store, rank, size, timeout)


def create_backend(opts: Any, backend_options: Any = None) -> Any:
    """The creator registered with ``Backend.register_backend("trn", ..., extended_api=True)``.

    Args:
        opts: torch's ``_DistributedBackendOptions`` (store, group rank/size, timeout, group name).
        backend_options: ``pg_options`` passed to ``init_process_group``/``new_group``; a
            ``ProcessGroupGloo.Options`` is honoured (threads, devices), anything else ignored.

    Returns:
        The ``ProcessGroupGloo`` the group registers for the ``trn`` device.

    Example:
        >>> import torch.distributed as dist
        >>> dist.Backend.register_backend("trn", create_backend, extended_api=True, devices=["trn"])  # doctest: +SKIP
    """
    timeout = opts.timeout if opts.timeout is not None else timedelta(minutes=30)
    gloo = _make_gloo(opts.store, opts.group_rank, opts.group_size, timeout, backend_options)
    shadow = dist.ProcessGroup(opts.store, opts.group_rank, opts.group_size)
    shadow._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
    shadow._register_backend(_CPU, dist.ProcessGroup.BackendType.GLOO, gloo)
    with _lock:
        _SHADOWS[str(opts.group_id)] = _Group(gloo, shadow)
    return gloo


def _group_of(boxed_pg: Any) -> tuple[_Group, str]:
    """The :class:`_Group` (and name) of the group a ``c10d`` op was called with."""
    pg = dist.ProcessGroup.unbox(boxed_pg)
    name = pg.group_name
    entry = _SHADOWS.get(name)
    try:
        backend: Any = pg._get_backend(memory.DEVICE)
    except RuntimeError as e:  # the group has no backend for trn: torch's own message says which
        raise TrnDistributedError(f"trn: process group {name!r} has no backend for trn tensors "
                                  f"(init_process_group('cpu:gloo,trn:trn') or backend='trn'): {e}") from None
    if entry is not None and entry.gloo is not backend and getattr(backend, "wrapped_pg", None) is entry.gloo:
        backend = entry.gloo  # TORCH_DISTRIBUTED_DEBUG=DETAIL wraps backends; the agreement check stands in
    if entry is None or entry.gloo is not backend:
        raise TrnDistributedError(
            f"trn: the trn backend of process group {name!r} was not made by trnlang's 'trn' backend "
            f"({type(backend).__name__}); collectives on trn tensors need init_process_group(backend='trn') "
            "or 'cpu:gloo,trn:trn'")
    return entry, name


def check_enabled() -> bool:
    """Whether collectives first check that every rank called the same op on the same shapes.

    ``TRN_DIST_CHECK=1`` (the default) exchanges a 256-byte description per collective (one gloo
    all-gather of a fixed-size frame, which carries small all-reduces' data too) and raises
    :class:`TrnDistributedError` on every rank when they differ; without it gloo aborts a process on
    mismatched sizes. ``TRN_DIST_CHECK=0`` skips the exchange. Every rank must use the same setting.

    Example:
        >>> import os; os.environ["TRN_DIST_CHECK"] = "1"; check_enabled()
        True
    """
    v = os.environ.get("TRN_DIST_CHECK", "1")
    if v not in ("0", "1"):
        raise ValueError(f"TRN_DIST_CHECK must be 0 or 1, got {v!r}")
    return v == "1"


def _describe(name: str, args: tuple[Any, ...]) -> str:
    parts = [name]
    for i in _AGREE[name]:
        flat = args[i] if isinstance(args[i], list) else [args[i]]
        flat = [t for x in flat for t in (x if isinstance(x, list) else [x])]
        parts.append(" ".join(f"{str(t.dtype)[6:]}{list(t.shape)}" for t in flat))
    if name in ("alltoall_", "alltoall_base_"):
        t = args[1][0] if isinstance(args[1], list) and args[1] else args[1]
        parts.append(str(t.dtype)[6:] if isinstance(t, torch.Tensor) else "")
    return " ".join(parts)


@functools.lru_cache(maxsize=512)
def _head(desc_text: str) -> bytes:
    """The frame's description field: ``desc_text`` padded to :data:`_DESC_BYTES` (a digest stands for the
    tail of long ones, e.g. long lists of tensors)."""
    desc = desc_text.encode()
    if len(desc) > _DESC_BYTES:
        desc = desc[:_DESC_BYTES - 9] + b"#" + f"{zlib.crc32(desc):08x}".encode()
    return desc.ljust(_DESC_BYTES, b"\0")


def _exchange(g: _Group, group: str, head: bytes, payload: torch.Tensor | None = None, red: Any = None) -> None:
    """All-gather every rank's frame (description, then the payload slot); raise on every rank if the
    descriptions differ. With ``payload`` (at most the slot's bytes; the calling rank's CPU view of an
    all-reduce) every rank's payload travels in the frame and is reduced with ``red`` into ``payload``.

    Every checked collective exchanges a frame of the group's current size (:class:`_Group`), whatever it
    carries, so that ranks that disagree about the call still agree about the exchange."""
    own = g.busy.acquire(blocking=False)
    try:
        if own:
            mine, every = g.buffers()
        else:  # another thread is using the group's buffers: same sizes, fresh memory
            mine = torch.empty(g.frame_bytes(), dtype=torch.uint8)
            every = torch.empty(g.size * mine.numel(), dtype=torch.uint8)
        f = mine.numel()
        mine_np = mine.numpy()
        mine_np[:_DESC_BYTES] = np.frombuffer(head, dtype=np.uint8)
        if payload is not None and payload.numel():
            nbytes = payload.numel() * payload.element_size()
            if payload.is_contiguous() and not payload.is_neg():
                ctypes.memmove(mine.data_ptr() + _DESC_BYTES, payload.data_ptr(), nbytes)
            else:
                mine[_DESC_BYTES:_DESC_BYTES + nbytes].view(payload.dtype).view(payload.shape).copy_(payload)
        g.gloo._allgather_base(every, mine).wait()  # raises gloo's timeout if a rank never calls a collective
        ev = every.numpy()
        if any(ev[r * f:r * f + _DESC_BYTES].tobytes() != head for r in range(g.size)):
            said = [ev[r * f:r * f + _DESC_BYTES].tobytes().rstrip(b"\0").decode(errors="replace")
                    for r in range(g.size)]
            raise TrnDistributedError(
                f"trn: collective mismatch in process group {group!r}: "
                + "; ".join(f"rank {r} called {d}" for r, d in enumerate(said))
                + " (every rank must call the same collective on the same dtypes and shapes)")
        if payload is not None:
            _reduce_rows(g if own else None, every.view(g.size, f), payload, red)
    finally:
        if own:
            g.busy.release()


def _check_agreement(g: _Group, group: str, name: str, args: tuple[Any, ...]) -> None:
    """All-gather each rank's description of this call; raise on every rank if they differ."""
    _exchange(g, group, _head(_describe(name, args)))
    g.next_slot(0)


#: dtypes whose SUM/PRODUCT/MIN/MAX give the same bits in any order (two's-complement integers)
_INT_DTYPES = frozenset({torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64})
#: float dtypes reduced inline when 2 ranks take part (a + b == b + a: the same bits as gloo's reduction)
_FLOAT_DTYPES = frozenset({torch.float32, torch.float64, torch.float16, torch.bfloat16})


def _rides(t: torch.Tensor, red: Any, ranks: int) -> bool:
    """Whether an all-reduce of ``t`` may ride in the agreement frame (see :func:`_allreduce`), size aside.
    Depends only on what the description carries (dtype, op) and the group size, so all ranks decide alike."""
    if t.dtype in _INT_DTYPES:
        return red in _INLINE_OPS
    # floats: only where the order cannot change the bits (MIN/MAX are left to gloo: NaN handling differs)
    return ranks == 2 and t.dtype in _FLOAT_DTYPES and red in (dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT)


def _inline_reducible(t: torch.Tensor, red: Any, ranks: int, slot: int = _INLINE_BYTES) -> bool:
    """Whether an all-reduce of ``t`` rides in a frame whose payload slot holds ``slot`` bytes."""
    return t.numel() * t.element_size() <= slot and _rides(t, red, ranks)


def _reduce_rows(g: _Group | None, rows: torch.Tensor, out: torch.Tensor, red: Any) -> None:
    """Reduce every rank's payload (in rank order) into ``out``, the calling rank's CPU view."""
    n = out.numel()
    if n == 0:
        return
    if g is not None and g.vals[:2] == (out.dtype, out.shape):
        vals = g.vals[2]
    else:
        flat = rows[:, _DESC_BYTES:_DESC_BYTES + n * out.element_size()].view(out.dtype)
        vals = [flat[i].view(out.shape) for i in range(rows.shape[0])]
        if g is not None:
            g.vals = (out.dtype, out.shape, vals)
    fn = _INLINE_OPS[red]
    if len(vals) == 2:
        fn(vals[0], vals[1], out=out)
        return
    acc = vals[0]
    for v in vals[1:]:
        acc = fn(acc, v)
    out.copy_(acc)


class _Views:
    """Maps ``trn`` tensors to CPU views (and back), checking that every tensor is on ``trn``."""

    def __init__(self, op: str) -> None:
        self.op = op
        self.back: dict[int, torch.Tensor] = {}
        self.keep: list[torch.Tensor] = []  # views stay alive (and their ids unique) until the work is done

    def to_cpu(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            v = _view(self.op, x)
            self.back[id(v)] = x
            self.keep.append(v)
            return v
        if isinstance(x, list):
            return [self.to_cpu(e) for e in x]
        return x

    def to_trn(self, x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return self.back.get(id(x), x)
        if isinstance(x, (list, tuple)):
            return type(x)(self.to_trn(e) for e in x)
        return x  # the Work


_REDOPS = {int(v.value): v for v in dist.ReduceOp.RedOpType.__members__.values()}


_INLINE_OPS: dict[Any, Any] = {dist.ReduceOp.SUM: torch.add, dist.ReduceOp.PRODUCT: torch.mul,
                               dist.ReduceOp.MIN: torch.minimum, dist.ReduceOp.MAX: torch.maximum}


_create_work_from_future = torch._C._distributed_c10d._create_work_from_future  # type: ignore[attr-defined]


def _done(result: list[torch.Tensor]) -> Any:
    """A completed ``Work`` whose future holds ``result`` (what gloo's all-reduce work holds: the CPU views)."""
    fut: torch.futures.Future[list[torch.Tensor]] = torch.futures.Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


def _view(op: str, x: Any) -> torch.Tensor:
    """The CPU view of the ``trn`` tensor ``x`` (an argument of ``c10d::<op>``)."""
    if not isinstance(x, torch.Tensor) or x.device.type != BACKEND:
        kind = x.device.type if isinstance(x, torch.Tensor) else type(x).__name__
        raise TrnDistributedError(
            f"trn: c10d::{op} got a {kind} tensor together with trn tensors; a collective "
            "takes tensors of one device (use a CPU group, e.g. init_process_group('cpu:gloo,trn:trn'), "
            "for CPU tensors)")
    if x.numel() == 0:
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype)
    return memory.cpu_view(x)


#: (dtype, shape, reduce op) of a one-tensor all-reduce -> its frame description (the hot loop's key)
_AR_HEADS: dict[tuple[Any, ...], bytes] = {}


def _allreduce_head(tensors: list[torch.Tensor], red: Any) -> bytes:
    if len(tensors) != 1:
        return _head(f"{_describe('allreduce_', (tensors,))} {red.name}")
    t = tensors[0]
    key = (t.dtype, t.shape, red)
    head = _AR_HEADS.get(key)
    if head is None:
        if len(_AR_HEADS) > 512:
            _AR_HEADS.clear()
        head = _AR_HEADS[key] = _head(f"{_describe('allreduce_', (tensors,))} {red.name}")
    return head


def _allreduce(tensors: list[torch.Tensor], pg: Any, reduce_op: Any, sparse_indices: Any = None,
               async_op: bool = True, timeout: int = -1) -> Any:
    """``c10d::allreduce_`` on trn tensors, straight to gloo's method: what torch's CPU kernel does, without a
    second trip through the dispatcher.

    With the agreement check on, an all-reduce of one tensor whose result does not depend on the order of
    the reduction (see :func:`_rides`) and that fits the frame's payload slot (:class:`_Group`: 1 KiB, or the
    size of the previous all-reduce up to :data:`_INLINE_MAX`) rides in the check's own all-gather: each rank
    reduces the gathered payloads in rank order. One round trip instead of two (the check's, then gloo's);
    the bits are gloo's. The returned ``Work`` is already complete."""
    red = _REDOPS.get(int(reduce_op.op()))
    if sparse_indices is not None or red is None or red == dist.ReduceOp.PREMUL_SUM:
        return _GENERIC["allreduce_"](tensors, pg, reduce_op, sparse_indices, async_op, timeout)
    cpu = [_view("allreduce_", t) for t in tensors]
    g, group = _group_of(pg)
    if _COST_LOGS:
        _note("allreduce_", (tensors,), g.size, group)
    if check_enabled():
        head = _allreduce_head(tensors, red)
        ride = len(cpu) == 1 and _rides(cpu[0], red, g.size)
        nbytes = cpu[0].numel() * cpu[0].element_size() if ride else 0
        if ride and nbytes <= g.slot:
            _exchange(g, group, head, cpu[0], red)
            g.next_slot(nbytes)
            return tensors, _done(cpu).boxed()
        _exchange(g, group, head)
        g.next_slot(nbytes)
    opts = dist.AllreduceOptions()
    opts.reduceOp = red  # type: ignore[assignment]  # torch converts a RedOpType, as dist.all_reduce relies on
    opts.asyncOp = async_op
    if timeout >= 0:
        opts.timeout = timedelta(milliseconds=timeout)
    return tensors, g.gloo.allreduce(cpu, opts).boxed()


def _note(name: str, args: tuple[Any, ...], ranks: int, group: str) -> None:
    """Note the call in every :func:`trnlang.distributed.cost.record` log (only called while one records)."""
    for log in _COST_LOGS:
        log.note(name, args, ranks, group)


def _collective(name: str, pg_index: int) -> Any:
    """The ``PrivateUse1`` kernel of ``c10d::<name>``: rerun the op on CPU views with the shadow group."""
    op = getattr(torch.ops.c10d, name).default

    def kernel(*args: Any) -> Any:
        views = _Views(name)
        new = [views.to_cpu(a) for a in args]
        g, group = _group_of(args[pg_index])
        new[pg_index] = g.shadow
        if name in _AGREE and check_enabled():
            _check_agreement(g, group, name, args)
        if _COST_LOGS:
            _note(name, args, g.size, group)
        out = op(*new)
        # gloo's own Work goes back: its wait() raises gloo's errors (a timeout, a size mismatch), which a
        # future-wrapping Work would swallow. Its future yields the CPU views (the trn tensors' own bytes).
        return views.to_trn(out) if isinstance(out, tuple) else out

    kernel.__name__ = f"trn_{name}"
    kernel.__qualname__ = kernel.__name__
    return kernel


_GENERIC: dict[str, Any] = {}
#: ops with a direct kernel (the hot ones: DDP's buckets, the benchmark); the others take :func:`_collective`
_FAST = {"allreduce_": _allreduce}


def register_kernels() -> None:
    """Route the ``c10d`` ops on ``trn`` tensors (the ``PrivateUse1`` key) to gloo on host views (idempotent).

    Example:
        >>> register_kernels()  # doctest: +SKIP
    """
    with _lock:
        if _LIBS:
            return
        lib = torch.library.Library("c10d", "IMPL")
        with warnings.catch_warnings():
            # torch registers placeholder PrivateUse1 kernels (they call the trn backend, i.e. gloo, with trn
            # tensors); replacing them for this key is the point, so its "overriding a kernel" warning is noise.
            warnings.filterwarnings("ignore", message=".*[Oo]verrid.*")
            for name in C10D_OPS:
                schema = getattr(torch.ops.c10d, name).default._schema
                pg_index = next(i for i, a in enumerate(schema.arguments) if "ProcessGroup" in str(a.type))
                _GENERIC[name] = _collective(name, pg_index)
                lib.impl(name, _FAST.get(name, _GENERIC[name]), "PrivateUse1")
        _LIBS.append(lib)
