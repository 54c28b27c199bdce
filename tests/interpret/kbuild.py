"""Hand-built IR kernels for the interpreter unit tests (no tracer: the nodes API directly)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import sympy

from trnlang.interpret.interpreter import run_kernel
from trnlang.ir.nodes import (
    Access,
    Buf,
    HbmTensor,
    Imm,
    Instr,
    Kernel,
    Loop,
    Region,
    SourceLoc,
    Stmt,
    axis_sym,
    gather_sym,
    pid_sym,
    sym,
)
from trnlang.ir.ops import Op
from trnlang.ir.types import DType, Space, to_dtype

F32, BF16, I32 = DType.float32, DType.bfloat16, DType.int32
A0, A1, A2 = axis_sym(0), axis_sym(1), axis_sym(2)
G0 = gather_sym(0)
P0, P1, P2 = pid_sym(0), pid_sym(1), pid_sym(2)
I0, I1 = sym("i0"), sym("i1")

__all__ = [
    "A0", "A1", "A2", "BF16", "F32", "G0", "I0", "I1", "I32", "P0", "P1", "P2", "Imm", "Loop", "Op", "Region",
    "Space", "acc", "alloc", "elementwise", "here", "hbm", "instr", "kernel", "load", "region", "run_kernel",
    "sbuf", "store", "whole",
]


def here() -> SourceLoc:
    """The caller's source line (what the tracer would record)."""
    f = inspect.currentframe().f_back
    return SourceLoc(f.f_code.co_filename, f.f_lineno, f.f_code.co_name)


def hbm(name: str, shape: Sequence[int], dt: DType = F32, kind: str = "in") -> HbmTensor:
    return HbmTensor(name, tuple(shape), dt, kind)


def sbuf(name: str, shape: Sequence[int], dt: DType = F32, space: Space = Space.SBUF) -> Buf:
    return Buf(name, tuple(shape), dt, space)


def whole(b: Buf) -> Region:
    return Region.whole(b)


def region(b: Buf, starts: Sequence[Any], sizes: Sequence[int], keep: Sequence[bool] | None = None) -> Region:
    keep = tuple(keep) if keep is not None else tuple(True for _ in sizes)
    return Region(b, tuple(sympy.sympify(s) for s in starts), tuple(sizes), keep)


def instr(kind: Op, outs: Sequence[Any], ins: Sequence[Any] = (), /, loc: SourceLoc | None = None,
          **attrs: Any) -> Instr:
    return Instr(kind, tuple(outs), tuple(ins), dict(attrs), loc=loc)


def alloc(b: Buf) -> Instr:
    return instr(Op.ALLOC, (b,))


def acc(t: HbmTensor, shape: Sequence[int], index: Sequence[Any] | None = None, gathers: Sequence[Region] = (),
        mask: Any = None, offs: Sequence[Any] | None = None) -> Access:
    """An access; the default index is (_a0 + offs[0], _a1 + offs[1], ...)."""
    if index is None:
        offs = offs or [0] * len(shape)
        index = [axis_sym(k) + o for k, o in enumerate(offs)]
    return Access(t, tuple(shape), tuple(sympy.sympify(i) for i in index), tuple(gathers), mask)


def load(dst: Region, src: Access, other: Any = None, loc: SourceLoc | None = None) -> Instr:
    return instr(Op.DMA_COPY, (dst,), (src,), loc=loc, other=other)


def store(dst: Access, src: Region, loc: SourceLoc | None = None) -> Instr:
    return instr(Op.DMA_COPY, (dst,), (src,), loc=loc)


def kernel(params: Sequence[HbmTensor], outputs: Sequence[HbmTensor], body: Sequence[Stmt],
           grid: Sequence[int] = (), scratch: Sequence[HbmTensor] = ()) -> Kernel:
    return Kernel("k", list(params), tuple(grid), list(body), list(outputs), list(scratch))


def elementwise(build: Callable[[list[Region], Region], list[Stmt]], inputs: Sequence[np.ndarray],
                out_shape: Sequence[int], out_dt: DType = F32) -> np.ndarray:
    """Load each input into a tile of its dtype, run ``build(in_tiles, out_tile)``, store and return the out tile."""
    ts = [hbm(f"x{i}", a.shape, to_dtype(a.dtype)) for i, a in enumerate(inputs)]
    o = hbm("out", out_shape, out_dt, "out")
    bufs = [sbuf(f"t{i}", a.shape, t.dtype) for i, (a, t) in enumerate(zip(inputs, ts))]
    ob = sbuf("o", out_shape, out_dt)
    body: list[Stmt] = [alloc(b) for b in [*bufs, ob]]
    body += [load(whole(b), acc(t, t.shape)) for b, t in zip(bufs, ts)]
    body += build([whole(b) for b in bufs], whole(ob))
    body.append(store(acc(o, out_shape), whole(ob)))
    out = np.zeros(tuple(out_shape), out_dt.np)
    run_kernel(kernel(ts, [o], body), [*inputs, out])
    return out
