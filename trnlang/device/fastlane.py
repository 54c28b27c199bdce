"""The fast lane: repeat a small kernel launch on same-layout tensors at near-native dispatch cost.

A lowering's Python (operand classification, type promotion, output allocation, the launch plan
lookup) costs tens of microseconds; a 16-element ``x + y`` on the CPU costs about one. For the
hottest shape of call (elementwise ops on contiguous tensors of one dtype and one shape, run as one
launch) a lowering can register a *fast* function (``@lowering(...,
fast=...)``) that the registry tries first. It keys a :class:`Lane` on ``(dtype, shape)``:

- on a miss the lowering runs normally while :func:`capture` records its kernel launch; if that
  was exactly one direct launch of a compiled kernel, the lane binds it (``KernelFn.bind``, the
  runtime's public launch API) and keeps its pointer call (``Launch.pointer_call``) and the order
  of the operands in it;
- on a hit the lane takes an output from its :class:`OutputPool`, and runs the launch on the new
  addresses through the pointer call's native trampoline (a four-argument ctypes call, the GIL
  held: these launches last a microsecond). A launch the runtime may split over the host threads
  (``runtime/split.py``: a big op) runs through ``Launch.run`` on the new addresses instead, so it keeps
  its threads (its plan keeps the launches of recent addresses).

Tensor-scalar calls (``x * 2.5``, ``x + 1``, ``x > 0.5``) have lanes too (``scalar_key``): the
lowering passes the Python number as a ``[1, 1]`` device tensor read by the kernel (a runtime
operand: one compiled variant serves every value), so the lane owns such a tensor and writes each
call's value into it before the launch (:meth:`Lane.scalar_call`).

The output pool keeps up to :data:`POOL_DEPTH` template tensors per lane (outputs of at most
:data:`POOL_MAX_BYTES`). A template is lent out as ``template.detach()`` (a new tensor on the same
storage, made in C++ without the dispatcher) and is reused only when nothing else holds its
storage or its memory block: the storage's C++ use count and the block's reference count prove it.
Idle templates are not counted by ``torch.trn.memory_allocated()`` and are released by
``torch.trn.empty_cache()``.

The lane is off (the lowering runs) while launch plans are off (``trn profile`` recording), when
``TRN_INTERPRET`` / ``TRN_TARGET`` (``trnlang.config``) changed since the lane was made, in inference mode, and
on threads other than the one that made it (its scratch arena is its own). A lane holds its
compiled variant (so the code it calls stays loaded while the lane can run); when the variant is
evicted (``TRN_MAX_LOADED_KERNELS``, runtime/codecache.py) the lane and its pooled outputs are
dropped and the next call makes a new one.

Example:
    >>> import torch, trnlang
    >>> x = torch.randn(16, device="trn"); y = torch.randn(16, device="trn")
    >>> z = x + y          # first call: the lowering runs and the lane is made
    >>> z = x + y          # later calls: the lane
    >>> torch.equal(z.cpu(), x.cpu() + y.cpu())
    True
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from typing import Any, Callable

import numpy as np
import torch

from trnlang import config as _config
from trnlang.device import fallback, memory
from trnlang.frontend.errors import LaunchError
from trnlang.runtime import codecache
from trnlang.runtime.args import TensorPiece
from trnlang.runtime.launch import PLANS, Launch, PointerCall

__all__ = ["Lane", "OutputPool", "capture", "stop_capture", "record_launch", "make_lane", "fast_function", "freeze",
           "unfreeze", "idle_bytes",
           "release_idle", "stats", "small_output", "SMALL_MAX_BYTES"]

#: templates per lane; the largest output a lane pools; lanes per fast function
POOL_DEPTH = 4
POOL_MAX_BYTES = 1 << 16
MAX_LANES = 64
#: calls of a lane key that try to make its lane (the first run of a kernel's new layout may not leave a plan)
MAKE_TRIES = 3

_uc = torch._C._storage_Use_Count
_getref = sys.getrefcount
_inference = torch.is_inference_mode_enabled
_ident = threading.get_ident
_POOLS: list[OutputPool] = []
_TABLES: list[dict[Any, Any]] = []  # the lanes of every fast function
_tls = threading.local()
_STATS = {"lanes": 0}
_I32 = 2**31
_F32_MAX = float(torch.finfo(torch.float32).max)
_INF = float("inf")


class OutputPool:
    """Output tensors of one ``(dtype, shape)`` (and dense ``strides``, else contiguous), reused when their previous
    user is gone."""

    __slots__ = ("shape", "dtype", "strides", "nbytes", "entries")

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, strides: tuple[int, ...] | None = None) -> None:
        self.shape = shape
        self.dtype = dtype
        self.strides = strides
        n = 1
        for s in shape:
            n *= s
        self.nbytes = n * dtype.itemsize
        self.entries: list[tuple[torch.Tensor, int, Any, int, Any]] = []
        if self.nbytes <= POOL_MAX_BYTES:
            _POOLS.append(self)

    def take(self) -> torch.Tensor:
        """A fresh output tensor (a lent template or a new allocation)."""
        for e in self.entries:
            if _uc(e[1]) == 2 and _getref(e[2]) == e[3]:
                return e[0].detach()
        if self.nbytes > POOL_MAX_BYTES or len(self.entries) >= POOL_DEPTH:
            return self._new()
        with torch.inference_mode(False):
            t = self._new()
        st: Any = t.untyped_storage()  # a trn storage carries its block (memory.HbmBlock.trn_storage)
        probe = (t, st._cdata, st._trn_block, 0, st)
        base = _getref(probe[2])  # the block's references when only the pool holds it (storage + entry + arg)
        self.entries.append((t, st._cdata, probe[2], base, st))
        del probe
        return t.detach()

    def _new(self) -> torch.Tensor:
        if self.strides is None:
            return memory.empty(self.shape, self.dtype)
        return memory.empty_strided(self.shape, self.strides, self.dtype)

    def idle(self) -> int:
        """Bytes held by templates nobody uses."""
        return sum(self.nbytes for e in self.entries if _uc(e[1]) == 2 and _getref(e[2]) == e[3])

    def release_idle(self) -> None:
        """Drop the idle templates (their memory goes back to the caching allocator)."""
        self.entries = [e for e in self.entries if not (_uc(e[1]) == 2 and _getref(e[2]) == e[3])]


#: A lowering's outputs of at most this many bytes come from :func:`small_output`'s pools; keys kept per thread.
SMALL_MAX_BYTES = 4096
SMALL_KEYS = 64


def small_output(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A contiguous ``trn`` tensor of ``shape`` (at most :data:`SMALL_MAX_BYTES`) for a lowering's output: a pooled
    template of this ``(shape, dtype)`` lent out when nothing else holds it (:class:`OutputPool`'s proof), else a
    new allocation. A fresh tensor of the device allocator costs ~7 us (its ``set_`` is a boxed redispatch); a lent
    one ~1 us. Pools are per thread, the least recently used of more than :data:`SMALL_KEYS` dropped; off in
    inference mode (as the lanes)."""
    if _inference():
        return memory.empty(shape, dtype)
    pools = getattr(_tls, "small", None)
    if pools is None:
        pools = _tls.small = OrderedDict()
    key = (shape, dtype)
    pool = pools.get(key)
    if pool is None:
        pool = pools[key] = OutputPool(shape, dtype)
        if len(pools) > SMALL_KEYS:
            old = pools.popitem(last=False)[1]
            if old in _POOLS:
                _POOLS.remove(old)
    else:
        pools.move_to_end(key)
    return pool.take()


