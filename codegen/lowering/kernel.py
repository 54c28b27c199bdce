"""Lower a traced ``Kernel`` to an ``llvmlite.ir.Module`` with the interpreter's semantics.

Entry point ABI (one exported function, C calling convention)::

    int32_t kernel_entry(void **tensors,     // data pointer of each kernel.tensors[k]
                         int64_t *meta,      // per tensor k: shape[ndim], strides[ndim] (in elements)
                         int64_t lo, int64_t hi,   // run linear program instances [lo, hi) ...
                         int64_t g1, int64_t g2,   // ... of a grid (g0, g1, g2): pid0 = lin / (g1*g2),
                                                   //     pid1 = lin / g2 % g1, pid2 = lin % g2 (row major)
                         uint8_t *arena,     // scratch of LoweredKernel.arena_size bytes, 64-byte aligned
                         int64_t *err,       // error record, ERR_WORDS int64 (see below)
                         void (*cb)(int64_t instr_id, void *tile, int64_t *values));  // device_print, or NULL

It returns 0, or non-zero after filling ``err`` and stopping at the first
failing instance (``err`` layout: ``ERR_*`` constants: kind, instruction id,
detail words, tile position, tensor index, pids, enclosing loop variables).
``meta`` holds ``2 * ndim`` words per tensor, in ``kernel.tensors`` order; the
strides of tensors compiled as contiguous are not read. ``cb`` receives the
printed tile as a contiguous row-major copy in its storage dtype and
``values = [pid0, pid1, pid2, loop variables of the enclosing loops...]``.

On-chip buffers live in the arena (``lower_plan`` lays them out; buffers whose
live ranges do not overlap share memory). Fresh buffers are poisoned (NaN / int
minimum / True, as the interpreter) only in debug mode; in normal mode a read of
never-written memory sees whatever the arena holds.

Code shape: IR loops become LLVM loops; each instruction becomes a loop nest
over its output tile (last dimension innermost, unit stride in the arena)
evaluating a ``lower_vals.Val`` tree per element. Elementwise producers whose
tile has a single consumer are inlined into it (``lower_plan`` fusion), so a
chain like load -> sub -> exp -> store is one loop; a plain load with a few consumers is
re-evaluated in each. Large HBM outputs are written with streaming stores (``lower_stream``).
An ``nc_matmul``'s gemm reads plain HBM loads and a transposed stationary's source in place
(``passes.plan_matmul_operands`` / ``lower_mmfuse``) instead of the staged tiles.
Scalar element code is
written so that LLVM's O3 loop vectoriser turns the inner loops into SIMD
(transcendentals come from ``codegen.mathlib.vecmath`` as straight-line code); every
arena access carries alias-scope metadata (one scope per buffer, noalias with
the buffers it does not share memory with) so loads and stores of different
tiles never block vectorisation. HBM accesses the verifier cannot prove inside
their tensor get a checking pass over the tile before the instruction runs.

``llvm_ir_text(kernel)`` returns the module's LLVM IR (for ``KernelFn.llvm_ir``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import sympy
from llvmlite import ir

from codegen.lowering import compute as lc
from codegen.lowering import ops as lo
from codegen.lowering import stream as lower_stream
from codegen.lowering.alu import binary as alu_binary
from codegen.lowering.ctx import I1, I8P, I32, I64, I64P, Ctx, ci32, ci64, const_int_value
from codegen.lowering.expr import emit_int
from codegen.lowering.plan import Plan, all_regions, regions_written, same_region
from codegen.lowering.rowblock import row_runs
from codegen.lowering.split import split_loop
from codegen.lowering.types import from_compute, poison_storage, storage_ty, to_compute
from codegen.lowering.vals import AccessEval, Imm, Iota, RegionRead, RegionView, RoundTrip, TensorArgs, Val
from codegen.lowering.vals import bcast as vbcast
from trnlang.frontend.errors import NeedStatic, TrnError
from trnlang.ir.bounds import expr_range
from trnlang.ir.nodes import Access, Buf, Instr, Kernel, Loop, Region, Stmt, pid_sym
from trnlang.ir.ops import Alu, Op
from trnlang.ir.types import DType, Space

ENTRY = "kernel_entry"
LOWERING_VERSION = "5"   # bump when generated code changes meaning (part of the cache key)

#: ``foreach`` loops outside an innermost loop of at least this many elements are not vectorised by LLVM (see
#: ``Ctx.loop``): the unrolled inner row is contiguous, a vectorised outer loop would gather across rows.
_VEC_INNER = 8

# error record layout (int64 words)
ERR_WORDS = 64
ERR_KIND, ERR_INSTR, ERR_A, ERR_B, ERR_C = 0, 1, 2, 3, 4
ERR_POS, ERR_INDEX, ERR_PIDS, ERR_LOOPS = 8, 16, 24, 27
MAX_DIMS, MAX_LOOPS = 8, ERR_WORDS - 27
KIND_ACCESS, KIND_REGION, KIND_DEFERRED, KIND_STEP = 1, 2, 3, 4


@dataclass
class LoweredKernel:
    """The lowered module and what the launcher needs to call it."""

    module: ir.Module
    arena_size: int
    meta_words: int
    has_print: bool
    plan: Plan
    deferred: dict[int, TrnError]
    split: bool = False  # the entry runs part [lo, hi) of g1 parts of its outermost affine loop (``split.py``)


def meta_layout(kernel: Kernel) -> tuple[list[int], int]:
    """Offsets of each tensor's words in ``meta`` and the total word count."""
    offs, n = [], 0
    for t in kernel.tensors:
        offs.append(n)
        n += 2 * len(t.shape)
    return offs, n


