"""Which ATen ops a generated kernel can compute, and the ``tl`` expression each one becomes.

One table, :data:`POINTWISE`, maps an ATen overload to a :class:`Rule`: which positional arguments are
operands (tensors or Python numbers) and a function building the trnlang expression text from the
operands' text. :data:`REDUCTIONS` does the same for reductions over the last dimension. An op that is
in neither table runs as the ``trn`` device's own lowering (an extern call inside the compiled graph).

Example:
    >>> import torch
    >>> from trnlang.compile.ops import POINTWISE
    >>> POINTWISE[torch.ops.aten.mul.Tensor].emit(["a", "0.5"], {})
    '(a * 0.5)'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

aten = torch.ops.aten
prims = torch.ops.prims

#: dtypes a generated kernel loads, computes and stores (int64 indices and ints stay extern ops).
FUSED_DTYPES = {torch.float32, torch.bfloat16, torch.float16, torch.bool}

_TL_DTYPE = {torch.float32: "tl.float32", torch.bfloat16: "tl.bfloat16", torch.float16: "tl.float16",
             torch.bool: "tl.bool_"}


@dataclass(frozen=True)
class Rule:
    """How one ATen op becomes an expression: ``operands`` (positional indices) feed ``emit``."""

    operands: tuple[int, ...]
    emit: Callable[[list[str], dict[str, Any]], str]
    #: a check of the node's non-operand arguments (None: any); False keeps the op extern.
    accepts: Callable[[tuple[Any, ...], dict[str, Any]], bool] | None = None


def _binary(op: str) -> Rule:
    return Rule((0, 1), lambda a, kw: f"({a[0]} {op} {a[1]})")


def _func(name: str) -> Rule:
    return Rule((0,), lambda a, kw: f"tl.{name}({a[0]})")


def _call2(name: str) -> Rule:
    return Rule((0, 1), lambda a, kw: f"tl.{name}({a[0]}, {a[1]})")


def _add(sign: str) -> Rule:
    def emit(a: list[str], kw: dict[str, Any]) -> str:
        alpha = kw.get("alpha", 1)
        rhs = a[1] if alpha == 1 else f"({a[1]} * {float(alpha)!r})"
        return f"({a[0]} {sign} {rhs})"
    return Rule((0, 1), emit)


def _pow_scalar(a: list[str], kw: dict[str, Any]) -> str:
    e = kw["_exponent"]
    if e == 2:
        return f"({a[0]} * {a[0]})"
    if e == 1:
        return a[0]
    if e == 3:  # torch's CPU kernel special-cases 2, 3 and -2 the same way (bit-identical results)
        return f"({a[0]} * {a[0]} * {a[0]})"
    if e == -2:
        return f"tl.reciprocal({a[0]} * {a[0]})"
    if e == 0.5:
        return f"tl.sqrt({a[0]})"
    if e == -0.5:
        return f"tl.rsqrt({a[0]})"
    if e == -1:
        return f"tl.reciprocal({a[0]})"
    return f"tl.power({a[0]}, {float(e)!r})"


def _convert(a: list[str], kw: dict[str, Any]) -> str:
    return f"tl.copy({a[0]}, dtype={_TL_DTYPE[kw['_dtype']]})"


def _to_copy_ok(args: tuple[Any, ...], kw: dict[str, Any]) -> bool:
    extra = set(kw) - {"dtype", "layout", "device", "memory_format"}
    return not extra and kw.get("dtype") in FUSED_DTYPES and kw.get("memory_format") in (None, torch.contiguous_format,
                                                                                          torch.preserve_format)


def _gelu(a: list[str], kw: dict[str, Any]) -> str:
    return f"tl.gelu_tanh({a[0]})" if kw.get("approximate", "none") == "tanh" else f"tl.gelu({a[0]})"


POINTWISE: dict[Any, Rule] = {
    aten.add.Tensor: _add("+"), aten.add.Scalar: _add("+"),
    aten.sub.Tensor: _add("-"), aten.sub.Scalar: _add("-"),
    aten.rsub.Scalar: Rule((0, 1), lambda a, kw: f"({a[1]} - {a[0]})"),
    aten.mul.Tensor: _binary("*"), aten.mul.Scalar: _binary("*"),
    aten.div.Tensor: _binary("/"), aten.div.Scalar: _binary("/"),
    aten.maximum.default: _call2("maximum"), aten.minimum.default: _call2("minimum"),
    aten.gt.Tensor: _binary(">"), aten.gt.Scalar: _binary(">"),
    aten.ge.Tensor: _binary(">="), aten.ge.Scalar: _binary(">="),
    aten.lt.Tensor: _binary("<"), aten.lt.Scalar: _binary("<"),
    aten.le.Tensor: _binary("<="), aten.le.Scalar: _binary("<="),
    aten.eq.Tensor: _binary("=="), aten.eq.Scalar: _binary("=="),
    aten.ne.Tensor: _binary("!="), aten.ne.Scalar: _binary("!="),
    aten.where.self: Rule((0, 1, 2), lambda a, kw: f"tl.where({a[0]}, {a[1]}, {a[2]})"),
    aten.neg.default: Rule((0,), lambda a, kw: f"(-{a[0]})"),
    aten.exp.default: _func("exp"), aten.log.default: _func("log"), aten.tanh.default: _func("tanh"),
    aten.erf.default: _func("erf"), aten.sigmoid.default: _func("sigmoid"), aten.relu.default: _func("relu"),
    aten.sqrt.default: _func("sqrt"), aten.rsqrt.default: _func("rsqrt"), aten.abs.default: _func("abs"),
    aten.reciprocal.default: _func("reciprocal"), aten.sin.default: _func("sin"), aten.cos.default: _func("cos"),
    aten.log1p.default: _func("log1p"), aten.expm1.default: _func("expm1"), aten.silu.default: _func("silu"),
    aten.exp2.default: _func("exp2"), aten.log2.default: _func("log2"),
    aten.gelu.default: Rule((0,), _gelu),
    aten.pow.Tensor_Scalar: Rule((0,), _pow_scalar, lambda a, kw: isinstance(a[1], (int, float))),
    aten.pow.Tensor_Tensor: _call2("power"),
    aten.clone.default: Rule((0,), lambda a, kw: a[0],
                             lambda a, kw: kw.get("memory_format") in (None, torch.contiguous_format,
                                                                        torch.preserve_format)),
    prims.convert_element_type.default: Rule((0,), _convert, lambda a, kw: a[1] in FUSED_DTYPES),
    aten._to_copy.default: Rule((0,), _convert, _to_copy_ok),
}

#: reductions over the last dimension: the ``tl`` builtin taking ``(tile, axis=1, keepdims=True)``.
REDUCTIONS: dict[Any, str] = {
    aten.sum.dim_IntList: "sum",
    aten.amax.default: "max",
    aten.amin.default: "min",
    aten.mean.dim: "mean",
}


def extra_kwargs(node: Any) -> dict[str, Any]:
    """The non-operand arguments ``Rule.emit`` reads, as one dict (``_exponent``, ``_dtype``, kwargs)."""
    kw = dict(node.kwargs)
    if node.target is aten.pow.Tensor_Scalar:
        kw["_exponent"] = node.args[1]
    elif node.target is prims.convert_element_type.default:
        kw["_dtype"] = node.args[1]
    elif node.target is aten._to_copy.default:
        kw["_dtype"] = kw.get("dtype")
    return kw


def literal(value: Any) -> str | None:
    """A Python number as expression text (None: not a number a kernel can take)."""
    if isinstance(value, bool):
        return repr(value)
    if isinstance(value, (int, float)):
        f = float(value)
        if f != f or f in (float("inf"), float("-inf")):
            return f"float({str(f)!r})"
        return repr(f) if isinstance(value, float) else repr(int(value))
    return None
