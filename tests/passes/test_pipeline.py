"""The pass pipeline: the lists, ``TRN_DUMP`` through ``trnlang.config``, and the verifier after every pass."""

from __future__ import annotations

import os

import pytest
import torch

import trnlang.config as config
from tests.kernels import CASES, softmax
from tests.passes.filecheck import filecheck
from tests.passes.kernels import exp_chain, mm_tn
from trnlang.ir.nodes import Region
from trnlang.ir.verifier import verify
from trnlang.passes import LOWERING, PIPELINE, plan_lowering, run_pipeline
from trnlang.passes.lowering import PlanError, verify_plan


def test_the_lists_name_every_pass_once() -> None:
    assert [n for n, _ in PIPELINE] == ["plan_memory"]
    assert [n for n, _ in LOWERING] == ["check_placement", "rematerialize", "fuse_elementwise", "plan_matmul_operands",
                                        "collapse_gemm", "layout_arena"]
    assert all(getattr(p, "__name__", "") == n for n, p in [*PIPELINE, *LOWERING])


def test_dump_reads_the_config_snapshot(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    k = softmax.trace(torch.randn(128, 64), torch.empty(128, 64))
    monkeypatch.setitem(os.environ, "TRN_DUMP", "plan_memory")  # the environment alone: no snapshot yet
    try:
        run_pipeline(k)
        assert capsys.readouterr().err == ""
        config.refresh()
        run_pipeline(k)
        err = capsys.readouterr().err
    finally:
        monkeypatch.delitem(os.environ, "TRN_DUMP")
        config.refresh()
    filecheck(err, """
        CHECK: // ----- IR after plan_memory -----
        CHECK-NEXT: kernel @softmax
        CHECK: alloc sbuf f32[128, 64] {addr = (0, {{[0-9]+}}), bufs =
        CHECK-NOT: IR after
    """)


def test_all_dumps_every_stage(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    k = exp_chain.trace(torch.randn(256, 64), torch.empty(256, 64))
    monkeypatch.setenv("TRN_DUMP", "all")
    capsys.readouterr()
    run_pipeline(k)
    plan_lowering(k, (1,))
    err = capsys.readouterr().err
    filecheck(err, "\n".join(f"CHECK: IR after {n}" for n in ["trace", *(n for n, _ in PIPELINE + LOWERING)]))


def _variants():
    for case in CASES:
        for may_alias, debug in ((False, False), (True, False), (False, True)):
            yield pytest.param(case, may_alias, debug, id=f"{case.name}-alias{int(may_alias)}-debug{int(debug)}")


@pytest.mark.parametrize("case,may_alias,debug", list(_variants()))
def test_verifier_after_every_pass(case, may_alias: bool, debug: bool) -> None:
    """Every test kernel: the IR verifies and the plan verifies after each lowering pass."""
    g = torch.Generator().manual_seed(0)
    args = case.make(200, 64, g)
    grid = case.grid(args) if case.grid else (1,)
    k = case.kernel.trace(*args, grid=grid)
    plan = plan_lowering(k, grid, may_alias=may_alias, debug=debug, verify_each=True)
    verify(k)
    assert plan.passes == [n for n, _ in LOWERING]


def test_verify_plan_catches_broken_decisions() -> None:
    k = mm_tn.trace(torch.randn(256, 128), torch.randn(256, 256), torch.empty(128, 256))
    plan = plan_lowering(k, (1,))
    verify_plan(plan)
    a, b = [bid for bid in plan.offsets if plan.live[bid][0] <= 4 <= plan.live[bid][1]][:2]
    plan.offsets[b] = plan.offsets[a]
    with pytest.raises(PlanError, match="share arena bytes"):
        verify_plan(plan)
    plan = plan_lowering(k, (1,))
    copy = next(i.instr for i in plan.infos if i.instr.op.value == "tensor_copy")
    dma = next(i.instr for i in plan.infos if i.instr.op.value == "dma_copy")
    plan.mm_defer[id(dma)] = copy
    with pytest.raises(PlanError, match="deferred"):
        verify_plan(plan)
    plan = plan_lowering(k, (1,))
    store = plan.infos[-1].instr
    src = store.ins[0]
    assert isinstance(src, Region)
    plan.producer[(id(dma), id(src.buf))] = store  # a consumer before its producer
    plan.fused[id(store)] = dma
    with pytest.raises(PlanError):
        verify_plan(plan)
