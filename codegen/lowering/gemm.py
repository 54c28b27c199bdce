"""``out (+)= stationary[K, M].T @ moving[K, N]`` on fp32 row-major views, for ``nc_matmul``.

Large products call ``codegen.mathlib.gemm``'s register-blocked ``gemm_tn`` (declared: the library is a
separate object, ``codegen.gemmlib``); small ones (where packing would dominate) use a
loop nest whose inner loop runs over N with unit stride (LLVM vectorises it).
Either way the product accumulates in fp32, as docs/ir.md states; the
interpreter's float64 product is within the usual fp32 matmul tolerance of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llvmlite import ir

from codegen.lowering.ctx import I64, cf32, ci64
from trnlang.ir.types import DType

if TYPE_CHECKING:
    from codegen.lowering.kernel import KernelLowering

GEMM_MIN_FLOPS = 16 * 1024  # M * N * K at and above which the blocked kernel pays for its packing
#: Fewest output rows for the blocked kernel: its micro-tile computes 6 rows (zero padded), and packing the moving
#: operand for one or two rows (``ones.T @ tile`` column sums) costs more than the vectorised loop over N.
GEMM_MIN_M = 6


def gemm_fn(L: KernelLowering, name: str) -> ir.Function:
    """The fp32 gemm library function ``name`` (``gemm_tn``, ``gemm_nn``), declared in ``L``'s module: the library
    is compiled once per process and ISA path and linked when the kernel loads (``codegen.gemmlib``)."""
    from codegen import gemmlib

    return gemmlib.declare(L.cx.module, "fp32", name)


def call_gemm(L: KernelLowering, fn: ir.Function, st: Any, mv: Any, out: Any, k_dim: int | ir.Value,
              m_dim: int | ir.Value, n_dim: int | ir.Value, accumulate: bool) -> None:
    """Emit a call of a gemm library function ``fn(out, ldo, st, lds, mv, ldm, M, N, K, accumulate)`` on the
    first elements and row strides of the views ``out``, ``st``, ``mv`` (the fp32 and bf16 gemms share it;
    sizes may be run-time i64 values: ``codegen.lowering.gemm_collapse``'s whole-product calls)."""
    cx, b = L.cx, L.cx.b
    ptr = ir.PointerType()

    def p(v: Any) -> ir.Value:
        return b.bitcast(v.addr(cx, [ci64(0), ci64(0)]), ptr)

    def ld(v: Any) -> ir.Value:
        s = v.view_strides[0] if len(v.view_strides) == 2 else 1
        return s if isinstance(s, ir.Value) else ci64(s)

    def i64(x: int | ir.Value) -> ir.Value:
        return x if isinstance(x, ir.Value) else ci64(x)

    b.call(fn, [p(out), ld(out), p(st), ld(st), p(mv), ld(mv), i64(m_dim), i64(n_dim), i64(k_dim),
                ir.Constant(I64, int(accumulate))])


def gemm(L: KernelLowering, st: Any, mv: Any, out: Any, k_dim: int, m_dim: int, n_dim: int,
         accumulate: bool, a_nn: bool = False) -> None:
    """Emit ``out = (out if accumulate else 0) + st.T @ mv`` (RegionView-like fp32 views with unit column
    stride, prepared). ``a_nn``: ``st`` is given transposed, as ``A [M, K]`` (``out (+)= A @ mv``)."""
    cx, b = L.cx, L.cx.b
    if k_dim * m_dim * n_dim >= GEMM_MIN_FLOPS and m_dim >= GEMM_MIN_M:
        call_gemm(L, gemm_fn(L, "gemm_nn" if a_nn else "gemm_tn"), st, mv, out, k_dim, m_dim, n_dim, accumulate)
        return
    # the product is summed over K from zero and then added to ``out`` (as the blocked kernel does): a long
    # accumulation into PSUM is a sum of K-sized partial sums, not one sequential chain
    acc = L.temp_view((m_dim, n_dim), DType.float32) if accumulate else out
    acc.prepare(cx)
    with L.foreach((m_dim, n_dim)) as idx:
        acc.store(cx, idx, cf32(0.0))
    with L.foreach((m_dim,)) as (m,):
        with L.foreach((k_dim,)) as (k,):
            a = st.load(cx, [m, k] if a_nn else [k, m])
            with L.foreach((n_dim,)) as (n,):
                prod = b.fmul(a, mv.load(cx, [k, n]), flags=("contract",))
                s = b.fadd(acc.load(cx, [m, n]), prod, flags=("contract",))
                acc.store(cx, [m, n], s)
    if accumulate:
        with L.foreach((m_dim, n_dim)) as idx:
            out.store(cx, idx, b.fadd(out.load(cx, idx), acc.load(cx, idx)))
