"""``collapse_gemm``: which matmul tile loops the lowering replaces by one gemm call over the whole product.

The emitted code is pinned by tests/codegen/test_gemm_collapse.py (results against numpy and the interpreter);
here, the decisions: a nest of two tile loops around a K loop (and, for the fallback of a failed corner check,
the loops inside it), a K loop alone, none in debug builds, none when a tile cannot be read in place.
"""

from __future__ import annotations

import torch

from tests.passes.filecheck import filecheck
from tests.passes.kernels import mm_nest, mm_tn


def _nest():
    return mm_nest.trace(torch.randn(256, 384), torch.randn(384, 512), torch.empty(256, 512))


def test_the_tile_nest_is_one_gemm(dump_after) -> None:
    out, plan = dump_after("collapse_gemm", _nest())
    filecheck(out, """
        CHECK: IR after collapse_gemm
        CHECK: affine_range %i0
        CHECK-NEXT: affine_range %i1
        CHECK: affine_range %i2
        CHECK: // #10 operands in place: a_region a_load v_load [one gemm: i0 M, i1 N, i2 K]
        CHECK-SAME: [one gemm: i1 N, i2 K] [one gemm: i2 K]
        CHECK-NEXT: nc_matmul
    """)
    roots = [g for g in plan.gemms.values() if len(g.nest) == 2]
    assert len(plan.gemms) == 3 and len(roots) == 1 and roots[0].a_nn and roots[0].store is not None


def test_a_nest_whose_store_adds_is_one_adding_gemm_for_fp32_only(dump_after) -> None:
    """``out += a @ b`` (addmm's bias put in the output first): one gemm with accumulate; a bf16 output would
    round the sum of product and output, which the gemm's fp32 accumulation does not do, so its nest stays."""
    k = mm_nest.trace(torch.randn(256, 384), torch.randn(384, 512), torch.empty(256, 512), True)
    out, plan = dump_after("collapse_gemm", k)
    filecheck(out, "CHECK: [one gemm: i0 M, i1 N, i2 K]\nCHECK: dma_copy{{.*}}accumulate = add")
    (root,) = [g for g in plan.gemms.values() if len(g.nest) == 2]
    assert root.store is not None and root.store.attrs["accumulate"] is not None
    kb = mm_nest.trace(torch.randn(256, 384), torch.randn(384, 512), torch.empty(256, 512).bfloat16(), True)
    out, plan = dump_after("collapse_gemm", kb)
    assert not [g for g in plan.gemms.values() if g.nest] and len(plan.gemms) == 1  # the K loop alone
    a, b = torch.randn(256, 384), torch.randn(384, 512)
    o = torch.randn(256, 512)
    exp = o + a @ b
    mm_nest(a, b, o, True)
    torch.testing.assert_close(o, exp, rtol=1e-5, atol=1e-4)


def test_a_k_loop_alone_accumulates_into_the_psum_tile(dump_after) -> None:
    k = mm_tn.trace(torch.randn(256, 128), torch.randn(256, 256), torch.empty(128, 256))
    out, plan = dump_after("collapse_gemm", k)
    filecheck(out, "CHECK: // #6 operands in place: s_load v_load [one gemm: i0 K]\nCHECK-NEXT: nc_matmul")
    (g,) = plan.gemms.values()
    assert g.store is None and not g.a_nn and g.k_tile == 128


def test_debug_builds_keep_the_tile_loops(dump_after) -> None:
    out, plan = dump_after("collapse_gemm", _nest(), debug=True)
    filecheck(out, "CHECK: debug True\nCHECK-NOT: one gemm")
    assert not plan.gemms


def test_an_operand_without_a_compile_time_unit_column_stride_is_not_collapsed(dump_after) -> None:
    """``a`` launched as a transposed view (its column stride read at run time): the gemm cannot read it in
    place, so no loop that reads it is collapsed; ``b`` and ``out`` contiguous."""
    out, plan = dump_after("collapse_gemm", _nest(), layouts=[(None, None), True, True])
    filecheck(out, "CHECK: IR after collapse_gemm\nCHECK-NOT: one gemm")
    assert not plan.gemms
    out, plan = dump_after("collapse_gemm", _nest(), layouts=[(None, 1), True, True])  # unit step known: fine
    assert len(plan.gemms) == 3


def test_an_aliased_output_keeps_the_nest(dump_after) -> None:
    """With arguments that may alias, the store may overwrite an operand later tiles read: only K loops."""
    out, plan = dump_after("collapse_gemm", _nest(), may_alias=True)
    filecheck(out, "CHECK: // #10 {{.*}}[one gemm: i2 K]\nCHECK-NOT: one gemm: i")
    assert [len(g.nest) for g in plan.gemms.values()] == [0]


def test_the_collapsed_nest_computes_the_product() -> None:
    a, b, out = torch.randn(256, 384), torch.randn(384, 512), torch.empty(256, 512)
    mm_nest(a, b, out)
    torch.testing.assert_close(out, a @ b, rtol=1e-4, atol=1e-3)


def test_stdlib_matmul_bias_prefix_keeps_the_adding_gemm() -> None:
    """The stdlib ``matmul`` with ``adds`` and a bias first stores the (broadcast) bias tile by tile, then its product
    nest still folds into one gemm that adds; run, it equals ``bias * beta + a @ b``."""
    from stdlib_kernels.linalg.matmul import matmul
    from trnlang.passes import plan_lowering

    a, b, bias = torch.randn(256, 384), torch.randn(384, 1024), torch.randn(1024)
    out = torch.empty(256, 1024)
    k = matmul.trace(a, b, bias.expand(256, 1024), out, 1.0, 0.5, True)
    plan = plan_lowering(k, (1,))
    nests = [g for g in plan.gemms.values() if len(g.nest) == 2]
    assert len(nests) == 1 and nests[0].store.attrs["accumulate"] is not None
    matmul(a, b, bias.expand(256, 1024), out, 1.0, 0.5, True)
    torch.testing.assert_close(out, 0.5 * bias + a @ b, rtol=1e-5, atol=1e-4)
