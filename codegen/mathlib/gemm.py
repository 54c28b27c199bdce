"""Register-blocked fp32 matrix multiply generated as ``llvmlite.ir``.

The entry points are emitted into a module by :func:`define_gemm` (C ABI,
pointers as ``ptr``, sizes and leading dimensions as ``i64``, in elements):

* ``gemm_tn(out, ldo, S, lds, V, ldv, M, N, K, accumulate)``:
  ``out[M,N] (+)= S[K,M]^T @ V[K,N]`` -- the trnlang ``nc_matmul`` (stationary
  ``S``, moving ``V``); ``accumulate != 0`` adds to ``out``.
* ``gemm_nn(out, ldo, A, lda, V, ldv, M, N, K, accumulate)``: ``out[M,N] (+)= A[M,K] @ V[K,N]`` (the
  same product with the stationary given untransposed: ``trnlang.passes.plan_matmul_operands``).
* ``gemm_tn_vt`` / ``gemm_nn_vt``: the same with ``V`` given transposed, as ``Vt [N, K]`` (``ldv`` its row
  stride): ``x @ w.T`` (``nn.Linear``) reads ``w`` in place.
* ``sgemm(M, N, K, A, lda, B, ldb, C, ldc)``: plain ``C[M,N] = A[M,K] @ B[K,N]``.

All matrices are row-major with the given leading dimensions (>= the row
width).  Any sizes work (including 0 and 1); fp32 accumulation.

Structure (BLIS/GotoBLAS): the operands are cut into ``KC x NC`` blocks of B
and ``MC x KC`` blocks of A, each packed (zero padded at the edges) into
``NR``-column / ``MR``-row micro-panels in a 64-byte aligned ``malloc``
workspace, and an ``MR x NR`` micro-kernel keeps ``MR * NR / width``
accumulator vectors in registers.  The last rows of a block run a 2- or
4-row micro-kernel (a 128-row block is 21 x 6 + 2 rows, not 22 x 6); edge
tiles store through masked vector loads and stores.  ``A [M, K]`` (the ``nn``
entries) is packed WIDTH columns at a time with a register transpose.  The
code is single threaded; calls through ctypes release
the GIL, so a host can split N (or M) across threads.  :class:`Gemm` compiles
a standalone module and wraps it for numpy.

Per ISA path (``codegen.isa``; :data:`CONFIGS`, measured on the hosts named
there; docs/isa_paths.md):

* ``avx512``: ``<16 x float>``, 6 x 64: 24 zmm accumulators, 4 loads of B and
  6 broadcasts of A per 24 FMAs (28 of the 32 zmm registers; the 14 x 32,
  8 x 48 and 12 x 32 shapes measured 10-30 % slower, 7 x 64 does not fit);
* ``avx2``: ``<8 x float>``, 6 x 16: 12 ymm accumulators, 2 loads of B and 6
  broadcasts of A per 12 FMAs;
* ``generic``: ``<4 x float>`` with ``llvm.fmuladd`` (no ISA assumption),
  6 x 8.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from codegen import llvm
from codegen.irutil import F32, I1, I32, I64, PTR, VOID, Loop, const, intrinsic, smin

__all__ = ["GemmConfig", "CONFIGS", "config_for", "define_gemm", "gemm_module", "Gemm", "default_gemm"]


@dataclass(frozen=True)
class GemmConfig:
    """Blocking parameters: micro-tile ``mr x nr`` (``nr`` a multiple of ``width``) and cache blocks."""

    mr: int = 6
    nr: int = 16
    kc: int = 256
    mc: int = 144
    nc: int = 3072
    width: int = 8
    fma: bool = True  #: ``llvm.fma`` (the target has FMA); else ``llvm.fmuladd`` (fused only where cheap)
    prefetch_c: bool = False  #: prefetch the C tile for writing before the K loop (hides its L2/L3 latency)

    def __post_init__(self) -> None:
        if self.nr % self.width or self.mc % self.mr or self.nc % self.nr:
            raise ValueError(f"inconsistent gemm blocking {self}")


#: Blocking per ISA path. avx512 measured on an Intel Xeon (Emerald Rapids, 2 cores, 48 KiB L1d, 2 MiB L2),
#: 1 thread, interleaved with torch.mm (oneDNN) in one process: 6 x 64 with KC 128 (the 32 KiB B micro-panel
#: stays in L1 while the A micro-panels of a 48-row block pass it) and the C tile prefetched before the K loop
#: ran 0.88-0.94x torch at 1024^3 where KC 256 / MC 144 (the B micro-panel streamed from L2) ran 0.80-0.84x; the
#: 5 x 80, 8 x 48, 12 x 32 and 14 x 32 shapes and the A-outer micro-panel loop order were within the noise of 6 x 64.
_AVX512 = GemmConfig(mr=6, nr=64, kc=128, mc=48, nc=3072, width=16, prefetch_c=True)
CONFIGS: dict[str, GemmConfig] = {
    "avx512": _AVX512,
    "avx512bf16": _AVX512,  # fp32: the avx512 kernel
    "amx": _AVX512,
    "avx2": GemmConfig(mr=6, nr=16, kc=256, mc=144, nc=3072, width=8),
    "generic": GemmConfig(mr=6, nr=8, kc=256, mc=144, nc=3072, width=4, fma=False),
}


def config_for(path: str | None = None) -> GemmConfig:
    """The blocking for ISA path ``path`` (default: the process's, ``codegen.isa.selected()``)."""
    if path is None:
        from codegen import isa

        path = isa.selected().name
    return CONFIGS[path]


def new_function(module: ir.Module, name: str, args: list[ir.Type],
                 internal: bool = True) -> tuple[ir.Function, ir.IRBuilder]:
    """A ``void name(args)`` nounwind function in ``module`` (internal linkage unless ``internal`` is False) and a
    builder at its entry block (the fp32 and bf16 gemm libraries' functions)."""
    fn = ir.Function(module, ir.FunctionType(VOID, args), name)
    if internal:
        fn.linkage = "internal"
    fn.attributes.add("nounwind")
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))


