"""``rematerialize``: a cheap load (or a cast of one) read by a few consumers is re-read in each of them; not
past a store to its tensor, not for more than ``REMAT_MAX_READERS`` readers; ``fuse_elementwise`` then
inlines the single-reader chain around it."""

from __future__ import annotations

import torch

from tests.passes.filecheck import filecheck
from tests.passes.kernels import cast_twice, exp_chain, five_readers, overwritten_between
from trnlang.ir.verifier import verify
from trnlang.passes.rematerialize import REMAT_MAX_BYTES, REMAT_MAX_READERS


def test_the_load_is_rematerialised_before_any_fusion(dump_after) -> None:
    k = exp_chain.trace(torch.randn(256, 64), torch.empty(256, 64))
    out, plan = dump_after("rematerialize", k)
    filecheck(out, """
        CHECK: IR after rematerialize
        CHECK: // #1 remat into #3,#7
        CHECK-NEXT: dma_copy[dma] %t0{{.*}}<- %x
        CHECK-NOT: fused into
        CHECK: }
    """)
    assert len(plan.remat) == 1 and len(plan.fused) == 4  # after every pass: the chain fused around it
    verify(k)


def test_a_cast_load_is_rematerialised_with_its_load(dump_after) -> None:
    """The bf16 load is inlined into its cast (one reader) and the cast into both of its readers."""
    k = cast_twice.trace(torch.randn(128, 64).bfloat16(), torch.empty(128, 64))
    out, plan = dump_after("rematerialize", k)
    filecheck(out, """
        CHECK: // #1 fused into #3
        CHECK-NEXT: dma_copy{{.*}}<- %x
        CHECK: // #3 remat into #5,#7
        CHECK-NEXT: tensor_copy
        CHECK-NOT: fused into
        CHECK: }
    """)
    assert [plan.info(plan.fused[p]).id for p in plan.remat] == [7]


def test_a_tile_past_the_l2_is_rematerialised_too(dump_after) -> None:
    """A 2 MiB row tile (tutorial 02's softmax at 4096 wide) is re-read like a small one: staging it would write
    and re-read 2 MiB that does not stay in the host's L2 either."""
    k = exp_chain.trace(torch.randn(128, 4096), torch.empty(128, 4096))
    out, plan = dump_after("rematerialize", k)
    filecheck(out, "CHECK: // #1 remat into #3,#7\nCHECK-NEXT: dma_copy[dma] %t0[0:128, 0:4096] <- %x")
    assert len(plan.remat) == 1 and 128 * 4096 * 4 <= REMAT_MAX_BYTES
    x = torch.randn(256, 4096)
    out_t = torch.empty(256, 4096)
    exp_chain(x, out_t)
    torch.testing.assert_close(out_t, torch.exp(x) * 2.0 + x)


def test_too_many_readers_stage_the_load(dump_after) -> None:
    k = five_readers.trace(torch.randn(128, 64), torch.empty(128, 64))
    out, plan = dump_after("rematerialize", k)
    filecheck(out, """
        CHECK: // #1
        CHECK-NOT: remat
        CHECK-NEXT: dma_copy[dma] %t0{{.*}}<- %x
    """)
    load = plan.infos[1].instr
    assert not plan.remat and id(load) not in plan.fused and REMAT_MAX_READERS == 4
    assert all(p is not load for p in plan.producer.values())


def test_no_rematerialisation_past_a_store_to_the_tensor(dump_after) -> None:
    k = overwritten_between.trace(torch.randn(128, 64), torch.empty(128, 64))
    out, plan = dump_after("rematerialize", k)
    filecheck(out, "CHECK: // #1\nCHECK-NEXT: dma_copy[dma] %t0{{.*}}<- %x\nCHECK-NOT: remat")
    assert not plan.remat
    out, plan = dump_after("fuse_elementwise", k)  # the readers are still fused into what reads them
    filecheck(out, "CHECK: // #1\nCHECK-NEXT: dma_copy[dma] %t0\nCHECK: // #5 fused into #7\n"
                   "CHECK: // #10 fused into #11")


def test_rematerialised_kernels_compute_the_same() -> None:
    x = torch.randn(256, 64)
    out = torch.empty(256, 64)
    exp_chain(x, out)
    torch.testing.assert_close(out, torch.exp(x) * 2.0 + x)
    xb = torch.randn(128, 64).bfloat16()
    out = torch.empty(128, 64)
    cast_twice(xb, out)
    torch.testing.assert_close(out, torch.exp(xb.float()) - xb.float())
    x = torch.randn(128, 64)
    out = torch.empty(128, 64)
    five_readers(x, out)
    torch.testing.assert_close(out, torch.exp(x) + x * 2.0 + x.abs() + x * x + (x - 1.0), rtol=1e-5, atol=1e-5)
    x = torch.randn(128, 64)
    x0 = x.clone()
    out = torch.empty(128, 64)
    overwritten_between(x, out)
    torch.testing.assert_close(out, x0 - x0.sum(1, keepdim=True), rtol=1e-5, atol=1e-4)
    assert bool((x == 5.0).all())
