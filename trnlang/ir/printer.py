"""Text form of the IR: ``print_kernel`` (and ``parser.parse_kernel``, its exact inverse).

The format is MLIR-ish, one statement per line::

    kernel @softmax_rows grid [2, 3] target trn2 {                   // k.py:10 softmax_rows
      param %x: hbm f32[1000, 64]
      output %out: hbm f32[1000, 64]                                 // k.py:10 softmax_rows
      affine_range %i0 = 0 to 8 step 1 {                             // k.py:12 softmax_rows
        %t0 = alloc sbuf f32[128, 64]                                // k.py:13 softmax_rows
        dma_copy[dma] %t0[0:128, 0:64] <- %x[_a0 + 128*i0, _a1] shape [128, 64] mask(_a0 + 128*i0 < 1000) {other = 0.0}
        tensor_reduce[vector] %t1[0:128, 0:1] <- %t0[0:128, 0:64] {op = maximum, axes = (1,), keepdims = true}
        tensor_scalar[vector] %t2[0:128, i0, 0:64] <- %t1[0:128, 2*i0 + 1:2*i0 + 5], 2.0 {op0 = add, ...}
      }
    }

Syntax summary:

- names: ``%name`` (``%"any text"`` when not a plain word); a ``#k`` suffix
  distinguishes different buffers / tensors that share a name. Kernel name ``@name``.
- regions: one item per buffer dimension, ``start:stop`` for kept dimensions
  (``start+:size`` if the difference does not simplify), a bare ``index`` for a
  dropped dimension of size 1 (``start:stop:drop`` otherwise).
- accesses: ``%t[index, ...] shape [..]`` then optional ``gather(%g[..], ...)``
  and ``mask(pred)``.
- immediates: ``true``/``false``, ints, floats via ``repr`` (``nan``, ``inf``, ``-0.0``).
- attribute values: Alu members by name, ``none``, bools, ints, floats,
  JSON-quoted strings, ``(tuples,)``, ``[lists]``, ``expr(<sympy>)``,
  ``engine(vector)``, ``dtype(f32)``, ``space(sbuf)``, ``opkind(memset)``.
- sympy expressions print with ``str()``; when that text does not parse back to
  the same expression it prints as ``srepr(<sympy srepr>)`` instead.
- source locations: trailing ``// path:line [func]`` comment (path / func
  JSON-quoted when not plain); a buffer whose own location differs from its
  ``alloc``'s carries an inline ``loc("path":line func)`` / ``loc(none)``.
"""

from __future__ import annotations

import enum
import functools
import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import sympy
from sympy.parsing.sympy_parser import parse_expr, standard_transformations

from trnlang.ir.nodes import Access, Buf, HbmTensor, Imm, Instr, Kernel, Loop, Region, SourceLoc, Stmt, sym
from trnlang.ir.ops import Alu, Op
from trnlang.ir.types import DType, Engine, Space

__all__ = ["print_kernel", "print_instr", "expr_to_text", "text_to_expr", "fmt_loc", "fmt_scalar"]

COMMENT_COLUMN = 80
SECTIONS = (("param", "in"), ("output", "out"), ("scratch", "scratch"))  # (keyword, default HbmTensor.kind)
ENUM_ATTR_KINDS: dict[str, type[enum.Enum]] = {"engine": Engine, "dtype": DType, "space": Space, "opkind": Op}

_PLAIN_NAME = re.compile(r"[\w.$]+", re.ASCII)
_PLAIN_PATH = re.compile(r"[\w./\\<>+\-~@]+", re.ASCII)
_PLAIN_FUNC = re.compile(r"[\w.<>]+", re.ASCII)
_BARE_IDENT = re.compile(r"(?<![\w.'\"])([A-Za-z_]\w*)(\s*\()?")
_CONSTANTS = frozenset({"oo", "zoo", "nan", "pi", "E", "I", "True", "False"})


def quote(s: str) -> str:
    """JSON-quote a string (escapes quotes, backslashes, control and non-ASCII characters)."""
    return json.dumps(s)


def fmt_name(name: str) -> str:
    """A name as written after ``%`` / ``@``: bare when it is a plain word, else quoted."""
    return name if _PLAIN_NAME.fullmatch(name) else quote(name)


# ----------------------------------------------------------------------------- sympy expressions


@functools.lru_cache(maxsize=1)
def _sympy_namespace() -> dict[str, Any]:
    ns: dict[str, Any] = {}
    exec("from sympy import *", ns)  # noqa: S102 - the namespace sympy's own parse_expr uses
    return ns


