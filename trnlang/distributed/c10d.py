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

Before each collective (not point-to-point ones) the ranks exchange a short description of the call (op,
dtypes, shapes, reduce op) and all raise :class:`TrnDistributedError` when they differ (:func:`check_enabled`,
``TRN_DIST_CHECK``); gloo itself would abort the process that receives the wrong number of bytes. How the
check travels is decided per group from the calls every rank already agreed on
(:mod:`trnlang.distributed.agree`): a small all-reduce rides in the check's own all-gather; a predicted one
(the next of a loop of same all-reduces, the next DDP bucket) runs as gloo's all-reduce on the zero-copy view
while the check runs; anything else takes the check, then its collective.

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

import functools
import os
import threading
import warnings
import weakref
import zlib
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroupGloo

from trnlang.device import compat_dist, memory
from trnlang.distributed.agree import DESC_BYTES, Group, TrnDistributedError
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
#: runs, see :meth:`~trnlang.distributed.agree.Group.agree`); ``()``: only the op must agree. Point-to-point
#: ops are not checked.
_AGREE: dict[str, tuple[int, ...]] = {
    "allreduce_": (0,), "allreduce_coalesced_": (0,), "broadcast_": (0,), "reduce_": (0,), "allgather_": (1,),
    "_allgather_base_": (0, 1), "allgather_coalesced_": (1,), "allgather_into_tensor_coalesced_": (0, 1),
    "reduce_scatter_": (0,), "_reduce_scatter_base_": (0, 1), "reduce_scatter_tensor_coalesced_": (0, 1),
    "alltoall_": (), "alltoall_base_": (), "gather_": (1,), "scatter_": (0,), "barrier": (),
}
_CPU = torch.device("cpu")
_lock = threading.Lock()
_LIBS: list[Any] = []

#: group name -> its :class:`~trnlang.distributed.agree.Group` (the gloo backend registered for trn, the
#: shadow group serving it, the agreement check's plan and buffers)
_SHADOWS: dict[str, Group] = {}


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
        _SHADOWS[str(opts.group_id)] = Group(gloo, shadow.boxed())
        _FRONT.clear()
    return gloo


def _group_of(boxed_pg: Any) -> tuple[Group, str]:
    """The :class:`~trnlang.distributed.agree.Group` (and name) of the group a ``c10d`` op was called with."""
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
    """The frame's description field: ``desc_text`` padded to ``DESC_BYTES`` (a digest stands for the tail
    of long ones, e.g. long lists of tensors)."""
    desc = desc_text.encode()
    if len(desc) > DESC_BYTES:
        desc = desc[:DESC_BYTES - 9] + b"#" + f"{zlib.crc32(desc):08x}".encode()
    return desc.ljust(DESC_BYTES, b"\0")


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


#: the last all-reduced ``trn`` tensor (a weak reference), its CPU view and the CPU storage under the view: a
#: loop all-reducing the same tensor reuses the view (one entry: it keeps at most one block's bytes alive)
_LAST_VIEW: list[tuple[Any, torch.Tensor, Any] | None] = [None]


def _allreduce_view(t: torch.Tensor) -> torch.Tensor:
    """:func:`_view` of an all-reduce's tensor, reused while ``t`` still has the same bytes, sizes and strides
    (its storage's CPU storage is the one under the view: ``resize_storage`` drops it)."""
    last = _LAST_VIEW[0]
    if last is not None and last[0]() is t:
        v = last[1]
        if (v.data_ptr() == t.data_ptr() and v.shape == t.shape and v.stride() == t.stride()
                and getattr(t.untyped_storage(), "_trn_cpu", None) is last[2]):
            return v
    v = _view("allreduce_", t)
    st = getattr(t.untyped_storage(), "_trn_cpu", None)
    if st is not None and not (t.is_conj() or t.is_neg()):
        _LAST_VIEW[0] = (weakref.ref(t), v, st)
    return v


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

    With the agreement check on, the group's plan (:mod:`trnlang.distributed.agree`) decides the round
    trips: a small all-reduce whose result does not depend on the order of the reduction rides in the
    check's own all-gather (each rank reduces the gathered payloads in rank order: gloo's bits; the returned
    ``Work`` is complete); a predicted one runs as gloo's all-reduce on the zero-copy view while the check
    runs; otherwise the check, then gloo's all-reduce."""
    red = _REDOPS.get(int(reduce_op.op()))
    if sparse_indices is not None or red is None or red == dist.ReduceOp.PREMUL_SUM:
        return _GENERIC["allreduce_"](tensors, pg, reduce_op, sparse_indices, async_op, timeout)
    cpu = [_allreduce_view(t) if len(tensors) == 1 else _view("allreduce_", t) for t in tensors]
    g, group = _group_of(pg)
    if _COST_LOGS:
        _note("allreduce_", (tensors,), g.size, group)
    if check_enabled():
        done = g.allreduce(group, _allreduce_head(tensors, red), cpu[0] if len(cpu) == 1 else None, red, timeout)
        if done == "done":
            return tensors, _done(cpu).boxed()
        if done is not None:
            return tensors, done.boxed()
    opts = dist.AllreduceOptions()
    opts.reduceOp = red  # type: ignore[assignment]  # torch converts a RedOpType, as dist.all_reduce relies on
    opts.asyncOp = async_op
    if timeout >= 0:
        opts.timeout = timedelta(milliseconds=timeout)
    return tensors, g.gloo.allreduce(cpu, opts).boxed()


