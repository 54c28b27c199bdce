"""Structural equality of kernels (used to check the text round trip, and by passes' tests).

Two kernels are equal when they have the same names, shapes, dtypes, spaces,
kinds, source locations, loop structure, instructions (op, engine, operands,
attributes) and the same *sharing*: a buffer / tensor object of one kernel
always corresponds to the same object of the other. Sympy expressions compare
with ``==``, falling back to ``simplify(a - b) == 0`` for non-boolean ones; ints
and sympy integers compare equal where the IR holds expressions (region starts,
loop bounds, shapes). Floats compare exactly, sign of zero included; NaN equals NaN.
"""

from __future__ import annotations

import enum
import math
from typing import Any, NoReturn

import numpy as np
import sympy

from trnlang.ir.nodes import Access, Buf, HbmTensor, Imm, Instr, Kernel, Loop, Region, SourceLoc, Stmt

__all__ = ["kernels_equal", "kernel_diff", "exprs_equal", "values_equal"]


class _Mismatch(Exception):
    pass


def exprs_equal(a: Any, b: Any) -> bool:
    """Sympy-expression equality (None only equals None)."""
    if a is None or b is None:
        return a is None and b is None
    try:
        sa, sb = sympy.sympify(a), sympy.sympify(b)
    except (sympy.SympifyError, TypeError):
        return False
    if sa == sb:
        return True
    if isinstance(sa, sympy.logic.boolalg.Boolean) or isinstance(sb, sympy.logic.boolalg.Boolean):
        return False
    try:
        return sympy.simplify(sa - sb) == 0
    except Exception:  # noqa: BLE001 - sympy can fail in many ways; then they differ
        return False


def _category(v: Any) -> str:
    if v is None:
        return "none"
    if isinstance(v, (bool, np.bool_)):
        return "bool"
    if isinstance(v, (int, np.integer)):
        return "int"
    if isinstance(v, (float, np.floating)):
        return "float"
    if isinstance(v, sympy.Basic):
        return "expr"
    return type(v).__name__


def values_equal(a: Any, b: Any) -> bool:
    """Attribute / immediate equality: same kind of value (bool, int, float, str, tuple, list, enum
    member, sympy expression) and the same value; floats exactly (NaN == NaN, -0.0 != 0.0)."""
    ca, cb = _category(a), _category(b)
    if ca != cb:
        return False
    if ca == "float":
        fa, fb = float(a), float(b)
        if math.isnan(fa) or math.isnan(fb):
            return math.isnan(fa) and math.isnan(fb)
        return fa == fb and math.copysign(1.0, fa) == math.copysign(1.0, fb)
    if ca in ("bool", "int", "none", "str"):
        return a == b
    if ca == "expr":
        return exprs_equal(a, b)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, enum.Enum):
        return a is b
    return bool(a == b)


