"""A random kernel generator for differential testing (compiled vs interpreter).

``generate(seed)`` builds IR directly (no tracer: every op, dtype and attribute
combination the interpreter defines is reachable, not only what ``tl`` emits)
and returns the kernel with launch arrays. Kernels have 1-3 HBM inputs of any
dtype (int64 and fp8 included), optional program-id tiling and an affine or
sequential loop over row blocks with ragged masked tails; the body loads tiles
(casting, masks with and without ``other``, gathers through index tiles), then
applies a random chain of elementwise unary / binary ops (every ALU function, all
dtypes, ``[P, 1]`` broadcasts, immediates, reversed scalar operands), selects,
affine selects, iotas, memsets, casts and reshapes, reductions (every reduce op,
any axes, keepdims), scans and transposes, and stores results to outputs of
random dtypes. ``nc_matmul`` and ``bn_stats``/``bn_aggr`` results go straight to
their own outputs (``Generated.tolerant`` lists them): compiled matmul
accumulates in fp32, the interpreter in float64.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import sympy

from trnlang.ir.nodes import Access, Buf, HbmTensor, Imm, Instr, Kernel, Loop, Region, axis_sym, gather_sym, pid_sym
from trnlang.ir.nodes import sym as mksym
from trnlang.ir.ops import ALU_SPECS, Alu, AluKind, Op
from trnlang.ir.types import DType, Space

ALL_DTYPES = [DType.float32, DType.bfloat16, DType.float16, DType.float8_e4m3, DType.float8_e5m2, DType.int32,
              DType.int16, DType.int8, DType.uint8, DType.bool_]
HBM_DTYPES = [*ALL_DTYPES, DType.int64]
FLOAT_TILE = [DType.float32, DType.float32, DType.bfloat16, DType.float16]
INT_TILE = [DType.int32, DType.int32, DType.int16, DType.int8, DType.uint8, DType.bool_]
UNARY = [a for a, s in ALU_SPECS.items() if s.kind is AluKind.UNARY]
BINARY = [a for a, s in ALU_SPECS.items() if s.kind is AluKind.BINARY]
REDUCE = [a for a, s in ALU_SPECS.items() if s.reducible]
INT_ONLY = {a for a, s in ALU_SPECS.items() if s.int_only}
A0, A1, A2 = axis_sym(0), axis_sym(1), axis_sym(2)


@dataclass
class Tile:
    region: Region

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.region.shape)

    @property
    def dtype(self) -> DType:
        return self.region.dtype


@dataclass
class Generated:
    """A random kernel, its launch arrays (inputs then outputs) and what to compare how."""

    kernel: Kernel
    arrays: list[np.ndarray]
    grid: tuple[int, ...]
    tolerant: set[int] = field(default_factory=set)   # indices (into arrays) of tolerance-compared outputs
    fully_defined: bool = True                         # False: some output may show poison (debug mode only)
    notes: list[str] = field(default_factory=list)


def random_array(rng: np.random.Generator, shape: tuple[int, ...], dt: DType, specials: bool) -> np.ndarray:
    """Values exercising each dtype: floats with (optionally) NaN/inf/-0, ints over their whole range."""
    if dt in (DType.float8_e4m3, DType.float8_e5m2):
        return rng.integers(0, 256, shape, dtype=np.uint8).view(dt.np)
    if dt.is_float:
        x = (rng.standard_normal(shape) * rng.choice([0.5, 3.0, 40.0])).astype(np.float32)
        if specials and x.size:
            flat = x.reshape(-1)
            k = max(1, flat.size // 16)
            idx = rng.integers(0, flat.size, k)
            flat[idx] = rng.choice(np.float32([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-3]), k)
        return x.astype(dt.np)
    if dt is DType.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    info = np.iinfo(dt.np)
    lo, hi = (-300, 300) if rng.random() < 0.6 else (max(info.min, -2**40), min(info.max, 2**40))
    return rng.integers(max(lo, info.min), min(hi, info.max) + 1, shape, dtype=np.int64).astype(dt.np)


class _Gen:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.body: list[Any] = []
        self.nbuf = 0
        self.notes: list[str] = []
        self.tolerant_outs: list[HbmTensor] = []
        self.defined = True

    # ------------------------------------------------------------------ helpers
    def pick(self, xs: list[Any]) -> Any:
        return xs[int(self.rng.integers(0, len(xs)))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def buf(self, shape: tuple[int, ...], dt: DType, space: Space = Space.SBUF) -> Tile:
        b = Buf(f"t{self.nbuf}", tuple(int(s) for s in shape), dt, space)
        self.nbuf += 1
        self.emit(Instr(Op.ALLOC, (b,), ()))
        return Tile(Region.whole(b))

    def emit(self, ins: Instr) -> None:
        self.cur.append(ins)

    def imm(self, kind: str | None = None) -> Imm:
        kind = kind or self.pick(["f", "f", "i", "b"])
        if kind == "f":
            return Imm(float(self.pick([0.5, -2.0, 3.25, 0.0, -0.0, 1e-3, 7.0, float("inf"), float("nan")])))
        if kind == "i":
            return Imm(int(self.pick([0, 1, -3, 7, 255, -129, 2**31 - 1])))
        return Imm(bool(self.chance(0.5)))

    def col(self, t: Tile) -> Tile:
        """A [P, 1] region of a 2-d tile (a per-partition scalar operand)."""
        r = t.region
        if len(r.shape) != 2 or r.shape[1] == 1:
            return t
        j = int(self.rng.integers(0, r.shape[1]))
        return Tile(Region(r.buf, (sympy.Integer(0), sympy.Integer(j)), (r.shape[0], 1), (True, True)))

    def tile_of(self, pool: list[Tile], shape: tuple[int, ...], want_int: bool | None = None) -> Tile | None:
        cands = [t for t in pool if t.shape == shape and (want_int is None or t.dtype.is_int == want_int)]
        return self.pick(cands) if cands else None

    # ------------------------------------------------------------------ kernel
    def build(self) -> Generated:
        rng = self.rng
        p = int(self.pick([1, 2, 3, 5, 8, 16, 32]))
        f = int(self.pick([1, 2, 3, 4, 7, 8, 16, 33]))
        nblk = int(self.pick([1, 1, 2, 3]))
        grid = self.pick([(1,), (1,), (2,), (2, 2)])
        ninst = int(np.prod(grid))
        rows_total = nblk * p * ninst - int(rng.integers(0, p))  # ragged last block
        rows_total = max(1, rows_total)
        self.loop_var = mksym("i0")
        ins_t = [HbmTensor(f"x{k}", (rows_total, f), self.pick(HBM_DTYPES)) for k in range(int(rng.integers(1, 4)))]
        idx_t = HbmTensor("idx", (rows_total, 1), self.pick([DType.int32, DType.int64, DType.int16]))
        outs: list[HbmTensor] = []
        pid_lin = pid_sym(0) * (grid[1] if len(grid) > 1 else 1) + (pid_sym(1) if len(grid) > 1 else 0)
        row0 = (pid_lin * nblk + self.loop_var) * p
        rows = row0 + A0
        mask = rows < rows_total
        self.cur = []
        loop = Loop(self.pick(["affine", "sequential"]), self.loop_var, sympy.Integer(0), sympy.Integer(nblk),
                    sympy.Integer(1), self.cur)
        self.body = [loop]
        pool: list[Tile] = []
        for t in ins_t:
            dt = self.pick(ALL_DTYPES) if self.chance(0.5) else (t.dtype if t.dtype is not DType.int64 else
                                                                  DType.int32)
            tile = self.buf((p, f), dt)
            other = None if self.chance(0.25) else self.pick([0, 0.0, -1.5, 7, True])
            if other is None:
                self.defined = False
            self.emit(Instr(Op.DMA_COPY, (tile.region,), (Access(t, (p, f), (rows, A1), (), mask),),
                            {"other": other}))
            pool.append(tile)
        if self.chance(0.4):  # gather rows of x0 through an index tile (indices in range, masked rows)
            it = self.buf((p, 1), self.pick([DType.int32, DType.int16, DType.float32]))
            self.emit(Instr(Op.DMA_COPY, (it.region,), (Access(idx_t, (p, 1), (rows, A1), (), mask),),
                            {"other": 0}))
            g = self.buf((p, f), self.pick(FLOAT_TILE + INT_TILE))
            gm = sympy.And(mask, gather_sym(0) >= 0) if self.chance(0.5) else mask
            self.emit(Instr(Op.DMA_COPY, (g.region,), (Access(ins_t[0], (p, f), (gather_sym(0), A1), (it.region,),
                                                               gm),), {"other": -2}))
            pool.append(g)
        for _ in range(int(rng.integers(2, 9))):
            try:
                new = self.step(pool, p, f)
            except _Skip:
                continue
            if new is not None:
                pool.append(new)
        n_out = int(rng.integers(1, 4))
        for k in range(n_out):
            src = self.pick([t for t in pool if t.shape[0] == p] or pool)
            width = int(np.prod(src.shape[1:])) if len(src.shape) > 1 else 1
            if len(src.shape) != 2:
                if src.shape[0] != p:
                    continue
                src2 = self.buf((p, width), src.dtype)
                self.emit(Instr(Op.TENSOR_COPY, (src2.region,), (src.region,), {"reshape": True}))
                src = src2
            o = HbmTensor(f"out{k}", (rows_total, src.shape[1]), self.pick(HBM_DTYPES), "out")
            outs.append(o)
            self.emit(Instr(Op.DMA_COPY, (Access(o, src.shape, (rows, A1), (), mask),), (src.region,)))
        outs.extend(self.tolerant_outs)
        params = ins_t + [idx_t]
        k = Kernel(f"rand{self.seed}", params, tuple(grid), self.body, outs)
        arrays = [random_array(rng, t.shape, t.dtype, self.chance(0.5)) for t in ins_t]
        arrays.append(rng.integers(0, rows_total, (rows_total, 1)).astype(idx_t.dtype.np))
        arrays += [np.zeros(tuple(int(s) for s in o.shape), o.dtype.np) for o in outs]
        tol = {len(params) + outs.index(o) for o in self.tolerant_outs}
        return Generated(k, arrays, tuple(grid), tol, self.defined, self.notes)

    # ------------------------------------------------------------------ one random op
    def step(self, pool: list[Tile], p: int, f: int) -> Tile | None:
        kind = self.pick(["unary", "unary", "binary", "binary", "scalar", "scalar", "reduce", "copy", "select",
                          "iota", "memset", "affine_select", "scan", "transpose", "matmul", "bn", "reshape"])
        two_d = [t for t in pool if len(t.shape) == 2 and t.shape[0] == p]
        if not two_d:
            raise _Skip
        x = self.pick(two_d)
        self.notes.append(kind)
        return self._STEPS[kind](self, pool, two_d, x, p, f)

    def _step_unary(self, pool: list[Tile], two_d: list[Tile], x: Tile, p: int, f: int) -> Tile | None:
        """A random ``unary`` instruction on ``x`` (None: its result is not a 2-D tile)."""
        shape = x.shape
        func = self.pick([u for u in UNARY if u is not Alu.bitwise_not])
        out = self.buf(shape, self.pick(FLOAT_TILE + INT_TILE))
        ins: list[Any] = [x.region]
        if self.chance(0.4):
            ins.append(self.pick([self.imm("f"), self.col(self.pick(two_d)).region]))
        red = self.chance(0.3)
        outs = [out.region]
        if red:
            r = self.buf((p, 1), self.pick([DType.float32, DType.int32, DType.bfloat16]))
            outs.append(r.region)
        self.emit(Instr(Op.ACTIVATION, tuple(outs), tuple(ins), {
            "func": func, "scale": float(self.pick([1.0, 1.0, 0.5, -2.0])),
            "reduce_op": self.pick(REDUCE) if red else None}))
        return out

    def _step_binary(self, pool: list[Tile], two_d: list[Tile], x: Tile, p: int, f: int) -> Tile | None:
        """A random ``binary`` instruction on ``x`` (None: its result is not a 2-D tile)."""
        shape = x.shape
        op = self.pick(BINARY)
        b = self.pick([t for t in two_d if t.shape == shape] + [self.col(self.pick(two_d))])
        if op in INT_ONLY:
            x = self.tile_of(pool, shape, True) or self._int_copy(x)
            b = self.tile_of(pool, b.shape, True) or self._int_copy(b)
        a_, b_ = (x, b) if self.chance(0.7) else (b, x)
        if a_.shape != shape:
            a_, b_ = b_, a_
        out = self.buf(shape, self._out_dtype(op, x, b))
        self.emit(Instr(Op.TENSOR_TENSOR, (out.region,), (a_.region, b_.region), {"op": op}))
        return out

    def _step_scalar(self, pool: list[Tile], two_d: list[Tile], x: Tile, p: int, f: int) -> Tile | None:
        """A random ``scalar`` instruction on ``x`` (None: its result is not a 2-D tile)."""
        shape = x.shape
        ops = [self.pick(BINARY), self.pick(BINARY + [None])]
        ints = any(o in INT_ONLY for o in ops if o is not None)
        if ints:
            x = self.tile_of(pool, shape, True) or self._int_copy(x)
        scal = []
        for o in ops:
            if o is None:
                continue
            if ints:
                scal.append(self.pick([self.imm("i"), self.imm("b"), self._int_copy(self.col(x)).region]))
            else:
                scal.append(self.pick([self.imm(), self.col(self.pick(two_d)).region]))
        out = self.buf(shape, self.pick(FLOAT_TILE + INT_TILE) if not ints else self.pick(INT_TILE))
        self.emit(Instr(Op.TENSOR_SCALAR, (out.region,), (x.region, *scal), {
            "op0": ops[0], "op1": ops[1], "reverse": (self.chance(0.3), self.chance(0.3))}))
        return out

    def _step_reduce(self, pool: list[Tile], two_d: list[Tile], x: Tile, p: int, f: int) -> Tile | None:
        """A random ``reduce`` instruction on ``x`` (None: its result is not a 2-D tile)."""
        op = self.pick(REDUCE)
        src = x
        if self.chance(0.4) and f % 2 == 0 and f > 1:
            src = self.buf((p, 2, f // 2), x.dtype)
            self.emit(Instr(Op.TENSOR_COPY, (src.region,), (x.region,), {"reshape": True}))
        nd = len(src.shape)
        axes = (self.pick(list(range(1, nd))),) if op in (Alu.argmax, Alu.argmin) or nd == 2 or \
            self.chance(0.5) else tuple(range(1, nd))
        keep = self.chance(0.5)
        oshape = tuple(1 if d in axes else s for d, s in enumerate(src.shape)) if keep else \
            tuple(s for d, s in enumerate(src.shape) if d not in axes)
        odt = DType.int32 if op in (Alu.argmax, Alu.argmin) else self.pick(FLOAT_TILE + INT_TILE)
        out = self.buf(oshape, odt)
        self.emit(Instr(Op.TENSOR_REDUCE, (out.region,), (src.region,), {"op": op, "axes": axes,
                                                                          "keepdims": keep}))
        return out if len(oshape) == 2 else None

    def _step_copy(self, pool: list[Tile], two_d: list[Tile], x: Tile, p: int, f: int) -> Tile | None:
        """A random ``copy`` instruction on ``x`` (None: its result is not a 2-D tile)."""
        shape = x.shape
        out = self.buf(shape, self.pick(ALL_DTYPES))
        self.emit(Instr(Op.TENSOR_COPY, (out.region,), (self.pick([x, self.col(x)]).region,), {"reshape": False}))
        return out

    def _step_reshape(self, pool: list[Tile], two_d: list[Tile], x: Tile, p: int, f: int) -> Tile | None:
        """A random ``reshape`` instruction on ``x`` (None: its result is not a 2-D tile)."""
        shape = x.shape
        if not (f % 2 == 0 and f > 1):
            raise _Skip
        mid = self.buf((p, f // 2, 2), x.dtype)
        self.emit(Instr(Op.TENSOR_COPY, (mid.region,), (x.region,), {"reshape": True}))
        out = self.buf(shape, self.pick(ALL_DTYPES))
        self.emit(Instr(Op.TENSOR_COPY, (out.region,), (mid.region,), {"reshape": True}))
        return out

    def _step_select(self, pool: list[Tile], two_d: list[Tile], x: Tile, p: int, f: int) -> Tile | None:
        """A random ``select`` instruction on ``x`` (None: its result is not a 2-D tile)."""
        shape = x.shape
        cond = self.pick([t for t in two_d if t.shape == shape] + [self.col(self.pick(two_d))])
        a = self.pick([x.region, self.imm()])
        b = self.pick([self.pick(two_d).region if self.pick(two_d).shape == shape else self.imm(), self.imm()])
        out = self.buf(shape, self.pick(ALL_DTYPES))
        self.emit(Instr(Op.SELECT, (out.region,), (cond.region, a, b)))
        return out

    def _step_iota(self, pool: list[Tile], two_d: list[Tile], x: Tile, p: int, f: int) -> Tile | None:
        """A random ``iota`` instruction on ``x`` (None: its result is not a 2-D tile)."""
        shape = x.shape
        e = self.pick([A0 * 3 + A1, A1 - self.loop_var * 5, sympy.floor((A0 + 2 * A1) / 3), sympy.Mod(A1, 3),
                       A0 >= A1, pid_sym(0) * 100 + A1 * A1, (A0 - A1) * 2**29, A1 / 2])
        out = self.buf(shape, self.pick(ALL_DTYPES))
        self.emit(Instr(Op.IOTA, (out.region,), (), {"expr": e}))
        return out

    def _step_memset(self, pool: list[Tile], two_d: list[Tile], x: Tile, p: int, f: int) -> Tile | None:
        """A random ``memset`` instruction on ``x`` (None: its result is not a 2-D tile)."""
        shape = x.shape
        out = self.buf(shape, self.pick(ALL_DTYPES))
        self.emit(Instr(Op.MEMSET, (out.region,), (), {"value": self.imm().value}))
        return out

    def _step_affine_select(self, pool: list[Tile], two_d: list[Tile], x: Tile, p: int, f: int) -> Tile | None:
        """A random ``affine_select`` instruction on ``x`` (None: its result is not a 2-D tile)."""
        shape = x.shape
        pred = self.pick([A1 <= A0, sympy.Eq(sympy.Mod(A0 + A1, 2), 0), A1 + self.loop_var * 2 < f,
                          sympy.And(A0 > 0, A1 < 3)])
        out = self.buf(shape, self.pick(ALL_DTYPES))
        self.emit(Instr(Op.AFFINE_SELECT, (out.region,), (self.pick([x.region, self.imm()]), self.imm()),
                        {"pred": pred}))
        return out

    def _step_scan(self, pool: list[Tile], two_d: list[Tile], x: Tile, p: int, f: int) -> Tile | None:
        """A random ``scan`` instruction on ``x`` (None: its result is not a 2-D tile)."""
        shape = x.shape
        fl = [o for o in BINARY if o not in INT_ONLY and o is not Alu.power]
        ini = self.pick([self.imm("f"), self.col(self.pick(two_d)).region])
        out = self.buf(shape, self.pick(FLOAT_TILE))
        b = self.pick([t for t in two_d if t.shape == shape])
        self.emit(Instr(Op.SCAN, (out.region,), (self.pick([x.region, self.imm("f")]), b.region, ini),
                        {"op0": self.pick(fl), "op1": self.pick(fl)}))
        return out

    def _step_transpose(self, pool: list[Tile], two_d: list[Tile], x: Tile, p: int, f: int) -> Tile | None:
        """A random ``transpose`` instruction on ``x`` (None: its result is not a 2-D tile)."""
        shape = x.shape
        out = self.buf((shape[1], shape[0]), self.pick(FLOAT_TILE + INT_TILE), Space.PSUM)
        self.emit(Instr(Op.TRANSPOSE, (out.region,), (x.region,)))
        back = self.buf(shape, out.dtype)
        self.emit(Instr(Op.TRANSPOSE, (back.region,), (out.region,)))
        return back

    def _step_matmul(self, pool: list[Tile], two_d: list[Tile], x: Tile, p: int, f: int) -> Tile | None:
        """A random ``matmul`` instruction on ``x`` (None: its result is not a 2-D tile)."""
        shape = x.shape
        # operands squashed to [-1, 1] (tanh) so fp32 vs float64 accumulation stays within the tolerance
        m = self.pick([t for t in two_d if t.shape == shape and t.dtype.is_float] or [x])
        sq = []
        for t in (x, m):
            s = self.buf(shape, self.pick([DType.float32, DType.bfloat16]))
            self.emit(Instr(Op.ACTIVATION, (s.region,), (t.region,), {"func": Alu.tanh, "scale": 1.0,
                                                                       "reduce_op": None}))
            sq.append(s)
        ps = self.buf((shape[1], shape[1]), DType.float32, Space.PSUM)
        self.emit(Instr(Op.MEMSET, (ps.region,), (), {"value": 0.0}))
        for _ in range(int(self.rng.integers(1, 3))):
            self.emit(Instr(Op.MATMUL, (ps.region,), (sq[0].region, sq[1].region), {"accumulate": True}))
        self._tolerant_store(ps)
        return None

    def _step_bn(self, pool: list[Tile], two_d: list[Tile], x: Tile, p: int, f: int) -> Tile | None:
        """A random ``bn`` instruction on ``x`` (None: its result is not a 2-D tile)."""
        st = self.buf((p, 6), DType.float32)
        half = max(1, f // 2)
        self.emit(Instr(Op.BN_STATS, (Region(st.region.buf, (sympy.Integer(0), sympy.Integer(0)), (p, 3),
                                             (True, True)),), (Region(x.region.buf, (sympy.Integer(0),
                                                                     sympy.Integer(0)), (p, half), (True, True)),)))
        self.emit(Instr(Op.BN_STATS, (Region(st.region.buf, (sympy.Integer(0), sympy.Integer(3)), (p, 3),
                                             (True, True)),), (x.region,)))
        ag = self.buf((p, 2), DType.float32)
        self.emit(Instr(Op.BN_AGGR, (ag.region,), (st.region,)))
        self._tolerant_store(ag)
        return None

    _STEPS: dict[str, Callable[..., Tile | None]] = {
        "unary": _step_unary,
        "binary": _step_binary,
        "scalar": _step_scalar,
        "reduce": _step_reduce,
        "copy": _step_copy,
        "reshape": _step_reshape,
        "select": _step_select,
        "iota": _step_iota,
        "memset": _step_memset,
        "affine_select": _step_affine_select,
        "scan": _step_scan,
        "transpose": _step_transpose,
        "matmul": _step_matmul,
        "bn": _step_bn,
    }

    def _tolerant_store(self, t: Tile) -> None:
        """Store a tile to a new output, one block of rows per (program instance, loop iteration)."""
        m = t.shape[0]
        blk = (pid_sym(0) * 2 + pid_sym(1)) * 4 + self.loop_var
        o = HbmTensor(f"tol{len(self.tolerant_outs)}", (16 * m, t.shape[1]), DType.float32, "out")
        self.tolerant_outs.append(o)
        self.emit(Instr(Op.DMA_COPY, (Access(o, t.shape, (blk * m + A0, A1), (), None),), (t.region,)))

    def _int_copy(self, t: Tile) -> Tile:
        out = self.buf(t.shape, self.pick(INT_TILE))
        self.emit(Instr(Op.TENSOR_COPY, (out.region,), (t.region,), {"reshape": False}))
        return out

    def _out_dtype(self, op: Alu, a: Tile, b: Tile) -> DType:
        if op in INT_ONLY:
            return self.pick(INT_TILE)
        return self.pick(FLOAT_TILE + INT_TILE)


class _Skip(Exception):
    pass


def generate(seed: int) -> Generated:
    """A random kernel (deterministic in ``seed``)."""
    return _Gen(seed).build()
