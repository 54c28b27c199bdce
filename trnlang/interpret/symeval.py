"""Fast, exact evaluation of the IR's sympy expressions with numpy.

Index expressions, masks, iota expressions, affine_select predicates, loop
bounds and region starts are sympy expressions over integer symbols. They are
translated once (cached per expression) into a Python lambda over numpy, with
*exact integer semantics*: ``floor(p/q)`` becomes ``floor_divide(p, q)`` on
integers (sympy's default numpy printer would compute ``floor((1/q)*p)`` in
floating point, which is off by one for some large ``p``), ``ceiling`` likewise,
``Mod`` is numpy's ``mod`` (sign of the divisor, as sympy), ``Min``/``Max`` are
elementwise, relations and boolean connectives are elementwise, ``Piecewise``
is a chain of ``where``. Expressions outside this subset fall back to
``sympy.lambdify`` (numpy module).

Axis symbols ``_a{k}`` are bound to ``np.ogrid``-style int64 ranges, so results
broadcast to the tile shape without materialising index grids.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy
from sympy.logic.boolalg import BooleanFalse, BooleanTrue


class _Unsupported(Exception):
    """Raised by the translator for nodes it does not know (triggers the lambdify fallback)."""


@dataclass(frozen=True)
class CompiledExpr:
    """An expression compiled to ``fn(*values of syms)``."""

    fn: Callable[..., Any]
    syms: tuple[sympy.Symbol, ...]
    source: str


_CACHE: dict[Any, CompiledExpr] = {}


def _is_int_valued(e: sympy.Expr) -> bool:
    return bool(e.is_integer) and not e.has(sympy.Float)


def _floor_code(arg: sympy.Expr, names: Mapping[sympy.Symbol, str], negate: bool) -> str:
    """Code for floor(arg) (or -floor(-arg) = ceiling(arg) when negate) with exact integer division."""
    if not arg.has(sympy.Float):
        num, den = sympy.fraction(sympy.together(arg))
        if _is_int_valued(num) and _is_int_valued(den):
            if negate:
                return f"(-_np.floor_divide(-{_code(num, names)}, {_code(den, names)}))"
            return f"_np.floor_divide({_code(num, names)}, {_code(den, names)})"
    fn = "_np.ceil" if negate else "_np.floor"
    return f"{fn}({_code(arg, names)})"


def _fold(fn: str, args: list[str]) -> str:
    out = args[0]
    for a in args[1:]:
        out = f"{fn}({out}, {a})"
    return out


_REL = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}


def _code(e: Any, names: Mapping[sympy.Symbol, str]) -> str:
    """Translate a sympy expression to numpy Python source (raises _Unsupported)."""
    if isinstance(e, bool | BooleanTrue | BooleanFalse):
        return "True" if bool(e) else "False"
    if isinstance(e, int):
        return f"({e})"
    if isinstance(e, float):
        return repr(e)
    if isinstance(e, sympy.Symbol):
        return names[e]
    if e.is_Integer:
        return f"({int(e)})"
    if e.is_Rational:
        return f"({int(e.p)}/{int(e.q)})"
    if e.is_Float:
        return repr(float(e))
    args = [_code(a, names) for a in e.args] if not isinstance(e, sympy.Piecewise) else []
    if isinstance(e, sympy.Add):
        return "(" + " + ".join(args) + ")"
    if isinstance(e, sympy.Mul):
        return "(" + " * ".join(args) + ")"
    out = _arith_code(e, args, names)
    return out if out is not None else _logic_code(e, args, names)


def _arith_code(e: Any, args: list[str], names: Mapping[sympy.Symbol, str]) -> str | None:
    """Powers, floor/ceiling, Mod, Min/Max, Abs and sign of the translated ``args`` (None: something else)."""
    if isinstance(e, sympy.Pow):
        ex = e.args[1]
        if ex.is_Integer and int(ex) >= 0:
            return f"({args[0]} ** {int(ex)})"
        return f"_np.power(_np.asarray({args[0]}, dtype=_np.float64), {args[1]})"
    if isinstance(e, sympy.floor):
        return _floor_code(e.args[0], names, negate=False)
    if isinstance(e, sympy.ceiling):
        return _floor_code(e.args[0], names, negate=True)
    if isinstance(e, sympy.Mod):
        return f"_np.mod({args[0]}, {args[1]})"
    if isinstance(e, sympy.Min):
        return _fold("_np.minimum", args)
    if isinstance(e, sympy.Max):
        return _fold("_np.maximum", args)
    if isinstance(e, sympy.Abs):
        return f"_np.abs({args[0]})"
    if isinstance(e, sympy.sign):
        return f"_np.sign({args[0]})"
    return None


def _logic_code(e: Any, args: list[str], names: Mapping[sympy.Symbol, str]) -> str:
    """Relations, boolean connectives and Piecewise of the translated ``args`` (raises _Unsupported)."""
    if isinstance(e, sympy.core.relational.Relational) and e.rel_op in _REL:
        return f"({args[0]} {_REL[e.rel_op]} {args[1]})"
    if isinstance(e, sympy.And):
        return _fold("_np.logical_and", args)
    if isinstance(e, sympy.Or):
        return _fold("_np.logical_or", args)
    if isinstance(e, sympy.Xor):
        return _fold("_np.logical_xor", args)
    if isinstance(e, sympy.Not):
        return f"_np.logical_not({args[0]})"
    if isinstance(e, sympy.Piecewise):
        out = "(0)"
        for val, cond in reversed(e.args):
            if cond is sympy.true:
                out = _code(val, names)
            else:
                out = f"_np.where({_code(cond, names)}, {_code(val, names)}, {out})"
        return out
    raise _Unsupported(type(e).__name__)


def compile_expr(e: Any) -> CompiledExpr:
    """Compile (and cache) a sympy expression; its arguments are its free symbols sorted by name."""
    key = e
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    se = sympy.sympify(e)
    syms = tuple(sorted(se.free_symbols, key=lambda s: s.name))
    names = {s: f"s{k}" for k, s in enumerate(syms)}
    try:
        src = _code(se, names)
        fn = eval(f"lambda {', '.join(names.values())}: {src}", {"_np": np})  # noqa: S307 - generated code
    except _Unsupported:
        src = f"<lambdify {se}>"
        fn = sympy.lambdify(syms, se, modules="numpy")
    out = CompiledExpr(fn, syms, src)
    _CACHE[key] = out
    return out


@functools.lru_cache(maxsize=512)
def axis_ranges(shape: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """Read-only ogrid-style int64 ranges, one per axis of ``shape``."""
    out = []
    n = len(shape)
    for k, size in enumerate(shape):
        r = np.arange(size, dtype=np.int64).reshape([size if j == k else 1 for j in range(n)])
        r.flags.writeable = False
        out.append(r)
    return tuple(out)


class UnboundSymbolError(NameError):
    """An expression mentions a symbol with no value (a loop variable outside its loop...)."""


def evaluate(e: Any, env: Mapping[sympy.Symbol, Any], local: Mapping[sympy.Symbol, Any] | None = None) -> Any:
    """Evaluate ``e`` with symbol values from ``local`` (axes, gathers) then ``env`` (loop vars, pids)."""
    if isinstance(e, int | bool):
        return e
    if isinstance(e, sympy.Integer):
        return int(e)
    c = compile_expr(e)
    vals = []
    for s in c.syms:
        if local is not None and s in local:
            vals.append(local[s])
        elif s in env:
            vals.append(env[s])
        else:
            raise UnboundSymbolError(f"symbol {s} has no value in expression {e}")
    return c.fn(*vals)


def evaluate_int(e: Any, env: Mapping[sympy.Symbol, Any]) -> int:
    """Evaluate a scalar integer expression (loop bound, region start)."""
    v = evaluate(e, env)
    return int(v)


def evaluate_on_tile(
    e: Any, shape: tuple[int, ...], env: Mapping[sympy.Symbol, Any],
    gathers: Mapping[sympy.Symbol, np.ndarray] | None = None,
) -> np.ndarray:
    """Evaluate ``e`` at every position of a tile of ``shape``; the result is broadcast to ``shape``.

    ``_a{k}`` is the position along axis k; ``gathers`` binds ``_g{k}`` to arrays of ``shape``.
    """
    from trnlang.ir.nodes import axis_sym

    local: dict[sympy.Symbol, Any] = {axis_sym(k): r for k, r in enumerate(axis_ranges(tuple(shape)))}
    if gathers:
        local.update(gathers)
    with np.errstate(all="ignore"):
        v = evaluate(e, env, local)
    return np.broadcast_to(np.asarray(v), shape)