class _Cmp:
    """Walks two kernels in lock step; raises _Mismatch(path: reason) at the first difference."""

    def __init__(self) -> None:
        self.fwd: dict[int, Any] = {}
        self.rev: dict[int, Any] = {}

    @staticmethod
    def fail(path: str, msg: str) -> NoReturn:
        raise _Mismatch(f"{path}: {msg}")

    def same(self, path: str, a: Any, b: Any) -> None:
        if a != b:
            self.fail(path, f"{a!r} != {b!r}")

    def expr(self, path: str, a: Any, b: Any) -> None:
        if not exprs_equal(a, b):
            self.fail(path, f"expression {a} != {b}")

    def loc(self, path: str, a: SourceLoc | None, b: SourceLoc | None) -> None:
        self.same(path + ".loc", a, b)

    def link(self, path: str, a: Any, b: Any) -> None:
        """a and b must correspond one to one; compare their fields the first time they are met."""
        if type(a) is not type(b):
            self.fail(path, f"{type(a).__name__} vs {type(b).__name__}")
        if id(a) in self.fwd or id(b) in self.rev:
            if self.fwd.get(id(a)) is not b or self.rev.get(id(b)) is not a:
                self.fail(path, f"%{a.name} / %{b.name}: different object sharing")
            return
        self.fwd[id(a)], self.rev[id(b)] = b, a
        self.same(path + ".name", a.name, b.name)
        self.same(path + ".dtype", a.dtype, b.dtype)
        self.same(path + ".space", a.space, b.space)
        self.loc(path, a.loc, b.loc)
        self.same(path + ".ndim", len(a.shape), len(b.shape))
        for d, (x, y) in enumerate(zip(a.shape, b.shape)):
            self.expr(f"{path}.shape[{d}]", x, y)
        if isinstance(a, HbmTensor):
            self.same(path + ".kind", a.kind, b.kind)

    def region(self, path: str, a: Region, b: Region) -> None:
        self.link(path + ".buf", a.buf, b.buf)
        self.same(path + ".sizes", tuple(int(s) for s in a.sizes), tuple(int(s) for s in b.sizes))
        self.same(path + ".keep", tuple(bool(k) for k in a.keep), tuple(bool(k) for k in b.keep))
        self.same(path + ".ndim", len(a.starts), len(b.starts))
        self.same(path + ".ap", a.ap, b.ap)
        for d, (x, y) in enumerate(zip(a.starts, b.starts)):
            self.expr(f"{path}.starts[{d}]", x, y)

    def operand(self, path: str, a: Any, b: Any) -> None:
        if type(a) is not type(b):
            self.fail(path, f"{type(a).__name__} vs {type(b).__name__}")
        if isinstance(a, Region):
            self.region(path, a, b)
        elif isinstance(a, Access):
            self.link(path + ".tensor", a.tensor, b.tensor)
            self.same(path + ".shape", tuple(int(s) for s in a.shape), tuple(int(s) for s in b.shape))
            self.same(path + ".index.len", len(a.index), len(b.index))
            for d, (x, y) in enumerate(zip(a.index, b.index)):
                self.expr(f"{path}.index[{d}]", x, y)
            self.same(path + ".gathers.len", len(a.gathers), len(b.gathers))
            for g, (x, y) in enumerate(zip(a.gathers, b.gathers)):
                self.region(f"{path}.gathers[{g}]", x, y)
            self.expr(path + ".mask", a.mask, b.mask)
        elif isinstance(a, Imm):
            if not values_equal(a.value, b.value):
                self.fail(path, f"immediate {a.value!r} != {b.value!r}")
        elif isinstance(a, Buf):
            self.link(path, a, b)
        else:
            self.fail(path, f"unknown operand type {type(a).__name__}")

    def instr(self, path: str, a: Instr, b: Instr) -> None:
        self.same(path + ".op", a.op, b.op)
        path = f"{path}({a.op.value})"
        self.same(path + ".engine", a.engine, b.engine)
        self.loc(path, a.loc, b.loc)
        for field in ("outs", "ins"):
            xs, ys = getattr(a, field), getattr(b, field)
            self.same(f"{path}.{field}.len", len(xs), len(ys))
            for n, (x, y) in enumerate(zip(xs, ys)):
                self.operand(f"{path}.{field}[{n}]", x, y)
        self.same(path + ".attrs.keys", sorted(a.attrs), sorted(b.attrs))
        for key in a.attrs:
            if not values_equal(a.attrs[key], b.attrs[key]):
                self.fail(f"{path}.attrs[{key!r}]", f"{a.attrs[key]!r} != {b.attrs[key]!r}")

    def body(self, path: str, a: list[Stmt], b: list[Stmt]) -> None:
        self.same(path + ".len", len(a), len(b))
        for n, (x, y) in enumerate(zip(a, b)):
            p = f"{path}[{n}]"
            if type(x) is not type(y):
                self.fail(p, f"{type(x).__name__} vs {type(y).__name__}")
            if isinstance(x, Loop):
                assert isinstance(y, Loop)  # same type as x (checked above)
                self.same(p + ".kind", x.kind, y.kind)
                self.same(p + ".var", x.var, y.var)
                self.expr(p + ".start", x.start, y.start)
                self.expr(p + ".stop", x.stop, y.stop)
                self.expr(p + ".step", x.step, y.step)
                self.loc(p, x.loc, y.loc)
                self.body(p + ".body", x.body, y.body)
            elif isinstance(x, Instr):
                assert isinstance(y, Instr)
                self.instr(p, x, y)
            else:
                self.fail(p, f"unknown statement type {type(x).__name__}")

    def kernel(self, a: Kernel, b: Kernel) -> None:
        self.same("kernel.name", a.name, b.name)
        self.same("kernel.target", a.target, b.target)
        self.loc("kernel", a.loc, b.loc)
        self.same("kernel.grid.len", len(a.grid), len(b.grid))
        for d, (x, y) in enumerate(zip(a.grid, b.grid)):
            self.expr(f"kernel.grid[{d}]", x, y)
        for field in ("params", "outputs", "scratch"):
            xs, ys = getattr(a, field), getattr(b, field)
            self.same(f"kernel.{field}.len", len(xs), len(ys))
            for n, (x, y) in enumerate(zip(xs, ys)):
                self.link(f"kernel.{field}[{n}]", x, y)
        self.body("body", a.body, b.body)


def kernel_diff(a: Kernel, b: Kernel) -> str | None:
    """None when the kernels are structurally equal, else a description of the first difference."""
    try:
        _Cmp().kernel(a, b)
    except _Mismatch as e:
        return str(e)
    return None


def kernels_equal(a: Kernel, b: Kernel) -> bool:
    """Structural equality of two kernels (see the module docstring)."""
    return kernel_diff(a, b) is None
