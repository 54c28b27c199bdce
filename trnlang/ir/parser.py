"""``parse_kernel``: the exact inverse of ``printer.print_kernel``.

The text format is described in ``printer``'s module docstring. Symbols come back
as ``nodes.sym(name)`` (integer symbols), buffers resolve to the ``Buf`` created
by their ``alloc`` line, tensors to their ``param`` / ``output`` / ``scratch``
declaration. Any malformed line raises ``ParseError`` naming the line.
"""

from __future__ import annotations

import json
import re
from typing import Any, NoReturn

import sympy

from trnlang.ir.nodes import Access, Buf, HbmTensor, Imm, Instr, Kernel, Loop, Region, SourceLoc, Stmt, sym
from trnlang.ir.ops import Alu, Op
from trnlang.ir.printer import ENUM_ATTR_KINDS, SECTIONS, text_to_expr
from trnlang.ir.types import DType, Engine, Space, dtype_from_short

__all__ = ["ParseError", "parse_kernel"]

_NUMBER = re.compile(r"-?(?:inf|nan|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)(?![\w.])")
_INT = re.compile(r"-?\d+")
_WORD = re.compile(r"[A-Za-z0-9_]+")
_PLAIN_NAME = re.compile(r"[\w.$]+", re.ASCII)
_PLAIN_LOC = re.compile(r"([^\s\"]*?):(-?\d+)(?:\s+(.*))?")
_OPEN, _CLOSE = "([{", ")]}"
_OPS = {op.value: op for op in Op}

Key = tuple[str, int]  # (name, #k suffix) -- unique among a kernel's buffers and tensors


class ParseError(ValueError):
    """Malformed IR text; ``lineno`` is 1-based."""

    def __init__(self, msg: str, lineno: int, line: str = "") -> None:
        self.lineno = lineno
        super().__init__(f"line {lineno}: {msg}" + (f"\n    {line.strip()}" if line else ""))


def _split_comment(line: str) -> tuple[str, str | None]:
    """Split ``code // comment`` at the first ``//`` outside quotes."""
    parts = _split_top(line, "//", maxsplit=1, nest=False)
    return parts[0].strip(), (parts[1].strip() if len(parts) > 1 else None)