def idle_bytes() -> int:
    """Bytes of simulated HBM held by idle pooled outputs (not in use by any tensor)."""
    return sum(p.idle() for p in _POOLS)


def release_idle() -> None:
    """Release every idle pooled output (``torch.trn.empty_cache()`` and the out-of-memory path call this)."""
    for p in _POOLS:
        p.release_idle()


memory.IDLE_COUNTERS.append(idle_bytes)
memory._IDLE_RELEASERS.append(release_idle)


def stats() -> dict[str, int]:
    """``{"lanes": lanes made}``."""
    return dict(_STATS)


# ----------------------------------------------------------------------------------- capture
def capture() -> list[Any]:
    """Start recording kernel launches on this thread; returns the record list (see :func:`record_launch`)."""
    rec: list[Any] = []
    _tls.rec = rec
    return rec


def stop_capture() -> None:
    """Stop recording on this thread."""
    _tls.rec = None


def record_launch(kernel: Any, args: tuple[Any, ...]) -> None:
    """Called by lowerings right before a direct single launch ``kernel(*args)`` (no-op unless capturing)."""
    rec = getattr(_tls, "rec", None)
    if rec is not None:
        rec.append((kernel, args))


class Lane:
    """One compiled launch on fixed layouts: ``lane(*operands)`` -> a new output tensor."""

    __slots__ = ("tramp", "ctx", "call", "pool", "roles", "owner", "config", "variant", "sbuf", "sval", "inplace",
                 "split", "consts", "cptrs")
    tramp: Any  # the pointer call's trampoline (len(roles) pointers after ctx)
    ctx: int  # its context (entry, meta block, scratch arena, error record)
    call: PointerCall  # keeps the trampoline's context and the compiled code alive
    pool: OutputPool | None  # None for an in-place lane (the output is operand 0)
    roles: tuple[int, ...]  # per launch pointer: operand index, -1 output, -2 scalar buffer, -3 - k frozen constant k
    consts: tuple[torch.Tensor, ...]  # the frozen constants the launch reads (fastlane.freeze)
    cptrs: tuple[int, ...]  # their addresses
    owner: int  # the thread that made the lane
    config: _config.Config  # the settings the lane was made under
    variant: Any  # the compiled variant the lane calls (runtime.jit.Variant)
    sbuf: torch.Tensor | None  # a scalar lane's own [1, 1] device tensor the kernel reads the number from
    sval: Any  # a flat numpy view of sbuf (float32 or int32): each call writes its number there
    inplace: bool  # the launch writes operand 0 (``x.add_(y)``): no output is allocated, operand 0 is returned
    split: Any  # the LaunchPlan of a launch the runtime may split over the host threads (else None)

    def _ready(self) -> bool:
        if not PLANS.enabled or _ident() != self.owner or _inference():
            return False
        self.variant.used = True
        cfg = _config.current
        if cfg is not self.config:  # settings re-read (trnlang.config.refresh): still the same launch?
            if cfg.launch_key != self.config.launch_key:
                return False
            self.config = cfg
        return True

    def scalar_call(self, x: torch.Tensor, value: Any) -> torch.Tensor | None:
        """``op(x, value)`` for a scalar lane: ``value`` (a Python number, already rounded as the op needs)
        is written into the lane's scalar buffer, then the launch runs on ``x``'s address."""
        if not self._ready():
            return None
        sval = self.sval
        if sval.dtype.kind == "i":
            if type(value) is float or not -_I32 <= value < _I32:
                return None  # an int32 buffer holds integers of the int32 range only (the lowering decides)
            sval[0] = int(value)
        else:
            f = float(value)
            if abs(f) > _F32_MAX and abs(f) != _INF:
                return None  # beyond float32: the lowering decides
            sval[0] = f
        out = x if self.pool is None else self.pool.take()
        roles = self.roles
        if self.split is not None:
            ptrs = {0: x.data_ptr(), -1: out.data_ptr(), -2: self.sbuf.data_ptr()}  # type: ignore[union-attr]
            if self._run_split(tuple([ptrs[r] for r in roles])):
                return out
        if roles == (0, -2, -1):
            rc = self.tramp(self.ctx, x.data_ptr(), self.sbuf.data_ptr(), out.data_ptr())  # type: ignore[union-attr]
        else:
            ptrs = {0: x.data_ptr(), -1: out.data_ptr(), -2: self.sbuf.data_ptr()}  # type: ignore[union-attr]
            rc = self.tramp(self.ctx, *[ptrs[r] for r in roles])
        if rc:
            return None  # the kernel reported an error: let the lowering run (and raise it)
        return out

    def _ptrs(self, ops: tuple[Any, ...], out: torch.Tensor) -> tuple[int, ...]:
        cp = self.cptrs
        return tuple([ops[r].data_ptr() if r >= 0 else out.data_ptr() if r == -1 else cp[-3 - r] for r in self.roles])

    def __call__(self, *ops: Any) -> torch.Tensor | None:
        if not self._ready():
            return None
        out = ops[0] if self.pool is None else self.pool.take()
        if self.split is not None and self._run_split(self._ptrs(ops, out)):
            return out
        if self.roles == (0, 1, -1):
            rc = self.tramp(self.ctx, ops[0].data_ptr(), ops[1].data_ptr(), out.data_ptr())
        else:
            rc = self.tramp(self.ctx, *self._ptrs(ops, out))
        if rc:
            return None  # the kernel reported an error: let the lowering run (and raise it)
        return out

    def _run_split(self, ptrs: tuple[int, ...]) -> bool:
        """Run a big launch as the lowering's launch runs (``Launch.run``: split over the host threads once
        its first runs were timed long enough, ``runtime/split.py``; the plan keeps the launches of recent
        addresses); False: run it through the trampoline (the plan decided to keep it whole: from now on every
        call does)."""
        go = self.split.bind(ptrs)
        if go is None:
            return False
        if not go.splittable:
            self.split = None
            return False
        go.run()  # a kernel error raises here, with the kernel's source line
        return True


