"""The CPU fallback: ATen ops without a ``trn`` lowering run on CPU views of device memory.

Device memory is host memory, so a CPU view of a ``trn`` tensor is zero-copy: in-place and
``out=`` ops write straight into the device bytes, views come back as ``trn`` aliases of their
base, and fresh CPU results are adopted as device memory without a copy.

Policy (``TRN_FALLBACK``, read at each fallback): ``warn`` (default: one warning per op name),
``error`` (raise :class:`FallbackError` naming the op), ``silent``, or ``f64only`` (``error``, except
for calls touching float64/complex128 tensors or dtypes, :data:`WIDE_DTYPES`: the hardware has no
such arithmetic, so they take the documented CPU fallback, warned once per op). Every fallback is
counted (:func:`fallback_stats`).

Example:
    >>> import torch, trnlang.device as td
    >>> x = torch.ones(3, device="trn")          # doctest: +SKIP
    >>> torch.sin(x).cpu()[0].item()              # doctest: +SKIP
    0.8414709568023682
    >>> td.fallback_stats()["aten::sin.out"] >= 1  # doctest: +SKIP
    True
"""

from __future__ import annotations

import math
import os
import sys
import threading
import warnings
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable

import torch

from trnlang import config as _config
from trnlang.device import memory
from trnlang.frontend.errors import TrnError

if TYPE_CHECKING:
    from types import FrameType

__all__ = ["FallbackError", "FallbackWarning", "fallback_stats", "fallback_reasons", "reset_fallback_stats",
           "run_on_cpu", "op_name", "check_devices", "policy", "decline", "take_decline_reason",
           "clear_decline_reason", "NO_LOWERING", "NO_REASON", "WIDE_DTYPES", "touches_wide", "makes_wide"]

_POLICIES = ("warn", "error", "silent", "f64only")
#: dtypes the NeuronCore has no arithmetic for: their calls may fall back under ``TRN_FALLBACK=f64only``.
WIDE_DTYPES = frozenset({torch.float64, torch.complex128})
_lock = threading.Lock()
_counts: Counter[str] = Counter()
_reasons: Counter[tuple[str, str]] = Counter()  # (op name, why it ran on the CPU) -> calls
_warned: set[str] = set()
_tls = threading.local()

#: The reason recorded for a call that reached the CPU fallback without a lowering (none is registered).
NO_LOWERING = "no trn lowering"
#: The reason recorded when a lowering returned a bare ``NotImplemented`` (no :func:`decline` reason).
NO_REASON = "declined (no reason given)"


def decline(reason: str) -> Any:
    """Decline the current call from inside a lowering: the CPU fallback runs it, and ``reason`` is reported.

    Return its result from the lowering (it is ``NotImplemented``). The reason appears in the fallback warning,
    in the ``TRN_FALLBACK=error`` message, in :func:`fallback_reasons` and in ``trn coverage``'s report, so a
    user (or contributor) sees *why* an op left the device, not only that it did.

    Example:
        >>> import torch
        >>> from trnlang.device import decline, lowering
        >>> @lowering("aten::relu", dtypes=(torch.float32,))   # doctest: +SKIP
        ... def relu(x):
        ...     if x.numel() > 2**31:
        ...         return decline("more than 2^31 elements")
        ...     ...
    """
    _tls.declined = reason
    return NotImplemented


def take_decline_reason() -> str:
    """The reason the last :func:`decline` of this thread gave (cleared by the call), else :data:`NO_REASON`."""
    r = getattr(_tls, "declined", None)
    if r is None:
        return NO_REASON
    _tls.declined = None
    return str(r)


def clear_decline_reason() -> None:
    """Forget a recorded decline reason (a caller that handles the declined call another way)."""
    _tls.declined = None


class FallbackError(TrnError, NotImplementedError):
    """An op has no ``trn`` lowering and ``TRN_FALLBACK=error`` forbids running it on the CPU."""


class FallbackWarning(UserWarning):
    """An op ran on the CPU because it has no ``trn`` lowering (once per op name)."""


