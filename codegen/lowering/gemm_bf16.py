"""``nc_matmul`` of two bf16 operands on the host's bf16 dot-product unit (``codegen.mathlib.gemm_bf16``).

When the ISA path has one (``codegen.isa.selected().bf16`` is ``"amx"`` or ``"avx512bf16"``), an
``nc_matmul`` whose stationary and moving tiles are both bf16 is not widened to fp32: the gemm reads
the bf16 elements (from the staged tiles, or where ``trnlang.passes.plan_matmul_operands`` found them: HBM, the
transpose's source) and accumulates in fp32, so the result is the fp32 sum of exact bf16 products,
as the widened path computes (up to summation order).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llvmlite import ir

from codegen.lowering.gemm import call_gemm
from trnlang.ir.nodes import Instr, Region
from trnlang.ir.types import DType

if TYPE_CHECKING:
    from codegen.lowering.kernel import KernelLowering

__all__ = ["bf16_kind", "native_bf16", "gemm_bf16"]


def bf16_kind() -> str | None:
    """The process's bf16 gemm kind (``"amx"``, ``"avx512bf16"``), or None when bf16 is widened to fp32."""
    from codegen import isa

    k = isa.selected().bf16
    return None if k == "widen" else k


def native_bf16(ins: Instr) -> bool:
    """``nc_matmul`` ``ins`` runs on the bf16 gemm: both operands are bf16 tiles and the path has one."""
    return bf16_kind() is not None and all(
        isinstance(x, Region) and x.buf.dtype is DType.bfloat16 for x in ins.ins[:2])


def _fn(L: KernelLowering, name: str) -> ir.Function:
    """The bf16 gemm library function ``name``, declared in ``L``'s module (``codegen.gemmlib``)."""
    from codegen import gemmlib

    assert bf16_kind() is not None
    return gemmlib.declare(L.cx.module, "bf16", name)


def gemm_bf16(L: KernelLowering, st: Any, mv: Any, out: Any, k_dim: int | ir.Value, m_dim: int | ir.Value,
              n_dim: int | ir.Value, accumulate: bool, a_nn: bool = False) -> None:
    """Emit ``out (+)= st.T @ mv`` (``a_nn``: ``out (+)= st @ mv``): bf16 views in, an fp32 view out (unit column
    stride, prepared), any sizes."""
    from codegen import isa

    if isa.selected().bf16 == "amx":
        isa.request_amx()  # granted when the path was chosen; a no-op after the first call
    call_gemm(L, _fn(L, "gemm_bf16_nn" if a_nn else "gemm_bf16_tn"), st, mv, out, k_dim, m_dim, n_dim, accumulate)
