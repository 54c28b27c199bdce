"""Row blocks: a run of partition-local instructions lowered one partition row at a time.

Each instruction is normally a loop nest over its whole output tile, so a row kernel (a load, free-axis
reductions, elementwise ops with ``[P, 1]`` columns and ``[1, d]`` rows, a store) walks every ``[P, d]``
tile once per instruction: a 128 x 1024 fp32 tile is 512 KiB, beyond the host's L1 (and L2 when several
are live), so every pass streams it again. When every instruction of a run of consecutive statements maps
partition ``p`` of its inputs to partition ``p`` of its output, the run is lowered as

    for p in range(P):          # one row of every tile: stays in L1 between the instructions
        instruction 1, row p
        instruction 2, row p
        ...

which computes the same values: instruction B reads row p of a buffer A writes only after A wrote it
(same row, earlier in the row's order), and no instruction reads a row another row's iteration writes.

A run qualifies (``row_runs``) when, for a common partition count ``P > 1``:

- every emitted instruction is a single-output ``dma_copy`` (HBM load or store, no gathers, no run-time
  check, no accumulation), ``tensor_tensor``, ``tensor_scalar``, ``activation`` (no ``reduce_cmd``),
  ``tensor_reduce`` over free axes only (written directly), ``tensor_copy`` (no reshape), ``select``,
  ``memset``, ``iota`` or ``affine_select``, without region checks, whose output is the whole first axis
  (``P`` rows, start 0) of a ``P``-row buffer or an HBM access of ``P`` rows, and which reads no
  buffer it writes;
- every buffer an instruction of the run reads (through inlined producers too) that an instruction of
  the run writes is read as that same whole-first-axis view, of the reader's rank; buffers the run only
  reads may be read in any way (``[1, d]`` rows broadcast, columns, ...);
- no two buffers the run touches share arena bytes (disjoint live ranges may share them);
- no HBM tensor is both stored and loaded in the run, none is stored twice, and with aliasing
  arguments the run does not both load and store;
- it is not a debug build (fresh buffers are poisoned whole), and it has at least two instructions.

A buffer the run alone uses (written and read only by its instructions, as whole rows, sharing no arena
bytes) is *row-private*: every row is written and read in its own iteration, so all rows use the buffer's
row 0 (its views ignore the first index) and its values never leave L1.

The handlers need no change: ``KernelLowering.foreach(shape, out=True)`` (the one loop nest over an
instruction's output) yields the current row instead of looping over the first axis.

Example:
    >>> import torch
    >>> from tests.kernels import softmax
    >>> from codegen.lowering.plan import Plan
    >>> k = softmax.trace(torch.randn(256, 64), torch.empty(256, 64))
    >>> [(p, len(run), len(private)) for p, run, private in row_runs(Plan(k, (1,)), k.body[0].body)]
    [(128, 13, 1)]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import sympy

from trnlang.ir.liveness import all_regions
from trnlang.ir.nodes import Access, Instr, Loop, Region, Stmt
from trnlang.ir.ops import Op
from trnlang.passes.lowering import LowerPlan

__all__ = ["ROW_BLOCKS", "row_runs"]

#: Lower qualifying runs row by row (switch off to compare).
ROW_BLOCKS = True

_ELEMENTWISE = {Op.TENSOR_TENSOR, Op.TENSOR_SCALAR, Op.ACTIVATION, Op.TENSOR_REDUCE, Op.TENSOR_COPY, Op.SELECT,
                Op.MEMSET, Op.IOTA, Op.AFFINE_SELECT, Op.DMA_COPY}


def _rows(r: Region, p: int) -> bool:
    """``r`` is the whole first axis of a ``p``-row buffer, viewed with that axis first."""
    return (r.ap is None and bool(r.keep) and r.keep[0] and int(r.sizes[0]) == p and int(r.buf.shape[0]) == p
            and sympy.sympify(r.starts[0]) == 0)


def _out_rows(plan: LowerPlan, ins: Instr) -> int | None:
    """The partition count of ``ins``'s output if the instruction can run row by row on its own, else None."""
    if ins.op not in _ELEMENTWISE or len(ins.outs) != 1 or plan.needs_checks(ins):
        return None
    a = ins.attrs
    if a.get("accumulate") is not None or a.get("reduce_cmd") is not None or a.get("reshape"):
        return None
    out = ins.outs[0]
    if isinstance(out, Access):
        if not (ins.op is Op.DMA_COPY and isinstance(ins.ins[0], Region)) or out.gathers or not out.shape:
            return None
        return int(out.shape[0])
    if not isinstance(out, Region) or not out.shape:
        return None
    if ins.op is Op.DMA_COPY:
        src = ins.ins[0]
        if isinstance(src, Access) and src.gathers:
            return None
    if ins.op is Op.TENSOR_REDUCE:
        data = ins.ins[0]
        dshape = tuple(int(s) for s in data.shape) if isinstance(data, Region) else ()
        nd = len(dshape)
        axes = {int(x) % nd for x in a["axes"]} if nd else {0}
        keep = bool(a.get("keepdims", False))
        rshape = tuple(1 if d in axes else dshape[d] for d in range(nd)) if keep else \
            tuple(dshape[d] for d in range(nd) if d not in axes)
        if 0 in axes or tuple(int(s) for s in out.shape) != rshape:
            return None
    p = int(out.shape[0])
    return p if _rows(out, p) else None


def _reads(plan: LowerPlan, ins: Instr, regions: list[Region], accesses: list[Access]) -> None:
    """The on-chip regions and HBM accesses evaluating ``ins`` reads (its inlined producers' included)."""
    outs = [x for x in ins.outs if isinstance(x, Region)]
    for r in all_regions(ins):
        if not any(r is o for o in outs):
            regions.append(r)
        q = plan.producer.get((id(ins), id(r.buf)))
        if q is not None and q is not ins:
            _reads(plan, q, regions, accesses)
    accesses.extend(x for x in ins.ins if isinstance(x, Access))


