"""Lowering a planned kernel to what the scheduler needs: one template per instruction.

A template knows its engine, its duration (constant for on-chip engines; a
function of the loop variables for DMA, whose masked-off elements are not
moved), the on-chip boxes it reads and writes (partition range x byte range
in SBUF or PSUM, from the memory plan's ``addr`` / ``bufs``), the HBM boxes
of tensors that the kernel both reads and writes, and its useful flops.

Index arithmetic is compiled once: every region start, access index and mask
bound is an integer affine function of the *environment*, a list of ints
holding ``pid0..pid2`` at positions 0-2 and the loop variable of depth ``d``
at ``3 + d``.

Example:
    >>> import torch
    >>> from tests.kernels import vector_add
    >>> k = vector_add.trace(torch.randn(300, 64), torch.randn(300, 64), torch.empty(300, 64))
    >>> p = build(k)
    >>> [t.ins.op.value for t in p.templates if t.kind == EXEC or t.kind == DMA]
    ['dma_copy', 'dma_copy', 'tensor_tensor', 'dma_copy']
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy

from trnlang.ir.bounds import affine_form
from trnlang.ir.nodes import Access, Buf, HbmTensor, Instr, Kernel, Loop, Region, SourceLoc, Stmt, axis_sym, pid_sym
from trnlang.ir.ops import Op
from trnlang.ir.printer import print_instr
from trnlang.ir.types import Engine, Space
from trnlang.passes.plan_memory import allocs as alloc_instrs
from trnlang.passes.plan_memory import plan_memory, slot_bytes
from trnlang.sim import cost
from trnlang.sim.targets import Target

__all__ = ["ALLOC", "DMA", "ENGINES", "EXEC", "SKIP", "Aff", "CLoop", "Program", "Template", "build"]

#: On-chip engines in resource order; DMA queues follow them (resource ``len(ENGINES) + q``).
ENGINES = (Engine.TENSOR, Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)
ALLOC, EXEC, DMA, SKIP = 0, 1, 2, 3
N_PID = 3


class Aff:
    """An integer affine function of the environment (or, failing that, a compiled sympy function)."""

    __slots__ = ("c", "terms", "fn", "syms")

    def __init__(self, expr: Any, index: dict[sympy.Symbol, int]) -> None:
        self.fn: Any = None
        self.c: int = 0
        self.terms: tuple[tuple[int, int], ...] = ()
        expr = sympy.sympify(expr)
        f = affine_form(expr)
        if f is not None and f[0].denominator == 1 and all(c.denominator == 1 and s in index for s, c in f[1].items()):
            self.c = int(f[0])
            self.terms = tuple((index[s], int(c)) for s, c in f[1].items())
            return
        syms = sorted(expr.free_symbols, key=str)
        self.syms = tuple(index[s] for s in syms)
        fn = sympy.lambdify(syms, expr, "math")
        self.fn = fn

    def __call__(self, env: list[int]) -> int:
        if self.fn is not None:
            return int(self.fn(*(env[i] for i in self.syms)))
        v = self.c
        for i, c in self.terms:
            v += c * env[i]
        return v

    def coef(self, i: int) -> int | None:
        """Coefficient of environment slot ``i`` (None when not affine)."""
        if self.fn is not None:
            return None if i in self.syms else 0
        for j, c in self.terms:
            if j == i:
                return c
        return 0


@dataclass(eq=False)
class OnChip:
    """A region access: allocation ``alloc``; partitions ``p_lo(env) + [0, p_len)``; bytes ``b_lo(env) + [0, b_len)``
    relative to the current copy of the allocation."""

    alloc: int
    p_lo: Aff
    p_len: int
    b_lo: Aff
    b_len: int


@dataclass(eq=False)
class HbmBox:
    """The bounding box of an HBM access per tensor dimension: ``lo(env) + lo_off .. lo(env) + hi_off``, or the
    whole dimension (``None``)."""

    tensor: int
    dims: list[tuple[Aff, int, int] | None]
    sizes: list[int]

    def box(self, env: list[int]) -> tuple[tuple[int, int], ...]:
        out = []
        for d, n in zip(self.dims, self.sizes):
            if d is None:
                out.append((0, n - 1))
            else:
                v = d[0](env)
                out.append((v + d[1], v + d[2]))
        return tuple(out)


class MaskCount:
    """Number of accessed elements of a masked access, per environment.

    Exact and O(rank) for conjunctions of linear bounds on one axis each (the ragged-tile masks); other masks are
    evaluated with numpy on the tile's index grid, cached per value of the loop variables they use.
    """

    def __init__(self, acc: Access, index: dict[sympy.Symbol, int]) -> None:
        self.shape = tuple(int(s) for s in acc.shape)
        self.full = math.prod(self.shape)
        self.axis: list[tuple[int, int, Aff, bool]] = []  # (axis, coef, rest, strict): coef*a + rest (<|<=) 0
        self.scalar: list[tuple[Aff, bool]] = []
        self.numeric: Any = None
        self.cache: dict[tuple[int, ...], int] = {}
        mask = acc.mask
        if mask is None or mask is sympy.true:
            return
        if mask is sympy.false:
            self.scalar.append((Aff(1, index), True))
            return
        atoms = list(mask.args) if isinstance(mask, sympy.And) else [mask]
        axes = {axis_sym(k): k for k in range(len(self.shape))}
        for a in atoms:
            if not self._atom(a, axes, index):
                self._numeric(mask, axes, index)
                return

    def _atom(self, a: Any, axes: dict[sympy.Symbol, int], index: dict[sympy.Symbol, int]) -> bool:
        rel = {sympy.StrictLessThan: (1, True), sympy.LessThan: (1, False), sympy.StrictGreaterThan: (-1, True),
               sympy.GreaterThan: (-1, False)}.get(type(a))
        if rel is None:
            return False
        e = sympy.expand((a.lhs - a.rhs) * rel[0])
        f = affine_form(e)
        if f is None:
            return False
        ax = [(s, c) for s, c in f[1].items() if s in axes]
        rest = f[0] + sum(c * s for s, c in f[1].items() if s not in axes)
        if any(s not in index for s in sympy.sympify(rest).free_symbols) or any(c.denominator != 1 for _, c in ax):
            return False
        if len(ax) > 1:
            return False
        r = Aff(rest, index)
        if r.fn is not None:
            return False
        if not ax:
            self.scalar.append((r, rel[1]))
        else:
            self.axis.append((axes[ax[0][0]], int(ax[0][1]), r, rel[1]))
        return True

    def _numeric(self, mask: Any, axes: dict[sympy.Symbol, int], index: dict[sympy.Symbol, int]) -> None:
        env_syms = sorted((s for s in mask.free_symbols if s not in axes), key=str)
        if any(s not in index for s in env_syms):  # gathered values: count every element (an upper bound)
            self.axis, self.scalar = [], []
            return
        ax_syms = [axis_sym(k) for k in range(len(self.shape))]
        fn = sympy.lambdify([*ax_syms, *env_syms], mask, "numpy")
        grids = np.indices(self.shape, sparse=True) if self.shape else ()
        slots = tuple(index[s] for s in env_syms)
        self.numeric = (fn, grids, slots)

    def __call__(self, env: list[int]) -> int:
        if self.numeric is not None:
            fn, grids, slots = self.numeric
            key = tuple(env[i] for i in slots)
            n = self.cache.get(key)
            if n is None:
                res = np.broadcast_to(fn(*grids, *key), self.shape)
                n = self.cache[key] = int(np.count_nonzero(res))
            return n
        for r, strict in self.scalar:
            v = r(env)
            if (v >= 0) if strict else (v > 0):
                return 0
        if not self.axis:
            return self.full
        lo = [0] * len(self.shape)
        hi = [s - 1 for s in self.shape]
        for k, a, r, strict in self.axis:
            v = r(env)
            if a > 0:  # a*x + v < 0 (strict) or <= 0
                bound = (-v - 1) // a if strict else (-v) // a
                hi[k] = min(hi[k], bound)
            else:
                b = -a
                bound = v // b + 1 if strict else -((-v) // b)
                lo[k] = max(lo[k], bound)
        n = 1
        for lo_k, hi_k in zip(lo, hi):
            n *= max(0, hi_k - lo_k + 1)
        return n


@dataclass(eq=False)
class Template:
    """One instruction as the scheduler sees it."""

    idx: int
    ins: Instr
    kind: int
    res: int = -1  # index into ENGINES for EXEC
    dur: float = 0.0  # seconds, EXEC
    cycles: int = 0
    reads: list[OnChip] = field(default_factory=list)
    writes: list[OnChip] = field(default_factory=list)
    hbm_read: HbmBox | None = None
    hbm_write: HbmBox | None = None
    acc_self: bool = False  # accumulating matmul: reading its own output is not a stall dependence
    flops: float = 0.0
    peak_s: float = 0.0  # flops / peak flops: the seconds this instruction needs at TensorE peak
    alloc: int = -1  # ALLOC: allocation index
    mask: MaskCount | None = None
    elem_bytes: int = 0  # DMA: HBM bytes per element
    run_bytes: int = 0  # DMA: contiguous HBM bytes per descriptor (sets the transfer's efficiency)
    part: OnChip | None = None  # DMA: the SBUF side (its partitions choose the DMA engines)
    loc: SourceLoc | None = None
    _text: str | None = None

    @property
    def text(self) -> str:
        """The instruction as printed in the IR."""
        if self._text is None:
            self._text = print_instr(self.ins)
        return self._text


@dataclass(eq=False)
class CLoop:
    """A loop of the program: variable at environment slot ``slot``; bounds compiled."""

    loop: Loop | None
    slot: int
    start: Aff
    stop: Aff
    step: Aff
    body: list[Any]


@dataclass(eq=False)
class AllocInfo:
    buf: Buf
    space: int  # 0 SBUF, 1 PSUM
    base: int
    stride: int
    bufs: int
    partitions: int
    slot0: int  # global id of copy 0


@dataclass(eq=False)
class Program:
    """A kernel lowered for scheduling."""

    kernel: Kernel
    target: Target
    templates: list[Template]
    body: list[Any]
    allocs: list[AllocInfo]
    overlaps: list[tuple[int, ...]]  # slot id -> slot ids whose addresses intersect it (itself included)
    tensors: list[HbmTensor]
    n_slots: int


class _Builder:
    def __init__(self, k: Kernel, t: Target) -> None:
        self.k, self.t = k, t
        self.index: dict[sympy.Symbol, int] = {pid_sym(a): a for a in range(N_PID)}
        self.templates: list[Template] = []
        self.alloc_of: dict[Buf, int] = {}
        self.allocs: list[AllocInfo] = []
        reads: set[int] = set()
        writes: set[int] = set()
        for s in _instrs(k.body):
            if s.op is Op.DMA_COPY:
                if isinstance(s.ins[0], Access):
                    reads.add(id(s.ins[0].tensor))
                if isinstance(s.outs[0], Access):
                    writes.add(id(s.outs[0].tensor))
        self.tracked = [tn for tn in k.tensors if id(tn) in reads and id(tn) in writes]
        self.tracked_idx = {id(tn): i for i, tn in enumerate(self.tracked)}

    def body(self, stmts: list[Stmt], depth: int) -> list[Any]:
        out: list[Any] = []
        for s in stmts:
            if isinstance(s, Loop):
                slot = N_PID + depth
                self.index[s.var] = slot
                out.append(CLoop(s, slot, Aff(s.start, self.index), Aff(s.stop, self.index), Aff(s.step, self.index),
                                 self.body(s.body, depth + 1)))
                del self.index[s.var]
            else:
                out.append(self.instr(s))
        return out

    def onchip(self, r: Region) -> OnChip:
        a = self.alloc_of[r.buf]
        b = r.buf
        item = b.dtype.itemsize
        strides = [math.prod(b.shape[d + 1:]) for d in range(len(b.shape))]
        byte_lo = sum((sympy.sympify(st) * strides[d] for d, st in enumerate(r.starts) if d >= 1), sympy.Integer(0))
        span = sum((n - 1) * strides[d] for d, n in enumerate(r.sizes) if d >= 1) + 1
        return OnChip(a, Aff(r.starts[0], self.index), int(r.sizes[0]), Aff(byte_lo * item, self.index), span * item)

    def hbm(self, acc: Access) -> HbmBox | None:
        ti = self.tracked_idx.get(id(acc.tensor))
        if ti is None:
            return None
        sizes = [int(n) for n in acc.tensor.shape]
        dims: list[tuple[Aff, int, int] | None] = []
        axes = {axis_sym(k): int(n) for k, n in enumerate(acc.shape)}
        for e in acc.index:
            f = affine_form(e)
            if f is None or any(s not in axes and s not in self.index for s in f[1]):
                dims.append(None)
                continue
            lo = hi = 0
            for s, c in f[1].items():
                if s in axes:
                    ext = int(c * (axes[s] - 1))
                    lo, hi = (lo + ext, hi) if ext < 0 else (lo, hi + ext)
            rest = f[0] + sum(c * s for s, c in f[1].items() if s not in axes)
            r = Aff(rest, self.index)
            dims.append((r, lo, hi) if r.fn is None else None)
        return HbmBox(ti, dims, sizes)

    def instr(self, ins: Instr) -> Template:
        t = self.t
        tp = Template(len(self.templates), ins, EXEC, loc=ins.loc)
        self.templates.append(tp)
        if ins.op is Op.ALLOC:
            tp.kind = ALLOC
            tp.alloc = self.alloc_of[ins.outs[0]]
            return tp
        eng = cost.engine_of(ins)
        if eng is Engine.HOST:
            tp.kind = SKIP
            return tp
        for x in ins.ins:
            for r in ([x] if isinstance(x, Region) else list(x.gathers) if isinstance(x, Access) else []):
                tp.reads.append(self.onchip(r))
        for o in ins.outs:
            if isinstance(o, Region):
                tp.writes.append(self.onchip(o))
            elif isinstance(o, Access):
                tp.reads.extend(self.onchip(g) for g in o.gathers)
        if ins.op is Op.MATMUL and ins.attrs.get("accumulate"):
            tp.reads.append(self.onchip(ins.outs[0]))
            tp.acc_self = True
        if eng is Engine.DMA:
            tp.kind = DMA
            acc = ins.ins[0] if isinstance(ins.ins[0], Access) else ins.outs[0]
            if isinstance(ins.ins[0], Access):
                tp.hbm_read = self.hbm(acc)
            else:
                tp.hbm_write = self.hbm(acc)
            tp.mask = MaskCount(acc, self.index)
            tp.elem_bytes = acc.tensor.dtype.itemsize
            tp.run_bytes = cost.dma_run_elems(acc) * tp.elem_bytes
            tile = ins.outs[0] if isinstance(ins.outs[0], Region) else ins.ins[0]
            if isinstance(tile, Region):
                tp.part = self.onchip(tile)
            return tp
        tp.res = ENGINES.index(eng)
        tp.cycles = cost.instr_cycles(ins, t, eng)
        tp.dur = tp.cycles / cost.clock_hz(eng, t)
        if ins.op is Op.MATMUL:
            tp.flops = float(cost.matmul_flops(ins))
            tp.peak_s = tp.flops / cost.matmul_peak(ins, t)
        return tp


def _instrs(body: list[Stmt]) -> list[Instr]:
    out: list[Instr] = []
    for s in body:
        if isinstance(s, Loop):
            out.extend(_instrs(s.body))
        else:
            out.append(s)
    return out


def build(k: Kernel, target: Target | None = None) -> Program:
    """Lower a kernel for scheduling (planning its memory first if no ALLOC carries an address yet)."""
    from trnlang.sim.targets import get_target

    t = target or get_target(k.target)
    ais = alloc_instrs(k)
    if any("addr" not in a.attrs or "bufs" not in a.attrs for a in ais):
        plan_memory(k, t)
    b = _Builder(k, t)
    slot = 0
    for a in ais:
        buf = a.outs[0]
        n = int(a.attrs.get("bufs", 1))
        info = AllocInfo(buf, 0 if buf.space is Space.SBUF else 1, int(a.attrs["addr"][1]), slot_bytes(buf, t), n,
                         int(buf.shape[0]), slot)
        b.alloc_of[buf] = len(b.allocs)
        b.allocs.append(info)
        slot += n
    body = b.body(k.body, 0)
    # slot id -> every slot whose byte range intersects it (same space; all buffers start at partition 0)
    ranges = []
    for info in b.allocs:
        for c in range(info.bufs):
            lo = info.base + c * info.stride
            ranges.append((info.space, lo, lo + info.stride))
    overlaps = []
    for sp, lo, hi in ranges:
        overlaps.append(tuple(j for j, (sp2, lo2, hi2) in enumerate(ranges) if sp2 == sp and lo2 < hi and lo < hi2))
    return Program(k, t, b.templates, body, b.allocs, overlaps, b.tracked, slot)