class _Gen:
    """Emits the gemm functions into one module."""

    def __init__(self, module: ir.Module, cfg: GemmConfig, prefix: str) -> None:
        self.m, self.cfg, self.prefix = module, cfg, prefix
        self.vty = ir.VectorType(F32, cfg.width)
        self.malloc = intrinsic(module, "malloc", PTR, [I64])
        self.free = intrinsic(module, "free", VOID, [PTR])
        self.mask_ty = ir.VectorType(I1, cfg.width)
        self.mload = intrinsic(module, f"llvm.masked.load.v{cfg.width}f32.p0", self.vty,
                               [PTR, I32, self.mask_ty, self.vty])
        self.mstore = intrinsic(module, f"llvm.masked.store.v{cfg.width}f32.p0", VOID,
                                [self.vty, PTR, I32, self.mask_ty])

    # ------------------------------------------------------------------ helpers
    def _fn(self, name: str, args: list[ir.Type], internal: bool = True) -> tuple[ir.Function, ir.IRBuilder]:
        return new_function(self.m, self.prefix + name, args, internal)

    @staticmethod
    def _gep(b: ir.IRBuilder, p: ir.Value, idx: ir.Value | int) -> ir.Value:
        return b.gep(p, [idx if isinstance(idx, ir.Value) else I64(idx)], source_etype=F32, inbounds=True)

    def _lane_mask(self, b: ir.IRBuilder, n_valid: ir.Value, offset: int) -> ir.Value:
        """<width x i1>: lane l is on when offset + l < n_valid."""
        w = self.cfg.width
        lanes = ir.Constant(ir.VectorType(I64, w), [offset + i for i in range(w)])
        splat = b.insert_element(ir.Constant(ir.VectorType(I64, w), None), n_valid, I32(0))
        splat = b.shuffle_vector(splat, ir.Constant(ir.VectorType(I64, w), None),
                                 ir.Constant(ir.VectorType(I32, w), [0] * w))
        return b.icmp_signed("<", lanes, splat)

    def _if(self, b: ir.IRBuilder, cond: ir.Value, name: str) -> tuple[ir.Block, ir.Block]:
        then = b.append_basic_block(f"{name}.then")
        after = b.append_basic_block(f"{name}.end")
        b.cbranch(cond, then, after)
        b.position_at_end(then)
        return then, after

    # ------------------------------------------------------------------ packing
    def pack_b(self, trans: bool = False) -> ir.Function:
        """pack_b(Bp, B, ldb, kc, nc): Bp[j/NR][k][j%NR] = B[k, j], zero padded to a multiple of NR.

        ``trans``: B is given as ``Bt [N, K]`` (B[k, j] = Bt[j*ldb + k]: a moving operand stored transposed, the
        ``x @ w.T`` of ``nn.Linear``); each row of Bt is read contiguously and scattered into its panel column.
        """
        if trans:
            return self._pack_b_t()
        cfg = self.cfg
        nvec = cfg.nr // cfg.width
        fn, b = self._fn("gemm_pack_b", [PTR, PTR, I64, I64, I64])
        bp, bsrc, ldb, kc, nc = fn.args
        zero = const(self.vty, 0.0)
        with Loop(b, I64(0), nc, cfg.nr, "jr") as jr:
            nv = b.sub(nc, jr)
            panel = self._gep(b, bp, b.mul(jr, kc))
            with b.if_else(b.icmp_signed(">=", nv, I64(cfg.nr))) as (full, part):
                with full:
                    with Loop(b, I64(0), kc, 1, "kf") as k:
                        src = self._gep(b, bsrc, b.add(b.mul(k, ldb), jr))
                        dst = self._gep(b, panel, b.mul(k, I64(cfg.nr)))
                        for v in range(nvec):
                            x = b.load(self._gep(b, src, v * cfg.width), typ=self.vty, align=4)
                            b.store(x, self._gep(b, dst, v * cfg.width)).align = 32
                with part:
                    masks = [self._lane_mask(b, nv, v * cfg.width) for v in range(nvec)]
                    with Loop(b, I64(0), kc, 1, "kp") as k:
                        src = self._gep(b, bsrc, b.add(b.mul(k, ldb), jr))
                        dst = self._gep(b, panel, b.mul(k, I64(cfg.nr)))
                        for v in range(nvec):
                            x = b.call(self.mload, [self._gep(b, src, v * cfg.width), I32(4), masks[v], zero])
                            b.store(x, self._gep(b, dst, v * cfg.width)).align = 32
        b.ret_void()
        return fn

    def _pack_b_t(self) -> ir.Function:
        cfg = self.cfg
        fn, b = self._fn("gemm_pack_b_t", [PTR, PTR, I64, I64, I64])
        bp, bsrc, ldb, kc, nc = fn.args
        w = cfg.width
        kv = b.sub(kc, b.srem(kc, I64(w)))
        with Loop(b, I64(0), nc, cfg.nr, "jr") as jr:
            nv = smin(b, b.sub(nc, jr), I64(cfg.nr))
            panel = self._gep(b, bp, b.mul(jr, kc))
            full = b.icmp_signed(">=", nv, I64(cfg.nr))
            with b.if_then(full):  # WIDTH x WIDTH blocks transposed in registers
                with Loop(b, I64(0), kv, w, "kb") as kb:
                    for j0 in range(0, cfg.nr, w):
                        rows = [b.load(self._gep(b, bsrc, b.add(b.mul(b.add(jr, I64(j0 + r)), ldb), kb)),
                                       typ=self.vty, align=4) for r in range(w)]
                        t = self._interleave(b, rows)  # lane kk*W + r = Bt[jr + j0 + r, kb + kk]
                        for kk in range(w):
                            piece = b.shuffle_vector(t, ir.Constant(t.type, None),
                                                     ir.Constant(ir.VectorType(I32, w), [kk * w + r for r in range(w)]))
                            dst = self._gep(b, panel, b.add(b.mul(b.add(kb, I64(kk)), I64(cfg.nr)), I64(j0)))
                            b.store(piece, dst).align = 4
            k0 = b.select(full, kv, I64(0))
            with Loop(b, I64(0), nv, 1, "j") as j:  # the rest: row jr + j of Bt from k0, one element at a time
                src = self._gep(b, bsrc, b.mul(b.add(jr, j), ldb))
                dst = self._gep(b, panel, j)
                with Loop(b, k0, kc, 1, "k") as k:
                    b.store(b.load(self._gep(b, src, k), typ=F32, align=4), self._gep(b, dst, b.mul(k, I64(cfg.nr))))
            with Loop(b, nv, I64(cfg.nr), 1, "jz") as j:  # zero padding of a last, partial panel
                dst = self._gep(b, panel, j)
                with Loop(b, I64(0), kc, 1, "kz") as k:
                    b.store(F32(0.0), self._gep(b, dst, b.mul(k, I64(cfg.nr))))
        b.ret_void()
        return fn

    def pack_a(self, trans: bool) -> ir.Function:
        """pack_a(Ap, A, ld, mc, kc): Ap[i/MR][k][i%MR] = op(A)[i, k], zero padded to a multiple of MR.

        ``trans``: op(A)[i, k] = A[k*ld + i] (gemm_tn's S); else A[i*ld + k].
        """
        cfg = self.cfg
        fn, b = self._fn("gemm_pack_a_t" if trans else "gemm_pack_a_n", [PTR, PTR, I64, I64, I64])
        ap, asrc, ld, mc, kc = fn.args

        def elem(k: ir.Value, i: ir.Value) -> ir.Value:
            idx = b.add(b.mul(k, ld), i) if trans else b.add(b.mul(i, ld), k)
            return self._gep(b, asrc, idx)

        with Loop(b, I64(0), mc, cfg.mr, "ir") as ir_:
            mv = b.sub(mc, ir_)
            panel = self._gep(b, ap, b.mul(ir_, kc))
            with b.if_else(b.icmp_signed(">=", mv, I64(cfg.mr))) as (full, part):
                with full:
                    k0: ir.Value = I64(0)
                    if not trans:  # rows of A are contiguous in k: WIDTH k at a time, transposed in registers
                        k0 = b.sub(kc, b.srem(kc, I64(cfg.width)))
                        with Loop(b, I64(0), k0, cfg.width, "kv") as k:
                            rows = [b.load(elem(k, b.add(ir_, I64(i))), typ=self.vty, align=4) for i in range(cfg.mr)]
                            b.store(self._interleave(b, rows), self._gep(b, panel, b.mul(k, I64(cfg.mr)))).align = 4
                    with Loop(b, k0, kc, 1, "kf") as k:
                        dst = self._gep(b, panel, b.mul(k, I64(cfg.mr)))
                        for i in range(cfg.mr):
                            x = b.load(elem(k, b.add(ir_, I64(i))), typ=F32, align=4)
                            b.store(x, self._gep(b, dst, i))
                with part:
                    with Loop(b, I64(0), kc, 1, "kp") as k:
                        dst = self._gep(b, panel, b.mul(k, I64(cfg.mr)))
                        for i in range(cfg.mr):
                            ok = b.icmp_signed("<", I64(i), mv)
                            with b.if_else(ok) as (then, other):
                                with then:
                                    x = b.load(elem(k, b.add(ir_, I64(i))), typ=F32, align=4)
                                    b.store(x, self._gep(b, dst, i))
                                with other:
                                    b.store(F32(0.0), self._gep(b, dst, i))
        b.ret_void()
        return fn

    def _interleave(self, b: ir.IRBuilder, rows: list[ir.Value]) -> ir.Value:
        """``<MR*WIDTH x float>`` with lane ``k*MR + i`` = lane ``k`` of ``rows[i]`` (a register transpose)."""
        w, n = self.cfg.width, len(rows)
        vs = list(rows)
        while len(vs) > 1:  # concatenate pairwise (same-length operands), padding with undef
            if len(vs) % 2:
                vs.append(ir.Constant(vs[0].type, None))
            half = vs[0].type.count
            idx = ir.Constant(ir.VectorType(I32, 2 * half), list(range(2 * half)))
            vs = [b.shuffle_vector(vs[j], vs[j + 1], idx) for j in range(0, len(vs), 2)]
        mask = ir.Constant(ir.VectorType(I32, n * w), [i * w + k for k in range(w) for i in range(n)])
        return b.shuffle_vector(vs[0], ir.Constant(vs[0].type, None), mask)

    # ------------------------------------------------------------------ micro-kernel
    def ukernel(self, rows: int = 0) -> ir.Function:
        """ukernel(Ap, Bp, kc, C, ldc, mv, nv, overwrite): C[:mv, :nv] (+)= Ap-panel @ Bp-panel.

        ``mv`` / ``nv`` are the rows / columns left from this tile on (clamped to ``rows`` / NR here).
        ``rows`` (default MR) < MR: a short kernel for the last rows of a block (the packed panel keeps
        its MR-row layout), so a 128-row block does not compute 4 padding rows of a 6-row tile.
        """
        cfg = self.cfg
        w, nvec = cfg.width, cfg.nr // cfg.width
        mr = rows or cfg.mr
        fn, b = self._fn(f"gemm_ukernel{rows or ''}", [PTR, PTR, I64, PTR, I64, I64, I64, I1])
        ap, bp, kc, c, ldc, mv, nv, overwrite = fn.args
        for a in (ap, bp, c):
            a.add_attribute("noalias")
        zero = const(self.vty, 0.0)
        undef = ir.Constant(self.vty, None)
        bcast = ir.Constant(ir.VectorType(I32, w), [0] * w)

        def step(kk: ir.Value, accs: list[list[ir.Value]]) -> list[list[ir.Value]]:
            bpk = self._gep(b, bp, b.mul(kk, I64(cfg.nr)))
            apk = self._gep(b, ap, b.mul(kk, I64(cfg.mr)))
            bv = [b.load(self._gep(b, bpk, j * w), typ=self.vty, align=32) for j in range(nvec)]
            new = []
            for i in range(mr):
                s = b.load(self._gep(b, apk, i), typ=F32, align=4)
                sv = b.shuffle_vector(b.insert_element(undef, s, I32(0)), undef, bcast)
                new.append([self._fma(b, sv, bv[j], accs[i][j]) for j in range(nvec)])
            return new

        def loop(name: str, k0: ir.Value, acc0: list[list[ir.Value]],
                 stride: int) -> tuple[ir.Value, list[list[ir.Value]]]:
            """k from k0 while k + stride <= kc, ``stride`` steps per iteration: (final k, accumulators)."""
            pre = b.block
            head = b.append_basic_block(f"{name}.head")
            body = b.append_basic_block(f"{name}.body")
            done = b.append_basic_block(f"{name}.done")
            b.branch(head)
            b.position_at_end(head)
            k = b.phi(I64, name=f"{name}.k")
            k.add_incoming(k0, pre)
            accs = [[b.phi(self.vty, name=f"{name}.acc{i}_{j}") for j in range(nvec)] for i in range(mr)]
            for i in range(mr):
                for j in range(nvec):
                    accs[i][j].add_incoming(acc0[i][j], pre)
            b.cbranch(b.icmp_signed("<=", b.add(k, I64(stride)), kc), body, done)
            b.position_at_end(body)
            new: list[list[ir.Value]] = [list(r) for r in accs]
            for u in range(stride):
                new = step(b.add(k, I64(u)) if u else k, new)
            for i in range(mr):
                for j in range(nvec):
                    accs[i][j].add_incoming(new[i][j], b.block)
            k.add_incoming(b.add(k, I64(stride)), b.block)
            b.branch(head)
            b.position_at_end(done)
            return k, [list(r) for r in accs]

        if cfg.prefetch_c:
            self._prefetch_tile(b, c, ldc, mr)
        # one K step per iteration (LLVM unrolls it by 2): unrolling by 4 measured no better on the avx512 host
        # (the loop is FMA bound once B is in L1: 24 FMAs, 4 loads, 6 broadcasts per step)
        _, accs = loop("k", I64(0), [[zero] * nvec for _ in range(mr)], 1)

        full = b.and_(b.icmp_signed(">=", mv, I64(mr)), b.icmp_signed(">=", nv, I64(cfg.nr)))
        with b.if_else(full) as (then, other):
            with then:
                for i in range(mr):
                    row = self._gep(b, c, b.mul(I64(i), ldc))
                    for j in range(nvec):
                        p = self._gep(b, row, j * w)
                        old = b.load(p, typ=self.vty, align=4)
                        val = b.select(overwrite, accs[i][j], b.fadd(old, accs[i][j]))
                        b.store(val, p).align = 4
            with other:
                # edge tile: rows below ``mv``, lanes below ``nv`` (masked vector loads and stores)
                masks = [self._lane_mask(b, nv, j * w) for j in range(nvec)]
                for i in range(mr):
                    with b.if_then(b.icmp_signed("<", I64(i), mv)):
                        row = self._gep(b, c, b.mul(I64(i), ldc))
                        for j in range(nvec):
                            p = self._gep(b, row, j * w)
                            old = b.call(self.mload, [p, I32(4), masks[j], zero])
                            val = b.select(overwrite, accs[i][j], b.fadd(old, accs[i][j]))
                            b.call(self.mstore, [val, p, I32(4), masks[j]])
        b.ret_void()
        return fn

    def _prefetch_tile(self, b: ir.IRBuilder, c: ir.Value, ldc: ir.Value, rows: int) -> None:
        """Prefetch (for writing) every 64-byte line of a ``rows x NR`` C tile. A hint that never faults, so the
        rows and lanes past an edge tile's are harmless."""
        pf = intrinsic(self.m, "llvm.prefetch.p0", VOID, [PTR, I32, I32, I32])
        for i in range(rows):
            row = self._gep(b, c, b.mul(I64(i), ldc))
            for line in range(0, self.cfg.nr, 16):
                b.call(pf, [self._gep(b, row, line), I32(1), I32(3), I32(1)])

    def _fma(self, b: ir.IRBuilder, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
        op = "fma" if self.cfg.fma else "fmuladd"
        f = intrinsic(self.m, f"llvm.{op}.v{self.cfg.width}f32", self.vty, [self.vty] * 3)
        return b.call(f, [x, y, z])

    # ------------------------------------------------------------------ driver
    def driver(self, name: str, pack_a: ir.Function, pack_b: ir.Function,
               uk: dict[int, ir.Function]) -> ir.Function:
        """name(M, N, K, A, lda, B, ldb, C, ldc, accumulate): the blocked loop nest."""
        fn, b = self._fn(name, [I64, I64, I64, PTR, I64, PTR, I64, PTR, I64, I1])
        M, N, K, A, lda, B, ldb, C, ldc, acc = fn.args
        trans, b_t = pack_a.name.endswith("_t"), pack_b.name.endswith("_t")
        ret = b.append_basic_block("ret")
        work = b.append_basic_block("work")
        empty = b.or_(b.icmp_signed("<=", M, I64(0)), b.icmp_signed("<=", N, I64(0)))
        b.cbranch(empty, ret, work)
        b.position_at_end(work)
        # K == 0: out = 0 (or unchanged when accumulating)
        with b.if_else(b.icmp_signed("<=", K, I64(0))) as (no_k, has_k):
            with no_k:
                with b.if_then(b.not_(acc)):
                    with Loop(b, I64(0), M, 1, "zi") as i:
                        row = self._gep(b, C, b.mul(i, ldc))
                        with Loop(b, I64(0), N, 1, "zj") as j:
                            b.store(F32(0.0), self._gep(b, row, j))
            with has_k:
                self._blocked(b, M, N, K, A, lda, B, ldb, C, ldc, acc, (trans, b_t), pack_a, pack_b, uk)
        b.branch(ret)
        b.position_at_end(ret)
        b.ret_void()
        return fn

    def _aligned_alloc(self, b: ir.IRBuilder, nfloats: ir.Value) -> tuple[ir.Value, ir.Value]:
        raw = b.call(self.malloc, [b.add(b.mul(nfloats, I64(4)), I64(64))])
        addr = b.ptrtoint(raw, I64)
        aligned = b.and_(b.add(addr, I64(63)), I64(~63))
        return raw, b.inttoptr(aligned, PTR)

    def _blocked(self, b: ir.IRBuilder, M: ir.Value, N: ir.Value, K: ir.Value, A: ir.Value, lda: ir.Value,
                 B: ir.Value, ldb: ir.Value, C: ir.Value, ldc: ir.Value, acc: ir.Value, trans: tuple[bool, bool],
                 pack_a: ir.Function, pack_b: ir.Function, uk: dict[int, ir.Function]) -> None:
        """The blocked loop nest; ``trans``: (A given as S [K, M], B given as Bt [N, K])."""
        cfg = self.cfg
        a_t, b_t = trans
        kc_max = smin(b, K, I64(cfg.kc))
        nc_max = smin(b, N, I64(cfg.nc))
        nc_pad = b.mul(b.sdiv(b.add(nc_max, I64(cfg.nr - 1)), I64(cfg.nr)), I64(cfg.nr))
        mc_max = smin(b, M, I64(cfg.mc))
        mc_pad = b.mul(b.sdiv(b.add(mc_max, I64(cfg.mr - 1)), I64(cfg.mr)), I64(cfg.mr))
        raw_a, ap = self._aligned_alloc(b, b.mul(mc_pad, kc_max))
        raw_b, bp = self._aligned_alloc(b, b.mul(nc_pad, kc_max))
        with Loop(b, I64(0), N, cfg.nc, "jc") as jc:
            nc = smin(b, b.sub(N, jc), I64(cfg.nc))
            with Loop(b, I64(0), K, cfg.kc, "pc") as pc:
                kc = smin(b, b.sub(K, pc), I64(cfg.kc))
                overwrite = b.and_(b.icmp_signed("==", pc, I64(0)), b.not_(acc))
                b_off = b.add(b.mul(jc, ldb), pc) if b_t else b.add(b.mul(pc, ldb), jc)
                b.call(pack_b, [bp, self._gep(b, B, b_off), ldb, kc, nc])
                with Loop(b, I64(0), M, cfg.mc, "ic") as ic:
                    mc = smin(b, b.sub(M, ic), I64(cfg.mc))
                    a_off = b.add(b.mul(pc, lda), ic) if a_t else b.add(b.mul(ic, lda), pc)
                    b.call(pack_a, [ap, self._gep(b, A, a_off), lda, mc, kc])
                    with Loop(b, I64(0), nc, cfg.nr, "jr") as jr:
                        nv = b.sub(nc, jr)
                        bpanel = self._gep(b, bp, b.mul(jr, kc))
                        with Loop(b, I64(0), mc, cfg.mr, "ir") as ir_:
                            mv = b.sub(mc, ir_)
                            apanel = self._gep(b, ap, b.mul(ir_, kc))
                            cptr = self._gep(b, C, b.add(b.mul(b.add(ic, ir_), ldc), b.add(jc, jr)))
                            args = [apanel, bpanel, kc, cptr, ldc, mv, nv, overwrite]
                            self._call_uk(b, uk, mv, args)
        b.call(self.free, [raw_a])
        b.call(self.free, [raw_b])

    def _uk_rows(self) -> list[int]:
        """Row counts with a micro-kernel: MR, and 2 and 4 when below MR (the short edge kernels)."""
        return sorted({r for r in (2, 4) if r < self.cfg.mr} | {self.cfg.mr})

    def _call_uk(self, b: ir.IRBuilder, uk: dict[int, ir.Function], mv: ir.Value, args: list[ir.Value]) -> None:
        """Call the shortest micro-kernel covering the ``mv`` rows left (the full one when ``mv >= MR``)."""
        rows = sorted(uk)
        if len(rows) == 1:
            b.call(uk[rows[0]], args)
            return
        with b.if_else(b.icmp_signed("<=", mv, I64(rows[0]))) as (short, rest):
            with short:
                b.call(uk[rows[0]], args)
            with rest:
                self._call_uk(b, {r: f for r, f in uk.items() if r != rows[0]}, mv, args)

    # ------------------------------------------------------------------ public entry points
    def build(self) -> dict[str, ir.Function]:
        uk = {cfg_rows: self.ukernel(cfg_rows if cfg_rows < self.cfg.mr else 0) for cfg_rows in self._uk_rows()}
        pa = {"t": self.pack_a(True), "n": self.pack_a(False)}
        pb = {"": self.pack_b(), "_vt": self.pack_b(True)}
        out: dict[str, ir.Function] = {}
        cores: dict[str, ir.Function] = {}
        for vt, pack_b in pb.items():
            for a, pack_a in pa.items():
                core = cores[f"{a}{vt}"] = self.driver(f"gemm_core_{a}{vt}", pack_a, pack_b, uk)
                fn, b = self._fn(f"gemm_{a}n{vt}", [PTR, I64, PTR, I64, PTR, I64, I64, I64, I64, I64], internal=False)
                o, ldo, st, lds, v, ldv, M, N, K, acc = fn.args
                b.call(core, [M, N, K, st, lds, v, ldv, o, ldo, b.icmp_signed("!=", acc, I64(0))])
                b.ret_void()
                out[fn.name[len(self.prefix):]] = fn
        core_n = cores["n"]
        fn, b = self._fn("sgemm", [I64, I64, I64, PTR, I64, PTR, I64, PTR, I64], internal=False)
        M, N, K, a, lda, bm, ldb, c, ldc = fn.args
        b.call(core_n, [M, N, K, a, lda, bm, ldb, c, ldc, I1(0)])
        b.ret_void()
        out["sgemm"] = fn
        return out


def define_gemm(module: ir.Module, cfg: GemmConfig | None = None, prefix: str = "") -> dict[str, ir.Function]:
    """Add ``<prefix>gemm_tn``, ``<prefix>gemm_nn``, their ``_vt`` forms and ``<prefix>sgemm`` (plus internal
    helpers) to ``module``."""
    return _Gen(module, cfg or config_for(), prefix).build()


def gemm_module(cfg: GemmConfig | None = None) -> ir.Module:
    """A standalone module with the gemm entry points."""
    module = ir.Module(name="trn_gemm")
    define_gemm(module, cfg)
    return module


_P, _I = ctypes.c_void_p, ctypes.c_int64


class Gemm:
    """Compiled gemm entry points with numpy conveniences."""

    def __init__(self, cfg: GemmConfig | None = None) -> None:
        self.cfg = cfg or config_for()
        self.obj = llvm.compile_ir(gemm_module(self.cfg))
        self.lib = llvm.load_object(self.obj)
        self.gemm_tn_raw = self.lib.cfunc("gemm_tn", None, [_P, _I, _P, _I, _P, _I, _I, _I, _I, _I])
        self.sgemm_raw = self.lib.cfunc("sgemm", None, [_I, _I, _I, _P, _I, _P, _I, _P, _I])
        self._entries: dict[str, Any] = {}

    @staticmethod
    def _check(a: np.ndarray, name: str) -> None:
        if a.dtype != np.float32 or a.ndim != 2:
            raise ValueError(f"{name} must be a 2-d float32 array")
        if a.size and (a.strides[1] != 4 or a.strides[0] % 4 or a.strides[0] < 4 * a.shape[1]):
            raise ValueError(f"{name} must be row-major with unit column stride")

    @staticmethod
    def _rowmajor(a: np.ndarray) -> np.ndarray:
        """``a`` itself when the kernels can read it in place, else a row-major copy."""
        if a.size and (a.strides[1] != 4 or a.strides[0] % 4 or a.strides[0] < 4 * a.shape[1]):
            return np.ascontiguousarray(a)
        return a

    @staticmethod
    def _ld(a: np.ndarray) -> int:
        """Leading dimension in elements (any value >= the width for empty arrays)."""
        return a.strides[0] // 4 if a.size else max(a.shape[1], 1)

    def gemm_tn(self, out: np.ndarray, s: np.ndarray, v: np.ndarray, accumulate: bool = False) -> np.ndarray:
        """``out (+)= s.T @ v`` in place (s: [K, M], v: [K, N], out: [M, N])."""
        for a, nm in ((out, "out"), (s, "s"), (v, "v")):
            self._check(a, nm)
        (K, M), (K2, N) = s.shape, v.shape
        if K != K2 or out.shape != (M, N):
            raise ValueError(f"shape mismatch {s.shape}^T @ {v.shape} -> {out.shape}")
        self.gemm_tn_raw(out.ctypes.data, self._ld(out), s.ctypes.data, self._ld(s), v.ctypes.data, self._ld(v),
                         M, N, K, int(accumulate))
        return out

    @staticmethod
    def _unit_cols(a: np.ndarray) -> bool:
        return not a.size or (a.strides[1] == 4 and a.strides[0] % 4 == 0 and a.strides[0] >= 4 * a.shape[1])

    def matmul(self, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``a @ b`` for 2-d float32 arrays (``out`` optional, row-major). Transposed views (``x.T``) are read in
        place (``gemm_tn`` for ``a``, the ``_vt`` entries for ``b``); other layouts are copied first."""
        a = np.asarray(a, dtype=np.float32)
        b = np.asarray(b, dtype=np.float32)
        if a.ndim != 2 or b.ndim != 2:
            raise ValueError("matmul needs 2-d arrays")
        (M, K), (K2, N) = a.shape, b.shape
        if K != K2:
            raise ValueError(f"shape mismatch {a.shape} @ {b.shape}")
        a_t = not self._unit_cols(a) and self._unit_cols(a.T)
        b_t = not self._unit_cols(b) and self._unit_cols(b.T)
        st = a.T if a_t else self._rowmajor(a)
        v = b.T if b_t else self._rowmajor(b)
        if out is None:
            out = np.empty((M, N), np.float32)
        self._check(out, "out")
        name = f"gemm_{'t' if a_t else 'n'}n{'_vt' if b_t else ''}"
        fn = self._entries.get(name)
        if fn is None:
            fn = self._entries[name] = self.lib.cfunc(name, None, [_P, _I, _P, _I, _P, _I, _I, _I, _I, _I])
        fn(out.ctypes.data, self._ld(out), st.ctypes.data, self._ld(st), v.ctypes.data, self._ld(v), M, N, K, 0)
        return out


_default: Gemm | None = None
_default_lock = threading.Lock()


def default_gemm() -> Gemm:
    """The process-wide :class:`Gemm` with the ISA path's configuration (compiled on first use)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Gemm()
        return _default
