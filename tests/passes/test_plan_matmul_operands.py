"""``plan_matmul_operands``: an nc_matmul's gemm reads plain HBM loads in place; debug builds keep them."""

from __future__ import annotations

import torch

from tests.passes.filecheck import filecheck
from tests.passes.kernels import mm_tn


def _trace():
    return mm_tn.trace(torch.randn(256, 128), torch.randn(256, 256), torch.empty(128, 256))


def test_loads_are_deferred_to_the_matmul(dump_after) -> None:
    out, plan = dump_after("plan_matmul_operands", _trace())
    filecheck(out, """
        CHECK: IR after plan_matmul_operands
        CHECK: // #3 deferred to #6
        CHECK-NEXT: dma_copy[dma] %t1{{.*}}%a_t
        CHECK: // #5 deferred to #6
        CHECK-NEXT: dma_copy[dma] %t2{{.*}}%b
        CHECK-NEXT: // #6 operands in place: s_load v_load
        CHECK-NEXT: nc_matmul
    """)
    assert len(plan.mm_defer) == 2


def test_debug_build_keeps_the_staged_tiles(dump_after) -> None:
    out, plan = dump_after("plan_matmul_operands", _trace(), debug=True)
    filecheck(out, "CHECK: debug True\nCHECK-NOT: deferred\nCHECK-NOT: operands in place")
    assert not plan.mm_ops


def test_in_place_operands_compute_the_product() -> None:
    a_t, b, out = torch.randn(256, 128), torch.randn(256, 256), torch.empty(128, 256)
    mm_tn(a_t, b, out)
    torch.testing.assert_close(out, a_t.T @ b, rtol=1e-4, atol=1e-3)
