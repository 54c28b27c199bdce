"""The trace context: where builder calls append IR while a kernel is traced."""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

import sympy

from trnlang.frontend.errors import TraceError, user_loc
from trnlang.ir.nodes import Buf, HbmTensor, Instr, Kernel, Loop, Region, SourceLoc, Stmt, sym
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
        #: NKI rules (``trnlang.nki``): tiles keep their partition dimension and stay 2-D after an integer
        #: index or a full free-axis reduction ([P, 1], not [P]); PSUM matmul destinations start a group.
        self.nki = getattr(_STATE, "dialect", None) == "nki"
        #: (file, line) of loops to unroll at trace time (NKI: a loop variable used as a Python list index)
        self.unroll: frozenset[tuple[str, int]] = getattr(_STATE, "unroll", frozenset())
        #: PSUM buffers some instruction has written (an ``nc_matmul(dst=...)`` into a fresh one overwrites)
        self.written: set[int] = set()

    # --- emission -------------------------------------------------------------------
    def emit(self, instr: Instr) -> Instr:
        if instr.loc is None:
            instr.loc = user_loc(2)
        for o in instr.outs:
            if isinstance(o, Region) and o.buf.space is Space.PSUM:
                self.written.add(id(o.buf))
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


@contextlib.contextmanager
def dialect(name: str | None, unroll: frozenset[tuple[str, int]] = frozenset()) -> Iterator[None]:
    """Trace kernels started inside this block under a dialect's rules (``"nki"``: see ``TraceContext.nki``);
    ``unroll``: (file, line) of loops the dialect unrolls at trace time."""
    prev: tuple[str | None, frozenset[tuple[str, int]]] = (getattr(_STATE, "dialect", None),
                                                           getattr(_STATE, "unroll", frozenset()))
    _STATE.dialect, _STATE.unroll = name, unroll
    try:
        yield
    finally:
        _STATE.dialect, _STATE.unroll = prev


class NeedUnroll(TraceError):
    """A loop variable was used as a Python int under NKI rules: the loops at ``locs`` get unrolled and the
    kernel is traced again (NKI unrolls such loops too)."""

    def __init__(self, msg: str, locs: frozenset[tuple[str, int]]) -> None:
        super().__init__(msg)
        self.locs = locs


def nki_rules() -> bool:
    """Whether the kernel being traced follows NKI's tile rules (False outside a trace)."""
    ctx = getattr(_STATE, "ctx", None)
    return bool(ctx is not None and ctx.nki)


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
