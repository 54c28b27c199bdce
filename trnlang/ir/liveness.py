"""Def-use and liveness of on-chip buffers: one analysis for the verifier, the memory planner and the JIT's arena.

**Positions.** Every instruction of a kernel (``ALLOC`` included) gets a position: its index in a
pre-order walk of the body (loops take none). A loop's *span* is the first and last position in its
body. The JIT's error record and ``device_print`` name an instruction by its position.

**Uses.** An instruction uses every on-chip region it touches (:func:`all_regions`: outputs, inputs,
the gather tiles of HBM accesses, a ``scale`` operand given as a region). :func:`regions_read` and
:func:`regions_written` split them by direction (a matmul that accumulates and a masked load that
keeps the old contents also read their output).

**Live interval** of a buffer (:meth:`Liveness.interval`): from its ``ALLOC`` to its last use, where
a use inside loops the ``ALLOC`` is not in keeps the buffer live to the end of the outermost such
loop (the next iteration reads it again). The verifier's capacity rule, the memory planner's reuse of
SBUF/PSUM addresses and the JIT's arena layout all read this one interval; the arena passes ``at`` to
move a use to where its value is computed (an instruction inlined into a later consumer).

Example:
    >>> import torch
    >>> from tests.kernels import softmax
    >>> k = softmax.trace(torch.randn(128, 64), torch.empty(128, 64))
    >>> live = Liveness(k)
    >>> buf = k.body[0].body[0].outs[0]
    >>> live.interval(buf)[0] == live.alloc_pos[buf]
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import sympy

from trnlang.ir.nodes import Access, Buf, HbmTensor, Instr, Kernel, Loop, Region, Stmt
from trnlang.ir.ops import Op

__all__ = ["Liveness", "all_regions", "hbm_read", "hbm_written", "is_load", "is_store", "no_mask", "regions_read",
           "regions_written", "same_region", "stmt_instrs"]


def is_load(ins: Instr) -> bool:
    """A ``dma_copy`` HBM -> SBUF."""
    return ins.op is Op.DMA_COPY and isinstance(ins.outs[0], Region) and isinstance(ins.ins[0], Access)


def is_store(ins: Instr) -> bool:
    """A ``dma_copy`` SBUF -> HBM."""
    return ins.op is Op.DMA_COPY and isinstance(ins.outs[0], Access) and isinstance(ins.ins[0], Region)


def no_mask(acc: Access) -> bool:
    """The access has no mask (or an always-true one)."""
    m = acc.mask
    return m is None or m is True or m is sympy.true


def same_region(a: Region, b: Region) -> bool:
    """The two regions view the same elements of the same buffer the same way."""
    return (a.buf is b.buf and tuple(a.sizes) == tuple(b.sizes) and tuple(a.keep) == tuple(b.keep)
            and a.ap == b.ap and all(sympy.sympify(x) == sympy.sympify(y) for x, y in zip(a.starts, b.starts)))


def regions_read(ins: Instr) -> list[Region]:
    """On-chip regions an instruction reads (operands, gather tiles, accumulators, kept contents)."""
    out: list[Region] = []
    for x in ins.ins:
        if isinstance(x, Region):
            out.append(x)
        elif isinstance(x, Access):
            out.extend(x.gathers)
    for x in ins.outs:
        if isinstance(x, Access):
            out.extend(x.gathers)
    scale = ins.attrs.get("scale")
    if isinstance(scale, Region):
        out.append(scale)
    if ins.op is Op.MATMUL and ins.attrs.get("accumulate") and isinstance(ins.outs[0], Region):
        out.append(ins.outs[0])
    if is_load(ins) and ins.attrs.get("other") is None and not no_mask(cast(Access, ins.ins[0])):
        out.append(ins.outs[0])
    return out


def regions_written(ins: Instr) -> list[Region]:
    """On-chip regions an instruction writes."""
    return [x for x in ins.outs if isinstance(x, Region)]


def hbm_read(ins: Instr) -> list[HbmTensor]:
    """HBM tensors an instruction reads."""
    return [x.tensor for x in ins.ins if isinstance(x, Access)]


def hbm_written(ins: Instr) -> list[HbmTensor]:
    """HBM tensors an instruction writes."""
    return [x.tensor for x in ins.outs if isinstance(x, Access)]


def all_regions(ins: Instr) -> list[Region]:
    """The on-chip regions ``ins`` touches, outputs first, each once; a region check is numbered by its index here."""
    out = [x for x in ins.outs if isinstance(x, Region)]
    for x in (*ins.ins, *ins.outs):
        if isinstance(x, Region) and x not in out:
            out.append(x)
        elif isinstance(x, Access):
            out.extend(x.gathers)
    scale = ins.attrs.get("scale")
    if isinstance(scale, Region):
        out.append(scale)
    return out


def stmt_instrs(s: Stmt) -> list[Instr]:
    """The instructions of a statement (itself, or every instruction in a loop's body)."""
    if isinstance(s, Instr):
        return [s]
    out: list[Instr] = []
    for x in s.body:
        out.extend(stmt_instrs(x))
    return out


class Liveness:
    """Positions, loop spans, allocations and uses of a kernel's on-chip buffers (see the module docstring).

    Attributes:
        instrs: the instructions in program order (``instrs[p]`` is at position ``p``).
        loops_of: the loops enclosing each position, outermost first.
        index: ``id(instruction) -> position``.
        loop_span: ``id(loop) -> (first, last)`` position in its body (``last < first`` for an empty body).
        loops: every loop in program order (pre-order), with its depth in ``depth``.
        alloc_pos: ``buffer -> position`` of its ``ALLOC``.
        uses: ``buffer -> positions`` of the other instructions touching it, each once, in order.
        bufs: every buffer allocated or touched, in order of first appearance.
    """

    def __init__(self, k: Kernel) -> None:
        self.instrs: list[Instr] = []
        self.loops_of: list[tuple[Loop, ...]] = []
        self.index: dict[int, int] = {}
        self.loop_span: dict[int, tuple[int, int]] = {}
        self.loops: list[Loop] = []
        self.depth: dict[int, int] = {}
        self.alloc_pos: dict[Buf, int] = {}
        self.uses: dict[Buf, list[int]] = {}
        self.bufs: list[Buf] = []
        self._walk(k.body, ())

    def _walk(self, stmts: list[Stmt], loops: tuple[Loop, ...]) -> None:
        for s in stmts:
            if isinstance(s, Loop):
                first = len(self.instrs)
                self.loops.append(s)
                self.depth[id(s)] = len(loops)
                self._walk(s.body, (*loops, s))
                self.loop_span[id(s)] = (first, len(self.instrs) - 1)
                continue
            if not isinstance(s, Instr):
                continue  # the verifier reports unknown statements
            pos = len(self.instrs)
            self.instrs.append(s)
            self.loops_of.append(loops)
            self.index[id(s)] = pos
            if s.op is Op.ALLOC:
                b = s.outs[0] if len(s.outs) == 1 else None
                if isinstance(b, Buf):
                    self.alloc_pos[b] = pos
                    self._touch(b)
                continue
            for r in all_regions(s):
                b = r.buf
                got = self._touch(b)
                if not got or got[-1] != pos:
                    got.append(pos)

    def _touch(self, b: Buf) -> list[int]:
        got = self.uses.get(b)
        if got is None:
            got = self.uses[b] = []
            self.bufs.append(b)
        return got

    def alloc_loops(self, buf: Buf) -> tuple[Loop, ...]:
        """The loops enclosing ``buf``'s ``ALLOC`` (none when it has no ``ALLOC``)."""
        p = self.alloc_pos.get(buf)
        return () if p is None else self.loops_of[p]

    def interval(self, buf: Buf, at: Callable[[int], int] | None = None) -> tuple[int, int]:
        """``(first, last)`` position at which ``buf`` is live (see the module docstring).

        Args:
            buf: the buffer.
            at: maps a use's position to the position where it is evaluated (default: itself).
        """
        a = self.alloc_pos.get(buf)
        inner = len(self.loops_of[a]) if a is not None else 0
        lo = hi = a
        for u in self.uses.get(buf, ()):
            p = at(u) if at is not None else u
            s = e = p
            extra = self.loops_of[p][inner:]  # loops entered after the alloc: live for all of the outermost
            if extra:
                s, e = self.loop_span[id(extra[0])]
                s, e = min(s, p), max(e, p)
            lo = s if lo is None else min(lo, s)
            hi = e if hi is None else max(hi, e)
        if lo is None or hi is None:
            raise KeyError(f"buffer {buf.name} is neither allocated nor used")
        return lo, hi