_NO_SCALAR = object()
_DUP = "same operand twice"
#: Device tensors that are never written (a lowering's cached constants, e.g. ``U.scalar_tensor``): a lane may keep
#: one and pass it to every replay (``freeze``).
_FROZEN: dict[int, torch.Tensor] = {}


def freeze(t: torch.Tensor) -> torch.Tensor:
    """Mark a device tensor nothing ever writes (a cached constant): launches reading it can become lanes, which keep
    it alive. Returns ``t``."""
    _FROZEN[id(t)] = t
    return t


def unfreeze(t: torch.Tensor) -> None:
    """Forget a :func:`freeze` (the tensor's cache dropped it; lanes already made keep it alive)."""
    _FROZEN.pop(id(t), None)


def _holds(t: torch.Tensor, value: Any) -> bool:
    """``t`` is a one-element float32/int32 device tensor holding ``value`` as the lowering stored it."""
    if t.numel() != 1 or t.dtype not in (torch.float32, torch.int32) or t.device.type != "trn":
        return False
    got = memory.np_view(t).reshape(-1)[0]
    if t.dtype == torch.int32:
        return type(value) is not float and -_I32 <= value < _I32 and int(got) == int(value)
    with np.errstate(over="ignore"):
        want = float(np.float32(float(value)))
    return float(got) == want or (want != want and got != got)


