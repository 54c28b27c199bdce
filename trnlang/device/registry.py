"""The lowering registry: ATen op name -> how the ``trn`` device runs it.

``@trn.lowering("aten::op.overload")`` registers a Python function (which launches trnlang
kernels) as the ``trn`` implementation of an ATen op. The registry is data
(:data:`REGISTRY`: op name -> :class:`Lowering` with ``kind``, ``dtypes``, ``source``) that the
coverage report reads.

Kinds: ``kernel`` (trnlang kernels), ``decomposition`` (torch's decomposition into ops that have
lowerings), ``plumbing`` (device-layer metadata and host<->device copies), ``cpu`` (explicitly
routed to a CPU op; counted as a fallback).

Trap 1 of the device notes: functional and in-place ops often reach the backend as their
``.out`` variant, so registering a functional op also routes its in-place and ``out=``
variants to the same function, unless they are registered themselves.

A lowering may decline a call by returning ``NotImplemented``; the call then runs through the
CPU fallback (and is counted as one). Calls with tensor dtypes outside ``dtypes`` fall back too.

Example:
    >>> import torch
    >>> from trnlang.device import lowering
    >>> @lowering("aten::relu", dtypes=(torch.float32,))   # doctest: +SKIP
    ... def relu(x):
    ...     out = torch.empty_like(x)
    ...     relu_kernel(x, out)
    ...     return out
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from trnlang.device import fallback

__all__ = ["Lowering", "REGISTRY", "lowering", "register_decomposition", "resolve", "registry_table", "describe"]


@dataclass
class Lowering:
    """One entry of the registry."""

    op: str
    kind: str
    dtypes: tuple[torch.dtype, ...] | None
    source: str
    fn: Callable[..., Any] = field(repr=False)
    routed_from: str | None = None
    takes_out: bool = False
    device_check: bool = True
    fast: Callable[..., Any] | None = field(default=None, repr=False)

    def as_dict(self) -> dict[str, Any]:
        """The JSON-able description the coverage report prints."""
        return {"kind": self.kind, "dtypes": [str(d).replace("torch.", "") for d in self.dtypes] if self.dtypes
                else None, "source": self.source, "routed_from": self.routed_from}


REGISTRY: dict[str, Lowering] = {}
_REGISTERED: set[str] = set()  # ops with a torch.library kernel (registration is once per process)
_LIBS: dict[str, Any] = {}


def _lib(ns: str) -> Any:
    lib = _LIBS.get(ns)
    if lib is None:
        lib = _LIBS[ns] = torch.library.Library(ns, "IMPL")
    return lib


def resolve(name: str) -> Any:
    """``aten::add.Tensor`` / ``aten::add`` -> the OpOverload."""
    ns, _, rest = name.partition("::")
    if not rest:
        ns, rest = "aten", name
    base, _, ov = rest.partition(".")
    packet = getattr(getattr(torch.ops, ns), base)
    return getattr(packet, ov or "default")


def _canonical(name: str) -> str:
    return fallback.op_name(resolve(name))


def _source(fn: Callable[..., Any]) -> str:
    try:
        f = inspect.getsourcefile(fn) or "?"
        line = inspect.getsourcelines(fn)[1]
    except (OSError, TypeError):
        return getattr(fn, "__module__", "?")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    f = os.path.relpath(f, root) if f.startswith(root) else f
    return f"{f}:{line}"


def _dtypes_in(ok: tuple[torch.dtype, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether every tensor argument (positional, in a list, or keyword) has a dtype in ``ok``."""
    for a in args:
        if isinstance(a, torch.Tensor) and a.dtype not in ok:
            return False
        if isinstance(a, (list, tuple)):
            for x in a:
                if isinstance(x, torch.Tensor) and x.dtype not in ok:
                    return False
    for a in kwargs.values():
        if isinstance(a, torch.Tensor) and a.dtype not in ok:
            return False
    return True


