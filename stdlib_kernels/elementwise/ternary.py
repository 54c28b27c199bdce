"""Elementwise ternary ops from one table: ``where``, ``clamp`` (scalar or tensor bounds), ``lerp``, ``addcmul``,
``addcdiv``.

One kernel (:func:`ternary`) serves them all: the op is a compile-time string naming an entry of
:data:`TERNARY_OPS`, a function of three tiles (and an optional ``[1, 1]`` scalar ``value``).
Broadcasting, scalars and type promotion work as in ``stdlib_kernels.elementwise.pointwise`` (whose
:func:`~stdlib_kernels.elementwise.pointwise.launch` coalesces the strided views): each operand is loaded in its
compute type (fp32 for a float result, int32 otherwise; ``where``'s condition as bool) and the store
rounds to the result dtype. A missing clamp bound is the ``[1, 1]`` operand ``+-inf`` (floats) or
the int32 extreme, so ``clamp(x, min=0)`` runs the same kernel.

``lerp`` follows torch's two-sided formula (``self + w * (end - self)`` for ``|w| < 0.5``, else
``end - (end - self) * (1 - w)``); ``addcmul``/``addcdiv`` evaluate ``self + (value * t1) * t2`` /
``self + (value * t1) / t2`` in torch's order.

Example:
    >>> import torch
    >>> x = torch.randn(8, 4, device="trn")                            # doctest: +SKIP
    >>> torch.where(x > 0, x, 0.1 * x), x.clamp(-1, 1), x.lerp(x * 2, 0.3)  # doctest: +SKIP
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.elementwise import pointwise as P
from trnlang.device import decline, lowering


def _lerp(x: Any, y: Any, w: Any) -> Any:
    d = y - x
    return tl.where(tl.abs(w) < 0.5, x + w * d, y - d * (1.0 - w))


#: op name -> function of three compute-type tiles and the ``value`` tile (None when unused).
TERNARY_OPS: dict[str, Callable[[Any, Any, Any, Any], Any]] = {
    "where": lambda c, x, y, v: tl.where(c, x, y),
    "clamp": lambda x, lo, hi, v: tl.minimum(tl.maximum(x, lo), hi),
    "lerp": lambda x, y, w, v: _lerp(x, y, w),
    "addcmul": lambda s, a, b, v: s + (v * a) * b,
    "addcdiv": lambda s, a, b, v: s + (v * a) / b,
}


def _load_scalar(t: Any, compute: str) -> Any:
    v = tl.load(t[0:1, 0:1])
    return v if compute == "bool" else v.astype(tl.float32 if compute == "f32" else tl.int32)


@trn.kernel
def ternary(x, y, z, value, out, op, scal, compute, flat=False):
    """``out = TERNARY_OPS[op](x, y, z, value)`` over 1- to 3-D tensors (rows by 128, the free dim by chunks).

    ``scal``: per operand, True if it is a ``[1, 1]`` scalar broadcast on chip. ``compute``: per
    operand ``"f32"``, ``"i32"`` or ``"bool"`` (loaded as is). ``value``: None or a ``[1, 1]`` tensor.
    ``flat``: every tensor is a contiguous 1-D piece (``elementwise.flat.flat_tiles``, through :data:`ternary_flat`).
    """
    fn = TERNARY_OPS[op]
    ops = (x, y, z)
    s0 = [_load_scalar(t, compute[k]) if scal[k] else None for k, t in enumerate(ops)]
    v0 = tl.load(value[0:1, 0:1]).astype(tl.float32 if compute[0] != "i32" else tl.int32) \
        if value is not None else None
    for acc, m in P.spaces(out, flat):
        ts = [s0[k] if scal[k] else P.load_tile(acc(t), m, compute[k]) for k, t in enumerate(ops)]
        tl.store(acc(out), fn(ts[0], ts[1], ts[2], v0), mask=m)


#: :func:`ternary` for flat launches: one variant for every element count.
ternary_flat = P.flat_kernel(ternary, rows=("x", "y", "z", "out"))


def run_ternary(op: str, operands: tuple[Any, Any, Any], out: torch.Tensor | None, rdt: torch.dtype,
                computes: tuple[str, str, str], value: Any = None) -> Any:
    """Launch ``TERNARY_OPS[op]``; operands are device tensors or Python numbers. NotImplemented declines."""
    o = P.classify(operands)
    if o is None or rdt not in P.RESULT_DTYPES:
        return decline("operands not trn tensors or numbers of a supported dtype, or an unsupported result dtype")
    ops = [t for t in o.full if t is not None]
    if any(t.dtype == torch.int64 for t in ops) or rdt == torch.int64:
        if P.i64_bound(op, "i32" if "i32" in computes else "f32") is None:
            return decline("int64 operands this op cannot compute exactly in 32 bits")
        if not P.ints_in_range(o, 2**31):
            return decline("int64 values beyond 2^31")
    shape = P.broadcast_shape(ops)
    if shape is None:
        return decline("operands do not broadcast: torch raises")
    res = P.prepare_out(shape, rdt, ops, out)
    if res is None:
        return decline("out= not a trn tensor of the result's shape and dtype, or overlapping an input")
    if res.numel() == 0:
        return res
    scal = P.to_scalars(o, shape, computes)
    if scal is None:
        return decline("a scalar operand not representable in the compute type")
    vt = None
    if value is not None:
        vt = P.scalar_operand(value, "i32" if computes[0] == "i32" else "f32")
        if vt is None:
            return decline("value= not representable in the compute type")
    P.launch(ternary, op, o.full, scal, vt, res, computes)
    return res


def _ct(dt: torch.dtype) -> str:
    return "f32" if dt.is_floating_point else "i32"


# ---------------------------------------------------------------------------------------------- where
@lowering("aten::where.self", dtypes=(*P.OPERAND_DTYPES, torch.complex64))
def where(condition: Any, self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
    """``self`` where ``condition`` else ``other`` (condition: a bool tensor); int64 and complex64 tensors select
    their int32 words / real-imaginary planes."""
    if isinstance(condition, torch.Tensor) and condition.dim() == 0 and condition.device.type == "cpu" \
            and condition.dtype == torch.bool:  # a CPU scalar joins any device's operands, as in TensorIterator
        condition = condition.to("trn")
    if not U.is_trn(condition) or condition.dtype != torch.bool:
        return decline("condition not a bool trn tensor (or a CPU 0-dim bool tensor)")
    rdt = torch.result_type(self, other)
    if rdt == torch.complex64:  # numbers and real tensors join as complex64 (a number: a 0-dim tensor)
        self, other = (v if U.is_trn(v) and v.dtype == rdt else v.to(rdt) if U.is_trn(v)
                       else torch.tensor(v, dtype=rdt, device="trn") if isinstance(v, (bool, int, float, complex))
                       else v for v in (self, other))
    if rdt == torch.complex64 or (rdt == torch.int64 and all(U.is_trn(t) and t.dtype == rdt for t in (self, other))):
        return _where_pairs(condition, self, other, out, rdt)
    c = _ct(rdt)
    return run_ternary("where", (condition, self, other), out, rdt, ("bool", c, c))


def _where_pairs(condition: torch.Tensor, self: torch.Tensor, other: torch.Tensor, out: torch.Tensor | None,
                 dtype: torch.dtype) -> Any:
    """``where`` of two ``dtype`` tensors (int64 or complex64) as a selection of element pairs, exact for every
    value: int64 as its int32 words (no arithmetic, so no range check), complex64 as its real/imaginary planes."""
    if not all(U.is_trn(t) and t.dtype == dtype and not t.is_conj() and not t.is_neg() for t in (self, other)) \
            or (out is not None and (not U.is_trn(out) or out.dtype != dtype)):
        return decline(f"{dtype} mixed with numbers or other dtypes, a conj/neg bit, or an out= of another dtype")
    shape = P.broadcast_shape([condition, self, other])
    if shape is None:
        return decline("operands do not broadcast: torch raises")
    if out is None:
        res = U.new_output(shape, dtype)
    else:
        if out.numel() == 0 and tuple(out.shape) != shape:
            out.resize_(shape)
        if tuple(out.shape) != shape or any(U.overlaps(out, t) for t in (condition, self, other)):
            return decline("out= not of the result's shape, or overlapping an input")
        res = out
    if res.numel() == 0:
        return res
    pairs, ct, c = (U.int32_words, torch.int32, "i32") if dtype == torch.int64 else \
        (torch.view_as_real, torch.float32, "f32")
    cond = condition.expand(shape).unsqueeze(-1).expand(*shape, 2)
    r = run_ternary("where", (cond, pairs(self.expand(shape)), pairs(other.expand(shape))), pairs(res), ct,
                    ("bool", c, c))
    return r if r is NotImplemented else res


@lowering("aten::where.ScalarSelf", dtypes=(*P.OPERAND_DTYPES, torch.complex64))
def where_scalar_self(condition: Any, self: Any, other: Any) -> Any:
    """``where`` with a number for ``self``."""
    return where(condition, self, other)


@lowering("aten::where.ScalarOther", dtypes=(*P.OPERAND_DTYPES, torch.complex64))
def where_scalar_other(condition: Any, self: Any, other: Any) -> Any:
    """``where`` with a number for ``other``."""
    return where(condition, self, other)


@lowering("aten::where.Scalar", dtypes=(*P.OPERAND_DTYPES, torch.complex64))
def where_scalar(condition: Any, self: Any, other: Any) -> Any:
    """``where`` with numbers for both branches."""
    return where(condition, self, other)


# ---------------------------------------------------------------------------------------------- clamp
def _meta(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    return x


def _kind(x: Any) -> Any:
    """What type promotion sees of an argument: a tensor's dtype and whether it is 0-dim, a number's type."""
    if isinstance(x, torch.Tensor):
        return (x.dtype, x.dim() == 0)
    return type(x)


_RESULT_DTYPES: dict[Any, torch.dtype] = {}


def result_dtype(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> torch.dtype:
    """The dtype torch gives ``fn(*args)`` (run on meta tensors: torch's own promotion, and its errors).

    Promotion depends only on the arguments' dtypes, 0-dim-ness and number types, so the result is
    memoised on those (running torch's reference on meta tensors costs about 2 ms).
    """
    key = (fn, tuple(_kind(a) for a in args), tuple((k, _kind(v)) for k, v in kwargs.items()))
    dt = _RESULT_DTYPES.get(key)
    if dt is None:
        dt = fn(*[_meta(a) for a in args], **{k: _meta(v) for k, v in kwargs.items()}).dtype
        _RESULT_DTYPES[key] = dt
    return dt


def _clamp(self: Any, lo: Any, hi: Any, out: torch.Tensor | None) -> Any:
    if lo is None and hi is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    if not U.is_trn(self):
        return decline("self not a trn tensor")
    rdt = result_dtype(torch.clamp, self, lo, hi)
    if rdt == torch.bool:
        return decline("a bool result")
    c = _ct(rdt)
    big = math.inf if c == "f32" else 2**31 - 1
    lo = -big if lo is None else lo
    hi = big if hi is None else hi
    if c == "i32" and any(isinstance(b, float) for b in (lo, hi)):
        return decline("float bounds on an integer tensor")
    return run_ternary("clamp", (self, lo, hi), out, rdt, (c, c, c))


@lowering("aten::clamp", dtypes=P.OPERAND_DTYPES)
def clamp(self: Any, min: Any = None, max: Any = None, *, out: torch.Tensor | None = None) -> Any:  # noqa: A002
    """``min(max(self, min), max)`` with number bounds (either may be None; NaN propagates).

    Example:
        >>> x.clamp(min=0.0)  # doctest: +SKIP
    """
    if isinstance(min, complex) or isinstance(max, complex):
        return decline("complex bounds")
    return _clamp(self, min, max, out)


@lowering("aten::clamp.Tensor", dtypes=P.OPERAND_DTYPES)
def clamp_tensor(self: Any, min: Any = None, max: Any = None, *,  # noqa: A002
                 out: torch.Tensor | None = None) -> Any:
    """``min(max(self, min), max)`` with tensor bounds (either may be None); bools with one bound as the CPU takes
    them: ``self | min`` or ``self & max`` (both bounds raise there)."""
    if U.is_trn(self) and self.dtype == torch.bool and (min is None) != (max is None) \
            and all(b is None or (isinstance(b, torch.Tensor) and b.dtype == torch.bool) for b in (min, max)):
        if min is not None:
            return torch.logical_or(self, min) if out is None else torch.logical_or(self, min, out=out)
        return torch.logical_and(self, max) if out is None else torch.logical_and(self, max, out=out)
    return _clamp(self, min, max, out)


# ---------------------------------------------------------------------------------------------- lerp, addc*
def _float_result(*xs: Any) -> torch.dtype | None:
    ts = [x for x in xs if isinstance(x, torch.Tensor)]
    rdt = ts[0].dtype
    for t in ts[1:]:
        if t.dtype != rdt:
            return None  # torch requires equal dtypes here (it raises)
    return rdt if rdt.is_floating_point else None


def _complex(*vs: Any) -> Any:
    """The complex_arith module when an operand is complex (None otherwise)."""
    if any(isinstance(v, complex) or (isinstance(v, torch.Tensor) and v.is_complex()) for v in vs):
        from stdlib_kernels.elementwise import complex_arith

        return complex_arith
    return None


_C64 = (*U.FLOAT_DTYPES, torch.complex64)


@lowering("aten::lerp.Scalar", dtypes=_C64)
def lerp_scalar(self: Any, end: Any, weight: Any, *, out: torch.Tensor | None = None) -> Any:
    """``self + weight * (end - self)`` (torch's two-sided formula) with a number weight."""
    if (ca := _complex(self, end, weight)) is not None:
        return ca.complex_lerp(self, end, weight, out)
    rdt = _float_result(self, end)
    if rdt is None or U.scalar_value(weight) is None or isinstance(U.scalar_value(weight), complex):
        return decline("not float operands, or a missing or complex weight")
    return run_ternary("lerp", (self, end, U.scalar_value(weight)), out, rdt, ("f32", "f32", "f32"))


@lowering("aten::lerp.Tensor", dtypes=_C64)
def lerp_tensor(self: Any, end: Any, weight: Any, *, out: torch.Tensor | None = None) -> Any:
    """``self + weight * (end - self)`` with a tensor weight."""
    if (ca := _complex(self, end, weight)) is not None:
        return ca.complex_lerp(self, end, weight, out)
    rdt = _float_result(self, end, weight)
    if rdt is None:
        return decline("not float operands")
    return run_ternary("lerp", (self, end, weight), out, rdt, ("f32", "f32", "f32"))


def _addc(op: str, self: Any, tensor1: Any, tensor2: Any, value: Any, out: torch.Tensor | None) -> Any:
    if (ca := _complex(self, tensor1, tensor2, value)) is not None:
        return ca.complex_addc(op, self, tensor1, tensor2, value, out)
    if not all(U.is_trn(t) for t in (self, tensor1, tensor2)):
        return decline("not all trn tensors")
    rdt = result_dtype(getattr(torch, op), self, tensor1, tensor2, value=value)
    if op == "addcdiv" and not rdt.is_floating_point:
        return decline("integer addcdiv: torch raises")
    v = U.scalar_value(value)
    if v is None or isinstance(v, complex) or rdt == torch.bool:
        return decline("a missing or complex value, or a bool result")
    c = _ct(rdt)
    if c == "i32" and isinstance(v, float):
        return decline("a float value on integer tensors")
    return run_ternary(op, (self, tensor1, tensor2), out, rdt, (c, c, c), value=v)


@lowering("aten::addcmul", dtypes=(*P.OPERAND_DTYPES, torch.complex64))
def addcmul(self: Any, tensor1: Any, tensor2: Any, *, value: Any = 1, out: torch.Tensor | None = None) -> Any:
    """``self + value * tensor1 * tensor2`` (Adam's second-moment update)."""
    return _addc("addcmul", self, tensor1, tensor2, value, out)


#: torch's refusal of integer ``addcdiv`` (tensor1 and tensor2 both integral or bool), word for word.
ADDCDIV_INT_MESSAGE = (
    "Integer division with addcdiv is no longer supported, and in a future  release addcdiv will perform a true "
    "division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as (input + value * "
    "torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as (input + value * tensor1 / tensor2) "
    "for float inputs. The future addcdiv behavior is just the latter implementation: (input + value * tensor1 / "
    "tensor2), for all dtypes.")


# integer operands too: they raise torch's error natively
@lowering("aten::addcdiv", dtypes=(*P.OPERAND_DTYPES, torch.complex64))
def addcdiv(self: Any, tensor1: Any, tensor2: Any, *, value: Any = 1, out: torch.Tensor | None = None) -> Any:
    """``self + value * tensor1 / tensor2`` (Adam's parameter update)."""
    ts = [t for t in (self, tensor1, tensor2, out) if isinstance(t, torch.Tensor)]
    if all(isinstance(t, torch.Tensor) and not t.is_floating_point() and not t.is_complex()
           for t in (tensor1, tensor2)):
        raise RuntimeError(ADDCDIV_INT_MESSAGE)
    if any(t.dtype not in (*U.FLOAT_DTYPES, torch.complex64) for t in ts):
        return decline("an integer or bool operand (the float kernel's dtypes: float32, bfloat16, float16)")
    return _addc("addcdiv", self, tensor1, tensor2, value, out)