class _Cur:
    """A cursor over one line of code (comment removed)."""

    def __init__(self, text: str, lineno: int, line: str) -> None:
        self.s, self.i, self.lineno, self.line = text, 0, lineno, line

    def fail(self, msg: str) -> NoReturn:
        raise ParseError(f"{msg} (at column {self.i + 1})", self.lineno, self.line)

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i].isspace():
            self.i += 1

    def at_end(self) -> bool:
        self.ws()
        return self.i >= len(self.s)

    def peek(self, lit: str) -> bool:
        self.ws()
        return self.s.startswith(lit, self.i)

    def eat(self, lit: str) -> bool:
        if self.peek(lit):
            self.i += len(lit)
            return True
        return False

    def expect(self, lit: str) -> None:
        if not self.eat(lit):
            self.fail(f"expected {lit!r}")

    def end(self) -> None:
        if not self.at_end():
            self.fail(f"unexpected {self.s[self.i:]!r}")

    def word(self) -> str:
        self.ws()
        m = _WORD.match(self.s, self.i)
        if not m:
            self.fail("expected a word")
        self.i = m.end()
        return m.group()

    def string(self) -> str:
        self.ws()
        if not self.s.startswith('"', self.i):
            self.fail("expected a quoted string")
        j = self.i + 1
        while j < len(self.s) and self.s[j] != '"':
            j += 2 if self.s[j] == "\\" else 1
        if j >= len(self.s):
            self.fail("unterminated string")
        text, self.i = self.s[self.i:j + 1], j + 1
        try:
            return json.loads(text)
        except ValueError as e:
            self.fail(f"bad string {text}: {e}")

    def name(self) -> Key:
        """A name (plain or quoted) with an optional ``#k`` suffix."""
        self.ws()
        if self.peek('"'):
            name = self.string()
        else:
            m = _PLAIN_NAME.match(self.s, self.i)
            if not m:
                self.fail("expected a name")
            name, self.i = m.group(), m.end()
        k = 0
        if self.s.startswith("#", self.i):
            m = re.compile(r"#(\d+)").match(self.s, self.i)
            if not m:
                self.fail("bad #k name suffix")
            k, self.i = int(m.group(1)), m.end()
        return name, k

    def raw(self, stops: tuple[str, ...]) -> str:
        """Text up to a depth-0 stop string (or an unmatched closing bracket), quotes respected."""
        self.ws()
        start, depth, quote = self.i, 0, ""
        while self.i < len(self.s):
            c = self.s[self.i]
            if quote:
                if c == "\\":
                    self.i += 1
                elif c == quote:
                    quote = ""
            elif depth == 0 and any(self.s.startswith(st, self.i) for st in stops):
                break
            elif c in "\"'":
                quote = c
            elif c in _OPEN:
                depth += 1
            elif c in _CLOSE:
                if depth == 0:
                    break
                depth -= 1
            self.i += 1
        text = self.s[start:self.i].strip()
        if not text:
            self.fail("expected an expression")
        return text

    def raw_list(self, open_: str, close: str) -> list[str]:
        self.expect(open_)
        items: list[str] = []
        if self.eat(close):
            return items
        while True:
            items.append(self.raw((",", close)))
            if not self.eat(","):
                self.expect(close)
                return items

    def expr(self, text: str) -> Any:
        try:
            return text_to_expr(text)
        except Exception as e:  # noqa: BLE001 - sympy raises many kinds
            self.fail(f"bad expression {text!r}: {type(e).__name__}: {e}")

    def dim(self, text: str) -> Any:
        return int(text) if _INT.fullmatch(text) else self.expr(text)

    def ints(self) -> tuple[int, ...]:
        out = []
        for t in self.raw_list("[", "]"):
            if not _INT.fullmatch(t):
                self.fail(f"expected an integer, got {t!r}")
            out.append(int(t))
        return tuple(out)

    def value(self) -> Any:
        """An attribute value or immediate literal."""
        self.ws()
        if self.peek('"'):
            return self.string()
        for open_, close, kind in (("(", ")", tuple), ("[", "]", list)):
            if self.eat(open_):
                items: list[Any] = []
                while not self.eat(close):
                    items.append(self.value())
                    if not self.eat(","):
                        self.expect(close)
                        break
                return kind(items)
        m = _NUMBER.match(self.s, self.i)
        if m:
            self.i = m.end()
            return int(m.group()) if _INT.fullmatch(m.group()) else float(m.group())
        w = self.word()
        if w in ("none", "true", "false"):
            return {"none": None, "true": True, "false": False}[w]
        if w == "expr" and self.eat("("):
            e = self.expr(self.raw((")",)))
            self.expect(")")
            return e
        if w in ENUM_ATTR_KINDS and self.eat("("):
            v = self.word()
            self.expect(")")
            try:
                return ENUM_ATTR_KINDS[w](v)
            except ValueError:
                self.fail(f"unknown {w} {v!r}")
        if w in Alu.__members__:
            return Alu[w]
        self.fail(f"unknown value {w!r}")

    def loc(self, text: str) -> SourceLoc:
        """``path:line [func]`` with path / func plain or JSON-quoted."""
        sub = _Cur(text, self.lineno, self.line)
        if sub.peek('"'):
            path = sub.string()
            sub.expect(":")
            m = re.compile(r"\s*(-?\d+)(?:\s+(.*))?").fullmatch(sub.s, sub.i)
            if not m:
                self.fail(f"bad source location {text!r}")
            lineno, func = m.group(1), m.group(2)
        else:
            m = _PLAIN_LOC.fullmatch(text)
            if not m:
                self.fail(f"bad source location {text!r}")
            path, lineno, func = m.groups()
        func = (func or "").strip()
        if func.startswith('"'):
            fc = _Cur(func, self.lineno, self.line)
            func = fc.string()
            fc.end()
        return SourceLoc(path, int(lineno), func)


