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

What a lowering accepts is declared where it is registered: ``dtypes=`` and ``accepts=Accepts(...)``
(which arguments must be ``trn`` tensors, conj/neg bits, contiguity, size and rank limits); a call outside
the declaration runs through the CPU fallback with a reason naming the rule, and ``trn coverage`` prints
the declaration. A lowering may also decline a call itself with ``decline("why")``.

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

__all__ = ["Accepts", "Lowering", "REGISTRY", "lowering", "register_decomposition", "resolve", "registry_table",
           "describe", "check_dims", "dim_arg_of", "warn_like_torch", "scalar_type_name"]


@dataclass(frozen=True)
class Accepts:
    """What a lowering accepts beyond its ``dtypes``, stated once where it is registered.

    A call outside it runs through the CPU fallback before the lowering is called, with a reason that names the
    rule and the argument (``fallback_reasons()``, the fallback warning, ``trn coverage``). Arguments are named
    as in the ATen schema (``self``, ``other``, ``weight``, ...); a named argument that is absent or None is not
    checked.

    Attributes:
        tensors: arguments that must be ``trn`` tensors (not Python numbers, not CPU tensors).
        plain: no tensor argument may carry a conj or neg bit.
        contiguous: arguments that must be contiguous tensors.
        max_numel: every tensor argument has fewer elements than this (e.g. ``2**31``: int32 offsets).
        max_dim: every tensor argument has at most this many dims.
        same_dtype: all tensor arguments share one dtype.

    Example:
        >>> import torch
        >>> from trnlang.device import Accepts, lowering
        >>> @lowering("aten::logaddexp", dtypes=(torch.float32,),
        ...           accepts=Accepts(tensors=("self", "other"), max_numel=2**31))   # doctest: +SKIP
        ... def logaddexp(self, other, *, out=None): ...
        >>> Accepts(tensors=("other",), max_dim=4).describe()
        'other a trn tensor; at most 4 dims; no conj/neg bit'
    """

    tensors: tuple[str, ...] = ()
    plain: bool = True
    contiguous: tuple[str, ...] = ()
    max_numel: int | None = None
    max_dim: int | None = None
    same_dtype: bool = False

    def describe(self) -> str:
        """The declaration in words (what ``trn coverage`` prints)."""
        parts = [f"{', '.join(self.tensors)} {'a trn tensor' if len(self.tensors) == 1 else 'trn tensors'}"] \
            if self.tensors else []
        if self.contiguous:
            parts.append(f"{', '.join(self.contiguous)} contiguous")
        if self.max_numel is not None:
            parts.append(f"fewer than {_pow2(self.max_numel)} elements")
        if self.max_dim is not None:
            parts.append(f"at most {self.max_dim} dims")
        if self.same_dtype:
            parts.append("one dtype")
        if self.plain:
            parts.append("no conj/neg bit")
        return "; ".join(parts)

    def refusal(self, positions: dict[str, int], args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        """Why this call is outside the declaration (None: it is inside)."""
        def arg(name: str) -> Any:
            i = positions.get(name)
            return args[i] if i is not None and i < len(args) else kwargs.get(name)

        for name in self.tensors:
            v = arg(name)
            if v is not None and not (isinstance(v, torch.Tensor) and v.device.type == "trn"):
                return f"{name} not a trn tensor"
        for name in self.contiguous:
            v = arg(name)
            if isinstance(v, torch.Tensor) and not v.is_contiguous():
                return f"{name} not contiguous"
        tensors = [(k, v) for k, v in ((k, arg(k)) for k in positions) if isinstance(v, torch.Tensor)]
        for k, v in tensors:
            if self.plain and (v.is_conj() or v.is_neg()):
                return f"{k} has a conj/neg bit"
            if self.max_numel is not None and v.numel() >= self.max_numel:
                return f"{k} has {_pow2(self.max_numel)} or more elements"
            if self.max_dim is not None and v.dim() > self.max_dim:
                return f"{k} has more than {self.max_dim} dims"
        if self.same_dtype and len({v.dtype for _, v in tensors}) > 1:
            return "tensor arguments of different dtypes"
        return None


def _pow2(n: int) -> str:
    return f"2^{n.bit_length() - 1}" if n > 0 and n & (n - 1) == 0 else str(n)


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
    dim_arg: tuple[int, str, bool] | None = field(default=None, repr=False)  # (position, name, is a list)
    out_check: Callable[[str, tuple[Any, ...], dict[str, Any]], None] | None = None  # out= dtype rule (_OUT_CHECKS)
    accepts: Accepts | None = None
    arg_positions: dict[str, int] = field(default_factory=dict, repr=False)  # schema name -> position

    def as_dict(self) -> dict[str, Any]:
        """The JSON-able description the coverage report prints."""
        d = {"kind": self.kind, "dtypes": [str(d).replace("torch.", "") for d in self.dtypes] if self.dtypes
             else None, "source": self.source, "routed_from": self.routed_from}
        if self.accepts is not None:
            d["accepts"] = self.accepts.describe()
        return d


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


def _first_dtype_outside(ok: tuple[torch.dtype, ...], args: tuple[Any, ...],
                         kwargs: dict[str, Any]) -> torch.dtype | None:
    """The dtype of the first tensor argument (positional, in a list, or keyword) not in ``ok``, else None.

    The ``info`` out= tensor of the ``linalg_*_ex`` ops and the ``pivots`` of the LU family are int32 by torch's
    contract, whatever the data dtype: not a dtype the lowering computes in, so not checked here (the op's own
    out= handling checks them)."""
    for a in (*args, *(v for k, v in kwargs.items() if k not in ("info", "pivots"))):
        for x in (a if isinstance(a, (list, tuple)) else (a,)):
            if isinstance(x, torch.Tensor) and x.dtype not in ok:
                return x.dtype
    return None


def _dtypes_in(ok: tuple[torch.dtype, ...], args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether every tensor argument (positional, in a list, or keyword) has a dtype in ``ok``."""
    return _first_dtype_outside(ok, args, kwargs) is None


def _dtype_reason(dtype: torch.dtype | None) -> str:
    return f"dtype {str(dtype).replace('torch.', '')} not among the lowering's dtypes"


#: Reductions over one ``int`` dim whose CPU kernels check it like a dim list (range, at most 64 dims).
_INT_DIM_REDUCTIONS = frozenset({"aten::argmax", "aten::argmin", "aten::max.dim", "aten::min.dim", "aten::all.dim",
                                 "aten::any.dim", "aten::prod.dim_int"})
#: Ops with a ``dim``/``dims`` list that torch checks its own way (repeats allowed, other messages).
_OWN_DIM_RULES = ("aten::roll", "aten::permute", "aten::_fft_", "aten::fft_", "aten::linalg_matrix_norm",
                  "aten::tensordot", "aten::movedim")


def dim_arg_of(op: Any, name: str, base: str | None = None) -> tuple[int, str, bool] | None:
    """Which argument of ``op`` is a reduction-style dim (checked by :func:`check_dims`), if any.

    A ``dim``/``dims`` argument typed ``int[]`` (optional or not), unless the op has rules of its own;
    or the ``int`` dim of the single-dim reductions in ``_INT_DIM_REDUCTIONS`` (``base``: the op a
    variant is routed from).
    """
    if name.startswith(_OWN_DIM_RULES) or (base or "").startswith(_OWN_DIM_RULES):
        return None
    for i, a in enumerate(op._schema.arguments):
        if a.name not in ("dim", "dims"):
            continue
        t = str(a.type)
        if "int[" in t or "List[int]" in t:
            return (i, a.name, True)
        if (base or name) in _INT_DIM_REDUCTIONS:
            return (i, a.name, False)
    return None


def check_dims(ndim: int, dims: Any, is_list: bool) -> None:
    """Raise as torch's reductions do for bad dims: out of range (IndexError), repeated, or a tensor of
    more than 64 dims reduced along some of them (RuntimeError). ``dims=None`` (and ``[]``) pass.

    Example:
        >>> check_dims(2, [0, 0], True)
        Traceback (most recent call last):
            ...
        RuntimeError: dim 0 appears multiple times in the list of dims
    """
    if dims is None:
        return
    ds = [int(d) for d in dims] if is_list else [int(dims)]
    if not ds:
        return
    if ndim > 64:
        raise RuntimeError("only tensors with up to 64 dims are supported")
    n = max(ndim, 1)
    seen = set()
    for d in ds:
        if not -n <= d < n:
            raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {d})")
        w = d % n
        if w in seen:
            raise RuntimeError(f"dim {w} appears multiple times in the list of dims")
        seen.add(w)


def _check_dim_arg(spec: tuple[int, str, bool], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    pos, nm, is_list = spec
    self = args[0] if args else None
    if not isinstance(self, torch.Tensor):
        return
    dims = args[pos] if pos < len(args) else kwargs.get(nm)
    check_dims(self.dim(), dims, is_list)


def _check_bool_out(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    out = kwargs.get("out")
    if isinstance(out, torch.Tensor) and out.dtype != torch.bool:
        raise RuntimeError(f"{name.split('::')[-1].split('.')[0]} does not support non-boolean outputs.")


def _check_real_out(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    out = kwargs.get("out")
    if isinstance(out, torch.Tensor) and out.is_complex():
        raise RuntimeError(f"{name.split('::')[-1].split('.')[0]} is not yet implemented for complex tensors.")


def _check_same_dtype_out(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    self, out = (args[0] if args else kwargs.get("self")), kwargs.get("out")
    if isinstance(self, torch.Tensor) and isinstance(out, torch.Tensor) and out.dtype != self.dtype \
            and not self.is_complex():
        raise RuntimeError(f"Found dtype {scalar_type_name(out.dtype)} but expected {scalar_type_name(self.dtype)}")


#: out= variants whose ``out`` dtype torch checks before any computation (whatever the operands): the check raises
#: torch's error. Unary predicates take a bool out only; heaviside refuses a complex out (real operands too); real
#: unary ops that neither promote nor cast (neg, floor, ...) need the input's dtype exactly.
_OUT_CHECKS: dict[str, Callable[[str, tuple[Any, ...], dict[str, Any]], None]] = {
    "aten::isposinf": _check_bool_out, "aten::isneginf": _check_bool_out, "aten::heaviside": _check_real_out,
    **dict.fromkeys(("aten::neg", "aten::floor", "aten::ceil", "aten::trunc", "aten::abs", "aten::sign"),
                    _check_same_dtype_out)}


def _needs_cpu(ent: Lowering, op: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Checks of calls with keywords, lists or CPU tensors: raise as torch does, or say the CPU must run it."""
    if ent.out_check is not None:  # an error whatever the dtypes: raised before any fallback
        ent.out_check(ent.routed_from or "", args, kwargs)
    if ent.dtypes is not None and not _dtypes_in(ent.dtypes, args, kwargs):
        return True
    if ent.device_check:
        fallback.check_devices(op, args, kwargs)
    return False


def _into_out_of_another_dtype(ent: Lowering, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """An ``out=`` variant whose inputs the lowering takes but whose ``out`` dtype it does not: the functional
    lowering's result, cast into ``out`` as torch casts (it computes in the result dtype); None to fall back."""
    out = kwargs.get("out")
    if ent.routed_from is None or ent.dtypes is None or ent.out_check is _check_same_dtype_out \
            or type(out) is not torch.Tensor \
            or out.device.type != "trn" or out.is_conj() or out.is_neg():
        return None
    rest = {k: v for k, v in kwargs.items() if k != "out"}
    func = REGISTRY.get(ent.routed_from)
    if func is None or func.kind != "kernel" or not _dtypes_in(ent.dtypes, args, rest) \
            or (func.accepts is not None and func.accepts.refusal(func.arg_positions, args, rest) is not None):
        return None
    if func.dim_arg is not None:
        _check_dim_arg(func.dim_arg, args, rest)
    r = func.fn(*args, **rest)
    if r is NotImplemented or type(r) is not torch.Tensor:
        fallback.take_decline_reason()
        return None
    if not torch.can_cast(r.dtype, out.dtype):
        return None  # torch raises, in the op's own words (TensorIterator's, or linalg's "safely castable")
    if out.shape != r.shape:
        if any(type(a) is torch.Tensor and a.device.type == "trn" and a.untyped_storage().data_ptr()
               == out.untyped_storage().data_ptr() for a in args):
            return None  # an input that is also the out= of another shape: torch raises (the CPU's error)
        resize_out(out, r.shape)
    return out.copy_(r)


def _outside_dtypes(ent: Lowering, op: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A call with a tensor of a dtype outside the lowering's: an ``out=`` of another dtype is filled from the
    functional lowering; anything else runs through the CPU fallback, saying which dtype."""
    if ent.device_check:  # _needs_cpu stopped at the dtypes, before its device check
        fallback.check_devices(op, args, kwargs)
    r = _into_out_of_another_dtype(ent, args, kwargs)
    if r is not None:
        return r
    return fallback.run_on_cpu(op, args, kwargs, name=name, reason=_dtype_reason(
        _first_dtype_outside(ent.dtypes or (), args, kwargs)))


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
                        return fallback.run_on_cpu(op, args, kwargs, name=name, reason=_dtype_reason(a.dtype))
                    if a.is_cpu and a.dim() != 0:
                        simple = False
                elif isinstance(a, (list, tuple)):
                    simple = False
        if not simple and _needs_cpu(ent, op, args, kwargs):
            return _outside_dtypes(ent, op, name, args, kwargs)
        if ent.accepts is not None:
            why = ent.accepts.refusal(ent.arg_positions, args, kwargs)
            if why is not None:
                return fallback.run_on_cpu(op, args, kwargs, name=name, reason=why)
        if ent.dim_arg is not None:
            _check_dim_arg(ent.dim_arg, args, kwargs)
        r = ent.fn(*args, **kwargs)
        if r is NotImplemented:
            return fallback.run_on_cpu(op, args, kwargs, name=name, reason=fallback.take_decline_reason())
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
    names = [(a.name, str(a.type)) for a in schema.arguments]  # types too: clamp.out is not clamp.Tensor's
    for o in packet.overloads():
        cand = getattr(packet, o)
        s = cand._schema
        if not s.is_mutable:
            continue
        outs = [a for a in s.arguments if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write]
        if len(outs) != len(schema.returns) or not outs:
            continue
        if [(a.name, str(a.type)) for a in s.arguments if a not in outs] == names:
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
            raise RuntimeError(f"result type {scalar_type_name(r.dtype)} can't be cast to the desired output type "
                               f"{scalar_type_name(self.dtype)}")
        self.copy_(r)
        return self

    return inplace


def scalar_type_name(d: torch.dtype) -> str:
    """The name torch's C++ messages give a dtype (``Long`` for int64, ``ComplexFloat`` for complex64).

    Example:
        >>> scalar_type_name(torch.int64), scalar_type_name(torch.complex64)
        ('Long', 'ComplexFloat')
    """
    return {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
            torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
            torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
            torch.complex32: "ComplexHalf"}.get(d, str(d))


#: Ops whose ``out=`` must have the result's dtype exactly (torch does not cast into it).
_EXACT_OUT = frozenset({"aten::amax", "aten::amin"})


def _pair_dtype_error(name: str, which: str, want: torch.dtype, got: torch.dtype) -> str:
    """torch's message for a (values, indices) ``out=`` of the wrong dtype: ops word theirs differently."""
    w, g = scalar_type_name(want), scalar_type_name(got)
    if name == "aten::mode":
        return f"expected scalar type '{w}' but got '{g}' for {which} output"
    if name in ("aten::cummax", "aten::cummin"):
        return f"expected scalar_type {w} but found {g}"
    if name == "aten::kthvalue":
        return ("output values must be of same type as input" if which == "values"
                else "output indices must be of scalar type Long")
    return f"Expected out tensor to have dtype {_cpp_name(want)}, but got {_cpp_name(got)} instead"


#: the C++ type names torch's generic out= dtype check prints
_CPP_NAMES = {torch.int64: "long int", torch.int32: "int", torch.int16: "short int", torch.int8: "signed char",
              torch.uint8: "unsigned char", torch.float64: "double", torch.float32: "float", torch.bool: "bool",
              torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16"}


def _cpp_name(dt: torch.dtype) -> str:
    return _CPP_NAMES.get(dt, scalar_type_name(dt).lower())


def _route_out(fn: Callable[..., Any], out_names: list[str], exact: bool = False,
               dtype_from_out: bool = False, name: str = "") -> Callable[..., Any]:
    def out_variant(*args: Any, **kwargs: Any) -> Any:
        outs = [kwargs.pop(n) for n in out_names]
        if dtype_from_out and kwargs.get("dtype") is None and isinstance(outs[0], torch.Tensor):
            kwargs["dtype"] = outs[0].dtype  # sum/prod/mean(out=...) compute in the out tensor's dtype
        r = fn(*args, **kwargs)
        if r is NotImplemented:
            return r
        rs = r if isinstance(r, tuple) else (r,)
        for o, v, which in zip(outs, rs, out_names):
            if len(outs) > 1 and o.dtype != v.dtype:  # (values, indices) results: torch never casts
                raise RuntimeError(_pair_dtype_error(name, which, v.dtype, o.dtype))
            if exact and o.dtype != v.dtype:
                raise RuntimeError(f"Expected the dtype for input and out to match, but got "
                                   f"{scalar_type_name(v.dtype)} for input's dtype and {scalar_type_name(o.dtype)} "
                                   "for out's dtype.")
            if not torch.can_cast(v.dtype, o.dtype):
                raise RuntimeError(f"result type {scalar_type_name(v.dtype)} can't be cast to the desired output type "
                                   f"{scalar_type_name(o.dtype)}")
            resize_out(o, v.shape)
            o.copy_(v)
        return outs[0] if len(outs) == 1 else tuple(outs)

    return out_variant


def lowering(op: str, *, dtypes: tuple[torch.dtype, ...] | list[torch.dtype] | None = None, kind: str = "kernel",
             variants: bool = True, device_check: bool = True, fast: Callable[..., Any] | None = None,
             accepts: Accepts | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
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
        accepts: what else the function handles (:class:`Accepts`: trn-tensor arguments, conj/neg bits,
            contiguity, size and rank limits); other calls run through the CPU fallback with the rule as
            their reason. Checked after the fast lane (a ``fast`` function must check for itself).

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
        if fn.__module__.startswith("stdlib_kernels.") and fallback.excluded(name):
            return fn  # TRN_STDLIB_EXCLUDE: left to the CPU fallback (to rewrite or bisect this lowering)
        dt = tuple(dtypes) if dtypes is not None else None
        takes_out = "out" in inspect.signature(fn).parameters
        check = device_check and kind not in ("plumbing", "cpu")
        pos = {a.name: i for i, a in enumerate(ov._schema.arguments)}
        if accepts is not None:
            unknown = [a for a in (*accepts.tensors, *accepts.contiguous) if a not in pos]
            if unknown:
                raise ValueError(f"accepts= names {unknown}, not arguments of {name} ({', '.join(pos)})")
        REGISTRY[name] = Lowering(name, kind, dt, _source(fn), fn, None, takes_out, check, fast,
                                  dim_arg_of(ov, name), accepts=accepts, arg_positions=pos)
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
                    infer = len(outs) == 1 and any(a.name == "dtype" and a.kwarg_only for a in ov._schema.arguments)
                    vfn = fn if takes_out and outs == ["out"] else _route_out(fn, outs, name in _EXACT_OUT, infer, name)
                REGISTRY[vname] = Lowering(vname, kind, dt, REGISTRY[name].source, vfn, name, False, check,
                                           fast=getattr(fast, "inplace", None) if how == "inplace" else None,
                                           dim_arg=dim_arg_of(vop, vname, name),
                                           out_check=_OUT_CHECKS.get(name) if how == "out" else None,
                                           accepts=accepts,
                                           arg_positions={a.name: i for i, a in enumerate(vop._schema.arguments)})
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


_LIB_DIRS = tuple(os.path.dirname(os.path.abspath(m)) for m in (
    __file__, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           "stdlib_kernels", "x"), torch.__file__))


def resize_out(out: torch.Tensor, shape: Any) -> None:
    """Resize an ``out=`` tensor to the result's ``shape`` as torch's structured kernels do: silently when it is
    empty, else with torch's deprecation warning (attributed to the user's line).

    Example:
        >>> t = torch.empty(0)
        >>> resize_out(t, (2, 3)); t.shape
        torch.Size([2, 3])
    """
    if tuple(out.shape) == tuple(shape):
        return
    if out.numel():
        resize_warning(out.shape, shape)
    out.resize_(tuple(shape))


def resize_warning(old: Any, new: Any) -> None:
    """torch's deprecation warning for a non-empty ``out=`` resized from shape ``old`` to ``new``."""
    warn_like_torch(f"An output with one or more elements was resized since it had shape {list(old)}, "
                    f"which does not match the required output shape {list(new)}. This behavior is "
                    "deprecated, and in a future PyTorch release outputs will not be resized unless they have "
                    "zero elements. You can explicitly reuse an out tensor t by resizing it, inplace, to zero "
                    "elements with t.resize_(0).")


def warn_like_torch(message: str, category: type[Warning] = UserWarning) -> None:
    """Emit a warning torch's CPU kernel would emit, attributed to the caller's line outside trnlang and
    torch (as torch attributes its C++ warnings), so Python's once-per-line filters behave the same.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as w:
        ...     warnings.simplefilter("always")
        ...     warn_like_torch("indexing with dtype torch.uint8 is now deprecated")
        >>> len(w)
        1
    """
    import sys
    import warnings

    f = sys._getframe(1)
    level = 2  # stacklevel 2 is the frame of sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_LIB_DIRS):
        f = f.f_back  # type: ignore[assignment]
        level += 1
    warnings.warn(message, category, stacklevel=level)


def registry_table() -> dict[str, dict[str, Any]]:
    """The registry as plain data: op name -> {kind, dtypes, source, routed_from}."""
    return {k: v.as_dict() for k, v in sorted(REGISTRY.items())}