class _OpInfo:
    """What the fallback needs from an op's schema, computed once per op (schema objects are slow)."""

    __slots__ = ("name", "names", "generator", "outs", "indices_pos", "tensor_pos")

    def __init__(self, op: Any) -> None:
        schema = op._schema
        ov = op._overloadname
        self.name = schema.name if ov == "default" else f"{schema.name}.{ov}"
        args = list(schema.arguments)
        self.names = [a.name for a in args]
        self.generator = [(i, a.kwarg_only) for i, a in enumerate(args)
                          if a.name == "generator" and a.type.kind() == "OptionalType"]
        self.outs = [a.name for a in args if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]
        self.indices_pos = self.names.index("indices") if "indices" in self.names else -1
        self.tensor_pos = [(i, a.name, a.kwarg_only) for i, a in enumerate(args) if str(a.type) == "Tensor"]


_INFO: dict[Any, _OpInfo] = {}


def _info(op: Any) -> _OpInfo:
    info = _INFO.get(op)
    if info is None:
        info = _INFO[op] = _OpInfo(op)
    return info


def op_name(op: Any) -> str:
    """``aten::name.overload`` (``aten::name`` for the default overload) of an OpOverload."""
    return _info(op).name


def policy() -> str:
    """The current fallback policy: ``warn``, ``error``, ``silent`` or ``f64only`` (``TRN_FALLBACK``, read
    through ``trnlang.config``: after changing the environment, call ``trnlang.config.refresh()``)."""
    p = _config.current.fallback
    if p not in _POLICIES:
        raise ValueError(f"TRN_FALLBACK must be one of {', '.join(_POLICIES)}, got {p!r}")
    return p


def fallback_stats() -> dict[str, int]:
    """How many times each op ran through the CPU fallback in this process, by op name."""
    with _lock:
        return dict(_counts)


def fallback_reasons() -> dict[str, dict[str, int]]:
    """Why ops ran through the CPU fallback in this process: op name -> {reason: calls}.

    Reasons are :data:`NO_LOWERING`, a dtype outside the lowering's dtypes, the string a lowering gave to
    :func:`decline`, or :data:`NO_REASON` for a bare ``NotImplemented``.

    Example:
        >>> from trnlang.device import fallback
        >>> isinstance(fallback.fallback_reasons(), dict)
        True
    """
    out: dict[str, dict[str, int]] = {}
    with _lock:
        for (name, why), n in _reasons.items():
            out.setdefault(name, {})[why] = n
    return out


def reset_fallback_stats() -> None:
    """Clear the counters (warnings already given are not repeated)."""
    with _lock:
        _counts.clear()
        _reasons.clear()


def total_fallbacks() -> int:
    """Sum of all fallback counts (cheap; used by the coverage runner)."""
    with _lock:
        return sum(_counts.values())


def _why(name: str, reason: str) -> str:
    return f"{name} has no trn lowering" if reason == NO_LOWERING else f"{name} was declined by its trn lowering " \
        f"({reason})"


def touches_wide(args: Any, kwargs: dict[str, Any]) -> bool:
    """Whether a call has a float64/complex128 tensor (also in a list) or dtype among its arguments.

    Example:
        >>> import torch
        >>> touches_wide((torch.ones(2), [torch.ones(1, dtype=torch.float64)]), {})
        True
        >>> touches_wide((torch.ones(2),), {"dtype": torch.float32})
        False
    """
    for v in (*args, *kwargs.values()):
        for x in (v if isinstance(v, (list, tuple)) else (v,)):
            if (isinstance(x, torch.Tensor) and x.dtype in WIDE_DTYPES) or (isinstance(x, torch.dtype)
                                                                           and x in WIDE_DTYPES):
                return True
    return False


def _meta(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype, device="meta")
    if isinstance(x, (list, tuple)):
        return type(x)(_meta(y) for y in x)
    return x