def _kernel_for(op: Any, name: str) -> Callable[..., Any]:
    """The function torch.library calls: looks the entry up at call time (entries may be replaced)."""
    def trn_kernel(*args: Any, **kwargs: Any) -> Any:
        ent = REGISTRY[name]
        if ent.fast is not None and not kwargs:  # the fast lane (fastlane.py): None means "not this call"
            r = ent.fast(*args)
            if r is not None:
                return r
        ok = ent.dtypes
        # the common case in one pass: positional tensors only, all on trn (or 0-dim CPU scalars)
        simple = not kwargs
        if simple:
            for a in args:
                if isinstance(a, torch.Tensor):
                    if ok is not None and a.dtype not in ok:
                        return fallback.run_on_cpu(op, args, kwargs, name=name)
                    if a.is_cpu and a.dim() != 0:
                        simple = False
                elif isinstance(a, (list, tuple)):
                    simple = False
        if not simple:
            if ok is not None and not _dtypes_in(ok, args, kwargs):
                return fallback.run_on_cpu(op, args, kwargs, name=name)
            if ent.device_check:
                fallback.check_devices(op, args, kwargs)
        r = ent.fn(*args, **kwargs)
        if r is NotImplemented:
            return fallback.run_on_cpu(op, args, kwargs, name=name)
        return r

    trn_kernel.__name__ = f"trn_{name.replace('::', '_').replace('.', '_')}"
    return trn_kernel


def _register_torch(op: Any, name: str) -> None:
    if name in _REGISTERED:
        return
    ns, _, qual = name.partition("::")
    _lib(ns).impl(qual, _kernel_for(op, name), "PrivateUse1")
    _REGISTERED.add(name)
    if torch._C._dispatch_has_kernel_for_dispatch_key(op._schema.name + (
            "" if op._overloadname == "default" else "." + op._overloadname), "CompositeImplicitAutograd"):
        _register_composite_autograd(op, name)


def _register_composite_autograd(op: Any, name: str) -> None:
    """Trap 10: a backend kernel for a CompositeImplicitAutograd op takes it out of autograd.

    With gradients needed, run the composite decomposition (differentiable, its pieces dispatch to
    ``trn`` kernels); otherwise go below autograd to the fused lowering.
    """
    def autograd_kernel(*args: Any, **kwargs: Any) -> Any:
        flat = [x for a in [*args, *kwargs.values()] for x in (a if isinstance(a, (list, tuple)) else (a,))]
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in flat):
            return op.decompose(*args, **kwargs)
        with torch._C._AutoDispatchBelowAutograd():
            return op(*args, **kwargs)

    ns, _, qual = name.partition("::")
    _lib(ns).impl(qual, autograd_kernel, "AutogradPrivateUse1")


def _variants(op: Any) -> list[tuple[Any, str]]:
    """In-place and out= variants of a functional op: [(OpOverload, 'inplace'|'out')]."""
    schema = op._schema
    if schema.is_mutable:
        return []
    ns = schema.name.partition("::")[0]
    base = schema.name.partition("::")[2]
    ov = op._overloadname
    found: list[tuple[Any, str]] = []
    nsobj = getattr(torch.ops, ns)
    inplace = getattr(nsobj, base + "_", None) if not base.endswith("_") else None
    if inplace is not None and ov in inplace.overloads():
        found.append((getattr(inplace, ov), "inplace"))
    packet = getattr(nsobj, base)
    names = [a.name for a in schema.arguments]
    for o in packet.overloads():
        cand = getattr(packet, o)
        s = cand._schema
        if not s.is_mutable:
            continue
        outs = [a for a in s.arguments if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]
        if len(outs) != len(schema.returns) or not outs:
            continue
        if [a.name for a in s.arguments if a not in outs] == names:
            found.append((cand, "out"))
            break
    return found


def _route_inplace(fn: Callable[..., Any], takes_out: bool) -> Callable[..., Any]:
    def inplace(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if takes_out:
            r = fn(self, *args, out=self, **kwargs)
            if r is NotImplemented:
                return r
            return self
        r = fn(self, *args, **kwargs)
        if r is NotImplemented:
            return r
        if r.shape != self.shape:
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape "
                               f"{list(r.shape)}")
        if not torch.can_cast(r.dtype, self.dtype):
            raise RuntimeError(f"result type {_dtype_name(r.dtype)} can't be cast to the desired output type "
                               f"{_dtype_name(self.dtype)}")
        self.copy_(r)
        return self

    return inplace


def _dtype_name(d: torch.dtype) -> str:
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
            torch.bool: "Bool"}.get(d, str(d))


def _route_out(fn: Callable[..., Any], out_names: list[str]) -> Callable[..., Any]:
    def out_variant(*args: Any, **kwargs: Any) -> Any:
        outs = [kwargs.pop(n) for n in out_names]
        r = fn(*args, **kwargs)
        if r is NotImplemented:
            return r
        rs = r if isinstance(r, tuple) else (r,)
        for o, v in zip(outs, rs):
            if not torch.can_cast(v.dtype, o.dtype):
                raise RuntimeError(f"result type {_dtype_name(v.dtype)} can't be cast to the desired output type "
                                   f"{_dtype_name(o.dtype)}")
            if o.shape != v.shape:
                if o.numel() != 0:
                    import warnings

                    warnings.warn(f"An output with one or more elements was resized since it had shape "
                                  f"{list(o.shape)}, which does not match the required output shape "
                                  f"{list(v.shape)}.", UserWarning, stacklevel=2)
                o.resize_(v.shape)
            o.copy_(v)
        return outs[0] if len(outs) == 1 else tuple(outs)

    return out_variant