def _emitted(plan: LowerPlan, s: Stmt) -> bool:
    return isinstance(s, Instr) and id(s) not in plan.fused and id(s) not in plan.mm_defer


class _Run:
    """Checks one candidate run as a whole (see the module docstring)."""

    def __init__(self, plan: LowerPlan, p: int, instrs: list[Instr]) -> None:
        self.plan, self.p, self.instrs = plan, p, instrs

    def ok(self, stmts: Sequence[Stmt]) -> set[int] | None:
        """None if the run does not qualify, else its row-private buffers (see :meth:`_private`)."""
        plan, p = self.plan, self.p
        written = {id(o.buf) for i in self.instrs for o in i.outs if isinstance(o, Region)}
        touched: dict[int, tuple[Region, bool]] = {}   # buffer -> a region of it, every use is whole rows
        stored: list[Access] = [o for i in self.instrs for o in i.outs if isinstance(o, Access)]
        loaded: list[Access] = []

        def touch(r: Region, rows: bool) -> None:
            prev = touched.get(id(r.buf))
            touched[id(r.buf)] = (r, rows and (prev is None or prev[1]))

        for ins in self.instrs:
            regions: list[Region] = []
            _reads(plan, ins, regions, loaded)
            out = ins.outs[0]
            rank = len(out.shape)
            for r in regions:
                if isinstance(out, Region) and r.buf is out.buf:
                    return None  # reads what it writes: the handler would copy it aside whole
                rows = _rows(r, p) and len(r.shape) == rank
                if id(r.buf) in written and not rows:
                    return None
                touch(r, rows)
            if isinstance(out, Region):
                touch(out, True)
        if any(a.gathers or id(a) in plan.access_checks for a in loaded):
            return None
        st = [id(a.tensor) for a in stored]
        if len(set(st)) != len(st) or set(st) & {id(a.tensor) for a in loaded}:
            return None
        if plan.may_alias and stored and loaded:
            return None
        if not self._arena_ok(touched):
            return None
        return self._private(touched, stmts)

    def _private(self, touched: dict[int, tuple[Region, bool]], stmts: Sequence[Stmt]) -> set[int]:
        """Buffers used only inside the run, as whole rows, sharing no arena bytes: each row's values live and die
        in that row's iteration, so one row of the buffer (row 0) serves every row and stays in L1."""
        plan = self.plan
        mine = {id(s) for s in stmts}
        offs, sizes = plan.offsets, plan.sizes
        out = set()
        for b, (_, rows) in touched.items():
            if not rows or b not in offs or self._row_bytes(touched[b]) == 0:
                continue
            if any(id(plan.emitter(i)) not in mine for i, _ in plan.buf_refs.get(b, [])):
                continue
            lo, hi = offs[b], offs[b] + sizes[b]
            if any(c != b and c in offs and offs[c] < hi and lo < offs[c] + sizes[c] for c in touched):
                continue
            out.add(b)
        return out


    def _arena_ok(self, touched: dict[int, tuple[Region, bool]]) -> bool:
        """Buffers sharing arena bytes (disjoint live ranges) are only the same rows at the same place: row p
        of one is row p of the other, so a row's writes never reach another row's reads."""
        offs, sizes = self.plan.offsets, self.plan.sizes
        spans = sorted((offs[b], offs[b] + sizes[b], b) for b in touched if b in offs)
        for i, (lo, hi, b) in enumerate(spans):
            for lo2, hi2, b2 in spans[i + 1:]:
                if lo2 >= hi:
                    break
                if not (lo2 == lo and hi2 == hi and self._row_bytes(touched[b]) == self._row_bytes(touched[b2])
                        and self._row_bytes(touched[b]) > 0):
                    return False
        return True

    def _row_bytes(self, use: tuple[Region, bool]) -> int:
        """Bytes per row of a buffer used only as whole rows of this run's ``P`` (0 otherwise)."""
        r, rows = use
        buf = r.buf
        if not rows or int(buf.shape[0]) != self.p:
            return 0
        n = buf.dtype.itemsize
        for d in buf.shape[1:]:
            n *= int(d)
        return n


def row_runs(plan: LowerPlan, stmts: Sequence[Stmt]) -> Iterator[tuple[int, list[Stmt], set[int]]]:
    """``stmts`` split into runs in order: ``(P, run, private)`` for a run lowered row by row (``P`` rows; the ids of
    its row-private buffers), ``(0, [s], set())`` for any other statement."""
    pending: list[Stmt] = []
    p = 0

    def flush() -> Iterator[tuple[int, list[Stmt], set[int]]]:
        instrs = [s for s in pending if _emitted(plan, s) and isinstance(s, Instr) and s.op is not Op.ALLOC]
        private = _Run(plan, p, instrs).ok(pending) if p > 1 and len(instrs) >= 2 else None
        if private is not None:
            yield p, list(pending), private
        else:
            for s in pending:
                yield 0, [s], set()

    enabled = ROW_BLOCKS and not plan.debug
    for s in stmts:
        if not enabled or isinstance(s, Loop):
            yield from flush()
            pending, p = [], 0
            yield 0, [s], set()
            continue
        assert isinstance(s, Instr)
        if not _emitted(plan, s) or s.op is Op.ALLOC:
            pending.append(s)
            continue
        rows = _out_rows(plan, s)
        if rows is None or (p and rows != p):
            yield from flush()
            pending, p = [], 0
            if rows is None:
                yield 0, [s], set()
                continue
        pending.append(s)
        p = rows
    yield from flush()