def makes_wide(op: Any, args: Any, kwargs: dict[str, Any]) -> bool:
    """Whether ``op(*args, **kwargs)`` computes in float64/complex128 though no argument is one: an integer
    division, a creation op, or an integer tensor compared with a Python float under
    ``torch.set_default_dtype(torch.float64)`` (the first two operands' common dtype, else the result's dtype found
    by running ``op`` on meta tensors; False where it has no meta kernel).

    Example:
        >>> import torch
        >>> x = torch.ones(2, dtype=torch.int32)
        >>> makes_wide(torch.ops.aten.div.Tensor, (x, x), {}), makes_wide(torch.ops.aten.add.Tensor, (x, x), {})
        (False, False)
        >>> torch.set_default_dtype(torch.float64)
        >>> makes_wide(torch.ops.aten.div.Tensor, (x, x), {})
        True
        >>> torch.set_default_dtype(torch.float32)
    """
    if len(args) >= 2 and isinstance(args[0], torch.Tensor) and isinstance(args[1], (torch.Tensor, bool, int, float)):
        try:  # a comparison's bool result is computed in the operands' common dtype
            if torch.result_type(args[0], args[1]) in WIDE_DTYPES:
                return True
        except (RuntimeError, TypeError):
            pass
    try:
        r = op(*_meta(args), **{k: _meta(v) for k, v in kwargs.items()})
    except Exception:  # no meta kernel, or the call is an error: not the documented float64 fallback
        return False
    return any(isinstance(t, torch.Tensor) and t.dtype in WIDE_DTYPES
               for t in (r if isinstance(r, (list, tuple)) else (r,)))


def note(name: str, reason: str = NO_LOWERING, wide: bool = False) -> None:
    """Apply the policy to one fallback of ``name`` (raise, warn once, or nothing) and count it with ``reason``.

    ``wide``: the call touches float64/complex128 (:func:`touches_wide`); ``f64only`` lets only such calls through.
    """
    p = policy()
    if p == "error" or (p == "f64only" and not wide):
        raise FallbackError(f"{_why(name, reason)} and TRN_FALLBACK={p} forbids the CPU fallback "
                            "(register one with @trn.lowering, or set TRN_FALLBACK=warn|silent)")
    with _lock:
        _counts[name] += 1
        _reasons[(name, reason)] += 1
        first = name not in _warned
        if first:
            _warned.add(name)
    if first and p in ("warn", "f64only"):
        warnings.warn(f"trn: {_why(name, reason)}; running it on the CPU (zero-copy views of device "
                      "memory). Set TRN_FALLBACK=silent to hide this, =error to forbid it.", FallbackWarning,
                      stacklevel=_user_stacklevel())


_SKIP_DIRS = (os.path.dirname(os.path.abspath(__file__)), os.path.dirname(os.path.abspath(torch.__file__)))


def _user_stacklevel() -> int:
    """Stack level of the first frame outside the device layer and torch (the user's line)."""
    f: FrameType | None = sys._getframe(2)
    level = 2
    while f is not None and f.f_code.co_filename.startswith(_SKIP_DIRS):
        f = f.f_back
        level += 1
    return level


def _same_device_error(a: torch.device, b: torch.device) -> RuntimeError:
    return RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, {a} and {b}!")


def _scan_kwargs(kwargs: dict[str, Any], has_trn: bool,
                 cpu_dev: torch.device | None) -> tuple[bool, torch.device | None]:
    """:func:`check_devices` over keyword arguments: (``has_trn``, ``cpu_dev``) updated."""
    for k, v in kwargs.items():
        if isinstance(v, torch.Tensor):
            if v.device.type == "trn":
                has_trn = True
            elif v.device.type == "cpu" and v.dim() != 0:
                cpu_dev = v.device
        elif isinstance(v, (list, tuple)) and k != "indices":
            for x in v:
                if isinstance(x, torch.Tensor):
                    if x.device.type == "trn":
                        has_trn = True
                    elif x.device.type == "cpu" and x.dim() != 0:
                        cpu_dev = x.device
    return has_trn, cpu_dev


