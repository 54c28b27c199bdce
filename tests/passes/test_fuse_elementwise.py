"""``fuse_elementwise``: producers inlined into their consumer (around the loads ``rematerialize`` re-reads, see
test_rematerialize.py), aliasing respected."""

from __future__ import annotations

import torch

from tests.passes.filecheck import filecheck
from tests.passes.kernels import exp_chain, store_between


def test_chain_is_inlined_around_the_rematerialised_load(dump_after) -> None:
    x = torch.randn(256, 64)
    out, plan = dump_after("fuse_elementwise", exp_chain.trace(x, torch.empty(256, 64)))
    filecheck(out, """
        CHECK: IR after fuse_elementwise
        CHECK: // #1 remat into #3,#7
        CHECK-NEXT: dma_copy
        CHECK: // #3 fused into #5
        CHECK-NEXT: activation
        CHECK: // #5 fused into #7
        CHECK-NEXT: tensor_scalar
        CHECK: // #7 fused into #8
        CHECK-NEXT: tensor_tensor
        CHECK: // #8
        CHECK-NEXT: dma_copy[dma] %out
    """)
    assert len(plan.remat) == 1 and len(plan.fused) == 4


def test_fused_chain_computes_the_same() -> None:
    x, out = torch.randn(256, 64), torch.empty(256, 64)
    exp_chain(x, out)
    torch.testing.assert_close(out, torch.exp(x) * 2.0 + x)


def test_no_fusion_past_a_store_that_may_alias(dump_after) -> None:
    x = torch.randn(128, 64)
    k = store_between.trace(x, torch.empty(128, 64), torch.empty(128, 64))
    out, _ = dump_after("fuse_elementwise", k, may_alias=False)
    filecheck(out, "CHECK: may_alias False\nCHECK: // #1 fused into #6\nCHECK-NEXT: dma_copy[dma] %t0")
    out, plan = dump_after("fuse_elementwise", k, may_alias=True)
    filecheck(out, """
        CHECK: may_alias True
        CHECK: // #1
        CHECK-NOT: fused
        CHECK-NEXT: dma_copy[dma] %t0
        CHECK: // #6 fused into #7
    """)
    assert not any(p.op.value == "dma_copy" and p.ins[0].tensor.name == "x" for p in plan.producer.values())


def test_aliasing_launch_reads_before_the_store() -> None:
    """y is x: the load happens before the store of 3.0, so out = exp(old x) (the variant without that fusion)."""
    x = torch.randn(128, 64)
    old = x.clone()
    out = torch.empty(128, 64)
    store_between(x, x, out)
    torch.testing.assert_close(out, torch.exp(old))
    assert bool((x == 3.0).all())