def text_to_expr(text: str) -> Any:
    """Parse the text of one expression (``str()`` spelling or ``srepr(...)``) back to sympy.

    Every bare identifier becomes ``nodes.sym(name)`` (an integer symbol), so parsed
    expressions compare equal to traced ones. Note: this evaluates the text.
    """
    t = text.strip()
    if t.startswith("srepr(") and t.endswith(")"):
        return sympy.sympify(eval(t[6:-1], dict(_sympy_namespace())))  # noqa: S307 - IR text is trusted
    local: dict[str, Any] = {}
    for m in _BARE_IDENT.finditer(t):
        name, call = m.group(1), m.group(2)
        if not call and name not in _CONSTANTS:
            local[name] = sym(name)
    res = parse_expr(t, local_dict=local, global_dict=dict(_sympy_namespace()),
                     transformations=standard_transformations)
    return sympy.sympify(res)


@functools.lru_cache(maxsize=1 << 16)
def _expr_text(e: sympy.Basic) -> str:
    s = str(e)
    try:
        back = text_to_expr(s)
        if back == e and type(back) is type(e):
            return s
    except Exception:  # noqa: BLE001 - any failure means "use the exact spelling"
        pass
    return f"srepr({sympy.srepr(e)})"


def expr_to_text(e: Any) -> str:
    """Readable text of a sympy expression (or int / bool) that ``text_to_expr`` maps back to it."""
    return _expr_text(sympy.sympify(e))


def fmt_dim(d: Any) -> str:
    """A shape / grid entry: an int literal, or an expression (dynamic dims)."""
    if isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_)):
        return str(int(d))
    return expr_to_text(d)


# ----------------------------------------------------------------------------- scalars and attributes


def fmt_float(x: float | np.floating[Any]) -> str:
    """``repr`` of a float: shortest exact spelling, always with ``.``/``e``/``inf``/``nan``."""
    return repr(float(x))


def fmt_scalar(v: Any) -> str:
    """An immediate: ``true``/``false``, an int, or a float (kept distinct)."""
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return fmt_float(v)
    raise TypeError(f"cannot print immediate of type {type(v).__name__}: {v!r}")


def fmt_value(v: Any) -> str:
    """An attribute value."""
    if v is None:
        return "none"
    if isinstance(v, (bool, np.bool_, int, np.integer, float, np.floating)):
        return fmt_scalar(v)
    if isinstance(v, Alu):
        return v.name
    for kw, cls in ENUM_ATTR_KINDS.items():
        if isinstance(v, cls):
            return f"{kw}({v.value})"
    if isinstance(v, str):
        return quote(v)
    if isinstance(v, tuple):
        if len(v) == 1:
            return f"({fmt_value(v[0])},)"
        return "(" + ", ".join(fmt_value(x) for x in v) + ")"
    if isinstance(v, list):
        return "[" + ", ".join(fmt_value(x) for x in v) + "]"
    if isinstance(v, sympy.Basic):
        return f"expr({expr_to_text(v)})"
    raise TypeError(f"cannot print attribute value of type {type(v).__name__}: {v!r}")


def fmt_loc(loc: SourceLoc, force_quote: bool = False) -> str:
    """``path:line [func]``; the path is quoted when not plain (or when ``force_quote``)."""
    path = loc.filename if (not force_quote and _PLAIN_PATH.fullmatch(loc.filename)) else quote(loc.filename)
    s = f"{path}:{int(loc.lineno)}"
    if loc.func:
        s += " " + (loc.func if _PLAIN_FUNC.fullmatch(loc.func) else quote(loc.func))
    return s


# ----------------------------------------------------------------------------- the printer


