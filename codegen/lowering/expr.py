"""Sympy index expressions -> LLVM values, with the interpreter's exact semantics (``interpret/symeval.py``).

Integer-valued expressions compute in i64 (wrapping like numpy int64):
``floor(p/q)`` / ``ceiling(p/q)`` of integer ``p, q`` are exact floor/ceil
divisions, ``Mod`` takes the sign of the divisor, division or modulo by zero
gives 0 (numpy's integer result). Expressions that are not integer valued
(rational coefficients outside a floor) compute in f64 exactly like numpy
evaluates the Python source symeval generates. Relations and boolean
connectives give i1.

``emit(cx, e, local)`` looks symbols up in ``local`` (axes ``_a*``, gathers
``_g*``) then ``cx.env`` (loop variables, program ids, symbolic sizes).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import sympy
from llvmlite import ir
from sympy.logic.boolalg import BooleanFalse, BooleanTrue

from codegen.lowering.ctx import F64, I1, I64, Ctx, cf64, ci64
from trnlang.frontend.errors import LoweringError

# value kinds
KI, KF, KB = "i64", "f64", "i1"


class Unsupported(LoweringError):
    """An expression form the JIT does not lower."""


def _is_int_valued(e: sympy.Expr) -> bool:
    return bool(e.is_integer) and not e.has(sympy.Float)


@functools.lru_cache(maxsize=4096)
def _split_floor(arg: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr] | None:
    if arg.has(sympy.Float):
        return None
    num, den = sympy.fraction(sympy.together(arg))
    if _is_int_valued(num) and _is_int_valued(den):
        return num, den
    return None


class _Emitter:
    def __init__(self, cx: Ctx, local: Mapping[Any, ir.Value]) -> None:
        self.cx = cx
        self.b = cx.b
        self.local = local

    # conversions between kinds
    def as_int(self, v: tuple[ir.Value, str]) -> ir.Value:
        val, k = v
        if k == KI:
            return val
        if k == KB:
            return self.b.zext(val, I64)
        return self.b.fptosi(val, I64)

    def as_float(self, v: tuple[ir.Value, str]) -> ir.Value:
        val, k = v
        if k == KF:
            return val
        if k == KB:
            return self.b.uitofp(val, F64)
        return self.b.sitofp(val, F64)

    def as_bool(self, v: tuple[ir.Value, str]) -> ir.Value:
        val, k = v
        if k == KB:
            return val
        if k == KI:
            return self.b.icmp_signed("!=", val, ci64(0))
        return self.b.fcmp_unordered("!=", val, cf64(0.0))

    def _arith(self, args: list[tuple[ir.Value, str]], op: str) -> tuple[ir.Value, str]:
        b = self.b
        acc = args[0]
        for x in args[1:]:
            if acc[1] == KF or x[1] == KF:
                fa, fb = self.as_float(acc), self.as_float(x)
                acc = (b.fadd(fa, fb) if op == "+" else b.fmul(fa, fb)), KF
            else:
                ia, ib = self.as_int(acc), self.as_int(x)
                acc = (b.add(ia, ib) if op == "+" else b.mul(ia, ib)), KI
        if acc[1] == KB:
            acc = self.as_int(acc), KI
        return acc

    def floordiv(self, a: ir.Value, d: ir.Value) -> ir.Value:
        """Python floor division of i64 (0 when d == 0, as numpy)."""
        b = self.b
        dc = d.constant if isinstance(d, ir.Constant) else None
        if isinstance(dc, int) and dc > 0:
            q = b.sdiv(a, d)
            r = b.srem(a, d)
            fix = b.icmp_signed("<", r, ci64(0))
            return b.sub(q, b.zext(fix, I64))
        zero = b.icmp_signed("==", d, ci64(0))
        safe = b.select(zero, ci64(1), d)
        # avoid INT64_MIN / -1 overflow (numpy wraps): compute via -1 special case
        q = b.sdiv(a, b.select(b.icmp_signed("==", safe, ci64(-1)), ci64(1), safe))
        q = b.select(b.icmp_signed("==", safe, ci64(-1)), b.neg(a), q)
        r = b.sub(a, b.mul(q, safe))
        adjust = b.and_(b.icmp_signed("!=", r, ci64(0)),
                        b.icmp_signed("!=", b.icmp_signed("<", r, ci64(0)), b.icmp_signed("<", safe, ci64(0))))
        q = b.sub(q, b.zext(adjust, I64))
        return b.select(zero, ci64(0), q)

    def mod(self, a: ir.Value, d: ir.Value) -> ir.Value:
        """numpy ``mod`` of i64: the sign of the divisor; 0 when d == 0."""
        b = self.b
        q = self.floordiv(a, d)
        r = b.sub(a, b.mul(q, d))
        return b.select(b.icmp_signed("==", d, ci64(0)), ci64(0), r)

    def floor_of(self, arg: sympy.Expr, negate: bool) -> tuple[ir.Value, str]:
        split = _split_floor(arg)
        b = self.b
        if split is not None:
            num, den = split
            n, d = self.as_int(self.emit(num)), self.as_int(self.emit(den))
            if negate:
                return b.neg(self.floordiv(b.neg(n), d)), KI
            return self.floordiv(n, d), KI
        f = self.as_float(self.emit(arg))
        name = "llvm.ceil" if negate else "llvm.floor"
        return self.cx.call_intrinsic(name, [f]), KF

    def emit(self, e: Any) -> tuple[ir.Value, str]:
        if isinstance(e, bool | BooleanTrue | BooleanFalse):
            return ir.Constant(I1, int(bool(e))), KB
        if isinstance(e, int):
            return ci64(e), KI
        if isinstance(e, float):
            return cf64(e), KF
        if isinstance(e, sympy.Symbol):
            v = self.local.get(e)
            if v is None:
                v = self.cx.env.get(e)
            if v is None:
                raise Unsupported(f"symbol {e} has no value here")
            return v, KI
        if e.is_Integer:
            return ci64(int(e)), KI
        if e.is_Rational:
            return cf64(int(e.p) / int(e.q)), KF
        if e.is_Float:
            return cf64(float(e)), KF
        if isinstance(e, sympy.Add):
            return self._arith([self.emit(a) for a in e.args], "+")
        if isinstance(e, sympy.Mul):
            return self._arith([self.emit(a) for a in e.args], "*")
        return self._emit_function(e)

    def _emit_function(self, e: Any) -> tuple[ir.Value, str]:
        """Everything but numbers, symbols, sums and products: powers, floor/ceiling, Mod, Min/Max, Abs, sign,
        relations, boolean connectives and Piecewise."""
        if isinstance(e, sympy.Pow):
            return self._pow(e)
        if isinstance(e, sympy.floor):
            return self.floor_of(e.args[0], negate=False)
        if isinstance(e, sympy.ceiling):
            return self.floor_of(e.args[0], negate=True)
        if isinstance(e, sympy.Mod):
            return self._mod(e)
        if isinstance(e, sympy.Min | sympy.Max):
            return self._min_max(e)
        if isinstance(e, sympy.Abs):
            return self._abs(e)
        if isinstance(e, sympy.sign):
            return self._sign(e)
        if isinstance(e, sympy.core.relational.Relational):
            return self._relation(e)
        if isinstance(e, sympy.And | sympy.Or | sympy.Xor):
            return self._connective(e)
        if isinstance(e, sympy.Not):
            return self.b.not_(self.as_bool(self.emit(e.args[0]))), KB
        if isinstance(e, sympy.Piecewise):
            return self.piecewise(list(e.args))
        raise Unsupported(f"the JIT cannot lower the expression {e} ({type(e).__name__})")

    def _pow(self, e: sympy.Pow) -> tuple[ir.Value, str]:
        base, ex = e.args
        if ex.is_Integer and int(ex) >= 0:
            bv = self.emit(base)
            n = int(ex)
            if n == 0:
                return (cf64(1.0), KF) if bv[1] == KF else (ci64(1), KI)
            return self._arith([bv] * n, "*")
        fb, fe = self.as_float(self.emit(base)), self.as_float(self.emit(ex))
        return self.cx.call_intrinsic("llvm.pow", [fb, fe]), KF

    def _mod(self, e: sympy.Mod) -> tuple[ir.Value, str]:
        b = self.b
        x, y = self.emit(e.args[0]), self.emit(e.args[1])
        if x[1] == KF or y[1] == KF:
            fx, fy = self.as_float(x), self.as_float(y)
            r = b.frem(fx, fy)
            fix = b.and_(b.fcmp_ordered("!=", r, cf64(0.0)),
                         b.xor(b.fcmp_ordered("<", r, cf64(0.0)), b.fcmp_ordered("<", fy, cf64(0.0))))
            return b.select(fix, b.fadd(r, fy), r), KF
        return self.mod(self.as_int(x), self.as_int(y)), KI

    def _min_max(self, e: sympy.Min | sympy.Max) -> tuple[ir.Value, str]:
        b = self.b
        vals = [self.emit(a) for a in e.args]
        flt = any(k == KF for _, k in vals)
        acc = self.as_float(vals[0]) if flt else self.as_int(vals[0])
        for v in vals[1:]:
            x = self.as_float(v) if flt else self.as_int(v)
            if flt:
                name = "llvm.minimum" if isinstance(e, sympy.Min) else "llvm.maximum"
                acc = self.cx.call_intrinsic(name, [acc, x])
            else:
                c = b.icmp_signed("<" if isinstance(e, sympy.Min) else ">", x, acc)
                acc = b.select(c, x, acc)
        return acc, (KF if flt else KI)

    def _abs(self, e: sympy.Abs) -> tuple[ir.Value, str]:
        b = self.b
        v = self.emit(e.args[0])
        if v[1] == KF:
            return self.cx.call_intrinsic("llvm.fabs", [v[0]]), KF
        x = self.as_int(v)
        return b.select(b.icmp_signed("<", x, ci64(0)), b.neg(x), x), KI

    def _sign(self, e: sympy.sign) -> tuple[ir.Value, str]:
        b = self.b
        v = self.emit(e.args[0])
        if v[1] == KF:
            f = v[0]
            pos = b.uitofp(b.fcmp_ordered(">", f, cf64(0.0)), F64)
            neg = b.uitofp(b.fcmp_ordered("<", f, cf64(0.0)), F64)
            return b.fsub(pos, neg), KF
        x = self.as_int(v)
        return b.sub(b.zext(b.icmp_signed(">", x, ci64(0)), I64), b.zext(b.icmp_signed("<", x, ci64(0)), I64)), KI

    def _relation(self, e: Any) -> tuple[ir.Value, str]:
        b = self.b
        x, y = self.emit(e.lhs), self.emit(e.rhs)
        op = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}.get(e.rel_op)
        if op is None:
            raise Unsupported(f"relation {e.rel_op}")
        if x[1] == KF or y[1] == KF:
            fx, fy = self.as_float(x), self.as_float(y)
            if op == "!=":
                return b.fcmp_unordered(op, fx, fy), KB
            return b.fcmp_ordered(op, fx, fy), KB
        return b.icmp_signed(op, self.as_int(x), self.as_int(y)), KB

    def _connective(self, e: Any) -> tuple[ir.Value, str]:
        b = self.b
        vals = [self.as_bool(self.emit(a)) for a in e.args]
        acc = vals[0]
        for v in vals[1:]:
            acc = b.and_(acc, v) if isinstance(e, sympy.And) else (
                b.or_(acc, v) if isinstance(e, sympy.Or) else b.xor(acc, v))
        return acc, KB

    def piecewise(self, pieces: list[tuple[Any, Any]]) -> tuple[ir.Value, str]:
        out: tuple[ir.Value, str] = (ci64(0), KI)
        for val, cond in reversed(pieces):
            v = self.emit(val)
            if cond is sympy.true or cond is True:
                out = v
                continue
            c = self.as_bool(self.emit(cond))
            kinds = {v[1], out[1]}
            if KF in kinds:
                out = self.b.select(c, self.as_float(v), self.as_float(out)), KF
            elif kinds == {KB}:
                out = self.b.select(c, v[0], out[0]), KB
            else:
                out = self.b.select(c, self.as_int(v), self.as_int(out)), KI
        return out


def emit(cx: Ctx, e: Any, local: Mapping[Any, ir.Value] | None = None) -> tuple[ir.Value, str]:
    """Lower ``e``; returns (value, kind) with kind ``"i64"``, ``"f64"`` or ``"i1"``."""
    return _Emitter(cx, local or {}).emit(sympy.sympify(e) if not isinstance(e, bool | int | float) else e)


def emit_int(cx: Ctx, e: Any, local: Mapping[Any, ir.Value] | None = None) -> ir.Value:
    """Lower an index expression to i64 (non-integer values truncate toward zero like ``astype(int64)``)."""
    em = _Emitter(cx, local or {})
    return em.as_int(em.emit(sympy.sympify(e) if not isinstance(e, bool | int | float) else e))


def emit_bool(cx: Ctx, e: Any, local: Mapping[Any, ir.Value] | None = None) -> ir.Value:
    """Lower a predicate / mask to i1 (numbers: ``!= 0``)."""
    em = _Emitter(cx, local or {})
    return em.as_bool(em.emit(sympy.sympify(e) if not isinstance(e, bool | int | float) else e))


def is_true(mask: Any) -> bool:
    return mask is None or mask is True or mask is sympy.true


def free_symbols(e: Any) -> set[Any]:
    if isinstance(e, bool | int | float) or e is None:
        return set()
    return set(sympy.sympify(e).free_symbols)