def _roles(args: tuple[Any, ...], operands: tuple[torch.Tensor, ...], out: torch.Tensor, scalar: Any,
           inplace: bool = False, consts: list[torch.Tensor] | None = None
           ) -> tuple[list[int], torch.Tensor | None] | None:
    """Per tensor argument of a launch: its operand index, -1 (``out``), -2 (the scalar's ``[1, 1]``
    tensor) or ``-3 - k`` (the ``k``-th frozen constant, appended to ``consts``); None if some tensor is none of them
    (``inplace``: ``out`` is operand 0, read and written)."""
    roles = []
    sbuf = None
    for a in args:
        if isinstance(a, TensorPiece):  # a piece starting at a tensor's first element (a flat view of it)
            if a.ptr != a.base.data_ptr():
                return None
            a = a.base
        if isinstance(a, torch.Tensor):
            if a is out:
                roles.append(-1)
                continue
            for i, o in enumerate(operands):
                if a is o:
                    roles.append(i)
                    break
            else:
                if consts is not None and _FROZEN.get(id(a)) is a:
                    roles.append(-3 - len(consts))
                    consts.append(a)
                    continue
                if scalar is _NO_SCALAR or sbuf is not None or not _holds(a, scalar):
                    return None
                sbuf = a
                roles.append(-2)
    if (roles.count(-1) < 1 if inplace else roles.count(-1) != 1) or (scalar is not _NO_SCALAR and sbuf is None):
        return None
    return roles, sbuf