class KernelLowering:
    """Builds the module for one specialization (tensor contiguity, aliasing, grid, debug)."""

    def __init__(self, kernel: Kernel, grid: Sequence[int] | None = None, contiguous: Sequence[bool] | None = None,
                 may_alias: bool = False, debug: bool = False) -> None:
        self.kernel = kernel
        self.grid = tuple(int(g) for g in (kernel.grid if grid is None else grid)) or (1,)
        self.debug = debug
        tensors = kernel.tensors
        self.contiguous = list(contiguous) if contiguous is not None else [True] * len(tensors)
        self.plan = Plan(kernel, self.grid, may_alias, debug, self.contiguous)
        self.split = split_loop(self.plan)  # the loop the runtime may split across threads (``split.py``)
        self.parts: tuple[ir.Value, ir.Value, ir.Value] | None = None  # its part_lo, part_hi, parts arguments
        self.meta_offsets, self.meta_words = meta_layout(kernel)
        self.deferred: dict[int, TrnError] = {}
        self.temp_top = 0
        self.temp_max = 0
        self.temp_bufs: dict[int, int] = {}
        self.has_print = any(i.instr.op is Op.PRINT for i in self.plan.infos)
        self._targs: dict[int, TensorArgs] = {}
        self.cur: Instr | None = None
        self._scopes: dict[str, Any] = {}
        self._aa_cache: dict[str, tuple[Any, Any]] = {}
        self._domain: Any = None
        self.row_private: set[int] = set()
        self.row: tuple[int, ir.Value, int] | None = None  # in a row block: rows, current row, output loops
        self.streamed = False  # a streaming (non-temporal) store was emitted: the entry fences before returning

    # ------------------------------------------------------------------ module
    def build(self) -> LoweredKernel:
        mod = ir.Module(name=f"trn_{self.kernel.name}")
        args = [I8P.as_pointer(), I64P, I64, I64, I64, I8P, I64P, I8P, I64, I64, I64]
        fn = ir.Function(mod, ir.FunctionType(I32, args), "trn.instance")
        fn.linkage = "internal"
        for k, name in enumerate(["tensors", "meta", "pid0", "pid1", "pid2", "arena", "err", "cb", "part_lo",
                                  "part_hi", "parts"]):
            fn.args[k].name = name
        self.parts = (fn.args[8], fn.args[9], fn.args[10])
        fn.args[5].add_attribute("noalias")
        fn.args[6].add_attribute("noalias")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.cx = cx = Ctx(mod, fn, b)
        self.tensors_arg, self.meta_arg, self.arena, self.err, self.cb = fn.args[0], fn.args[1], fn.args[5], \
            fn.args[6], fn.args[7]
        for a in range(3):
            cx.env[pid_sym(a)] = fn.args[2 + a]
        self._tensor_args()
        if self.debug:
            for bid, buf in self.plan.bufs.items():
                refs = self.plan.buf_refs.get(bid, [])
                if bid in self.plan.offsets and not any(role == "alloc" for _, role in refs):
                    self.poison(buf)
        self.lower_stmts(self.kernel.body)
        if not b.block.is_terminated:
            b.ret(ci32(0))
        self._entry(mod, fn)
        arena = self.plan.bufs_size + self.temp_max
        return LoweredKernel(mod, max(64, arena), self.meta_words, self.has_print, self.plan, self.deferred,
                             self.split is not None)

    def _entry(self, mod: ir.Module, inst: ir.Function) -> None:
        args = [I8P.as_pointer(), I64P, I64, I64, I64, I64, I8P, I64P, I8P]
        fn = ir.Function(mod, ir.FunctionType(I32, args), ENTRY)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        tensors, meta, lo_, hi, g1, g2, arena, err, cb = fn.args
        cx = Ctx(mod, fn, b)
        if self.split is not None:  # grid (1,): [lo, hi) are parts of g1 (ordinary launches: 0, 1, 1: all of it)
            r = b.call(inst, [tensors, meta, ci64(0), ci64(0), ci64(0), arena, err, cb, lo_, hi, g1])
            if self.streamed:
                lower_stream.fence(b, mod)
            b.ret(r)
            return
        g12 = b.mul(g1, g2)
        with cx.loop(lo_, hi, 1, "lin") as lin:
            p0 = b.sdiv(lin, g12)
            rem = b.srem(lin, g12)
            p1 = b.sdiv(rem, g2)
            p2 = b.srem(rem, g2)
            r = b.call(inst, [tensors, meta, p0, p1, p2, arena, err, cb, ci64(0), ci64(1), ci64(1)])
            with b.if_then(b.icmp_signed("!=", r, ci32(0)), likely=False):
                if self.streamed:
                    lower_stream.fence(b, mod)
                b.ret(r)
        if self.streamed:
            lower_stream.fence(b, mod)
        b.ret(ci32(0))

    def _tensor_args(self) -> None:
        cx, b = self.cx, self.cx.b
        for k, t in enumerate(self.kernel.tensors):
            raw = b.load(cx.gep(self.tensors_arg, ci64(k)))
            ptr = b.bitcast(raw, storage_ty(t.dtype).as_pointer())
            off = self.meta_offsets[k]
            nd = len(t.shape)
            shape: list[ir.Value] = []
            for d, s in enumerate(t.shape):
                if isinstance(s, int | sympy.Integer):
                    shape.append(ci64(int(s)))
                else:
                    v = b.load(cx.gep(self.meta_arg, ci64(off + d)))
                    if isinstance(s, sympy.Symbol):
                        cx.env.setdefault(s, v)
                    shape.append(v)
            strides: list[ir.Value] = []
            lay = self.contiguous[k]
            if lay is True:
                acc: ir.Value = ci64(1)
                for d in range(nd - 1, -1, -1):
                    strides.append(acc)
                    c1, c2 = const_int_value(acc), const_int_value(shape[d])
                    acc = ci64(c1 * c2) if c1 is not None and c2 is not None else b.mul(acc, shape[d])
                strides.reverse()
            else:  # per dim: 0 / 1 known at compile time (jit.layout_of), else read from meta
                known: tuple[int | None, ...] = lay if isinstance(lay, tuple) and len(lay) == nd else (None,) * nd
                strides = [ci64(kd) if (kd := known[d]) is not None
                           else b.load(cx.gep(self.meta_arg, ci64(off + nd + d))) for d in range(nd)]
            self._targs[id(t)] = TensorArgs(ptr, shape, strides, t.dtype, self._aa_hbm(k))

    def targs(self, t: Any) -> TensorArgs:
        return self._targs[id(t)]

    # ------------------------------------------------------------------ statements
    def lower_stmts(self, stmts: Sequence[Stmt]) -> None:
        for rows, run, private in row_runs(self.plan, stmts):
            if rows:
                self.lower_rows(rows, run, private)
                continue
            s = run[0]
            if isinstance(s, Loop):
                self.lower_loop(s)
            elif id(s) not in self.plan.fused and id(s) not in self.plan.mm_defer:
                self.lower_instr(s)

    def lower_rows(self, rows: int, run: Sequence[Stmt], private: set[int]) -> None:
        """A run of partition-local instructions, one partition row at a time (``rowblock.py``); the buffers in
        ``private`` keep one row (their row 0) for all."""
        self.row_private = private
        with self.cx.loop_n(rows, "row") as p:
            for s in run:
                if isinstance(s, Instr) and id(s) not in self.plan.fused and id(s) not in self.plan.mm_defer:
                    self.row = (rows, p, 0)
                    self.lower_instr(s)
                    used = self.row[2] if self.row is not None else 1
                    assert used == 1 or s.op is Op.ALLOC, f"{s.op.value}: {used} row loops"
        self.row = None
        self.row_private = set()

    def lower_loop(self, lp: Loop) -> None:
        from codegen.lowering.gemm_collapse import try_collapse

        # matmul tile loops: one gemm (gemm_collapse.py); the split loop never is one (split.py)
        if lp is self.split or not try_collapse(self, lp, self.lower_loop_plain):
            self.lower_loop_plain(lp)

    def _part_range(self, start: ir.Value, stop: ir.Value, step: ir.Value) -> tuple[ir.Value, ir.Value]:
        """The iterations of part ``[part_lo, part_hi)`` of ``parts`` of a loop of positive constant step."""
        b = self.cx.b
        assert self.parts is not None
        plo, phi, parts = self.parts
        parts = b.select(b.icmp_signed("<", parts, ci64(1)), ci64(1), parts)
        span = b.sub(stop, start)
        trips = b.select(b.icmp_signed(">", span, ci64(0)), b.sdiv(b.add(span, b.sub(step, ci64(1))), step), ci64(0))
        k_lo = b.sdiv(b.mul(trips, plo), parts)
        k_hi = b.sdiv(b.mul(trips, phi), parts)
        new_start = b.add(start, b.mul(k_lo, step))
        end = b.add(start, b.mul(k_hi, step))
        return new_start, b.select(b.icmp_signed("<", end, stop), end, stop)

    def lower_loop_plain(self, lp: Loop) -> None:
        """``lp`` as written: an LLVM loop around its body."""
        cx, b = self.cx, self.cx.b
        start, stop, step = (emit_int(cx, e) for e in (lp.start, lp.stop, lp.step))
        if lp is self.split and self.parts is not None:
            start, stop = self._part_range(start, stop, step)
        saved = cx.env.get(lp.var)
        c = const_int_value(step)
        if c is not None and c > 0:
            with cx.loop(start, stop, step, str(lp.var)) as iv:
                cx.env[lp.var] = iv
                self.lower_stmts(lp.body)
        else:
            with b.if_then(b.icmp_signed("==", step, ci64(0)), likely=False):
                first = next((i for i in self.plan.infos if any(x is lp for x in i.loops)), None)
                self._fail(KIND_STEP, first.id if first else -1, {ERR_A: ci64(self.loop_index(lp))}, loops=())
            pre = b.block
            head = b.append_basic_block(f"{lp.var}.head")
            body = b.append_basic_block(f"{lp.var}.body")
            done = b.append_basic_block(f"{lp.var}.exit")
            b.branch(head)
            b.position_at_end(head)
            iv = b.phi(I64)
            iv.add_incoming(start, pre)
            pos = b.icmp_signed(">", step, ci64(0))
            cond = b.select(pos, b.icmp_signed("<", iv, stop), b.icmp_signed(">", iv, stop))
            b.cbranch(cond, body, done)
            b.position_at_end(body)
            cx.env[lp.var] = iv
            self.lower_stmts(lp.body)
            if not b.block.is_terminated:
                iv.add_incoming(b.add(iv, step), b.block)
                b.branch(head)
            b.position_at_end(done)
        if saved is None:
            cx.env.pop(lp.var, None)
        else:
            cx.env[lp.var] = saved

    def loop_index(self, lp: Loop) -> int:
        return [x for x in all_loops(self.kernel.body)].index(lp)

    _HANDLERS: dict[Op, Callable[[Any, Instr], None]] = {
        Op.ALLOC: lo.alloc, Op.DMA_COPY: lo.dma_copy, Op.ACTIVATION: lo.activation,
        Op.TENSOR_TENSOR: lo.tensor_tensor, Op.TENSOR_SCALAR: lo.tensor_scalar, Op.TENSOR_REDUCE: lo.tensor_reduce,
        Op.TENSOR_COPY: lo.tensor_copy, Op.SELECT: lo.select, Op.IOTA: lo.iota, Op.MEMSET: lo.memset,
        Op.AFFINE_SELECT: lo.affine_select, Op.SCAN: lc.scan, Op.MATMUL: lc.matmul, Op.TRANSPOSE: lc.transpose,
        Op.BN_STATS: lc.bn_stats, Op.BN_AGGR: lc.bn_aggr, Op.PRINT: lc.device_print,
    }

    def lower_instr(self, ins: Instr) -> None:
        self.cur = ins
        self.temp_top = 0
        info = self.plan.info(ins)
        before = set(id(blk) for blk in self.cx.fn.blocks)
        try:
            self.check_regions(ins)
            self._HANDLERS[ins.op](self, ins)
        except TrnError as e:
            if isinstance(e, NeedStatic):  # a runtime size codegen needs as a constant: not a user error
                raise
            # the interpreter raises when the instruction executes: so does the compiled code
            if e.loc is None or e.loc != ins.loc:
                e = type(e)(e.msg, loc=ins.loc, notes=e.notes)
            self.deferred[info.id] = e
            b = self.cx.b
            if not b.block.is_terminated:
                self._fail(KIND_DEFERRED, info.id, {})
            for blk in self.cx.fn.blocks:  # blocks of loops left half built by the failed handler
                if id(blk) not in before and not blk.is_terminated:
                    b.position_at_end(blk)
                    b.unreachable()
            b.position_at_end(b.append_basic_block("dead"))

    # ------------------------------------------------------------------ errors
    def _fail(self, kind: int, instr_id: int, fields: dict[int, ir.Value], loops: Sequence[Loop] | None = None) -> None:
        """Fill the error record (kind, instruction, fields, pids, loop variables) and return 1."""
        cx, b = self.cx, self.cx.b
        put = self._put
        put(ERR_KIND, ci64(kind))
        put(ERR_INSTR, ci64(instr_id))
        for k, v in fields.items():
            put(k, v)
        for a in range(3):
            put(ERR_PIDS + a, cx.env[pid_sym(a)])
        if loops is None:
            loops = self.plan.infos[instr_id].loops if 0 <= instr_id < len(self.plan.infos) else ()
        for k, lp in enumerate(list(loops)[:MAX_LOOPS]):
            put(ERR_LOOPS + k, cx.env.get(lp.var, ci64(0)))
        b.ret(ci32(1))

    def _put(self, k: int, v: ir.Value) -> None:
        self.cx.b.store(v, self.cx.gep(self.err, ci64(k)))

    def check_regions(self, ins: Instr) -> None:
        """Run-time checks that regions with unproven starts stay inside their buffers."""
        b = self.cx.b
        info = self.plan.info(ins)
        for slot, r in enumerate(all_regions(ins)):
            for d in self.plan.region_checks.get(id(r), []):
                s = emit_int(self.cx, r.starts[d])
                n = r.sizes[d] if r.keep[d] else 1
                bad = b.or_(b.icmp_signed("<", s, ci64(0)), b.icmp_signed(">", b.add(s, ci64(n)),
                                                                            ci64(int(r.buf.shape[d]))))
                with b.if_then(bad, likely=False):
                    self._fail(KIND_REGION, info.id, {ERR_A: ci64(d), ERR_B: s, ERR_C: ci64(slot)})

    def check_access(self, ins: Instr, acc: Access) -> None:
        """If the access needs it, a pass over the tile before the instruction runs: count the accessed
        elements outside the tensor, record the first (row-major) and return an error."""
        dims = self.plan.access_checks.get(id(acc))
        if dims is None:
            return
        cx, b = self.cx, self.cx.b
        info = self.plan.info(ins)
        slot = [*ins.outs, *ins.ins].index(acc)
        ev = AccessEval(acc, [self.val(g, ins) for g in acc.gathers])
        ev.prepare(cx)
        t = self.targs(acc.tensor)
        count = self.alloca_i64(1)
        b.store(ci64(0), count)
        shape = tuple(int(s) for s in acc.shape)
        with self.foreach(shape) as idx:
            env = ev.local(cx, idx)
            m = ev.mask(cx, env)
            ctx = b.if_then(m) if m is not None else contextlib.nullcontext()
            with ctx:
                index = ev.index(cx, env)
                bad = ir.Constant(I1, 0)
                for d in dims:
                    bad = b.or_(bad, b.or_(b.icmp_signed("<", index[d], ci64(0)),
                                           b.icmp_signed(">=", index[d], t.shape[d])))
                with b.if_then(bad, likely=False):
                    c = b.load(count)
                    with b.if_then(b.icmp_signed("==", c, ci64(0))):
                        for k, v in enumerate(list(idx)[:MAX_DIMS]):
                            self._put(ERR_POS + k, v)
                        for k, v in enumerate(index[:MAX_DIMS]):
                            self._put(ERR_INDEX + k, v)
                    b.store(b.add(c, ci64(1)), count)
        c = b.load(count)
        with b.if_then(b.icmp_signed(">", c, ci64(0)), likely=False):
            self._fail(KIND_ACCESS, info.id, {ERR_A: c, ERR_B: ci64(slot)})

    # ------------------------------------------------------------------ memory
    def base_of(self, cx: Ctx, buf: Buf) -> ir.Value:
        off = self.temp_bufs.get(id(buf))
        if off is None:
            off = self.plan.offsets[id(buf)]
        p = cx.gep(self.arena, ci64(off)) if off else self.arena
        return cx.b.bitcast(p, storage_ty(buf.dtype).as_pointer())

    def view(self, r: Region) -> RegionView:
        v = RegionView(r, self.base_of)
        v.aa = self._aa_buf(r.buf)
        if self.row is not None and id(r.buf) in self.row_private:
            v.view_strides = [0, *v.view_strides[1:]]  # row-private: one row serves every row of the block
        return v

    # ------------------------------------------------------------------ alias analysis metadata
    # One scope per arena buffer, one for all scratch temps (they overlap across instructions), one per HBM
    # tensor in a variant whose written tensors overlap no other (the runtime's ``may_alias`` is False: LLVM may
    # then keep loads of one tensor ahead of stores to another, e.g. vectorise a row copied between two tensors),
    # else one for all HBM. An access is ``noalias`` with every scope whose memory is disjoint from its own:
    # buffers sharing arena memory (disjoint live ranges) are never declared noalias with each other, so LLVM
    # cannot reorder their accesses.
    def _scope(self, name: str) -> Any:
        sc = self._scopes.get(name)
        if sc is None:
            m = self.cx.module
            if self._domain is None:
                self._domain = m.add_metadata([ir.MetaDataString(m, f"trn.{self.kernel.name}.domain")])
            sc = self._scopes[name] = m.add_metadata([ir.MetaDataString(m, f"trn.{name}"), self._domain])
        return sc

    def _aa_for(self, key: str, mine: str, others: list[str]) -> tuple[Any, Any]:
        hit = self._aa_cache.get(key)
        if hit is None:
            m = self.cx.module
            hit = (m.add_metadata([self._scope(mine)]), m.add_metadata([self._scope(o) for o in others]))
            self._aa_cache[key] = hit
        return hit

    def _aa_buf(self, buf: Buf) -> tuple[Any, Any]:
        bid = id(buf)
        bufs = self.plan.offsets
        if bid in self.temp_bufs or bid not in bufs:
            return self._aa_for("temps", "temps", [f"buf{b}" for b in bufs] + self._hbm_scopes())
        lo, hi = bufs[bid], bufs[bid] + self.plan.sizes[bid]
        l0, l1 = self.plan.live[bid]
        live = self.plan.live
        # only buffers live at the same time matter (and keep the metadata small in big kernels)
        others = [f"buf{b}" for b, o in bufs.items() if b != bid and (o + self.plan.sizes[b] <= lo or o >= hi)
                  and not (live[b][1] < l0 or live[b][0] > l1)]
        return self._aa_for(f"buf{bid}", f"buf{bid}", [*others, "temps", *self._hbm_scopes()])

    def _hbm_scopes(self) -> list[str]:
        if self.plan.may_alias:
            return ["hbm"]
        return [f"hbm{k}" for k in range(len(self.kernel.tensors))]

    def _aa_hbm(self, k: int) -> tuple[Any, Any]:
        """Tensor ``k``'s HBM scope (one shared scope when written tensors may overlap others)."""
        bufs = [f"buf{b}" for b in self.plan.offsets] + ["temps"]
        if self.plan.may_alias:
            return self._aa_for("hbm", "hbm", bufs)
        return self._aa_for(f"hbm{k}", f"hbm{k}", bufs + [h for h in self._hbm_scopes() if h != f"hbm{k}"])

    def temp_view(self, shape: Sequence[int], dtype: DType) -> RegionView:
        """Scratch for the current instruction only (a contiguous tile of ``shape``)."""
        shape = tuple(int(s) for s in shape)
        n = 1
        for s in shape:
            n *= s
        size = -(-max(1, n) * dtype.itemsize // 64) * 64
        buf = Buf("tmp", shape if shape else (1,), dtype, Space.SBUF)
        self.temp_bufs[id(buf)] = self.plan.bufs_size + self.temp_top
        self.temp_top += size
        self.temp_max = max(self.temp_max, self.temp_top)
        self._keep = getattr(self, "_keep", [])
        self._keep.append(buf)
        r = Region.whole(buf) if shape else Region(buf, (sympy.Integer(0),), (1,), (False,))
        v = RegionView(r, self.base_of)
        v.aa = self._aa_buf(buf)
        return v

    def alloca_i64(self, n: int) -> ir.Value:
        return self.cx.alloca_entry(I64, n)

    def poison(self, buf: Buf) -> None:
        v = self.view(Region.whole(buf))
        v.prepare(self.cx)
        c = poison_storage(buf.dtype)
        with self.foreach(v.shape) as idx:
            v.store(self.cx, idx, c)

    # ------------------------------------------------------------------ values
    def val(self, x: Any, ins: Instr) -> Val:
        """The element value of an operand of ``ins`` (a fused producer's tree for an inlined region)."""
        if isinstance(x, Region):
            p = self.plan.producer.get((id(ins), id(x.buf)))
            if p is not None:
                return RoundTrip(vbcast(self.producer_val(p), tuple(p.outs[0].shape)), p.outs[0].dtype)
            return RegionRead(self.view(x))
        if hasattr(x, "value") and not isinstance(x, Access):
            return Imm(x.value)
        if isinstance(x, bool | int | float):
            return Imm(x)
        raise TypeError(f"unsupported operand {x!r}")

    def producer_val(self, p: Instr) -> Val:
        shape = tuple(p.outs[0].shape)
        if p.op is Op.TENSOR_TENSOR:
            return lo.tensor_tensor_val(self, p)
        if p.op is Op.TENSOR_SCALAR:
            return lo.tensor_scalar_val(self, p)
        if p.op is Op.ACTIVATION:
            return lo.activation_val(self, p)
        if p.op is Op.TENSOR_COPY:
            return lo.copy_val(self, p)
        if p.op is Op.SELECT:
            return lo.select_val(self, p)
        if p.op is Op.AFFINE_SELECT:
            return lo.affine_select_val(self, p)
        if p.op is Op.IOTA:
            return Iota(p.attrs["expr"], shape)
        if p.op is Op.MEMSET:
            return vbcast(Imm(p.attrs["value"]), shape)
        if p.op is Op.DMA_COPY:
            return lo.load_val(self, p)
        raise AssertionError(f"{p.op} is not fusable")

    # ------------------------------------------------------------------ loops
    @contextlib.contextmanager
    def foreach(self, shape: Sequence[int], out: bool = False) -> Iterator[list[ir.Value]]:
        """Nested loops over ``shape`` (row major, last dim innermost); yields the index list.

        ``out``: the loop nest over an instruction's output; in a row block (``lower_rows``) the first axis is
        the block's current row instead of a loop."""
        row = self.row
        dims = [int(n) for n in shape]
        # loops outside an inner loop of at least _VEC_INNER elements are not vectorised across (gathers of rows)
        inner = [k for k, n in enumerate(dims) if n > 1]
        vec = [not (inner and k < inner[-1] and dims[inner[-1]] >= _VEC_INNER) for k in range(len(dims))]
        with contextlib.ExitStack() as stack:
            if out and row is not None and shape and dims[0] == row[0]:
                self.row = (row[0], row[1], row[2] + 1)
                idx = [row[1]] + [stack.enter_context(self.cx.loop_n(n, f"a{k + 1}", vec[k + 1]))
                                  for k, n in enumerate(dims[1:])]
            else:
                idx = [stack.enter_context(self.cx.loop_n(n, f"a{k}", vec[k])) for k, n in enumerate(dims)]
            yield idx

    def reduce_loops(self, dims: Sequence[int], init: list[ir.Value],
                     step: Callable[[list[ir.Value], list[ir.Value]], list[ir.Value]]) -> list[ir.Value]:
        """Loops over ``dims`` carrying accumulators (``step(idx, acc) -> acc``); returns the final values."""
        cx, b = self.cx, self.cx.b
        ptrs = [cx.alloca_entry(v.type) for v in init]
        for p, v in zip(ptrs, init):
            b.store(v, p)
        with self.foreach(dims) as idx:
            acc = [b.load(p) for p in ptrs]
            for p, v in zip(ptrs, step(idx, acc)):
                b.store(v, p)
        return [b.load(p) for p in ptrs]

    # ------------------------------------------------------------------ writes
    def write(self, ins: Instr, region: Region, val: Val, guard: Callable[[list[ir.Value]], ir.Value] | None = None,
              hazards: bool = True, elementwise: bool = True) -> None:
        """``region[idx] = cast(val[idx])`` over the region's shape (only where ``guard`` holds)."""
        cx, b = self.cx, self.cx.b
        shape = tuple(region.shape)
        val = vbcast(val, shape, "output")
        if hazards:
            self.resolve_hazards(ins, [val], elementwise=elementwise)
        view = self.view(region)
        val.prepare(cx)
        view.prepare(cx)
        with self.foreach(shape, out=True) as idx:
            if guard is None:
                view.store(cx, idx, from_compute(cx, val.emit(cx, idx), val.ct, region.dtype))
            else:
                with b.if_then(guard(idx)):
                    view.store(cx, idx, from_compute(cx, val.emit(cx, idx), val.ct, region.dtype))

    def store_access(self, ins: Instr, acc: Access, val: Val, accumulate: Alu | None = None) -> None:
        """HBM store: ``tensor[index(a)] = cast(val[a])`` where the mask holds, in row-major tile order.

        ``accumulate``: an accumulating DMA, ``tensor[i] = cast(op(to_compute(tensor[i]), val[a]))`` per element.
        """
        row = lower_stream.row_length(self, acc, accumulate)
        if row is not None:  # a large output: streaming stores
            lower_stream.store_rows(self, ins, acc, val, row)
            return
        cx, b = self.cx, self.cx.b
        ev = AccessEval(acc, [self.val(g, ins) for g in acc.gathers])
        t = self.targs(acc.tensor)
        ev.prepare(cx)
        val.prepare(cx)
        dt = acc.tensor.dtype
        with self.foreach(tuple(int(s) for s in acc.shape), out=True) as idx:
            env = ev.local(cx, idx)
            m = ev.mask(cx, env)
            ctx = b.if_then(m) if m is not None else contextlib.nullcontext()
            with ctx:
                index = ev.index(cx, env)
                if accumulate is None:
                    v = from_compute(cx, val.emit(cx, idx), val.ct, dt)
                else:
                    cur, cct = to_compute(cx, t.load(cx, index), dt)
                    r, rct = alu_binary(cx, accumulate, cur, cct, val.emit(cx, idx), val.ct)
                    v = from_compute(cx, r, rct, dt)
                t.store(cx, index, v)

    def resolve_hazards(self, ins: Instr, vals: Sequence[Val], elementwise: bool = True) -> None:
        """Copy aside every region an instruction reads that it also writes, unless the read is the same
        region with the identity element mapping (elementwise ops read element a before writing it)."""
        outs = regions_written(ins)
        if not outs:
            return
        for root in vals:
            for leaf, ident in _leaves(root, True, tuple(root.shape)):
                r = leaf.view.region
                for o in outs:
                    if r.buf is not o.buf:
                        continue
                    if elementwise and ident and same_region(r, o) and tuple(o.shape) == tuple(root.shape):
                        continue
                    if self._disjoint(ins, r, o):
                        continue
                    self._snapshot(leaf)
                    break

    def _disjoint(self, ins: Instr, a: Region, c: Region) -> bool:
        info = self.plan.info(ins)
        from trnlang.ir.bounds import loop_ranges

        rng = loop_ranges(list(info.loops), self.grid)
        for d in range(len(a.starts)):
            na = a.sizes[d] if a.keep[d] else 1
            nc = c.sizes[d] if c.keep[d] else 1
            got = expr_range(sympy.sympify(a.starts[d]) - sympy.sympify(c.starts[d]), rng)
            if got is not None and (got[0] >= nc or got[1] <= -na):
                return True
        return False

    def _snapshot(self, leaf: RegionRead) -> None:
        cx = self.cx
        src = leaf.view
        tmp = self.temp_view(src.shape, src.dtype)
        src.prepare(cx)
        tmp.prepare(cx)
        with self.foreach(src.shape) as idx:
            tmp.store(cx, idx, src.load(cx, idx))
        leaf.view = tmp
        setattr(tmp, "prepare", lambda cx: None)  # already prepared at this point (an instance override)


def _leaves(v: Val, ident: bool, shape: tuple[int, ...]) -> Iterator[tuple[RegionRead, bool]]:
    from codegen.lowering.vals import Bcast, FlatMap, Reshape

    if isinstance(v, RegionRead):
        yield v, ident and tuple(v.shape) == shape
        return
    child_ident = ident and not isinstance(v, Bcast | FlatMap | Reshape)
    for c in v.children():
        yield from _leaves(c, child_ident, shape)


def all_loops(body: Sequence[Stmt]) -> list[Loop]:
    """Every loop of ``body`` in program order (pre-order); an error record names a loop by its index here."""
    out: list[Loop] = []
    for s in body:
        if isinstance(s, Loop):
            out.append(s)
            out.extend(all_loops(s.body))
    return out


def lower_kernel(kernel: Kernel, grid: Sequence[int] | None = None, contiguous: Sequence[Any] | None = None,
                 may_alias: bool = False, debug: bool = False) -> LoweredKernel:
    """Lower ``kernel`` for one specialization; see the module docstring for the entry ABI."""
    return KernelLowering(kernel, grid, contiguous, may_alias, debug).build()


def llvm_ir_text(kernel: Kernel, grid: Sequence[int] | None = None, contiguous: Sequence[bool] | None = None,
                 debug: bool = False, optimized: bool = False) -> str:
    """The LLVM IR of ``kernel`` (unoptimized, or after the O3 pipeline with ``optimized=True``)."""
    low = lower_kernel(kernel, grid, contiguous, False, debug)
    if not optimized:
        return str(low.module)
    from codegen import llvm

    mod = llvm.optimize(llvm.build(low.module))
    return str(mod)
