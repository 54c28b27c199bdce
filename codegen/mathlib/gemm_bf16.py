"""bf16 matrix multiply with fp32 accumulation on AMX-BF16 tiles or AVX512-BF16 dot products (``llvmlite.ir``).

Entry points emitted by :func:`define_gemm_bf16` (C ABI; pointers as ``ptr``; sizes and leading
dimensions as ``i64``, in elements; operands bf16 (2 bytes), ``out`` fp32):

* ``gemm_bf16_tn(out, ldo, S, lds, V, ldv, M, N, K, accumulate)``: ``out[M,N] (+)= S[K,M]^T @ V[K,N]``;
* ``gemm_bf16_nn(out, ldo, A, lda, V, ldv, M, N, K, accumulate)``: ``out[M,N] (+)= A[M,K] @ V[K,N]``.

Products of bf16 are exact in fp32 and every sum is fp32, as torch's CPU bf16 matmul does before
it rounds the result; the caller rounds ``out`` to bf16 where it must.

Both kinds (``codegen.isa``'s ``bf16`` field) use the BLIS structure of ``codegen.mathlib.gemm``: ``KC x NC``
blocks of ``V`` and ``MC x KC`` blocks of ``A`` packed (zero padded) into a 64-byte aligned
workspace, ``V`` in the *pair* (VNNI) layout the dot-product instructions read: for a panel of
``P`` columns, ``Vp[kp][j][t] = V[2 kp + t, j]`` (``t`` in 0, 1), so one 64-byte row holds 16
columns' pairs.

* ``amx``: a 32 x 32 block of ``out`` in four 16 x 16 fp32 tiles (``tmm0..3``), two A tiles of 16 rows x
  32 bf16 (``tmm4, 5``) and two B tiles of 16 pairs x 16 columns (``tmm6, 7``): four ``tdpbf16ps`` per
  32-deep step. ``A`` is packed in 16 x 32 tiles (1 KiB, contiguous), B in 16-column panels. Full
  blocks load and store ``out`` as tiles; edge blocks go through a 32 x 32 scratch block. Each call
  configures the tiles (``ldtilecfg``) and releases them (``tilerelease``): the tile state is per
  thread. Linux lets a process use the tiles only after ``arch_prctl(ARCH_REQ_XCOMP_PERM)``
  (``codegen.isa.request_amx``), which the path's selection asks for.
* ``avx512bf16``: the fp32 gemm's 6 x 64 register tile (24 zmm accumulators) with ``vdpbf16ps``
  (16 lanes x 2 products each) in place of the FMA: per pair of K, 4 loads of the B panel and 6
  broadcasts of A's pairs (``A`` packed as ``Ap[kp][i][t]``).

Example:
    >>> import numpy as np, torch
    >>> from codegen import isa
    >>> from codegen.mathlib.gemm_bf16 import GemmBf16
    >>> g = GemmBf16(isa.selected().bf16) if isa.selected().bf16 != "widen" else None
    >>> a, b = torch.randn(40, 70).bfloat16(), torch.randn(70, 33).bfloat16()
    >>> out = g.matmul(a, b) if g else (a.float() @ b.float()).numpy()
    >>> bool(np.allclose(out, (a.float() @ b.float()).numpy(), atol=1e-3))
    True
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir

from codegen import llvm
from codegen.irutil import F32, I1, I8, I32, I64, PTR, VOID, Loop, const, intrinsic, smin
from codegen.mathlib.gemm import GemmConfig, new_function
from codegen.mathlib.gemm import _Gen as _F32Gen

I16 = ir.IntType(16)

__all__ = ["Bf16Config", "BF16_CONFIGS", "define_gemm_bf16", "gemm_bf16_module", "GemmBf16", "default_gemm_bf16",
           "BFloat16Type", "BF16", "runnable_kinds"]


class BFloat16Type(ir.types._BaseFloatType):
    """LLVM's ``bfloat`` (llvmlite has no such type): the element type of ``vdpbf16ps``'s operands."""

    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self) -> str:
        return "bfloat"


BFloat16Type._create_instance()
BF16 = BFloat16Type()


@dataclass(frozen=True)
class Bf16Config:
    """Blocking of one bf16 kind: register/tile block ``mr x nr``, cache blocks ``kc`` (even), ``mc``, ``nc``."""

    kind: str
    mr: int
    nr: int
    kc: int
    mc: int
    nc: int

    def __post_init__(self) -> None:
        if self.kind not in ("amx", "avx512bf16") or self.kc % 32 or self.mc % self.mr or self.nc % self.nr:
            raise ValueError(f"inconsistent bf16 gemm blocking {self}")

    @property
    def a_rows(self) -> int:
        """Rows of one packed A panel (16: an AMX tile; else the micro-tile's rows)."""
        return 16 if self.kind == "amx" else self.mr

    @property
    def a_chunk(self) -> int:
        """K elements per packed A row chunk (32: an AMX tile row; 2: a pair)."""
        return 32 if self.kind == "amx" else 2

    @property
    def b_cols(self) -> int:
        """Columns of one packed B panel (16: an AMX tile; else the micro-tile's columns)."""
        return 16 if self.kind == "amx" else self.nr


#: Blocking per kind, measured on an Intel Xeon (Emerald Rapids, 48 KiB L1d, 2 MiB L2; docs/isa_paths.md). AMX:
#: MC 32 and KC 384: one 32 x 384 block of A (24 KiB) stays in L1 while the 32-column B panels (24 KiB each) stream
#: from L2; at 1024^3 (1 thread, CPU time, best of 9 alternating with torch, load 7-9) it measured 0.92-0.95x torch
#: where KC 1024 (A 64 KiB: past L1) measured 0.55-0.59x, KC 256/512 0.86/0.88x and MC 64-128 0.65-0.80x.
BF16_CONFIGS: dict[str, Bf16Config] = {
    "amx": Bf16Config("amx", mr=32, nr=32, kc=384, mc=32, nc=1024),
    "avx512bf16": Bf16Config("avx512bf16", mr=6, nr=64, kc=512, mc=144, nc=3072),
}


def _tile_config() -> bytes:
    """The 64-byte ``ldtilecfg`` operand: palette 1, tiles 0..7 of 16 rows x 64 bytes."""
    cfg = bytearray(64)
    cfg[0] = 1
    for t in range(8):
        cfg[16 + 2 * t] = 64
        cfg[48 + t] = 16
    return bytes(cfg)


class _Gen:
    def __init__(self, module: ir.Module, cfg: Bf16Config, prefix: str) -> None:
        self.m, self.cfg, self.prefix = module, cfg, prefix
        self.malloc = intrinsic(module, "malloc", PTR, [I64])
        self.free = intrinsic(module, "free", VOID, [PTR])

    def _fn(self, name: str, args: list[ir.Type], internal: bool = True) -> tuple[ir.Function, ir.IRBuilder]:
        return new_function(self.m, self.prefix + name, args, internal)

    @staticmethod
    def _gep(b: ir.IRBuilder, p: ir.Value, idx: ir.Value | int, ty: ir.Type = I16) -> ir.Value:
        return b.gep(p, [idx if isinstance(idx, ir.Value) else I64(idx)], source_etype=ty, inbounds=True)

    def _mask(self, b: ir.IRBuilder, n_valid: ir.Value, w: int) -> ir.Value:
        """``<w x i1>``: lane l on when l < n_valid."""
        lanes = ir.Constant(ir.VectorType(I64, w), list(range(w)))
        splat = b.insert_element(ir.Constant(ir.VectorType(I64, w), None), n_valid, I32(0))
        splat = b.shuffle_vector(splat, ir.Constant(ir.VectorType(I64, w), None),
                                 ir.Constant(ir.VectorType(I32, w), [0] * w))
        return b.icmp_signed("<", lanes, splat)

    def _mload(self, b: ir.IRBuilder, p: ir.Value, mask: ir.Value, w: int, ety: ir.Type = I16) -> ir.Value:
        vty = ir.VectorType(ety, w)
        sfx = "i16" if ety == I16 else "f32"
        f = intrinsic(self.m, f"llvm.masked.load.v{w}{sfx}.p0", vty, [PTR, I32, ir.VectorType(I1, w), vty])
        return b.call(f, [p, I32(2 if ety == I16 else 4), mask, const(vty, 0)])

    def _mstore(self, b: ir.IRBuilder, v: ir.Value, p: ir.Value, mask: ir.Value, w: int) -> None:
        vty = ir.VectorType(F32, w)
        f = intrinsic(self.m, f"llvm.masked.store.v{w}f32.p0", VOID, [vty, PTR, I32, ir.VectorType(I1, w)])
        b.call(f, [v, p, I32(4), mask])

    # ------------------------------------------------------------------ packing
    def pack_b(self) -> ir.Function:
        """pack_b(Bp, B, ldb, kc, nc, kp): ``P``-column panels of pairs, ``kp`` pairs deep (zero padded).

        Pairs of whole rows of two panels at a time (two ``2P``-element loads, two interleaving shuffles, two
        64-byte stores); the last pair of an odd ``kc``, the zero padding and a ragged last panel take the
        masked loop."""
        pw = self.cfg.b_cols
        fn, b = self._fn("gemm_bf16_pack_b", [PTR, PTR, I64, I64, I64, I64])
        bp, src, ldb, kc, nc, kp_n = fn.args
        kpad = b.mul(kp_n, I64(2))
        kfull = b.sdiv(kc, I64(2))  # pairs whose two rows are inside
        v2 = ir.VectorType(I16, 2 * pw)
        halves = [ir.Constant(ir.VectorType(I32, 2 * pw), [x for j in range(pw)
                                                           for x in (h * pw + j, (h + 2) * pw + j)]) for h in range(2)]
        n2 = b.mul(b.sdiv(nc, I64(2 * pw)), I64(2 * pw))
        with Loop(b, I64(0), n2, 2 * pw, "jq") as jq:
            panels = [self._gep(b, bp, b.mul(b.add(jq, I64(h * pw)), kpad)) for h in range(2)]
            with Loop(b, I64(0), kfull, 1, "kq") as kp:
                r0p = self._gep(b, src, b.add(b.mul(b.mul(kp, I64(2)), ldb), jq))
                r0 = b.load(r0p, typ=v2, align=2)
                r1 = b.load(self._gep(b, r0p, ldb), typ=v2, align=2)
                for h in range(2):
                    dst = self._gep(b, panels[h], b.mul(kp, I64(2 * pw)))
                    b.store(b.shuffle_vector(r0, r1, halves[h]), dst).align = 64
            self._pack_b_masked(b, (bp, src, ldb, kc, nc, kp_n), jq, b.add(jq, I64(2 * pw)), kfull)
        self._pack_b_masked(b, (bp, src, ldb, kc, nc, kp_n), n2, nc, I64(0))
        b.ret_void()
        return fn

    def _pack_b_masked(self, b: ir.IRBuilder, args: tuple[ir.Value, ...], j0: ir.Value, j1: ir.Value,
                       kp0: ir.Value) -> None:
        """Pack panels ``j0 .. j1`` from pair ``kp0`` on with masked loads (rows past ``kc``, columns past ``nc``
        read as zero)."""
        bp, src, ldb, kc, nc, kp_n = args
        pw = self.cfg.b_cols
        inter = ir.Constant(ir.VectorType(I32, 2 * pw), [x for j in range(pw) for x in (j, pw + j)])
        with Loop(b, j0, j1, pw, "jp") as jp:
            panel = self._gep(b, bp, b.mul(jp, b.mul(kp_n, I64(2))))
            mask = self._mask(b, b.sub(nc, jp), pw)

            def row(k: ir.Value) -> ir.Value:
                ok = b.icmp_signed("<", k, kc)
                p = b.select(ok, self._gep(b, src, b.add(b.mul(k, ldb), jp)), src)  # no address past the operand
                return self._mload(b, p, b.and_(mask, self._splat(b, ok, pw)), pw)

            with Loop(b, kp0, kp_n, 1, "kp") as kp:
                k0 = b.mul(kp, I64(2))
                v = b.shuffle_vector(row(k0), row(b.add(k0, I64(1))), inter)
                b.store(v, self._gep(b, panel, b.mul(kp, I64(2 * pw)))).align = 64

    @staticmethod
    def _splat(b: ir.IRBuilder, bit: ir.Value, w: int) -> ir.Value:
        v = b.insert_element(ir.Constant(ir.VectorType(I1, w), None), bit, I32(0))
        return b.shuffle_vector(v, ir.Constant(ir.VectorType(I1, w), None), ir.Constant(ir.VectorType(I32, w), [0] * w))

    def pack_a(self, trans: bool) -> ir.Function:
        """pack_a(Ap, A, ld, mc, kc, kp): ``R``-row panels of ``C``-element K chunks, ``Ap[i/R][k/C][i%R][k%C]``
        (zero padded to ``2 kp`` deep). ``trans``: ``A[i, k]`` is at ``k*ld + i`` (the stationary [K, M]).

        Untransposed, full panels' full chunks are plain row copies; the rest (ragged rows, the last chunk,
        the padding) takes masked loads."""
        R, C = self.cfg.a_rows, self.cfg.a_chunk
        fn, b = self._fn("gemm_bf16_pack_a_t" if trans else "gemm_bf16_pack_a_n", [PTR, PTR, I64, I64, I64, I64])
        ap, src, ld, mc, kc, kp_n = fn.args
        kpad = b.mul(kp_n, I64(2))
        if trans:
            self._pack_a_t(b, fn.args, kpad)
            b.ret_void()
            return fn
        vty = ir.VectorType(I16, C)
        kf = b.mul(b.sdiv(kc, I64(C)), I64(C))
        mf = b.mul(b.sdiv(mc, I64(R)), I64(R))
        with Loop(b, I64(0), mf, R, "ipf") as ip:
            panel = self._gep(b, ap, b.mul(ip, kpad))
            with Loop(b, I64(0), kf, C, "kf") as k0:
                chunk = self._gep(b, panel, b.mul(k0, I64(R)))
                for r in range(R):
                    p = self._gep(b, src, b.add(b.mul(b.add(ip, I64(r)), ld), k0))
                    b.store(b.load(p, typ=vty, align=2), self._gep(b, chunk, r * C)).align = 2
            self._pack_a_masked(b, fn.args, kpad, ip, b.add(ip, I64(R)), kf)
        self._pack_a_masked(b, fn.args, kpad, mf, mc, I64(0))
        b.ret_void()
        return fn

    def _pack_a_masked(self, b: ir.IRBuilder, args: list[ir.Value], kpad: ir.Value, i0: ir.Value, i1: ir.Value,
                       k_start: ir.Value) -> None:
        """Untransposed panels from row ``i0`` to ``i1``, chunks from ``k_start`` to ``kpad`` (masked loads)."""
        ap, src, ld, mc, kc, _ = args
        R, C = self.cfg.a_rows, self.cfg.a_chunk
        with Loop(b, i0, i1, R, "ipm") as ip:
            panel = self._gep(b, ap, b.mul(ip, kpad))
            with Loop(b, k_start, kpad, C, "km") as k0:
                chunk = self._gep(b, panel, b.mul(k0, I64(R)))
                km = self._mask(b, b.sub(kc, k0), C)
                for r in range(R):
                    i = b.add(ip, I64(r))
                    row_ok = b.icmp_signed("<", i, mc)
                    p = b.select(row_ok, self._gep(b, src, b.add(b.mul(i, ld), k0)), src)
                    v = self._mload(b, p, b.and_(km, self._splat(b, row_ok, C)), C)
                    b.store(v, self._gep(b, chunk, r * C)).align = 2

    def _pack_a_t(self, b: ir.IRBuilder, args: list[ir.Value], kpad: ir.Value) -> None:
        """The transposed stationary (``A[i, k]`` at ``k*ld + i``): full ``R x C`` chunks as ``C`` row loads of ``R``
        elements transposed in registers (one shuffle), the rest element by element."""
        ap, src, ld, mc, kc, _ = args
        R, C = self.cfg.a_rows, self.cfg.a_chunk
        kf = b.mul(b.sdiv(kc, I64(C)), I64(C))
        mf = b.mul(b.sdiv(mc, I64(R)), I64(R))
        rty = ir.VectorType(I16, R)
        with Loop(b, I64(0), mf, R, "ipt") as ip:
            panel = self._gep(b, ap, b.mul(ip, kpad))
            with Loop(b, I64(0), kf, C, "kt") as k0:
                rows = [b.load(self._gep(b, src, b.add(b.mul(b.add(k0, I64(t)), ld), ip)), typ=rty, align=2)
                        for t in range(C)]
                while len(rows) > 1:  # concatenate pairwise: lane t * R + r is A[ip + r, k0 + t]
                    n = rows[0].type.count
                    cat = ir.Constant(ir.VectorType(I32, 2 * n), list(range(2 * n)))
                    rows = [b.shuffle_vector(rows[j], rows[j + 1], cat) for j in range(0, len(rows), 2)]
                whole = rows[0]
                tr = ir.Constant(ir.VectorType(I32, R * C), [t * R + r for r in range(R) for t in range(C)])
                dst = self._gep(b, panel, b.mul(k0, I64(R)))
                b.store(b.shuffle_vector(whole, ir.Constant(whole.type, None), tr), dst).align = 2
        self._pack_a_t_elems(b, args, kpad, I64(0), mf, kf)
        self._pack_a_t_elems(b, args, kpad, mf, mc, I64(0))

    def _pack_a_t_elems(self, b: ir.IRBuilder, args: list[ir.Value], kpad: ir.Value, i0: ir.Value, i1: ir.Value,
                        k_start: ir.Value) -> None:
        """Transposed panels from row ``i0`` to ``i1``, chunks from ``k_start`` on, element by element."""
        ap, src, ld, mc, kc, _ = args
        R, C = self.cfg.a_rows, self.cfg.a_chunk
        vty = ir.VectorType(I16, C)
        with Loop(b, i0, i1, R, "ip") as ip:
            panel = self._gep(b, ap, b.mul(ip, kpad))
            with Loop(b, k_start, kpad, C, "kc") as k0:
                chunk = self._gep(b, panel, b.mul(k0, I64(R)))
                for r in range(R):
                    i = b.add(ip, I64(r))
                    row_ok = b.icmp_signed("<", i, mc)
                    vals = []
                    for t in range(C):
                        k = b.add(k0, I64(t))
                        ok = b.and_(row_ok, b.icmp_signed("<", k, kc))
                        # clamp the address so a skipped element never reads outside the operand
                        idx = b.select(ok, b.add(b.mul(k, ld), i), I64(0))
                        x = b.load(self._gep(b, src, idx), typ=I16, align=2)
                        vals.append(b.select(ok, x, I16(0)))
                    v = ir.Constant(vty, None)
                    for t, x in enumerate(vals):
                        v = b.insert_element(v, x, I32(t))
                    b.store(v, self._gep(b, chunk, r * C)).align = 2

    # ------------------------------------------------------------------ micro-kernels
    def amx_ukernel(self) -> ir.Function:
        """uk(Ap, Bp, kp, C, ldc, mv, nv, overwrite, scratch): ``C[:mv, :nv] (+)=`` a 32 x 32 block on AMX tiles."""
        fn, b = self._fn("gemm_bf16_amx_uk", [PTR, PTR, I64, PTR, I64, I64, I64, I1, PTR])
        ap, bp, kp_n, c, ldc, mv, nv, overwrite, scratch = fn.args
        m = self.m
        tload = intrinsic(m, "llvm.x86.tileloadd64", VOID, [I8, PTR, I64])
        tstore = intrinsic(m, "llvm.x86.tilestored64", VOID, [I8, PTR, I64])
        tzero = intrinsic(m, "llvm.x86.tilezero", VOID, [I8])
        dp = intrinsic(m, "llvm.x86.tdpbf16ps", VOID, [I8, I8, I8])
        kpad = b.mul(kp_n, I64(2))
        half = b.mul(kpad, I64(16))  # elements from one 16-row A panel (16-column B panel) to the next
        ldc_b = b.mul(ldc, I64(4))
        full = b.and_(b.icmp_signed(">=", mv, I64(32)), b.icmp_signed(">=", nv, I64(32)))
        # C tile t = 2 * (row half) + (column half)
        offs_c = [(0, 0), (0, 16), (16, 0), (16, 16)]

        def c_at(base: ir.Value, ld: ir.Value, r: int, col: int) -> ir.Value:
            return self._gep(b, base, b.add(b.mul(I64(r), ld), I64(col)), F32)

        with b.if_else(overwrite) as (zero, load):
            with zero:
                for t in range(4):
                    b.call(tzero, [I8(t)])
            with load:
                with b.if_else(full) as (direct, edge):
                    with direct:
                        for t, (r, col) in enumerate(offs_c):
                            b.call(tload, [I8(t), c_at(c, ldc, r, col), ldc_b])
                    with edge:
                        self._edge_copy(b, c, ldc, scratch, mv, nv, to_scratch=True)
                        for t, (r, col) in enumerate(offs_c):
                            b.call(tload, [I8(t), c_at(scratch, I64(32), r, col), I64(128)])
        with Loop(b, I64(0), kpad, 32, "kb") as kb:
            a0 = self._gep(b, ap, b.mul(kb, I64(16)))
            b0 = self._gep(b, bp, b.mul(kb, I64(16)))
            b.call(tload, [I8(4), a0, I64(64)])
            b.call(tload, [I8(6), b0, I64(64)])
            b.call(tload, [I8(5), self._gep(b, a0, half), I64(64)])
            b.call(tload, [I8(7), self._gep(b, b0, half), I64(64)])
            b.call(dp, [I8(0), I8(4), I8(6)])
            b.call(dp, [I8(1), I8(4), I8(7)])
            b.call(dp, [I8(2), I8(5), I8(6)])
            b.call(dp, [I8(3), I8(5), I8(7)])
        with b.if_else(full) as (direct, edge):
            with direct:
                for t, (r, col) in enumerate(offs_c):
                    b.call(tstore, [I8(t), c_at(c, ldc, r, col), ldc_b])
            with edge:
                for t, (r, col) in enumerate(offs_c):
                    b.call(tstore, [I8(t), c_at(scratch, I64(32), r, col), I64(128)])
                self._edge_copy(b, c, ldc, scratch, mv, nv, to_scratch=False)
        b.ret_void()
        return fn

    def _edge_copy(self, b: ir.IRBuilder, c: ir.Value, ldc: ir.Value, scratch: ir.Value, mv: ir.Value,
                   nv: ir.Value, to_scratch: bool) -> None:
        """Copy ``C[:min(mv,32), :min(nv,32)]`` to the 32 x 32 scratch block (zeros elsewhere), or back."""
        rows = smin(b, mv, I64(32))
        masks = [self._mask(b, b.sub(nv, I64(16 * h)), 16) for h in range(2)]
        with Loop(b, I64(0), I64(32), 1, "er") as r:
            ok = b.icmp_signed("<", r, rows)
            for h in range(2):
                src = self._gep(b, c, b.add(b.mul(r, ldc), I64(16 * h)), F32)
                dst = self._gep(b, scratch, b.add(b.mul(r, I64(32)), I64(16 * h)), F32)
                m = b.and_(masks[h], self._splat(b, ok, 16))
                if to_scratch:
                    b.store(self._mload(b, src, m, 16, F32), dst).align = 4
                else:
                    self._mstore(b, b.load(dst, typ=ir.VectorType(F32, 16), align=4), src, m, 16)

    # ------------------------------------------------------------------ driver
    def driver(self, name: str, pack_a: ir.Function, pack_b: ir.Function, uk: Any) -> ir.Function:
        """name(M, N, K, A, lda, B, ldb, C, ldc, accumulate): the blocked loop nest (C fp32, A and B bf16)."""
        fn, b = self._fn(name, [I64, I64, I64, PTR, I64, PTR, I64, PTR, I64, I1])
        M, N, K, A, lda, B, ldb, C, ldc, acc = fn.args
        ret = b.append_basic_block("ret")
        work = b.append_basic_block("work")
        b.cbranch(b.or_(b.icmp_signed("<=", M, I64(0)), b.icmp_signed("<=", N, I64(0))), ret, work)
        b.position_at_end(work)
        with b.if_else(b.icmp_signed("<=", K, I64(0))) as (no_k, has_k):
            with no_k:
                with b.if_then(b.not_(acc)):
                    with Loop(b, I64(0), M, 1, "zi") as i:
                        row = self._gep(b, C, b.mul(i, ldc), F32)
                        with Loop(b, I64(0), N, 1, "zj") as j:
                            b.store(F32(0.0), self._gep(b, row, j, F32))
            with has_k:
                self._blocked(b, M, N, K, A, lda, B, ldb, C, ldc, acc, pack_a.name.endswith("_t"), pack_a, pack_b,
                              uk)
        b.branch(ret)
        b.position_at_end(ret)
        b.ret_void()
        return fn

    def _pairs(self, b: ir.IRBuilder, kc: ir.Value) -> ir.Value:
        """Pairs of K a ``kc``-deep block is packed to (a multiple of 16 on AMX: 32-deep tiles)."""
        step = 32 if self.cfg.kind == "amx" else 2
        return b.mul(b.sdiv(b.add(kc, I64(step - 1)), I64(step)), I64(step // 2))

    def _alloc(self, b: ir.IRBuilder, nbytes: ir.Value) -> tuple[ir.Value, ir.Value]:
        raw = b.call(self.malloc, [b.add(nbytes, I64(64))])
        addr = b.ptrtoint(raw, I64)
        return raw, b.inttoptr(b.and_(b.add(addr, I64(63)), I64(~63)), PTR)

    def _blocked(self, b: ir.IRBuilder, M: ir.Value, N: ir.Value, K: ir.Value, A: ir.Value, lda: ir.Value,
                 B: ir.Value, ldb: ir.Value, C: ir.Value, ldc: ir.Value, acc: ir.Value, trans: bool,
                 pack_a: ir.Function, pack_b: ir.Function, uk: Any) -> None:
        cfg = self.cfg
        amx = cfg.kind == "amx"
        kpad_max = b.mul(self._pairs(b, smin(b, K, I64(cfg.kc))), I64(2))
        nc_pad = b.mul(b.sdiv(b.add(smin(b, N, I64(cfg.nc)), I64(cfg.nr - 1)), I64(cfg.nr)), I64(cfg.nr))
        mc_pad = b.mul(b.sdiv(b.add(smin(b, M, I64(cfg.mc)), I64(cfg.mr - 1)), I64(cfg.mr)), I64(cfg.mr))
        raw_a, ap = self._alloc(b, b.mul(b.mul(mc_pad, kpad_max), I64(2)))
        raw_b, bp = self._alloc(b, b.mul(b.mul(nc_pad, kpad_max), I64(2)))
        raw_s, scratch = self._alloc(b, I64(32 * 32 * 4))
        if amx:
            b.call(intrinsic(self.m, "llvm.x86.ldtilecfg", VOID, [PTR]), [self._tilecfg()])
        with Loop(b, I64(0), N, cfg.nc, "jc") as jc:
            nc = smin(b, b.sub(N, jc), I64(cfg.nc))
            with Loop(b, I64(0), K, cfg.kc, "pc") as pc:
                kc = smin(b, b.sub(K, pc), I64(cfg.kc))
                kp = self._pairs(b, kc)
                kpad = b.mul(kp, I64(2))
                overwrite = b.and_(b.icmp_signed("==", pc, I64(0)), b.not_(acc))
                b.call(pack_b, [bp, self._gep(b, B, b.add(b.mul(pc, ldb), jc)), ldb, kc, nc, kp])
                with Loop(b, I64(0), M, cfg.mc, "ic") as ic:
                    mc = smin(b, b.sub(M, ic), I64(cfg.mc))
                    a_off = b.add(b.mul(pc, lda), ic) if trans else b.add(b.mul(ic, lda), pc)
                    b.call(pack_a, [ap, self._gep(b, A, a_off), lda, mc, kc, kp])
                    with Loop(b, I64(0), nc, cfg.nr, "jr") as jr:
                        nv = b.sub(nc, jr)
                        bpanel = self._gep(b, bp, b.mul(jr, kpad))
                        with Loop(b, I64(0), mc, cfg.mr, "ir") as ir_:
                            mv = b.sub(mc, ir_)
                            apanel = self._gep(b, ap, b.mul(ir_, kpad))
                            cptr = self._gep(b, C, b.add(b.mul(b.add(ic, ir_), ldc), b.add(jc, jr)), F32)
                            if amx:
                                b.call(uk, [apanel, bpanel, kp, cptr, ldc, mv, nv, overwrite, scratch])
                            else:
                                uk(b, mv, [apanel, bpanel, kp, cptr, ldc, mv, nv, overwrite])
        if amx:
            b.call(intrinsic(self.m, "llvm.x86.tilerelease", VOID, []), [])
        for raw in (raw_a, raw_b, raw_s):
            b.call(self.free, [raw])

    def _tilecfg(self) -> ir.Value:
        name = self.prefix + "gemm_bf16_tilecfg"
        g = self.m.globals.get(name)
        if g is None:
            data = _tile_config()
            ty = ir.ArrayType(I8, len(data))
            g = ir.GlobalVariable(self.m, ty, name)
            g.initializer = ir.Constant(ty, bytearray(data))
            g.global_constant = True
            g.linkage = "internal"
            g.align = 64
        return g

    def build(self) -> dict[str, ir.Function]:
        pb = self.pack_b()
        if self.cfg.kind == "amx":
            uk: Any = self.amx_ukernel()
        else:
            f32 = _DotGen(self.m, GemmConfig(mr=self.cfg.mr, nr=self.cfg.nr, kc=self.cfg.kc, mc=self.cfg.mc,
                                             nc=self.cfg.nc, width=16), self.prefix + "bf16_")
            kernels = {r: f32.ukernel(r if r < self.cfg.mr else 0) for r in f32._uk_rows()}

            def uk(b: ir.IRBuilder, mv: ir.Value, args: list[ir.Value]) -> None:
                f32._call_uk(b, kernels, mv, args)
        out: dict[str, ir.Function] = {}
        for trans, entry in ((True, "gemm_bf16_tn"), (False, "gemm_bf16_nn")):
            core = self.driver(entry + "_core", self.pack_a(trans), pb, uk)
            fn, b = self._fn(entry, [PTR, I64, PTR, I64, PTR, I64, I64, I64, I64, I64], internal=False)
            o, ldo, s, lds, v, ldv, M, N, K, acc = fn.args
            b.call(core, [M, N, K, s, lds, v, ldv, o, ldo, b.icmp_signed("!=", acc, I64(0))])
            b.ret_void()
            out[entry] = fn
        return out


class _DotGen(_F32Gen):
    """``codegen.mathlib.gemm``'s register-tiled micro-kernel with ``vdpbf16ps`` for the FMA: each 32-bit "element" of
    the packed panels is a pair of bf16, so one instruction adds two products per lane."""

    def _fma(self, b: ir.IRBuilder, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
        vb = ir.VectorType(BF16, 32)
        f = intrinsic(self.m, "llvm.x86.avx512bf16.dpbf16ps.512", self.vty, [self.vty, vb, vb])
        return b.call(f, [z, b.bitcast(x, vb), b.bitcast(y, vb)])


def define_gemm_bf16(module: ir.Module, kind: str, prefix: str = "") -> dict[str, ir.Function]:
    """Add ``<prefix>gemm_bf16_tn`` and ``<prefix>gemm_bf16_nn`` of ``kind`` (``amx`` or ``avx512bf16``)."""
    return _Gen(module, BF16_CONFIGS[kind], prefix).build()


def gemm_bf16_module(kind: str) -> ir.Module:
    """A standalone module with the bf16 gemm entry points of ``kind``."""
    module = ir.Module(name=f"trn_gemm_bf16_{kind}")
    define_gemm_bf16(module, kind)
    return module


_P, _I = ctypes.c_void_p, ctypes.c_int64


def _bits(t: Any) -> np.ndarray:
    """A 2-d bf16 torch tensor's bits as an int16 numpy array (a view when it has unit column stride)."""
    import torch

    if t.dtype != torch.bfloat16 or t.dim() != 2:
        raise ValueError("bf16 gemm operands must be 2-d torch.bfloat16 tensors")
    if t.numel() and t.stride(1) != 1:
        t = t.contiguous()
    return t.view(torch.int16).numpy()


class GemmBf16:
    """The compiled bf16 gemm of one kind with torch/numpy conveniences (operands: bf16 torch tensors)."""

    def __init__(self, kind: str) -> None:
        from codegen import isa

        allowed = runnable_kinds()
        if kind not in allowed:
            raise ValueError(f"bf16 gemm kind {kind!r} is not available on ISA path {isa.selected().name!r} "
                             f"(runnable here: {', '.join(allowed) or 'none'})")
        self.kind = kind
        self.lib = llvm.load_object(llvm.compile_ir(gemm_bf16_module(kind)))
        sig = [_P, _I, _P, _I, _P, _I, _I, _I, _I, _I]
        self.tn_raw = self.lib.cfunc("gemm_bf16_tn", None, sig)
        self.nn_raw = self.lib.cfunc("gemm_bf16_nn", None, sig)

    @staticmethod
    def _ld(a: np.ndarray, elem: int) -> int:
        return a.strides[0] // elem if a.size and a.shape[0] > 1 else max(a.shape[1], 1)

    def matmul(self, a: Any, b: Any, out: np.ndarray | None = None, accumulate: bool = False,
               a_transposed: bool = False) -> np.ndarray:
        """``out (+)= a @ b`` in fp32 (``a_transposed``: ``a`` is given as ``[K, M]``, the ``tn`` entry)."""
        an, bn = _bits(a), _bits(b)
        (M, K) = an.shape[::-1] if a_transposed else an.shape
        K2, N = bn.shape
        if K != K2:
            raise ValueError(f"shape mismatch {tuple(a.shape)} @ {tuple(b.shape)}")
        if out is None:
            out = np.zeros((M, N), np.float32)
        if out.dtype != np.float32 or out.shape != (M, N) or (out.size and out.strides[1] != 4):
            raise ValueError(f"out must be a float32 [{M}, {N}] array with unit column stride")
        fn = self.tn_raw if a_transposed else self.nn_raw
        fn(out.ctypes.data, self._ld(out, 4), an.ctypes.data, self._ld(an, 2), bn.ctypes.data, self._ld(bn, 2),
           M, N, K, int(accumulate))
        return out


def runnable_kinds() -> tuple[str, ...]:
    """bf16 gemm kinds this process can run: those of its ISA path and narrower ones (a forced ``TRN_ISA``
    compiles without the wider features), AMX only once Linux granted the tile state."""
    from codegen import isa

    sel = isa.PATHS.index(isa.selected().name)
    return tuple(k for k in ("amx", "avx512bf16") if k in isa.available() and isa.PATHS.index(k) >= sel
                 and (k != "amx" or isa.request_amx()))


_default: dict[str, GemmBf16] = {}
_default_lock = threading.Lock()


def default_gemm_bf16(kind: str) -> GemmBf16:
    """The process-wide :class:`GemmBf16` of ``kind`` (compiled on first use)."""
    with _default_lock:
        if kind not in _default:
            _default[kind] = GemmBf16(kind)
        return _default[kind]