class _Parser:
    def __init__(self, text: str) -> None:
        self.lines = text.splitlines()
        self.tensors: dict[Key, HbmTensor] = {}
        self.bufs: dict[Key, Buf] = {}

    def run(self) -> Kernel:
        kernel: Kernel | None = None
        stack: list[list[Stmt]] = []
        for n, line in enumerate(self.lines, 1):
            code, comment = _split_comment(line)
            if not code:
                continue
            cur = _Cur(code, n, line)
            loc = cur.loc(comment) if comment and code != "}" else None
            if kernel is None:
                kernel = self.header(cur, loc)
                stack.append(kernel.body)
            elif not stack:
                cur.fail("text after the end of the kernel")
            elif code == "}":
                stack.pop()
            else:
                first = _WORD.match(code)
                w = first.group() if first else ""
                if w in _OPS or code.startswith("%"):
                    stack[-1].append(self.instr(cur, loc))
                elif w in ("param", "output", "scratch"):
                    if len(stack) != 1:
                        cur.fail("tensor declarations belong at the kernel's top level")
                    self.decl(cur, loc, kernel)
                elif w.endswith("_range"):
                    loop = self.loop(cur, loc)
                    stack[-1].append(loop)
                    stack.append(loop.body)
                else:
                    cur.fail(f"unknown statement {w!r}")
        if kernel is None:
            raise ParseError("no kernel", len(self.lines))
        if stack:
            raise ParseError("missing '}' at end of text", len(self.lines))
        return kernel

    # -- declarations

    def header(self, cur: _Cur, loc: SourceLoc | None) -> Kernel:
        cur.expect("kernel")
        cur.expect("@")
        name, _ = cur.name()
        cur.expect("grid")
        grid = tuple(cur.dim(t) for t in cur.raw_list("[", "]"))
        cur.expect("target")
        target, _ = cur.name()
        cur.expect("{")
        cur.end()
        return Kernel(name, [], grid, [], [], [], target, loc)

    def decl(self, cur: _Cur, loc: SourceLoc | None, k: Kernel) -> None:
        section = cur.word()
        default = dict(SECTIONS)[section]
        cur.expect("%")
        key = cur.name()
        if key in self.tensors or key in self.bufs:
            cur.fail(f"%{key[0]} declared twice")
        cur.expect(":")
        space = self.enum(cur, Space)
        dtype = self.dtype(cur)
        shape = tuple(cur.dim(t) for t in cur.raw_list("[", "]"))
        kind = cur.string() if cur.eat("kind") else default
        cur.end()
        t = HbmTensor(key[0], shape, dtype, kind, space, loc)
        self.tensors[key] = t
        {"param": k.params, "output": k.outputs, "scratch": k.scratch}[section].append(t)

    def enum(self, cur: _Cur, cls: type) -> Any:
        w = cur.word()
        try:
            return cls(w)
        except ValueError:
            cur.fail(f"unknown {cls.__name__} {w!r}")

    def dtype(self, cur: _Cur) -> DType:
        w = cur.word()
        try:
            return dtype_from_short(w)
        except KeyError:
            cur.fail(f"unknown dtype {w!r}")

    # -- statements

    def loop(self, cur: _Cur, loc: SourceLoc | None) -> Loop:
        kind = cur.word()[: -len("_range")]
        cur.expect("%")
        name, k = cur.name()
        if k:
            cur.fail("loop variables take no #k suffix")
        cur.expect("=")
        start = cur.expr(cur.raw((" to ",)))
        cur.expect("to")
        stop = cur.expr(cur.raw((" step ",)))
        cur.expect("step")
        step = cur.expr(cur.raw(("{",)))
        cur.expect("{")
        cur.end()
        return Loop(kind, sym(name), start, stop, step, [], loc)

    def engine(self, cur: _Cur) -> Engine | None:
        if not cur.s.startswith("[", cur.i):
            return None
        cur.expect("[")
        eng = self.enum(cur, Engine)
        cur.expect("]")
        return eng

    def instr(self, cur: _Cur, loc: SourceLoc | None) -> Instr:
        if cur.eat("%"):
            return self.alloc(cur, loc)
        op = _OPS[cur.word()]
        engine = self.engine(cur)
        outs = self.operands(cur, ("<-", "{"))
        ins = self.operands(cur, ("{",)) if cur.eat("<-") else []
        attrs = self.attrs(cur) if cur.peek("{") else {}
        cur.end()
        return Instr(op, tuple(outs), tuple(ins), attrs, engine, loc)

    def alloc(self, cur: _Cur, loc: SourceLoc | None) -> Instr:
        key = cur.name()
        cur.expect("=")
        if cur.word() != "alloc":
            cur.fail("expected 'alloc'")
        engine = self.engine(cur)
        space = self.enum(cur, Space)
        dtype = self.dtype(cur)
        shape = cur.ints()
        attrs: dict[str, Any] = {}
        buf_loc = loc
        while not cur.at_end():
            if cur.peek("{"):
                attrs = self.attrs(cur)
            elif cur.eat("loc("):
                text = cur.raw((")",))
                cur.expect(")")
                buf_loc = None if text == "none" else cur.loc(text)
            else:
                cur.fail("expected attributes or loc(...)")
        if key in self.tensors:
            cur.fail(f"%{key[0]} is already an HBM tensor")
        buf = self.bufs.get(key)
        if buf is None:
            buf = self.bufs[key] = Buf(key[0], shape, dtype, space, buf_loc)
        elif (buf.shape, buf.dtype, buf.space, buf.loc) != (shape, dtype, space, buf_loc):
            cur.fail(f"%{key[0]} re-allocated with a different type")
        return Instr(Op.ALLOC, (buf,), (), attrs, engine, loc)

    def attrs(self, cur: _Cur) -> dict[str, Any]:
        cur.expect("{")
        out: dict[str, Any] = {}
        if cur.eat("}"):
            return out
        while True:
            key = cur.string() if cur.peek('"') else cur.name()[0]
            cur.expect("=")
            out[key] = cur.value()
            if not cur.eat(","):
                cur.expect("}")
                return out

    def operands(self, cur: _Cur, stops: tuple[str, ...]) -> list[Any]:
        out: list[Any] = []
        while not cur.at_end() and not any(cur.peek(s) for s in stops):
            out.append(self.operand(cur))
            if not cur.eat(","):
                break
        return out

    def operand(self, cur: _Cur) -> Region | Access | Imm:
        if not cur.eat("%"):
            v = cur.value()
            if not isinstance(v, (bool, int, float)):
                cur.fail(f"expected an operand, got {v!r}")
            return Imm(v)
        key = cur.name()
        if key in self.bufs:
            return self.region(cur, self.bufs[key])
        if key in self.tensors:
            return self.access(cur, self.tensors[key])
        suffix = f"#{key[1]}" if key[1] else ""
        cur.fail(f"undeclared buffer or tensor %{key[0]}{suffix} (buffers must be alloc'd before use)")

    def region(self, cur: _Cur, buf: Buf) -> Region:
        starts, sizes, keep = [], [], []
        for item in cur.raw_list("[", "]"):
            parts = _split_top(item, ":")
            kept = parts[-1].strip() != "drop"
            if not kept:
                parts = parts[:-1]
            if len(parts) == 1:
                start, size = cur.expr(parts[0]), 1
                kept = False
            elif len(parts) == 2 and parts[0].rstrip().endswith("+") and _INT.fullmatch(parts[1].strip()):
                start, size = cur.expr(parts[0].rstrip()[:-1]), int(parts[1])
            elif len(parts) == 2:
                start = cur.expr(parts[0])
                diff = sympy.sympify(cur.expr(parts[1]) - start)
                if not diff.is_Integer:
                    cur.fail(f"region size {diff} is not an integer in {item!r}")
                size = int(diff)
            else:
                cur.fail(f"bad region item {item!r}")
            starts.append(start)
            sizes.append(size)
            keep.append(kept)
        if len(starts) != len(buf.shape):
            cur.fail(f"%{buf.name} has {len(buf.shape)} dimensions, region gives {len(starts)}")
        ap = None
        if cur.eat("ap"):
            strides = cur.ints()
            cur.expect("x")
            ns = cur.ints()
            if len(strides) != len(ns):
                cur.fail("a region's ap gives as many strides as sizes")
            ap = tuple(zip(strides, ns))
        return Region(buf, tuple(starts), tuple(sizes), tuple(keep), ap)

    def access(self, cur: _Cur, t: HbmTensor) -> Access:
        index = tuple(cur.expr(x) for x in cur.raw_list("[", "]"))
        cur.expect("shape")
        shape = cur.ints()
        gathers: list[Region] = []
        if cur.eat("gather("):
            gathers = self.operands(cur, (")",))
            cur.expect(")")
            if not all(isinstance(g, Region) for g in gathers):
                cur.fail("gathers must be buffer regions")
        mask = None
        if cur.eat("mask("):
            mask = cur.expr(cur.raw((")",)))
            cur.expect(")")
        return Access(t, shape, index, tuple(gathers), mask)


def _split_top(text: str, sep: str, maxsplit: int = -1, nest: bool = True) -> list[str]:
    """Split at ``sep`` outside quotes and (if ``nest``) brackets, at most ``maxsplit`` times if >= 0."""
    parts: list[str] = []
    depth, quote, last, i = 0, "", 0, 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif nest and c in _OPEN:
            depth += 1
        elif nest and c in _CLOSE:
            depth -= 1
        elif depth == 0 and text.startswith(sep, i) and len(parts) != maxsplit:
            parts.append(text[last:i])
            last = i + len(sep)
        i += 1
    parts.append(text[last:])
    return parts


def parse_kernel(text: str) -> Kernel:
    """Parse the text printed by ``print_kernel`` back into a Kernel (raises ParseError)."""
    return _Parser(text).run()
