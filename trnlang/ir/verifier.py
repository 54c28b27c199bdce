"""The IR verifier: the structural and device rules every kernel must satisfy.

``verify(kernel)`` walks the body in program order, collects every violation,
and raises the first one (a ``TrnError`` subclass carrying the offending
instruction's source line) with the others attached as notes. On success it
returns the DMA accesses whose bounds could not be decided at compile time:
codegen emits a run-time check for each.

Rules (DEVICE.md "Rules the compiler enforces", docs/ir.md), by error class:

- ``VerifyError`` (structure): operand counts/kinds; engine in ``OP_SPECS[op].engines``;
  ALU functions of the right kind; loops ``affine``/``sequential`` with a positive
  step; every region's buffer declared by a visible ``ALLOC`` (an alloc in a loop
  body is not visible after the loop); symbols in scope. Memory spaces: ALLOC is
  SBUF/PSUM; DMA is HBM <-> SBUF only; matmul reads SBUF, writes PSUM; a
  Tensor-engine transpose reads SBUF, writes PSUM; GpSimd cannot access PSUM.
  Partition start: a compute tile spanning > 64 partitions starts at 0, 33-64 at
  0 or 64, <= 32 at 0/32/64/96; symbolic starts must provably comply (DMA exempt).
- ``ShapeError``: partition dim <= 128; regions inside their buffers for all loop
  values; inputs broadcast to the output; matmul K, M <= 128, N <= 512, output
  [M, N]; transpose <= 128x128 (32x32 on Vector); Vector/Scalar/GpSimd free size
  <= 64K elements (4K with a PSUM operand); reductions on free axes only;
  ``bn_stats`` -> [P, 3]; ``bn_aggr`` [P, 3k] -> [P, 2].
- ``DTypeError``: bitwise ALUs need integers; matmul inputs are floats (fp8 only
  where the target has fp8 matmul), output fp32; gather indices are integers;
  argmax/argmin write ints, bn_* floats; int64 is HBM-only. **fp8 is a storage
  type**: any instruction may read it (widened exactly) but only data movement
  may write it: DMA, ``tensor_copy`` (the cast), ``memset``, ``select``,
  ``affine_select``, ``nc_transpose``, ``activation`` with ``func=copy``.
  Arithmetic writes a wider type and casts after (torch has no fp8 math either).
- ``BoundsError``: an HBM access provably outside its tensor
  (:func:`trnlang.ir.bounds.access_check`); undecided ones are returned.
- ``SbufOverflowError``: a buffer is live from its ALLOC to its last use (to the
  end of the outermost loop using it that does not allocate it); live SBUF bytes
  per partition must fit the target, live PSUM buffers (``ceil(bytes/2KiB)``
  banks each) its 8 banks.

Example:
    >>> from trnlang.ir.nodes import Kernel
    >>> verify(Kernel("empty", [], (1,), []))
    []
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, cast

import sympy

from trnlang.frontend.errors import BoundsError, DTypeError, SbufOverflowError, ShapeError, TrnError, VerifyError
from trnlang.ir.bounds import Ranges, access_check, affine_form, const_int, expr_range, loop_ranges
from trnlang.ir.liveness import Liveness
from trnlang.ir.nodes import Access, Buf, Imm, Instr, Kernel, Loop, Region, SourceLoc, axis_sym, gather_sym, pid_sym
from trnlang.ir.ops import ALU_SPECS, OP_SPECS, REDUCE_CMDS, Alu, AluKind, Op
from trnlang.ir.types import DType, Engine, Space
from trnlang.sim.targets import Target, get_target

__all__ = ["RuntimeCheck", "problems", "verify"]

_COMPUTE = (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)
_ONCHIP_ENGINES = (*_COMPUTE, Engine.TENSOR)
_FP8 = (DType.float8_e4m3, DType.float8_e5m2)
_FP8_WRITERS = {Op.DMA_COPY, Op.TENSOR_COPY, Op.MEMSET, Op.SELECT, Op.AFFINE_SELECT, Op.TRANSPOSE}
_MAX_NOTES = 10
# Operand kinds of `ins` per op: "R" a Region, "RI" a Region or an Imm.
_IN_KINDS: dict[Op, tuple[str, ...]] = {
    Op.ACTIVATION: ("R", "RI", "RI", "R"), Op.TENSOR_TENSOR: ("R", "R"), Op.TENSOR_SCALAR: ("R", "RI", "RI"),
    Op.TENSOR_REDUCE: ("R",), Op.TENSOR_COPY: ("R",), Op.SELECT: ("R", "RI", "RI"), Op.IOTA: (), Op.MEMSET: (),
    Op.AFFINE_SELECT: ("RI", "RI"), Op.SCAN: ("RI", "RI", "RI"), Op.MATMUL: ("R", "R"), Op.TRANSPOSE: ("R",),
    Op.BN_STATS: ("R",), Op.BN_AGGR: ("R",), Op.PRINT: ("R",),
}
# (min, max) operand counts where they vary (docs/ir.md).
_N_OUTS = {Op.ACTIVATION: (1, 3), Op.TENSOR_SCALAR: (1, 2)}
_N_INS = {Op.ACTIVATION: (1, 4), Op.TENSOR_SCALAR: (2, 3)}


class RuntimeCheck(NamedTuple):
    """A DMA access whose bounds need a run-time check (codegen emits it at ``instr``)."""

    instr: Instr
    access: Access


@dataclass(eq=False)
class _Alloc:
    buf: Buf
    pos: int
    loops: tuple[Loop, ...]
    loc: SourceLoc | None
    end: int = -1


def _shape(s: Any) -> str:
    return "[" + ", ".join(str(x) for x in s) + "]"


def _dt(d: DType) -> str:
    return d.name.rstrip("_")


def _region(r: Region) -> str:
    """``t3[0:128, 64*i0:64*i0 + 64]``: the region in its buffer's coordinates."""
    parts = [str(s) if not k else ":" if s == 0 and n == dim else f"{s}:{s + n}"
             for s, n, k, dim in zip(map(sympy.sympify, r.starts), r.sizes, r.keep, r.buf.shape)]
    return f"{r.buf.name}[{', '.join(parts)}]"