def make_lane(rec: list[Any], operands: tuple[torch.Tensor, ...], out: Any, scalar: Any = _NO_SCALAR,
              inplace: bool = False, allow_consts: bool = False) -> Lane | None:
    """A lane from one captured launch whose tensors are ``operands`` and ``out`` (None if not possible).

    ``scalar``: the Python number of a tensor-scalar call; the launch must read it from one
    one-element tensor (the lane then reads it from a buffer of its own, see :meth:`Lane.scalar_call`).
    ``inplace``: the call wrote operand 0 (``out`` must be it); replays write the operand 0 of each call.
    ``allow_consts``: the launch may read frozen constants (:func:`freeze`), kept by the lane; only for lowerings
    whose constants depend on nothing but the lane's key (never with a scalar: which tensor holds the number would
    be ambiguous). A lane that allocates its outputs needs a dense one (its pool makes tensors of its strides: the
    lowering's choice for the operands' layouts, which the lane's key holds).
    """
    if len(rec) != 1 or not isinstance(out, torch.Tensor) or not PLANS.enabled:
        return None
    contiguous = out.is_contiguous()
    if (out is not operands[0]) if inplace else not (contiguous or memory.is_dense(out)):
        return None
    kernel, args = rec[0]
    consts: list[torch.Tensor] = []
    found = _roles(args, operands, out, scalar, inplace, consts if allow_consts and scalar is _NO_SCALAR else None)
    if found is None:
        return None
    roles, sarg = found
    if inplace:  # operand 0 is the output: every pointer of it is the output's
        roles = [-1 if r == 0 else r for r in roles]
    go = kernel.bind(*args)  # the launch just made its plan: this resolves it
    if not isinstance(go, Launch) or not go.native:
        return None
    try:
        call = go.pointer_call()
    except LaunchError:
        return None
    lane = Lane()
    lane.call = call
    lane.tramp, lane.ctx = call.fn, call.ctx
    lane.variant = call.variant  # the code stays loaded while the lane can call it
    lane.roles = tuple(roles)
    lane.consts = tuple(consts)  # kept alive with the lane
    lane.cptrs = tuple(c.data_ptr() for c in consts)
    lane.owner = _ident()
    lane.config = _config.current
    lane.pool = None if inplace else OutputPool(tuple(out.shape), out.dtype, None if contiguous else out.stride())
    lane.inplace = inplace
    lane.split = go.plan if go.splittable else None
    lane.sbuf = lane.sval = None
    if sarg is not None:
        with torch.inference_mode(False):
            lane.sbuf = memory.empty_strided(tuple(sarg.shape), sarg.stride(), sarg.dtype)
        lane.sval = memory.np_view(lane.sbuf).reshape(-1)
    _STATS["lanes"] += 1
    return lane


def _first_call(table: dict[Any, Any], k: Any, lower: Callable[..., Any], args: tuple[Any, ...],
                make: Callable[[Any, Any], Any]) -> Any:
    """A call of a lane key with no lane yet: run the lowering while recording its launch, and keep the lane that
    ``make(recording, result)`` builds (after :data:`MAKE_TRIES` calls without one, False: this key has none; the
    caller's slow path runs the lowering)."""
    rec = capture()
    try:
        r = lower(*args)
    finally:
        stop_capture()
    if r is NotImplemented:
        table[k] = False
        fallback.clear_decline_reason()  # the slow path calls the lowering again and records its own
        return None
    made = make(rec, r)
    if made:
        table[k] = made
    else:  # none yet: a launch whose plan the next call makes (a kernel's first layouts) gets MAKE_TRIES calls
        tries = table.get(k)
        tries = tries + 1 if type(tries) is int else 1
        table[k] = tries if tries < MAKE_TRIES else False
    return r


def _partly_overlapping(args: tuple[Any, ...]) -> bool:
    """A tensor among ``args[1:]`` overlaps ``args[0]`` without being the same elements (contiguous tensors of one
    shape and dtype, as the lanes' keys demand: the same start address is the same view)."""
    a = args[0]
    if type(a) is not torch.Tensor:
        return False
    pa = a.data_ptr()
    ea = pa + a.nbytes
    for b in args[1:]:
        if type(b) is torch.Tensor:
            pb = b.data_ptr()
            if pb != pa and pb < ea and pa < pb + b.nbytes:
                return True
    return False