def lowering(op: str, *, dtypes: tuple[torch.dtype, ...] | list[torch.dtype] | None = None, kind: str = "kernel",
             variants: bool = True, device_check: bool = True,
             fast: Callable[..., Any] | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the ``trn`` implementation of the ATen op ``op``.

    Args:
        op: ``"aten::name.overload"`` (``"aten::name"`` for the default overload).
        dtypes: tensor dtypes the function handles; calls with others run through the CPU fallback.
        kind: ``kernel``, ``decomposition``, ``plumbing`` or ``cpu`` (see the module docstring).
        variants: also route the op's in-place and ``out=`` variants to this function (unless those
            are registered themselves). A function with an ``out`` keyword parameter gets the
            output tensor (``self`` for the in-place variant) instead of allocating one.
        device_check: reject ``trn`` tensors mixed with CPU tensors that are not 0-dim (like the
            CPU fallback does); off for plumbing and for ops that copy across devices.
        fast: a function tried first for calls without keyword arguments; it returns the result, or
            None to let the lowering run (see :mod:`trnlang.device.fastlane`). Only the op itself,
            not its in-place and ``out=`` variants.

    Returns:
        A decorator returning the function unchanged.

    Example:
        >>> @lowering("aten::mul.Tensor", dtypes=(torch.float32,))  # doctest: +SKIP
        ... def mul(self, other, out=None): ...
    """
    if kind not in ("kernel", "decomposition", "plumbing", "cpu"):
        raise ValueError(f"unknown lowering kind {kind!r}")

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        ov = resolve(op)
        name = fallback.op_name(ov)
        dt = tuple(dtypes) if dtypes is not None else None
        takes_out = "out" in inspect.signature(fn).parameters
        check = device_check and kind not in ("plumbing", "cpu")
        REGISTRY[name] = Lowering(name, kind, dt, _source(fn), fn, None, takes_out, check, fast)
        _register_torch(ov, name)
        if variants:
            for vop, how in _variants(ov):
                vname = fallback.op_name(vop)
                cur = REGISTRY.get(vname)
                if cur is not None and cur.routed_from is None:
                    continue  # registered on its own
                if how == "inplace":
                    vfn = _route_inplace(fn, takes_out)
                else:
                    outs = [a.name for a in vop._schema.arguments
                            if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]
                    vfn = fn if takes_out and outs == ["out"] else _route_out(fn, outs)
                REGISTRY[vname] = Lowering(vname, kind, dt, REGISTRY[name].source, vfn, name, False, check)
                _register_torch(vop, vname)
        return fn

    return deco


def register_decomposition(ops: list[str], *, dtypes: tuple[torch.dtype, ...] | None = None) -> None:
    """Register torch's own decompositions (``torch._decomp``) of ``ops`` as their ``trn`` lowering.

    The decomposed pieces dispatch again, so they run natively where they have lowerings.
    """
    from torch._decomp import decomposition_table

    for name in ops:
        ov = resolve(name)
        fn = decomposition_table.get(ov)
        if fn is None:
            raise KeyError(f"torch has no decomposition for {name}")
        lowering(name, dtypes=dtypes, kind="decomposition", variants=False)(fn)


def describe(op: str, fn: Callable[..., Any], *, kind: str = "kernel",
             dtypes: tuple[torch.dtype, ...] | None = None) -> None:
    """Record, as data only, an implementation registered with ``torch.library`` directly.

    For the few ops whose lowering must sit at a dispatch key ``@lowering`` does not use (an
    ``AutogradPrivateUse1`` kernel that keeps a fused op and its own backward); the coverage report
    and the docs then list it like any other entry.
    """
    name = fallback.op_name(resolve(op))
    REGISTRY[name] = Lowering(name, kind, tuple(dtypes) if dtypes else None, _source(fn), fn, None, False, False)


def registry_table() -> dict[str, dict[str, Any]]:
    """The registry as plain data: op name -> {kind, dtypes, source, routed_from}."""
    return {k: v.as_dict() for k, v in sorted(REGISTRY.items())}