class _Printer:
    """Prints statements; owns the table of unique ``%name`` tokens for buffers and tensors."""

    def __init__(self, notes: Callable[[Instr], str] | None = None) -> None:
        self.tokens: dict[int, str] = {}
        self.used: set[str] = set()
        self.lines: list[str] = []
        self.notes = notes

    def name(self, obj: Buf | HbmTensor) -> str:
        """``%name`` of a buffer / tensor, with a ``#k`` suffix when another object has the same name."""
        tok = self.tokens.get(id(obj))
        if tok is None:
            base = fmt_name(obj.name)
            tok, k = base, 1
            while tok in self.used:
                tok, k = f"{base}#{k}", k + 1
            self.tokens[id(obj)] = tok
            self.used.add(tok)
        return "%" + tok

    def emit(self, indent: int, code: str, loc: SourceLoc | None) -> None:
        line = "  " * indent + code
        if loc is not None:
            line = f"{line.ljust(COMMENT_COLUMN)}  // {fmt_loc(loc)}"
        self.lines.append(line)

    # -- operands

    def region(self, r: Region) -> str:
        if not (len(r.starts) == len(r.sizes) == len(r.keep)):
            raise ValueError(f"region of {r.buf.name}: starts/sizes/keep lengths differ")
        items = []
        for start, size, keep in zip(r.starts, r.sizes, r.keep):
            start = sympy.sympify(start)
            if not keep and size == 1:
                items.append(expr_to_text(start))
                continue
            stop = start + size
            if sympy.sympify(stop - start) == size:
                item = f"{expr_to_text(start)}:{expr_to_text(stop)}"
            else:
                item = f"{expr_to_text(start)}+:{int(size)}"
            items.append(item if keep else item + ":drop")
        s = f"{self.name(r.buf)}[{', '.join(items)}]"
        if r.ap is not None:  # a strided / permuted view: strides then sizes per view axis
            s += f" ap[{', '.join(str(int(st)) for st, _ in r.ap)}]x[{', '.join(str(int(n)) for _, n in r.ap)}]"
        return s

    def access(self, a: Access) -> str:
        idx = ", ".join(expr_to_text(e) for e in a.index)
        s = f"{self.name(a.tensor)}[{idx}] shape [{', '.join(str(int(n)) for n in a.shape)}]"
        if a.gathers:
            s += " gather(" + ", ".join(self.region(g) for g in a.gathers) + ")"
        if a.mask is not None:
            s += f" mask({expr_to_text(a.mask)})"
        return s

    def operand(self, x: Any) -> str:
        if isinstance(x, Region):
            return self.region(x)
        if isinstance(x, Access):
            return self.access(x)
        if isinstance(x, Imm):
            return fmt_scalar(x.value)
        raise TypeError(f"cannot print operand of type {type(x).__name__}: {x!r}")

    def attrs(self, attrs: dict[str, Any]) -> str:
        items = [f"{k if _PLAIN_NAME.fullmatch(k) else quote(k)} = {fmt_value(v)}" for k, v in attrs.items()]
        return "{" + ", ".join(items) + "}"

    # -- statements

    def instr(self, ins: Instr) -> str:
        eng = f"[{ins.engine.value}]" if ins.engine is not None else ""
        if ins.op is Op.ALLOC:
            if len(ins.outs) != 1 or not isinstance(ins.outs[0], Buf) or ins.ins:
                raise ValueError("alloc must have exactly one Buf out and no ins")
            buf = ins.outs[0]
            s = f"{self.name(buf)} = alloc{eng} {buf.space.value} {buf.dtype.value}"
            s += f"[{', '.join(str(int(n)) for n in buf.shape)}]"
            if ins.attrs:
                s += " " + self.attrs(ins.attrs)
            if buf.loc != ins.loc:
                s += f" loc({fmt_loc(buf.loc, force_quote=True) if buf.loc is not None else 'none'})"
            return s
        for o in ins.outs:
            if isinstance(o, Buf):
                raise ValueError(f"{ins.op.value}: a Buf out is only allowed on alloc")
        parts = [f"{ins.op.value}{eng}"]
        if ins.outs:
            parts.append(", ".join(self.operand(o) for o in ins.outs))
        if ins.ins:
            parts.append("<- " + ", ".join(self.operand(x) for x in ins.ins))
        if ins.attrs:
            parts.append(self.attrs(ins.attrs))
        return " ".join(parts)

    def body(self, stmts: list[Stmt], indent: int) -> None:
        for s in stmts:
            if isinstance(s, Loop):
                if not re.fullmatch(r"\w+", s.kind, re.ASCII):
                    raise ValueError(f"loop kind {s.kind!r} is not a plain word")
                head = (f"{s.kind}_range %{fmt_name(s.var.name)} = {expr_to_text(s.start)} "
                        f"to {expr_to_text(s.stop)} step {expr_to_text(s.step)} {{")
                self.emit(indent, head, s.loc)
                self.body(s.body, indent + 1)
                self.lines.append("  " * indent + "}")
            elif isinstance(s, Instr):
                note = self.notes(s) if self.notes is not None else ""
                if note:  # a comment line of its own: the text still parses
                    self.lines.append("  " * indent + "// " + note)
                self.emit(indent, self.instr(s), s.loc)
            else:
                raise TypeError(f"cannot print statement of type {type(s).__name__}")

    def kernel(self, k: Kernel) -> None:
        grid = ", ".join(fmt_dim(g) for g in k.grid)
        self.emit(0, f"kernel @{fmt_name(k.name)} grid [{grid}] target {fmt_name(k.target)} {{", k.loc)
        for (kw, default), tensors in zip(SECTIONS, (k.params, k.outputs, k.scratch)):
            for t in tensors:
                dims = ", ".join(fmt_dim(d) for d in t.shape)
                s = f"{kw} {self.name(t)}: {t.space.value} {t.dtype.value}[{dims}]"
                if t.kind != default:
                    s += f" kind {quote(t.kind)}"
                self.emit(1, s, t.loc)
        self.body(k.body, 1)
        self.lines.append("}")


def print_kernel(k: Kernel, notes: Callable[[Instr], str] | None = None) -> str:
    """The text form of a kernel (``parser.parse_kernel`` is its exact inverse).

    ``notes(instr)``, when given, is printed as a ``// ...`` comment line before each instruction it
    returns text for (the lowering plan's decisions in ``TRN_DUMP``); the parser skips such lines.
    """
    p = _Printer(notes)
    p.kernel(k)
    return "\n".join(p.lines) + "\n"


def print_instr(ins: Instr) -> str:
    """One instruction on one line (for messages; names are not disambiguated)."""
    return _Printer().instr(ins)

