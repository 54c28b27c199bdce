"""The trace context: where builder calls append IR while a kernel is traced."""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import sympy

from trnlang.frontend.errors import TraceError, user_loc
from trnlang.ir.nodes import Buf, HbmTensor, Instr, Kernel, Loop, SourceLoc, Stmt, sym
from trnlang.ir.ops import Op
from trnlang.ir.types import DType, Space

_STATE = threading.local()


class TraceContext:
    """State of one kernel being traced: the kernel, the open blocks, name counters."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self.blocks: list[list[Stmt]] = [kernel.body]
        self.loops: list[Loop] = []
        self._n_buf = 0
        self._n_loop = 0
        self._n_hbm = 0
        self.allocated_hbm: list[HbmTensor] = []

    # --- emission -------------------------------------------------------------------
    def emit(self, instr: Instr) -> Instr:
        if instr.loc is None:
            instr.loc = user_loc(2)
        self.blocks[-1].append(instr)
        return instr

    def last_instr(self) -> Instr | None:
        blk = self.blocks[-1]
        return blk[-1] if blk and isinstance(blk[-1], Instr) else None

    def new_buf(self, shape: tuple[int, ...], dtype: DType, space: Space, loc: SourceLoc | None = None) -> Buf:
        loc = loc or user_loc(2)
        buf = Buf(f"t{self._n_buf}", tuple(int(s) for s in shape), dtype, space, loc)
        self._n_buf += 1
        self.emit(Instr(Op.ALLOC, (buf,), (), {}, None, loc))
        return buf

    def new_hbm(self, shape: tuple[int, ...], dtype: DType, space: Space) -> HbmTensor:
        t = HbmTensor(f"h{self._n_hbm}", tuple(shape), dtype, "scratch", space, user_loc(2))
        self._n_hbm += 1
        self.allocated_hbm.append(t)
        return t

    @contextlib.contextmanager
    def loop(self, kind: str, start: sympy.Expr, stop: sympy.Expr, step: sympy.Expr) -> Iterator[Loop]:
        var = sym(f"i{self._n_loop}")
        self._n_loop += 1
        lp = Loop(kind, var, start, stop, step, [], user_loc(3))
        self.emit_loop(lp)
        self.blocks.append(lp.body)
        self.loops.append(lp)
        depth = len(self.blocks)
        yield lp
        if len(self.blocks) != depth:
            raise TraceError("unbalanced loop nesting while tracing (a `break` or `return` inside a traced loop?)")
        self.blocks.pop()
        self.loops.pop()

    def emit_loop(self, lp: Loop) -> None:
        self.blocks[-1].append(lp)


def current() -> TraceContext:
    """The active trace context; a TraceError outside a kernel."""
    ctx = getattr(_STATE, "ctx", None)
    if ctx is None:
        raise TraceError("trnlang.language operations can only be used inside a @trn.kernel function being traced")
    return ctx


def active() -> TraceContext | None:
    return getattr(_STATE, "ctx", None)


@contextlib.contextmanager
def tracing(kernel: Kernel) -> Iterator[TraceContext]:
    prev = getattr(_STATE, "ctx", None)
    ctx = TraceContext(kernel)
    _STATE.ctx = ctx
    try:
        yield ctx
    finally:
        _STATE.ctx = prev