def _bcast_ok(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """numpy broadcasting of ``src`` to exactly ``dst``."""
    return len(src) <= len(dst) and all(a == b or a == 1 for a, b in zip(reversed(src), reversed(dst)))


class _Verifier:
    """One walk over a kernel; see the module docstring for the rules."""

    def __init__(self, k: Kernel, target: Target) -> None:
        self.k, self.t = k, target
        self.issues: list[tuple[type[TrnError], str, SourceLoc | None]] = []
        self.runtime: list[RuntimeCheck] = []
        self.visible: dict[Buf, _Alloc] = {}
        self.allocated: dict[Buf, SourceLoc | None] = {}
        self.bad_bufs: set[Buf] = set()
        self.allocs: list[_Alloc] = []
        self.pos = 0
        self.tensor_ids = {id(t) for t in k.tensors}
        self._ranges: dict[tuple[int, ...], Ranges] = {}
        self._scopes: dict[tuple[int, ...], frozenset[sympy.Symbol]] = {}
        # runtime sizes of a shape-polymorphic kernel are in scope everywhere
        self.size_syms = {s for t in k.tensors for d in t.shape if isinstance(d, sympy.Basic) for s in d.free_symbols}

    # --- helpers ---------------------------------------------------------------------------------
    def err(self, cls: type[TrnError], msg: str, loc: SourceLoc | None) -> None:
        self.issues.append((cls, msg, loc if loc is not None else self.k.loc))

    def ranges(self, loops: tuple[Loop, ...]) -> Ranges:
        key = tuple(id(lp) for lp in loops)
        return self._ranges.get(key) or self._ranges.setdefault(key, loop_ranges(loops, self.k.grid))

    def scope(self, loops: tuple[Loop, ...]) -> frozenset[sympy.Symbol]:
        """The symbols an expression inside ``loops`` may use (computed once per loop nest)."""
        key = tuple(id(lp) for lp in loops)
        got = self._scopes.get(key)
        if got is None:
            got = self._scopes[key] = frozenset({lp.var for lp in loops} | self.size_syms | {
                pid_sym(a) for a in range(max(3, len(self.k.grid)))})
        return got

    def check_syms(self, e: Any, allowed: frozenset[sympy.Symbol] | set[sympy.Symbol], what: str | Callable[[], str],
                   loc: SourceLoc | None) -> bool:
        """``e`` uses only ``allowed`` symbols; ``what`` names it in the error (a callable: built only then)."""
        bad = sorted(str(s) for s in (e.free_symbols if isinstance(e, sympy.Basic) else set()) - allowed)
        if bad:
            what = what if isinstance(what, str) else what()
            self.err(VerifyError, f"{what} uses {', '.join(bad)}, which is not an enclosing loop variable, program id "
                                  f"or axis in scope here", loc)
        return not bad

    # --- walk --------------------------------------------------------------------------------------
    def run(self) -> None:
        self.block(self.k.body, ())
        self.capacity()

    def block(self, stmts: list[Instr | Loop], loops: tuple[Loop, ...]) -> None:
        local: list[Buf] = []
        for s in stmts:
            if isinstance(s, Loop):
                self.loop(s, loops)
            elif isinstance(s, Instr):
                self.instr(s, loops, local)
            else:
                self.err(VerifyError, f"unknown statement {type(s).__name__} in the kernel body", None)
        for b in local:  # allocations of this block are not visible after it
            self.visible.pop(b, None)

    def loop(self, lp: Loop, loops: tuple[Loop, ...]) -> None:
        if lp.kind not in ("affine", "sequential"):
            self.err(VerifyError, f"loop kind must be 'affine' or 'sequential', got {lp.kind!r}", lp.loc)
        if not isinstance(lp.var, sympy.Symbol) or lp.var in {o.var for o in loops}:
            self.err(VerifyError, f"loop variable {lp.var} must be a fresh symbol (it shadows an enclosing loop)",
                     lp.loc)
            return
        allowed = self.scope(loops)
        ok = all([self.check_syms(e, allowed, functools.partial("the loop {} {}".format, name, e), lp.loc)
                  for name, e in (("start", lp.start), ("stop", lp.stop), ("step", lp.step))])
        if ok:
            st = expr_range(lp.step, self.ranges(loops))
            if st is None or st[0] < 1:
                self.err(VerifyError, f"loop step must be positive, got {lp.step}", lp.loc)
        self.block(lp.body, (*loops, lp))

    def instr(self, ins: Instr, loops: tuple[Loop, ...], local: list[Buf]) -> None:
        pos, loc = self.pos, ins.loc
        self.pos += 1
        if ins.op is Op.ALLOC:
            self.alloc(ins, loops, local, pos)
            return
        spec = OP_SPECS[ins.op]
        if ins.engine is not None and ins.engine not in spec.engines:
            allowed = ", ".join(e.value for e in spec.engines)
            self.err(VerifyError, f"{ins.op.value} cannot run on the {ins.engine.value} engine (allowed: {allowed})",
                     loc)
        engine = ins.engine if ins.engine in spec.engines else spec.engines[0]
        if not self.arity(ins):
            return
        regions = [r for x in (*ins.outs, *ins.ins)
                   for r in ([x] if isinstance(x, Region) else x.gathers if isinstance(x, Access) else [])]
        if not all([self.region(r, loops, pos, loc) for r in regions]):
            return
        _CHECKS[ins.op](self, ins, loops)
        if engine in _ONCHIP_ENGINES:
            self.engine_rules(ins, engine, loops)
        self.dtype_rules(ins)

    def arity(self, ins: Instr) -> bool:
        spec, op, loc = OP_SPECS[ins.op], ins.op, ins.loc
        for what, got, (lo, hi) in (("outputs", ins.outs, _N_OUTS.get(op, (spec.n_outs,) * 2)),
                                    ("inputs", ins.ins, _N_INS.get(op, (spec.n_ins,) * 2))):
            if not lo <= len(got) <= hi:  # type: ignore[operator]
                n = lo if lo == hi else f"{lo}-{hi}"
                self.err(VerifyError, f"{op.value} takes {n} {what}, got {len(got)}", loc)
                return False
        if op is Op.DMA_COPY:
            return True  # its operand kinds are checked with the access
        for o in ins.outs:
            if not isinstance(o, Region):
                self.err(VerifyError, f"{op.value} writes an SBUF/PSUM tile, not {type(o).__name__}", loc)
                return False
        for x, kind in zip(ins.ins, _IN_KINDS[op]):
            if not (isinstance(x, Region) or (kind == "RI" and isinstance(x, Imm))):
                want = "a tile" if kind == "R" else "a tile or an immediate"
                self.err(VerifyError, f"{op.value} takes {want} here, not {type(x).__name__}", loc)
                return False
        return True

    # --- buffers and regions -----------------------------------------------------------------------
    def alloc(self, ins: Instr, loops: tuple[Loop, ...], local: list[Buf], pos: int) -> None:
        loc = ins.loc
        if len(ins.outs) != 1 or not isinstance(ins.outs[0], Buf) or ins.ins:
            self.err(VerifyError, "alloc declares exactly one buffer and takes no inputs", loc)
            return
        b: Buf = ins.outs[0]
        loc = loc or b.loc
        what = f"buffer {b.name} {_shape(b.shape)} {_dt(b.dtype)}"
        ok = True
        if b in self.visible:
            self.err(VerifyError, f"{what} is allocated twice", loc)
            return
        if b.space not in (Space.SBUF, Space.PSUM):
            self.err(VerifyError, f"alloc declares on-chip buffers (SBUF or PSUM) only; {what} is {b.space.value}", loc)
            ok = False
        if not b.shape or any(not isinstance(n, int) or n < 1 for n in b.shape):
            self.err(ShapeError, f"{what}: buffer dimensions must be positive integers", loc)
            ok = False
        elif b.shape[0] > self.t.pmax:
            self.err(ShapeError, f"{what}: partition dimension {b.shape[0]} exceeds {self.t.pmax} (tl.tile_size.pmax)",
                     loc)
            ok = False
        if b.dtype is DType.int64:
            self.err(DTypeError, f"{what}: int64 exists only in HBM; tiles hold at most int32 (loads convert)", loc)
        self.visible[b] = rec = _Alloc(b, pos, loops, loc)
        self.allocated[b] = loc
        local.append(b)
        if ok:
            self.allocs.append(rec)
        else:
            self.bad_bufs.add(b)

    def region(self, r: Region, loops: tuple[Loop, ...], pos: int, loc: SourceLoc | None) -> bool:
        b = r.buf
        if not isinstance(b, Buf):
            self.err(VerifyError, f"a region must view a Buf, not {type(b).__name__}", loc)
            return False
        rec = self.visible.get(b)
        if rec is None:
            why = (f"outside the loop that allocates it (allocated at {self.allocated[b]})" if b in self.allocated
                   else "before it is allocated (no alloc precedes it)")
            self.err(VerifyError, f"tile {b.name} {_shape(b.shape)} is used {why}", loc)
            return False
        if b in self.bad_bufs:
            return False  # already reported at its alloc
        nd = len(b.shape)
        if not len(r.starts) == len(r.sizes) == len(r.keep) == nd:
            self.err(VerifyError, f"a region of {b.name} {_shape(b.shape)} needs {nd} starts/sizes/keeps", loc)
            return False
        for d, (n, k) in enumerate(zip(r.sizes, r.keep)):
            if not isinstance(n, int) or n < 1 or (not k and n != 1):
                self.err(ShapeError, f"region {_region(r)}: size {n} in dim {d} must be a positive integer "
                                     f"(1 for an indexed dim)", loc)
                return False
        if not all([self.check_syms(s, self.scope(loops), lambda: f"the region {_region(r)}", loc) for s in r.starts]):
            return False
        ranges, ok = self.ranges(loops), True
        for d, (s, n, dim) in enumerate(zip(r.starts, r.sizes, b.shape)):
            sr = expr_range(s, ranges)
            if sr is None:
                self.err(ShapeError, f"region {_region(r)}: the start {s} of dim {d} cannot be bounded", loc)
                ok = False
            elif sr[0] <= sr[1] and (sr[0] < 0 or sr[1] + n > dim):
                rng = f"is {sr[0]}" if sr[0] == sr[1] else f"ranges over [{sr[0]}, {sr[1]}]"
                self.err(ShapeError, f"region {_region(r)} is outside its buffer {b.name} {_shape(b.shape)} in dim "
                                     f"{d}: the start {rng} and the size is {n}, so it covers indices "
                                     f"[{sr[0]}, {sr[1] + n - 1}] of a dimension of size {dim}", loc)
                ok = False
        if r.shape and r.shape[0] > self.t.pmax:
            self.err(ShapeError, f"tile {_region(r)} of shape {_shape(r.shape)}: partition dimension {r.shape[0]} "
                                 f"exceeds {self.t.pmax} (tl.tile_size.pmax)", loc)
            ok = False
        return ok

    def bcast(self, ins: Instr, x: Any, out: Region, what: str) -> None:
        if isinstance(x, Region) and not _bcast_ok(x.shape, out.shape):
            self.err(ShapeError, f"{ins.op.value}: {what} {_region(x)} of shape {_shape(x.shape)} does not broadcast "
                                 f"to the output shape {_shape(out.shape)}", ins.loc)

    # --- engine-wide rules -------------------------------------------------------------------------
    def engine_rules(self, ins: Instr, engine: Engine, loops: tuple[Loop, ...]) -> None:
        regs = [x for x in (*ins.outs, *ins.ins) if isinstance(x, Region)]
        for r in regs:
            self.partition_start(r, loops, ins.loc)
        if engine not in _COMPUTE or not regs:
            return
        in_psum = [r for r in regs if r.space is Space.PSUM]
        if engine is Engine.GPSIMD and in_psum:
            self.err(VerifyError, f"the GpSimd engine cannot access PSUM ({_region(in_psum[0])} is in PSUM); "
                                  f"run {ins.op.value} on the Vector or Scalar engine", ins.loc)
        limit = self.t.free_max_psum if in_psum else self.t.free_max_sbuf
        big = max(regs, key=lambda r: math.prod(r.shape[1:]))
        fs = math.prod(big.shape[1:])
        if fs > limit:
            where = "with an operand in PSUM" if in_psum else "from SBUF"
            self.err(ShapeError, f"{ins.op.value} on the {engine.value} engine: free size {fs} elements per partition "
                                 f"({_region(big)}) exceeds the limit of {limit} {where}; split the tile along a free "
                                 f"dimension", ins.loc)

    def partition_start(self, r: Region, loops: tuple[Loop, ...], loc: SourceLoc | None) -> None:
        p, s = r.sizes[0], sympy.sympify(r.starts[0])
        if not 1 <= p <= self.t.pmax:
            return
        allowed = self.t.partition_starts(p)
        c = const_int(s)
        note = ""
        if c is not None:
            ok = c in allowed
        else:
            rng = expr_range(s, self.ranges(loops))
            aff = affine_form(s)
            q = allowed[1] if len(allowed) > 1 else None
            ok = rng is not None and (rng[0] > rng[1] or (
                rng[0] >= 0 and rng[1] <= allowed[-1] and aff is not None and q is not None
                and all(v % q == 0 for v in (aff[0], *aff[1].values()))))
            note = f" (which ranges over [{rng[0]}, {rng[1]}])" if rng is not None else ""
        if not ok:
            span = f"{p} partition" + "s" * (p > 1)
            self.err(VerifyError, f"tile {_region(r)} spans {span} and starts at partition {s}{note}; a tile "
                                  f"spanning {span} must start at partition "
                                  f"{' or '.join(str(a) for a in allowed)} (tiles spanning > 64 partitions start at "
                                  f"0; 33-64 at 0 or 64; <= 32 at 0, 32, 64 or 96)", loc)

    def dtype_rules(self, ins: Instr) -> None:
        op, loc = ins.op, ins.loc
        writes_fp8 = [o for o in ins.outs if isinstance(o, Region) and o.dtype in _FP8]
        allowed = op in _FP8_WRITERS or (op is Op.ACTIVATION and ins.attrs.get("func") is Alu.copy
                                         and ins.attrs.get("reduce_op") is None)
        if writes_fp8 and not allowed:
            o = writes_fp8[0]
            self.err(DTypeError, f"{_dt(o.dtype)} is a storage type: {op.value} cannot write its result to "
                                 f"{_region(o)}; compute in bfloat16/float32 and convert with .astype() or tl.copy",
                     loc)
        for key in ("op", "op0", "op1", "func"):
            alu = ins.attrs.get(key)
            if isinstance(alu, Alu) and ALU_SPECS[alu].int_only:
                for x in ins.ins:
                    bad = (isinstance(x, Region) and x.dtype.is_float) or (
                        isinstance(x, Imm) and isinstance(x.value, float))
                    if bad:
                        got = _dt(x.dtype) if isinstance(x, Region) else f"the float {cast(Imm, x).value}"
                        self.err(DTypeError, f"{alu.value} needs integer operands, got {got}", loc)
                        break

    def alu(self, ins: Instr, key: str, kinds: tuple[AluKind, ...], optional: bool = False,
            reduce: bool = False) -> Alu | None:
        a = ins.attrs.get(key)
        if a is None and optional:
            return None
        ok = isinstance(a, Alu) and ALU_SPECS[a].kind in kinds and (not reduce or ALU_SPECS[a].reducible)
        if not ok:
            kind = "a reduction" if reduce else " or ".join(k.name.lower() for k in kinds) + " function"
            self.err(VerifyError, f"{ins.op.value}: attribute {key}={a!r} must be {kind}", ins.loc)
            return None
        return a

    # --- capacity -----------------------------------------------------------------------------------
    def capacity(self) -> None:
        live = Liveness(self.k)  # the one liveness rule (trnlang.ir.liveness), shared with the memory planner
        for rec in self.allocs:
            rec.end = live.interval(rec.buf)[1] if live.alloc_pos.get(rec.buf) == rec.pos else rec.pos
        self.overflow(Space.SBUF)
        self.overflow(Space.PSUM)

    def overflow(self, space: Space) -> None:
        t = self.t
        recs = [r for r in self.allocs if r.buf.space is space]

        def cost(r: _Alloc) -> int:
            n = r.buf.nbytes_per_partition
            if space is Space.PSUM and r.buf.blocks:  # NKI's allocator places PSUM blocks as they are used
                n //= math.prod(r.buf.shape[1:1 + r.buf.blocks])
            return n if space is Space.SBUF else -(-n // t.psum_bank_bytes)

        cap = t.sbuf_bytes_per_partition if space is Space.SBUF else t.psum_banks
        for rec in recs:
            live = [r for r in recs if r.pos <= rec.pos <= r.end]
            total = sum(cost(r) for r in live)
            if total <= cap:
                continue
            live.sort(key=lambda r: (-r.buf.nbytes_per_partition, r.pos))
            banks = {r: f" = {cost(r)} bank{'s' * (cost(r) > 1)}" if space is Space.PSUM else "" for r in live}
            lines = [f"    {r.buf.name} {_shape(r.buf.shape)} {_dt(r.buf.dtype)}: {r.buf.nbytes_per_partition} B per "
                     f"partition{banks[r]}, allocated at {r.loc or '<unknown line>'}" for r in live]
            if space is Space.SBUF:
                head = (f"SBUF overflow: the live SBUF allocations need {total} bytes per partition "
                        f"({total / 1024:.1f} KiB) but {t.name} has {cap} ({cap // 1024} KiB) per partition")
            else:
                head = (f"PSUM overflow: the live PSUM buffers need {total} banks of {t.psum_bank_bytes // 1024} KiB "
                        f"per partition but {t.name} has {cap} ({t.psum_bytes_per_partition // 1024} KiB per "
                        f"partition)")
            self.err(SbufOverflowError, head + "\n  live allocations (largest first):\n" + "\n".join(lines), rec.loc)
            return


# --- per-op checks ---------------------------------------------------------------------------------


_DMA_ACCUMULATE = (Alu.add, Alu.multiply, Alu.maximum, Alu.minimum)


def _dma_operands(v: _Verifier, ins: Instr) -> tuple[Region, Access] | None:
    """The SBUF tile and the HBM access of a DMA (None, reported: not one of each)."""
    out, src = ins.outs[0], ins.ins[0]
    if isinstance(out, Region) and isinstance(src, Access):
        return out, src
    if isinstance(out, Access) and isinstance(src, Region):
        return src, out
    kinds = f"{type(out).__name__} <- {type(src).__name__}"
    v.err(VerifyError, f"DMA moves data between HBM and SBUF only (one HBM access and one SBUF tile), got {kinds}",
          ins.loc)
    return None


def _check_dma_accumulate(v: _Verifier, ins: Instr, reg: Region, acc: Access) -> None:
    """``accumulate=``: only on a store, one of the DMA's reductions, into a tensor of a fitting dtype."""
    accum, loc = ins.attrs.get("accumulate"), ins.loc
    if accum is None:
        return
    if acc is not ins.outs[0]:
        v.err(VerifyError, "accumulate= is only allowed on a store (SBUF -> HBM)", loc)
    elif accum not in _DMA_ACCUMULATE:
        v.err(VerifyError, f"DMA accumulate must be one of {', '.join(a.name for a in _DMA_ACCUMULATE)}, "
                           f"got {accum!r}", loc)
    elif acc.tensor.dtype == DType.bool_ or (acc.tensor.dtype.is_int and reg.dtype.is_float):
        v.err(DTypeError, f"accumulating a {_dt(reg.dtype)} tile into a {_dt(acc.tensor.dtype)} tensor is not "
                          f"supported", loc)


def _check_dma(v: _Verifier, ins: Instr, loops: tuple[Loop, ...]) -> None:
    loc = ins.loc
    operands = _dma_operands(v, ins)
    if operands is None:
        return
    reg, acc = operands
    if reg.space is not Space.SBUF:
        v.err(VerifyError, f"DMA moves data between HBM and SBUF only: {_region(reg)} is in {reg.space.value.upper()} "
                           f"(copy it to SBUF with tl.copy first)", loc)
    _check_dma_accumulate(v, ins, reg, acc)
    t = acc.tensor
    if id(t) not in v.tensor_ids:
        v.err(VerifyError, f"access to tensor '{t.name}', which is not a parameter, output or scratch tensor of "
                           f"kernel {v.k.name}", loc)
        return
    if len(acc.index) != t.ndim:
        v.err(VerifyError, f"access to '{t.name}' has {len(acc.index)} indices for a {t.ndim}-D tensor", loc)
        return
    if tuple(acc.shape) != tuple(reg.shape):
        v.err(ShapeError, f"dma_copy shapes differ: tile {_region(reg)} is {_shape(reg.shape)} but the access to "
                          f"'{t.name}' is {_shape(acc.shape)}", loc)
    for g in acc.gathers:
        if g.dtype.is_float:
            v.err(DTypeError, f"gather indices must be an integer tile, got {_dt(g.dtype)} ({_region(g)})", loc)
        if g.space is not Space.SBUF:
            v.err(VerifyError, f"gather index tile {_region(g)} must be in SBUF", loc)
        if not _bcast_ok(g.shape, tuple(acc.shape)):
            v.err(ShapeError, f"gather index tile {_region(g)} of shape {_shape(g.shape)} does not broadcast to the "
                              f"access shape {_shape(acc.shape)}", loc)
    allowed = v.scope(loops) | {axis_sym(k) for k in range(len(acc.shape))} | {
        gather_sym(k) for k in range(len(acc.gathers))}
    what = f"the access to '{t.name}'"
    if not all([v.check_syms(e, allowed, what, loc) for e in (*acc.index, acc.mask)]):
        return
    verdict = access_check(acc, v.ranges(loops))
    if verdict.status == "oob":
        v.err(BoundsError, f"out-of-bounds access to '{t.name}' (shape {_shape(t.shape)}): {verdict.reason}; mask "
                           f"the access (mask=...) or fix the index range", loc)
    elif verdict.status == "runtime":
        v.runtime.append(RuntimeCheck(ins, acc))


def _check_reduction_outs(v: _Verifier, ins: Instr, what: str) -> None:
    """The [P, 1] outputs after the first: the free-axis reduction (or the activation's registers)."""
    out = ins.outs[0]
    p = out.shape[0] if out.shape else 1
    for r in ins.outs[1:]:
        if tuple(r.shape) != (p, 1):
            v.err(ShapeError, f"{ins.op.value} {what} output {_region(r)} must have shape [{p}, 1], got "
                              f"{_shape(r.shape)}", ins.loc)


def _check_activation(v: _Verifier, ins: Instr, loops: tuple[Loop, ...]) -> None:
    out = ins.outs[0]
    v.alu(ins, "func", (AluKind.UNARY,))
    v.alu(ins, "reduce_op", (AluKind.BINARY,), optional=True, reduce=True)
    cmd = ins.attrs.get("reduce_cmd")
    if cmd is not None and cmd not in REDUCE_CMDS:
        v.err(VerifyError, f"activation reduce_cmd={cmd!r} must be one of {', '.join(REDUCE_CMDS)}", ins.loc)
    reduces = ins.attrs.get("reduce_op") is not None
    if cmd in (None, "reset_reduce", "reduce") and reduces != (len(ins.outs) >= 2):
        v.err(VerifyError, "activation writes a second (reduction) output exactly when reduce_op is set", ins.loc)
    elif cmd in ("reset", "idle") and len(ins.outs) < 2:
        v.err(VerifyError, f"activation reduce_cmd={cmd} writes the registers: it needs a second output", ins.loc)
    if (cmd in ("reduce", "idle")) != (len(ins.ins) == 4):
        v.err(VerifyError, "activation reads the registers' old value (a fourth input) exactly when reduce_cmd is "
                           "reduce or idle", ins.loc)
    _check_reduction_outs(v, ins, "reduction")
    for x, what in zip(ins.ins, ("data", "bias", "scale", "registers")):
        v.bcast(ins, x, ins.outs[1] if what == "registers" and len(ins.outs) > 1 else out, what)


def _check_tensor_scalar(v: _Verifier, ins: Instr, loops: tuple[Loop, ...]) -> None:
    v.alu(ins, "op0", (AluKind.BINARY,))
    op1 = v.alu(ins, "op1", (AluKind.BINARY,), optional=True)
    want = 3 if ins.attrs.get("op1") is not None else 2
    if len(ins.ins) != want:
        v.err(VerifyError, f"tensor_scalar with op1={op1 and op1.value} takes {want} inputs, got {len(ins.ins)}",
              ins.loc)
    rev = ins.attrs.get("reverse", (False, False))
    if not (isinstance(rev, tuple) and len(rev) == 2 and all(isinstance(b, bool) for b in rev)):
        v.err(VerifyError, f"tensor_scalar: reverse must be a tuple of 2 bools, got {rev!r}", ins.loc)
    v.alu(ins, "reduce_op", (AluKind.BINARY,), optional=True, reduce=True)
    if (ins.attrs.get("reduce_op") is not None) != (len(ins.outs) == 2):
        v.err(VerifyError, "tensor_scalar writes a second (reduction) output exactly when reduce_op is set",
              ins.loc)
    _check_reduction_outs(v, ins, "reduction")
    for x, what in zip(ins.ins, ("data", "operand0", "operand1")):
        v.bcast(ins, x, ins.outs[0], what)


def _tile_ins(ins: Instr) -> tuple[Region, ...]:
    """The inputs of an instruction whose inputs are all tiles (``_IN_KINDS`` "R", checked by ``arity``)."""
    return cast(tuple[Region, ...], ins.ins)


def _check_reduce(v: _Verifier, ins: Instr, loops: tuple[Loop, ...]) -> None:
    out, x, loc = ins.outs[0], _tile_ins(ins)[0], ins.loc
    op = v.alu(ins, "op", (AluKind.BINARY, AluKind.REDUCE), reduce=True)
    axes = ins.attrs.get("axes")
    if isinstance(axes, int):
        axes = (axes,)
    nd = len(x.shape)
    if not isinstance(axes, tuple) or not axes or not all(isinstance(a, int) for a in axes):
        v.err(VerifyError, f"tensor_reduce: axes must be a non-empty tuple of ints, got {axes!r}", loc)
        return
    norm = tuple(a + nd if a < 0 else a for a in axes)
    if 0 in norm:
        v.err(ShapeError, "reductions run along free axes only; axis 0 is the partition axis", loc)
        return
    if any(not 0 < a < nd for a in norm) or len(set(norm)) != len(norm):
        v.err(ShapeError, f"tensor_reduce: axes {axes} are not distinct free axes of a {nd}-D tile", loc)
        return
    keep = bool(ins.attrs.get("keepdims", False))
    want = tuple(1 if i in norm else n for i, n in enumerate(x.shape)) if keep else tuple(
        n for i, n in enumerate(x.shape) if i not in norm)
    if tuple(out.shape) != want:
        v.err(ShapeError, f"tensor_reduce over axes {axes} (keepdims={keep}) of {_shape(x.shape)} gives "
                          f"{_shape(want)}, but the output {_region(out)} is {_shape(out.shape)}", loc)
    if op in (Alu.argmax, Alu.argmin):
        if len(norm) != 1:
            v.err(ShapeError, f"{op.value} reduces exactly one axis, got {axes}", loc)
        if out.dtype.is_float:
            v.err(DTypeError, f"{op.value} writes integer indices; the output is {_dt(out.dtype)}", loc)


def _check_copy(v: _Verifier, ins: Instr, loops: tuple[Loop, ...]) -> None:
    out, x = ins.outs[0], _tile_ins(ins)[0]
    if ins.attrs.get("reshape"):
        ps, po = (x.shape[0] if x.shape else 1), (out.shape[0] if out.shape else 1)
        if ps != po or math.prod(x.shape[1:]) != math.prod(out.shape[1:]):
            v.err(ShapeError, f"tensor_copy reshape keeps the partition count and the free element count: "
                              f"{_shape(x.shape)} -> {_shape(out.shape)}", ins.loc)
    else:
        v.bcast(ins, x, out, "source")


def _check_elementwise(v: _Verifier, ins: Instr, loops: tuple[Loop, ...]) -> None:
    if ins.op is Op.TENSOR_TENSOR:
        v.alu(ins, "op", (AluKind.BINARY,))
    for x, what in zip(ins.ins, ("a", "b") if ins.op is Op.TENSOR_TENSOR else ("condition", "on_true", "on_false")):
        v.bcast(ins, x, ins.outs[0], what)


def _check_generated(v: _Verifier, ins: Instr, loops: tuple[Loop, ...]) -> None:
    """iota / affine_select / memset: the output is generated from an attribute."""
    key = {Op.IOTA: "expr", Op.AFFINE_SELECT: "pred", Op.MEMSET: "value"}[ins.op]
    e, out = ins.attrs.get(key), ins.outs[0]
    if e is None or (ins.op is Op.MEMSET and not isinstance(e, (int, float, bool))):
        v.err(VerifyError, f"{ins.op.value} needs the attribute {key} (got {e!r})", ins.loc)
        return
    allowed = v.scope(loops) | {axis_sym(k) for k in range(len(out.shape))}
    v.check_syms(e, allowed, lambda: f"the {ins.op.value} {key} {e}", ins.loc)
    for x, what in zip(ins.ins, ("on_true", "on_false")):
        v.bcast(ins, x, out, what)


def _check_scan(v: _Verifier, ins: Instr, loops: tuple[Loop, ...]) -> None:
    out = ins.outs[0]
    v.alu(ins, "op0", (AluKind.BINARY,))
    v.alu(ins, "op1", (AluKind.BINARY,))
    a, b, init = ins.ins
    for x, what in ((a, "a"), (b, "b")):
        v.bcast(ins, x, out, what)
    p = out.shape[0] if out.shape else 1
    if isinstance(init, Region) and not _bcast_ok(init.shape, (p, 1)):
        v.err(ShapeError, f"tensor_tensor_scan: initial {_region(init)} must be [{p}, 1], got {_shape(init.shape)}",
              ins.loc)


def _check_matmul(v: _Verifier, ins: Instr, loops: tuple[Loop, ...]) -> None:
    out, (st, mv), loc, t = ins.outs[0], _tile_ins(ins), ins.loc, v.t
    if out.space is not Space.PSUM:
        v.err(VerifyError, f"matmul writes PSUM only: the output {_region(out)} is in {out.space.value.upper()}", loc)
    for x, what in ((st, "stationary"), (mv, "moving")):
        if x.space is not Space.SBUF:
            v.err(VerifyError, f"matmul reads its operands from SBUF: the {what} {_region(x)} is in "
                               f"{x.space.value.upper()} (copy it to SBUF with tl.copy first)", loc)
        if x.dtype.is_int:
            v.err(DTypeError, f"matmul inputs must be floating point: the {what} {_region(x)} is {_dt(x.dtype)}", loc)
        elif x.dtype in _FP8 and t.tensor.peak_fp8_flops is None:
            v.err(DTypeError, f"the {t.name} Tensor engine has no fp8 matmul: the {what} is {_dt(x.dtype)}", loc)
    if out.dtype is not DType.float32:
        v.err(DTypeError, f"matmul accumulates in fp32: the PSUM output {_region(out)} must be float32, not "
                          f"{_dt(out.dtype)}", loc)
    if not (len(st.shape) == len(mv.shape) == len(out.shape) == 2):
        v.err(ShapeError, f"nc_matmul operands are 2-D (stationary [K, M], moving [K, N], output [M, N]); got "
                          f"{_shape(st.shape)}, {_shape(mv.shape)} -> {_shape(out.shape)}", loc)
        return
    (k, m), (k2, n) = st.shape, mv.shape
    if k != k2:
        v.err(ShapeError, f"matmul contraction sizes differ: stationary {_shape(st.shape)} has K={k}, moving "
                          f"{_shape(mv.shape)} has K={k2}", loc)
    for val, lim, what in ((k, t.matmul_k_max, "contraction size K"), (m, t.matmul_m_max, "stationary free size M"),
                           (n, t.matmul_n_max, "moving free size N")):
        if val > lim:
            extra = " (one 2 KiB PSUM bank of fp32 per partition)" if what.endswith("N") else ""
            v.err(ShapeError, f"matmul {what}={val} exceeds {lim}{extra}", loc)
    if tuple(out.shape) != (m, n):
        v.err(ShapeError, f"matmul of stationary {_shape(st.shape)} and moving {_shape(mv.shape)} gives [{m}, {n}], "
                          f"but the output {_region(out)} is {_shape(out.shape)}", loc)


def _check_transpose(v: _Verifier, ins: Instr, loops: tuple[Loop, ...]) -> None:
    out, x, loc = ins.outs[0], _tile_ins(ins)[0], ins.loc
    if len(x.shape) != 2 or len(out.shape) != 2:
        v.err(ShapeError, f"nc_transpose takes a 2-D tile [P, F] to [F, P]; got {_shape(x.shape)} -> "
                          f"{_shape(out.shape)}", loc)
        return
    p, f = x.shape
    engine = ins.engine or Engine.TENSOR
    lim = 32 if engine is Engine.VECTOR else v.t.pmax
    if p > lim or f > lim:
        on = " on the Vector engine" if engine is Engine.VECTOR else ""
        v.err(ShapeError, f"transpose input {_shape(x.shape)} exceeds {lim}x{lim}{on}", loc)
    if tuple(out.shape) != (f, p):
        v.err(ShapeError, f"transpose of {_shape(x.shape)} gives [{f}, {p}], but the output {_region(out)} is "
                          f"{_shape(out.shape)}", loc)
    if engine is Engine.TENSOR:
        if out.space is not Space.PSUM:
            v.err(VerifyError, f"the Tensor engine writes PSUM only: transpose output {_region(out)} is in "
                               f"{out.space.value.upper()}", loc)
        if x.space is not Space.SBUF:
            v.err(VerifyError, f"the Tensor engine reads SBUF only: transpose input {_region(x)} is in "
                               f"{x.space.value.upper()}", loc)


def _check_bn(v: _Verifier, ins: Instr, loops: tuple[Loop, ...]) -> None:
    out, x, loc, op = ins.outs[0], _tile_ins(ins)[0], ins.loc, ins.op
    p = x.shape[0] if x.shape else 1
    width = 3 if op is Op.BN_STATS else 2
    if op is Op.BN_AGGR and (len(x.shape) != 2 or x.shape[1] % 3):
        v.err(ShapeError, f"bn_aggr takes bn_stats groups [P, 3k], got {_shape(x.shape)}", loc)
    if tuple(out.shape) != (p, width):
        v.err(ShapeError, f"{op.value} of {_shape(x.shape)} writes [{p}, {width}], but the output {_region(out)} is "
                          f"{_shape(out.shape)}", loc)
    if out.dtype.is_int:
        v.err(DTypeError, f"{op.value} writes floats; the output {_region(out)} is {_dt(out.dtype)}", loc)


_CHECKS: dict[Op, Callable[[_Verifier, Instr, tuple[Loop, ...]], None]] = {
    Op.DMA_COPY: _check_dma, Op.ACTIVATION: _check_activation, Op.TENSOR_TENSOR: _check_elementwise,
    Op.TENSOR_SCALAR: _check_tensor_scalar, Op.TENSOR_REDUCE: _check_reduce, Op.TENSOR_COPY: _check_copy,
    Op.SELECT: _check_elementwise, Op.IOTA: _check_generated, Op.MEMSET: _check_generated,
    Op.AFFINE_SELECT: _check_generated, Op.SCAN: _check_scan, Op.MATMUL: _check_matmul,
    Op.TRANSPOSE: _check_transpose, Op.BN_STATS: _check_bn, Op.BN_AGGR: _check_bn, Op.PRINT: lambda v, ins, loops: None,
}


# --- entry points -------------------------------------------------------------------------------------


def _run(k: Kernel, target: str | Target | None) -> _Verifier:
    t = target if isinstance(target, Target) else get_target(target or k.target)
    v = _Verifier(k, t)
    v.run()
    return v


def problems(k: Kernel, target: str | Target | None = None) -> list[TrnError]:
    """Every violation of the kernel as an (unraised) ``TrnError``, in program order (capacity last)."""
    return [cls(msg, loc=loc) for cls, msg, loc in _run(k, target).issues]


def verify(k: Kernel, target: str | Target | None = None) -> list[RuntimeCheck]:
    """Check ``k`` against the IR contract and the target's device rules.

    Args:
        k: the kernel.
        target: a target name (``"trn2"``) or ``Target``; default ``k.target``.

    Returns:
        The DMA accesses that need run-time bounds checks, in program order, as
        ``RuntimeCheck(instr, access)`` pairs.

    Raises:
        TrnError: the first violation (``ShapeError``, ``DTypeError``,
            ``BoundsError``, ``SbufOverflowError`` or ``VerifyError``) at its
            instruction's source line; the other violations are listed as notes.

    Warns ``trnlang.ir.carried.CarriedDependenceWarning`` for a loop-carried dependence in an
    ``affine_range`` (see ``trnlang.ir.carried``).
    """
    v = _run(k, target)
    if v.issues:
        (cls, msg, loc), rest = v.issues[0], v.issues[1:]
        notes = [f"also: {m.splitlines()[0]} (at {where})" for _, m, where in rest[:_MAX_NOTES]]
        if len(rest) > _MAX_NOTES:
            notes.append(f"... and {len(rest) - _MAX_NOTES} more problems")
        raise cls(msg, loc=loc, notes=notes)
    from trnlang.ir.carried import warn_carried_dependences

    warn_carried_dependences(k)  # affine_range iterations that depend on each other: a warning at the user's line
    return v.runtime