def check_devices(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Raise like a device backend does when ``trn`` tensors meet CPU tensors that are not 0-dim
    (tensors in an ``indices`` argument may stay on the CPU)."""
    cpu_dev = None
    has_trn = False
    for i, v in enumerate(args):
        if isinstance(v, torch.Tensor):
            t = v.device.type
            if t == "trn":
                has_trn = True
            elif t == "cpu" and v.dim() != 0:
                cpu_dev = v.device
        elif isinstance(v, (list, tuple)) and v and i != _info(op).indices_pos:
            for x in v:
                if isinstance(x, torch.Tensor):
                    if x.device.type == "trn":
                        has_trn = True
                    elif x.device.type == "cpu" and x.dim() != 0:
                        cpu_dev = x.device
    if kwargs:
        has_trn, cpu_dev = _scan_kwargs(kwargs, has_trn, cpu_dev)
    if has_trn and cpu_dev is not None:
        raise _same_device_error(memory.DEVICE, cpu_dev)


class _Converter:
    """Maps ``trn`` arguments to CPU views (one view per tensor) and CPU results back."""

    def __init__(self, copies: bool = False) -> None:
        self.copies = copies  # CPU copies of the device blocks instead of views (nothing is written back)
        self.views: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # id(trn) -> (trn, cpu view)
        self.by_view: dict[int, torch.Tensor] = {}  # id(cpu view) -> trn
        self.cpu_storages: dict[int, Any] = {}  # block address -> cpu storage
        self.trn_storages: dict[int, Any] = {}  # block address -> trn storage
        self.user_cpu_ptrs: set[int] = set()

    def to_cpu(self, v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            dev = v.device.type
            if dev == "trn":
                hit = self.views.get(id(v))
                if hit is not None:
                    return hit[1]
                blk = memory.block_of(v)
                cst = self.cpu_storages.get(blk.ptr)
                if cst is None:
                    cst = blk.cpu_storage()
                    cst = self.cpu_storages[blk.ptr] = cst.clone() if self.copies else cst
                    self.trn_storages[blk.ptr] = v.untyped_storage()
                view = memory.cpu_view(v, cst)
                self.views[id(v)] = (v, view)
                self.by_view[id(view)] = v
                return view
            if dev == "cpu" and v.layout == torch.strided:
                self.user_cpu_ptrs.add(v.untyped_storage().data_ptr())
            return v
        if isinstance(v, torch.device) and v.type == "trn":
            return torch.device("cpu")
        if isinstance(v, list):
            return [self.to_cpu(x) for x in v]
        if isinstance(v, tuple):
            return tuple(self.to_cpu(x) for x in v)
        return v

    def to_trn(self, v: Any, adopted: dict[int, Any]) -> Any:
        if isinstance(v, torch.Tensor):
            orig = self.by_view.get(id(v))
            if orig is not None:
                return orig
            if v.device.type != "cpu":
                return v
            if v.layout != torch.strided:
                raise RuntimeError(f"trn: the CPU fallback produced a {v.layout} tensor; only strided tensors "
                                   "live on the trn device")
            ptr = v.untyped_storage().data_ptr()
            # a view of a device tensor: a device alias (not for address 0: every empty storage has it, so an empty
            # result is not a view of an empty input just because both have no memory)
            st = self.trn_storages.get(ptr) if ptr != 0 else None
            if st is not None:
                t = memory.wrap(st, v.dtype, v.shape, v.stride(), v.storage_offset())
                if v.is_conj():
                    t = t.conj()
                if v.is_neg():
                    t = torch._neg_view(t)
                return t
            if v.is_conj() or v.is_neg():
                v = v.resolve_conj().resolve_neg()
            elif ptr in self.user_cpu_ptrs and ptr != 0:  # aliases a user's CPU tensor: copy
                v = v.clone()
            return memory.adopt(v, adopted)
        if isinstance(v, list):
            return [self.to_trn(x, adopted) for x in v]
        if isinstance(v, tuple):
            return tuple(self.to_trn(x, adopted) for x in v)
        return v

    def sync_back(self) -> None:
        """A CPU op may have changed a mutated argument's metadata (resize within its storage)."""
        for t, view in self.views.values():
            if t.shape != view.shape or t.stride() != view.stride() or t.storage_offset() != view.storage_offset():
                memory.set_metadata(t, view.shape, view.stride(), view.storage_offset())


def _wrapped_number(v: Any, ref: torch.dtype | None) -> torch.Tensor:
    """Trap 4: a C++ "wrapped number" reaches Python kernels as a Python number. Rebuild a 0-dim tensor
    whose dtype promotes like the wrapped number did (it never wins within its category)."""
    if isinstance(v, bool):
        dt = ref or torch.bool
    elif isinstance(v, int):
        dt = ref if ref is not None and ref != torch.bool else torch.int64
    elif isinstance(v, float):
        dt = ref if ref is not None and (ref.is_floating_point or ref.is_complex) else torch.get_default_dtype()
    elif ref is not None and ref.is_complex:
        dt = ref
    else:  # a complex number takes a float tensor's precision (float16 -> complex32), else the default's
        base = ref if ref is not None and ref.is_floating_point else torch.get_default_dtype()
        dt = {torch.float16: torch.complex32, torch.float64: torch.complex128}.get(base, torch.complex64)
    return torch.tensor(v, dtype=dt)


def _wrap_numbers(info: _OpInfo, cargs: list[Any], ckw: dict[str, Any]) -> None:
    fix = [(i, n, kw) for i, n, kw in info.tensor_pos
           if isinstance(ckw.get(n) if kw or i >= len(cargs) else cargs[i], (bool, int, float, complex))]
    if not fix:
        return
    ref = next((a.dtype for a in [*cargs, *ckw.values()] if isinstance(a, torch.Tensor)), None)
    for i, n, kw in fix:
        if kw or i >= len(cargs):
            ckw[n] = _wrapped_number(ckw[n], ref)
        else:
            cargs[i] = _wrapped_number(cargs[i], ref)


def _generator() -> torch.Generator:
    from trnlang.device import module

    return module.default_generator()


#: Largest device memory (bytes, over a call's tensors) copied to find out whether a forbidden fallback is an error.
ERROR_PROBE_BYTES = 1 << 28


def _tensors(tree: Any) -> list[torch.Tensor]:
    """The tensors in nested lists/tuples/dicts."""
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [t for v in tree for t in _tensors(v)]
    if isinstance(tree, dict):
        return [t for v in tree.values() for t in _tensors(v)]
    return []


def _raise_if_an_error(op: Any, run: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Under a policy that forbids this fallback, a call torch rejects raises torch's own error, as a device with
    the op would (not the policy's :class:`FallbackError`, which follows for calls that do not raise): the CPU op
    runs on copies of the device memory (nothing is written back) and its exception propagates. Calls whose
    tensors hold more than :data:`ERROR_PROBE_BYTES` are not probed."""
    sizes = [t.untyped_storage().nbytes() for t in _tensors((args, kwargs)) if t.device.type == "trn"]
    if sum(sizes) > ERROR_PROBE_BYTES:
        return
    conv = _Converter(copies=True)
    cargs = [conv.to_cpu(a) for a in args]
    ckw = {k: conv.to_cpu(v) for k, v in kwargs.items()}
    info = _info(op)
    _wrap_numbers(info, cargs, ckw)
    for i, kwarg_only in info.generator:  # a throwaway generator: no random stream advances
        if kwarg_only or i >= len(cargs):
            ckw["generator"] = torch.Generator()
        else:
            cargs[i] = torch.Generator()
    try:
        with warnings.catch_warnings():  # the probe is silent; only its error matters
            warnings.simplefilter("ignore")
            run(*cargs, **ckw)
    except (RuntimeError, ValueError, TypeError, IndexError) as e:
        raise e.with_traceback(None) from None


def run_on_cpu(op: Any, args: tuple[Any, ...], kwargs: dict[str, Any], *, cpu_op: Callable[..., Any] | None = None,
               name: str | None = None, count: bool = True, reason: str = NO_LOWERING) -> Any:
    """Run ``op`` (or ``cpu_op``) on CPU views of the ``trn`` arguments; results come back on ``trn``.

    Args:
        op: the ATen OpOverload that was called (its schema drives the argument handling).
        args: positional arguments as the dispatcher gave them.
        kwargs: keyword arguments as the dispatcher gave them.
        cpu_op: what to run on the CPU instead of ``op`` (for ops routed to a different CPU op).
        name: op name for the policy and the counters (default: ``op``'s name).
        count: apply the fallback policy and count this call (False for plumbing that is native).
        reason: why the call runs on the CPU (:func:`fallback_reasons`).
    """
    if count:
        wide = touches_wide(args, kwargs) or (policy() == "f64only" and makes_wide(op, args, kwargs))
        if policy() == "error" or (policy() == "f64only" and not wide):
            _raise_if_an_error(op, cpu_op or op, args, kwargs)
        note(name or _info(op).name, reason, wide)
    check_devices(op, args, kwargs)
    conv = _Converter()
    cargs = [conv.to_cpu(a) for a in args]
    ckw = {k: conv.to_cpu(v) for k, v in kwargs.items()}
    info = _info(op)
    _wrap_numbers(info, cargs, ckw)
    fresh_outs: dict[str, torch.Tensor] = {}
    for i, kwarg_only in info.generator:
        if kwarg_only or i >= len(cargs):
            if ckw.get("generator") is None:
                ckw["generator"] = _generator()
        elif cargs[i] is None:
            cargs[i] = _generator()
    for oname in info.outs:
        t = kwargs.get(oname)
        # empty outs, and 0-dim ones (torch's composite wrappers hand .out kernels a 0-dim out that the
        # kernel resizes, e.g. mse_loss): let the CPU op allocate, then adopt or copy back
        if isinstance(t, torch.Tensor) and t.device.type == "trn" and (t.numel() == 0 or t.dim() == 0):
            fresh_outs[oname] = ckw[oname] = torch.empty((0,), dtype=t.dtype)
    run = cpu_op or op
    try:
        out = run(*cargs, **ckw)
    except RuntimeError as e:
        if "not resizable" not in str(e):
            raise
        grown = {}
        for oname in info.outs:  # an out= argument must grow: give the CPU op fresh tensors
            t = kwargs.get(oname)
            if isinstance(t, torch.Tensor) and oname not in fresh_outs:  # (fresh ones never failed)
                fresh_outs[oname] = ckw[oname] = torch.empty((0,), dtype=t.dtype)
                grown[oname] = t
        out = run(*cargs, **ckw)
        _warn_later_resizes(grown, fresh_outs)
    adopted: dict[int, Any] = {}
    for k, fresh in fresh_outs.items():  # out= tensors the CPU op allocated
        t = kwargs[k]
        if fresh.shape == t.shape and t.numel() > 0:
            memory.cpu_view(t).copy_(fresh)  # same shape: write into the caller's memory (keeps aliases)
        else:
            src = memory.adopt(fresh, adopted)
            memory.set_metadata(t, src.shape, src.stride(), src.storage_offset(), storage=src.untyped_storage())
        conv.by_view[id(fresh)] = t
        conv.views.pop(id(t), None)
    conv.sync_back()
    return conv.to_trn(out, adopted)


def _warn_later_resizes(grown: dict[str, torch.Tensor], fresh: dict[str, torch.Tensor]) -> None:
    """torch's resize warnings the retried out= call owes: the first attempt warned for each out it resized, in
    order, and stopped at the first whose storage had to grow; the outs after that one are warned for here (each
    non-empty out whose shape changes), so the call gives as many warnings as the CPU op."""
    from trnlang.device.registry import resize_warning

    stopped = False
    for name, t in grown.items():
        new = tuple(fresh[name].shape)
        if stopped:
            if t.numel() and new != tuple(t.shape):
                resize_warning(t.shape, new)
            continue
        room = t.untyped_storage().nbytes() - t.storage_offset() * t.element_size()
        stopped = math.prod(new) * t.element_size() > room


def excluded(name: str) -> bool:
    """``name`` (``aten::op`` or ``aten::op.overload``) is left out of the standard library by ``TRN_STDLIB_EXCLUDE``
    (an op name without an overload excludes every overload); such ops run through the CPU fallback, not a torch
    decomposition.

    Example:
        >>> excluded("aten::add.Tensor")  # unless TRN_STDLIB_EXCLUDE names it
        False
    """
    ex = _config.current.stdlib_exclude
    return bool(ex) and (name in ex or name.split(".", 1)[0] in ex)


_decomposed: Counter[str] = Counter()
_DECOMP: dict[Any, Callable[..., Any] | None] = {}


def decomposition_stats() -> dict[str, int]:
    """How many times each op without a lowering ran as torch's decomposition on ``trn`` (by op name)."""
    with _lock:
        return dict(_decomposed)


def _decomposition(op: Any) -> Callable[..., Any] | None:
    """torch's decomposition of ``op`` if it is safe to run eagerly on ``trn``, else None (cached).

    Safe: functional ops and ``out=`` variants (the decomposition writes ``out`` at the end) whose
    results are not views; in-place ops and view ops keep the CPU fallback, which preserves their
    aliasing exactly.
    """
    hit = _DECOMP.get(op, False)
    if hit is not False:
        return hit  # type: ignore[return-value]
    fn = None
    try:
        from torch._decomp import decomposition_table

        fn = decomposition_table.get(op)
        schema = op._schema
        outs = {a.name for a in schema.arguments if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write}
        mutates_inputs = any(a.alias_info is not None and a.alias_info.is_write and a.name not in outs
                             for a in schema.arguments)
        returns_view = not outs and any(r.alias_info is not None for r in schema.returns)
        if mutates_inputs or returns_view or op.namespace != "aten" or excluded(_info(op).name):
            fn = None
    except Exception:  # noqa: BLE001 - no usable decomposition
        fn = None
    _DECOMP[op] = fn
    return fn


def _scalars_on_trn(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` with CPU 0-dim tensors moved to ``trn`` when a ``trn`` tensor is among them: torch's kernels take a
    CPU scalar beside any device's tensors, but decompositions' ``out=`` wrappers check the first argument's device
    (promotion is unchanged: it looks at dimensions, not devices)."""
    def cpu_scalar(a: Any) -> bool:
        return type(a) is torch.Tensor and a.dim() == 0 and a.device.type == "cpu"

    if not any(cpu_scalar(a) for a in args) \
            or not any(type(a) is torch.Tensor and a.device.type == "trn" for a in args):
        return args
    return tuple(a.to("trn") if cpu_scalar(a) else a for a in args)


def boxed_fallback(op: Any, *args: Any, **kwargs: Any) -> Any:
    """The PrivateUse1 backend fallback: every op without a registered kernel lands here.

    Ops with a decomposition in torch (``torch._decomp``) run it first: its pieces dispatch to
    ``trn`` again (native where they have lowerings, each piece counted if it falls back). When the
    decomposition fails for this call (an unsupported case), the whole op runs on the CPU.

    The stdlib lowerings load at the first allocation on the device; a factory op called before any (e.g.
    ``torch.tril_indices(..., device="trn")`` first in a process) lands here first: the lowerings are loaded and
    the op dispatched again when one of them covers it.
    """
    from trnlang.device import backend

    if not backend.lowerings_loaded():
        backend.ensure_lowerings()
        if torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "PrivateUse1"):
            return op(*args, **kwargs)
    fn = _decomposition(op)
    if fn is not None:
        active = getattr(_tls, "decomposing", None)
        if active is None:
            active = _tls.decomposing = set()
        if op not in active:
            active.add(op)
            name = _info(op).name
            own = _counts.get(name, 0)
            try:
                r = fn(*_scalars_on_trn(args), **kwargs)
            except FallbackError:
                raise  # strict mode: names the piece that has no lowering
            except Exception:  # noqa: BLE001 - this call is not decomposable here: the CPU runs it
                r = NotImplemented
            finally:
                active.discard(op)
            if r is not NotImplemented:
                with _lock:
                    if _counts.get(name, 0) == own:  # not a wrapper that ended up running the op itself on the CPU
                        _decomposed[name] += 1
                return r
    return run_on_cpu(op, args, kwargs)