_RED_TYPES = frozenset(v for v in _REDOPS.values() if v != dist.ReduceOp.PREMUL_SUM)
_c10d_mod = dist.distributed_c10d
_has_torch_function = torch._C._has_torch_function_unary
_inflight = torch._C._distributed_c10d._allow_inflight_collective_as_graph_input
#: ProcessGroup -> (its Group, its name): the front door's lookup (a group's trn backend never changes)
_FRONT: dict[Any, tuple[Group, str]] = {}


def _front_group(group: Any) -> tuple[Group, str] | None:
    """The :class:`~trnlang.distributed.agree.Group` of a ``ProcessGroup`` (None: not ours, or not a plain
    group: torch's own ``all_reduce`` then handles it)."""
    entry = _FRONT.get(group)
    if entry is None:
        try:
            entry = _group_of(group.boxed())
        except (TrnDistributedError, AttributeError):
            return None
        if len(_FRONT) > 64:
            _FRONT.clear()
        _FRONT[group] = entry
    return entry


#: what :func:`front_all_reduce` returns when torch's own ``all_reduce`` should handle the call
DECLINE = compat_dist.DECLINE
_RedOpType = dist.ReduceOp.RedOpType


def front_all_reduce(tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM, group: Any = None,
                     async_op: bool = False) -> Any:
    """``torch.distributed.all_reduce`` of a ``trn`` tensor, without torch's dispatcher (the front door that
    ``trnlang.device.compat_dist.patch_all_reduce`` opens for ``trn`` tensors); :data:`DECLINE` for any call
    torch's own ``all_reduce`` must handle.

    torch's ``all_reduce`` reaches a ``trn`` tensor's backend through the C++ dispatcher, which can only
    box the call into a Python kernel (:func:`_allreduce`): the boxing and the trip back into Python cost
    more than gloo's whole call on small tensors. A plain ``trn`` tensor with a plain reduce op in a group
    served by the ``trn`` backend goes straight to what that kernel does: the agreement check and gloo's
    all-reduce on the zero-copy CPU view. The rest (complex tensors, ``PREMUL_SUM``, tensor subclasses and
    torch-function modes, coalescing managers, ranks outside the group, groups without the ``trn``
    backend) declines.

    Example:
        >>> t = torch.ones(4, device="trn"); front_all_reduce(t)  # doctest: +SKIP
    """
    if (type(tensor) is not torch.Tensor or type(op) is not _RedOpType or op not in _RED_TYPES
            or group is _NON_MEMBER or tensor.device.type != BACKEND or tensor.is_complex()
            or _has_torch_function(tensor) or _inflight()):
        return DECLINE
    pg = group if group is not None else _c10d_mod._get_default_group()
    entry = _front_group(pg)
    if entry is None or pg in _c10d_mod._world.pg_coalesce_state:
        return DECLINE
    g, name = entry
    view = _allreduce_view(tensor)
    if _COST_LOGS:
        _note("allreduce_", ([tensor],), g.size, name)
    work: Any = None
    if check_enabled():
        work = g.allreduce(name, _allreduce_head([tensor], op), view, op, -1)
        if work == "done":
            return _done([view]) if async_op else None
    if work is None:
        opts = dist.AllreduceOptions()
        opts.reduceOp = op  # type: ignore[assignment]  # torch converts a RedOpType, as dist.all_reduce relies on
        opts.asyncOp = async_op
        work = g.gloo.allreduce([view], opts)
    if async_op:
        return work
    work.wait()
    return None


_NON_MEMBER = _c10d_mod.GroupMember.NON_GROUP_MEMBER


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
            g.agree(group, _head(_describe(name, args)))
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
        compat_dist.ALL_REDUCE_DOOR[0] = front_all_reduce