def fast_function(lower: Callable[..., Any], nops: int, key: Callable[..., Any],
                  scalar_key: Callable[..., Any] | None = None, inplace: Callable[..., Any] | None = None,
                  inplace_keys: tuple[Callable[..., Any], Callable[..., Any] | None] | None = None,
                  allow_consts: bool = False, _writes_first: bool = False) -> Callable[..., Any]:
    """A registry fast function for ``lower`` (``nops`` tensor operands, positional only).

    ``key(*ops)`` returns the lane key for eligible operands (dtypes, shape: all contiguous, one
    dtype...) or None. A miss runs ``lower`` while capturing its launch and makes the lane.
    ``scalar_key(x, number)``, tried where ``key`` gives None, returns ``(lane key, value)`` for an
    eligible tensor-scalar call (``value``: the number as the lowering's kernel reads it, e.g. rounded
    to bf16) or None; its lanes are kept in ``fast.scalar_lanes``.

    ``inplace``: the lowering of the op's in-place variant (``lambda a, b: add(a, b, out=a)``); then
    ``fast.inplace`` is the fast function of that variant (``x.add_(y)``: its lanes write operand 0), which the
    registry gives the variant; ``inplace_keys``: its ``(key, scalar_key)`` if not the same (keys of contiguous
    operands only: the overlap check of an in-place call, ``_partly_overlapping``, reads contiguous spans).
    ``allow_consts``: see :func:`make_lane` (then ``key`` must hold everything the lowering's constants depend on;
    ``args`` may hold non-tensor arguments too, which the key holds).
    """
    lanes: dict[Any, Any] = {}
    _TABLES.append(lanes)
    slanes: dict[Any, Any] = {}
    _TABLES.append(slanes)

    def fast_scalar(args: tuple[Any, ...]) -> Any:
        kv = scalar_key(*args)  # type: ignore[misc]
        if kv is None:
            return None
        k, value = kv
        lane = slanes.get(k)
        if lane is not None and type(lane) is not int:
            return lane.scalar_call(args[0], value) if lane is not False else None
        if len(slanes) >= MAX_LANES:
            return None
        return _first_call(slanes, k, lower, args,
                           lambda rec, r: make_lane(rec, (args[0],), r, value, inplace=_writes_first))

    def fast(*args: Any) -> Any:
        if len(args) != nops:
            return None
        if _writes_first and _partly_overlapping(args):
            return None  # torch raises for a written operand partly overlapping a read one: the lowering does
        k = key(*args)
        if k is None:
            return fast_scalar(args) if scalar_key is not None else None
        if nops == 2 and args[0] is args[1]:
            k = (k, _DUP)  # x * x: a lane of its own (its launch reads operand 0 twice)
        lane = lanes.get(k)
        if lane is not None and type(lane) is not int:
            return lane(*args) if lane is not False else None
        if len(lanes) >= MAX_LANES:
            return None
        return _first_call(lanes, k, lower, args, lambda rec, r: make_lane(rec, args, r, inplace=_writes_first,
                                                                            allow_consts=allow_consts))

    fast.lanes = lanes  # type: ignore[attr-defined]
    fast.scalar_lanes = slanes  # type: ignore[attr-defined]
    if inplace is not None:
        ik, isk = inplace_keys or (key, scalar_key)
        fast.inplace = fast_function(inplace, nops, ik, isk, _writes_first=True)  # type: ignore[attr-defined]
    return fast


@codecache.on_evict
def _drop_lanes(evicted: list[Any]) -> None:
    """Drop the lanes (and their pooled outputs) calling evicted variants; a lane running now finishes first."""
    gone = {id(v) for v in evicted}
    for lanes in _TABLES:
        for k, lane in list(lanes.items()):
            if isinstance(lane, Lane) and id(lane.variant) in gone:
                lanes.pop(k, None)
                if lane.pool in _POOLS:
                    _POOLS.remove(lane.pool)
