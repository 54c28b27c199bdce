"""Analysis before lowering: instruction ids, run-time checks, elementwise fusion, scratch arena layout.

Nothing here changes the IR; the lowering reads the decisions.

- **Instruction ids**: pre-order position in ``kernel.body`` (the error record and
  the device_print callback name instructions by id).
- **Run-time checks**: an HBM access needs a check when ``bounds.access_check``
  cannot prove it inside its tensor (status ``runtime``, or ``oob``: the
  interpreter raises only when the instruction executes, so do we); a region
  needs one when its start is not provably inside its buffer.
- **Fusion**: a producer P (elementwise instruction writing region R of buffer B)
  is inlined into its consumer C (evaluated per element inside C's loop, B never
  materialised) when B is written only by P and read only by C, C is later in
  the same statement list, C reads exactly R with the identity element mapping
  (same region, no broadcasting), no statement between P and C writes anything P
  reads (on-chip buffers, or HBM tensors that may alias), P needs no run-time
  check, and C is not an HBM store to a tensor P loads from (or may alias). A cheap P (a plain HBM
  load, possibly through fused casts, of at most ``REMAT_MAX_BYTES``) read by up to
  ``REMAT_MAX_READERS`` consumers is inlined into each of them when every one of them qualifies
  (re-evaluated: the tile is read from memory, then from cache, never staged in the arena).
- **Arena**: every materialised buffer gets a 64-byte aligned offset in the
  per-instance scratch arena. Live ranges are instruction-id intervals; a buffer
  used inside a loop that does not contain its ``alloc`` lives through the whole
  loop. Buffers whose ranges do not overlap share memory (not in debug mode,
  where each buffer has its own memory so poisoning is faithful).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import sympy

from trnlang.ir.bounds import access_check, expr_range, loop_ranges
from trnlang.ir.nodes import Access, Buf, HbmTensor, Instr, Kernel, Loop, Region, Stmt, axis_sym
from trnlang.ir.ops import Op

ALIGN = 64
#: Largest HBM load (bytes) re-evaluated in each of several consumers instead of staged (see ``Plan._remat_ok``).
REMAT_MAX_BYTES = 1 << 20
#: Most consumers a load is re-evaluated in.
REMAT_MAX_READERS = 4

_PRODUCERS = {Op.TENSOR_TENSOR, Op.TENSOR_SCALAR, Op.ACTIVATION, Op.TENSOR_COPY, Op.SELECT, Op.IOTA, Op.MEMSET,
              Op.AFFINE_SELECT, Op.DMA_COPY}
_CONSUMERS = {Op.TENSOR_TENSOR, Op.TENSOR_SCALAR, Op.ACTIVATION, Op.TENSOR_COPY, Op.SELECT, Op.AFFINE_SELECT,
              Op.TENSOR_REDUCE, Op.BN_STATS, Op.DMA_COPY}


@dataclass
class InstrInfo:
    """An instruction with its id and enclosing loops (outer first)."""

    id: int
    instr: Instr
    loops: tuple[Loop, ...]


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
    if is_load(ins) and ins.attrs.get("other") is None and not _no_mask(cast(Access, ins.ins[0])):
        out.append(ins.outs[0])
    return out


def regions_written(ins: Instr) -> list[Region]:
    return [x for x in ins.outs if isinstance(x, Region)]


def hbm_read(ins: Instr) -> list[HbmTensor]:
    return [x.tensor for x in ins.ins if isinstance(x, Access)]


def hbm_written(ins: Instr) -> list[HbmTensor]:
    return [x.tensor for x in ins.outs if isinstance(x, Access)]


def is_load(ins: Instr) -> bool:
    return ins.op is Op.DMA_COPY and isinstance(ins.outs[0], Region) and isinstance(ins.ins[0], Access)


def is_store(ins: Instr) -> bool:
    return ins.op is Op.DMA_COPY and isinstance(ins.outs[0], Access) and isinstance(ins.ins[0], Region)


def _no_mask(acc: Access) -> bool:
    m = acc.mask
    return m is None or m is True or m is sympy.true


def same_region(a: Region, b: Region) -> bool:
    return (a.buf is b.buf and tuple(a.sizes) == tuple(b.sizes) and tuple(a.keep) == tuple(b.keep)
            and a.ap == b.ap and all(sympy.sympify(x) == sympy.sympify(y) for x, y in zip(a.starts, b.starts)))


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


def _stmt_instrs(s: Stmt) -> list[Instr]:
    if isinstance(s, Instr):
        return [s]
    out: list[Instr] = []
    for x in s.body:
        out.extend(_stmt_instrs(x))
    return out


@dataclass
class Plan:
    """Every decision the lowering needs, computed from the kernel alone."""

    kernel: Kernel
    grid: tuple[int, ...]
    may_alias: bool = False
    debug: bool = False
    infos: list[InstrInfo] = field(default_factory=list)
    by_instr: dict[int, InstrInfo] = field(default_factory=dict)
    access_checks: dict[int, tuple[int, ...]] = field(default_factory=dict)   # id(Access) -> runtime dims
    region_checks: dict[int, list[int]] = field(default_factory=dict)         # id(Region) -> dims to check
    fused: dict[int, Instr] = field(default_factory=dict)                     # id(P) -> consumer C
    mm_ops: dict[int, Any] = field(default_factory=dict)                      # id(nc_matmul) -> MatmulOperands
    mm_defer: dict[int, Instr] = field(default_factory=dict)                  # id(P) -> nc_matmul P is deferred to
    producer: dict[tuple[int, int], Instr] = field(default_factory=dict)      # (id(C), id(B)) -> P
    offsets: dict[int, int] = field(default_factory=dict)                     # id(Buf) -> arena byte offset
    sizes: dict[int, int] = field(default_factory=dict)                       # id(Buf) -> arena bytes
    live: dict[int, tuple[int, int]] = field(default_factory=dict)            # id(Buf) -> live instr ids
    bufs: dict[int, Buf] = field(default_factory=dict)
    bufs_size: int = 0

    def __post_init__(self) -> None:
        self._number()
        self._checks()
        self._fuse()
        from codegen.plan_matmul import plan_matmuls

        self.mm_ops, self.mm_defer = plan_matmuls(self)
        self._layout()

    # ------------------------------------------------------------------ numbering
    def _number(self) -> None:
        def rec(stmts: list[Stmt], loops: tuple[Loop, ...]) -> None:
            for s in stmts:
                if isinstance(s, Loop):
                    rec(s.body, (*loops, s))
                else:
                    info = InstrInfo(len(self.infos), s, loops)
                    self.infos.append(info)
                    self.by_instr[id(s)] = info

        rec(self.kernel.body, ())
        self.buf_refs: dict[int, list[tuple[Instr, str]]] = {}
        for info in self.infos:
            ins = info.instr
            if ins.op is Op.ALLOC:
                buf = ins.outs[0]
                self.bufs[id(buf)] = buf
                self.buf_refs.setdefault(id(buf), []).append((ins, "alloc"))
                continue
            for r in regions_written(ins):
                self.bufs[id(r.buf)] = r.buf
                self.buf_refs.setdefault(id(r.buf), []).append((ins, "write"))
            for r in regions_read(ins):
                self.bufs[id(r.buf)] = r.buf
                self.buf_refs.setdefault(id(r.buf), []).append((ins, "read"))

    def info(self, ins: Instr) -> InstrInfo:
        return self.by_instr[id(ins)]

    # ------------------------------------------------------------------ run-time checks
    def _checks(self) -> None:
        self._ranges: dict[tuple[int, ...], Any] = {}
        for info in self.infos:
            ins = info.instr
            if ins.op is Op.ALLOC:
                continue
            key = tuple(id(lp) for lp in info.loops)
            rng = self._ranges.get(key)
            if rng is None:
                rng = self._ranges[key] = loop_ranges(list(info.loops), self.grid)
            for x in (*ins.outs, *ins.ins):
                if isinstance(x, Access):
                    v = access_check(x, rng)
                    if v.status == "runtime":
                        self.access_checks[id(x)] = tuple(v.runtime_dims)
                    elif v.status == "oob":
                        self.access_checks[id(x)] = tuple(range(len(x.index)))
            for r in all_regions(ins):
                dims = self._region_dims_to_check(r, rng)
                if dims:
                    self.region_checks[id(r)] = dims

    @staticmethod
    def _region_dims_to_check(r: Region, rng: Any) -> list[int]:
        dims = []
        for d, (start, size, keep) in enumerate(zip(r.starts, r.sizes, r.keep)):
            n = size if keep else 1
            got = expr_range(start, rng)
            if got is None or got[0] < 0 or got[1] + n > r.buf.shape[d]:
                if getattr(rng, "empty", False):
                    continue
                dims.append(d)
        return dims

    def needs_checks(self, ins: Instr) -> bool:
        """True if any access or region of ``ins`` is checked at run time."""
        for x in (*ins.outs, *ins.ins):
            if isinstance(x, Access) and id(x) in self.access_checks:
                return True
        return any(id(r) in self.region_checks for r in all_regions(ins))

    # ------------------------------------------------------------------ fusion
    def _tensors_alias(self, a: HbmTensor, b: HbmTensor) -> bool:
        return a is b or self.may_alias

    def _producer_ok(self, p: Instr) -> bool:
        if p.op not in _PRODUCERS or len(p.outs) != 1 or not isinstance(p.outs[0], Region):
            return False
        if p.op is Op.ACTIVATION and p.attrs.get("reduce_op") is not None:
            return False
        if p.op is Op.DMA_COPY:
            src = p.ins[0]
            if isinstance(src, Access):
                if not _no_mask(src) and p.attrs.get("other") is None:
                    return False
            elif not isinstance(src, Region):
                return False
        if self.needs_checks(p):
            return False
        return True

    @staticmethod
    def _consumer_reads_ok(c: Instr, r: Region) -> bool:
        """C reads buffer r.buf only as region r, with the identity element mapping."""
        if c.op not in _CONSUMERS:
            return False
        buf = r.buf
        if c.op is Op.DMA_COPY:
            dst, src = c.outs[0], c.ins[0]
            if isinstance(dst, Access):
                if any(g.buf is buf for g in dst.gathers) or not isinstance(src, Region):
                    return False
                return same_region(src, r) and tuple(src.shape) == tuple(dst.shape)
            if isinstance(dst, Region) and isinstance(src, Region):
                return same_region(src, r) and tuple(src.shape) == tuple(dst.shape)
            return False
        if c.op in (Op.TENSOR_REDUCE, Op.BN_STATS):
            return isinstance(c.ins[0], Region) and same_region(c.ins[0], r)
        if c.op is Op.TENSOR_COPY and c.attrs.get("reshape"):
            return False
        shape = tuple(c.outs[0].shape)
        operands = [x for x in c.ins if isinstance(x, Region)]
        scale = c.attrs.get("scale")
        if isinstance(scale, Region):
            operands.append(scale)
        seen = False
        for x in operands:
            if x.buf is buf:
                if not same_region(x, r) or tuple(x.shape) != shape:
                    return False
                seen = True
        return seen

    def _leaves(self, p: Instr) -> tuple[set[int], set[int]]:
        """(buffer ids, tensor ids) that P's inlined expression reads, through producers fused into P."""
        bufs: set[int] = set()
        tensors: set[int] = set()
        for r in regions_read(p):
            q = self.producer.get((id(p), id(r.buf)))
            if q is not None:
                qb, qt = self._leaves(q)
                bufs |= qb
                tensors |= qt
            else:
                bufs.add(id(r.buf))
        for t in hbm_read(p):
            tensors.add(id(t))
        return bufs, tensors

    def _remat_ok(self, p: Instr, readers: int) -> bool:
        """P is cheap to evaluate again in each of its ``readers`` consumers instead of staging its tile.

        A plain HBM load (no gathers, unit step along the innermost tile axis), possibly through casts
        fused into P, of at most :data:`REMAT_MAX_BYTES`: re-reading it from the host caches costs less
        than writing the tile to the arena and reading it back (on the host, stores to the arena also
        queue behind the streaming output stores of the previous tile).
        """
        if readers > REMAT_MAX_READERS:
            return False
        if p.op is Op.DMA_COPY:
            src = p.ins[0]
            if not isinstance(src, Access) or src.gathers or not src.shape:
                return False
            n = 1
            for d in src.shape:
                n *= int(d)
            if n * src.tensor.dtype.itemsize > REMAT_MAX_BYTES:
                return False
            last = sympy.sympify(src.index[-1])
            inner = axis_sym(len(src.shape) - 1)
            if sympy.diff(last, inner) != 1:
                return False
            return not any(a != inner and a.name.startswith("_a") for a in last.free_symbols)
        if p.op is Op.TENSOR_COPY and not p.attrs.get("reshape"):
            srcs = [x for x in p.ins if isinstance(x, Region)]
            if len(srcs) != 1:
                return False
            q = self.producer.get((id(p), id(srcs[0].buf)))
            return q is not None and self._remat_ok(q, 1)
        return False

    def _fuse_list(self, stmts: list[Stmt]) -> None:
        tensors = {id(t): t for t in self.kernel.tensors}
        for i, p in enumerate(stmts):
            if isinstance(p, Loop):
                self._fuse_list(p.body)
                continue
            if not self._producer_ok(p):
                continue
            r = p.outs[0]
            got = self._fusable_consumers(stmts, i, p, r)
            if got is None:
                continue
            consumers, pos, lb, lt = got
            if not all(self._consumer_ok(stmts, i, pos[id(c)], c, r, lb, lt, tensors) for c in consumers):
                continue
            self.fused[id(p)] = consumers[-1]
            for c in consumers:
                self.producer[(id(c), id(r.buf))] = p

    def _fusable_consumers(self, stmts: list[Stmt], i: int, p: Instr, r: Region
                           ) -> tuple[list[Instr], dict[int, int], set[int], set[int]] | None:
        """The readers of producer ``p = stmts[i]`` (its only writer) in program order, with the positions of the
        statements after it and ``p``'s leaf buffers and tensors; None when ``p`` cannot be inlined into them (no
        reader, reads its own output, readers elsewhere, or several readers of a producer that cannot be
        recomputed)."""
        refs = self.buf_refs.get(id(r.buf), [])
        if any(role == "write" and ins is not p for ins, role in refs):
            return None
        readers = {id(ins): ins for ins, role in refs if role == "read"}
        if not readers or id(p) in readers:
            return None
        if len(readers) > 1 and not self._remat_ok(p, len(readers)):
            return None
        pos = {id(s): k for k, s in enumerate(stmts) if k > i}
        if any(x not in pos for x in readers):
            return None
        lb, lt = self._leaves(p)
        if len(readers) > 1 and lb:
            return None
        return sorted(readers.values(), key=lambda c: pos[id(c)]), pos, lb, lt

    def _consumer_ok(self, stmts: list[Stmt], i: int, j: int, c: Instr, r: Region, lb: set[int], lt: set[int],
                     tensors: dict[int, HbmTensor]) -> bool:
        """The producer ``stmts[i]`` (output ``r``, leaf buffers ``lb`` and tensors ``lt``) can be evaluated where
        consumer ``c = stmts[j]`` reads it: ``c`` reads ``r`` elementwise, nothing in between overwrites a leaf
        buffer or an HBM tensor aliasing a leaf tensor, and a store consumer does not write such a tensor."""
        if not self._consumer_reads_ok(c, r):
            return False
        for s in stmts[i + 1:j]:
            for ins in _stmt_instrs(s):
                if any(id(w.buf) in lb for w in regions_written(ins)):
                    return False
                for t in hbm_written(ins):
                    if any(self._tensors_alias(t, tensors.get(x, t)) for x in lt):
                        return False
        if is_store(c):
            t = c.outs[0].tensor
            if any(self._tensors_alias(t, tensors[x]) for x in lt if x in tensors):
                return False
        return True

    def _fuse(self) -> None:
        self._fuse_list(self.kernel.body)

    def emitter(self, ins: Instr) -> Instr:
        """The instruction whose code evaluates ``ins`` (itself, the last consumer it is inlined into, or the
        ``nc_matmul`` it is deferred to: ``codegen.plan_matmul``)."""
        while True:
            nxt = self.fused.get(id(ins)) or self.mm_defer.get(id(ins))
            if nxt is None:
                return ins
            ins = nxt

    def fused_buf(self, buf: Buf) -> bool:
        return any(key[1] == id(buf) for key in self.producer)

    # ------------------------------------------------------------------ arena
    def _layout(self) -> None:
        fused_bufs = {key[1] for key in self.producer}
        loop_span: dict[int, tuple[int, int]] = {}
        for info in self.infos:
            for lp in info.loops:
                lo, hi = loop_span.get(id(lp), (info.id, info.id))
                loop_span[id(lp)] = (min(lo, info.id), max(hi, info.id))
        intervals: list[tuple[int, int, int, int]] = []  # (start, end, size, buf id)
        for bid, buf in self.bufs.items():
            if bid in fused_bufs:
                continue
            refs = self.buf_refs.get(bid, [])
            # an inlined producer reads its inputs where its final consumer is emitted
            emitted = [self.info(self.emitter(ins)) for ins, _ in refs]
            pos = [i.id for i in emitted]
            if not pos:
                continue
            allocs = [self.info(ins) for ins, role in refs if role == "alloc"]
            common: set[int] = set(id(lp) for lp in allocs[0].loops) if allocs else set()
            for a in allocs[1:]:
                common &= {id(lp) for lp in a.loops}
            lo, hi = min(pos), max(pos)
            for info in emitted:
                for lp in info.loops:
                    if id(lp) not in common:
                        s, e = loop_span[id(lp)]
                        lo, hi = min(lo, s), max(hi, e)
            n = 1
            for d in buf.shape:
                n *= int(d)
            size = max(ALIGN, -(-n * buf.dtype.itemsize // ALIGN) * ALIGN)
            intervals.append((lo, hi, size, bid))
        intervals.sort()
        placed: list[tuple[int, int, int, int]] = []  # (start, end, offset, size)
        top = 0
        for lo, hi, size, bid in intervals:
            if self.debug:
                off = top
            else:
                busy = sorted((o, o + s) for (s0, e0, o, s) in placed if not (e0 < lo or s0 > hi))
                off = 0
                for used_lo, used_hi in busy:
                    if off + size <= used_lo:
                        break
                    off = max(off, used_hi)
            placed.append((lo, hi, off, size))
            self.offsets[bid] = off
            self.sizes[bid] = size
            self.live[bid] = (lo, hi)
            top = max(top, off + size)
        self.bufs_size = top
