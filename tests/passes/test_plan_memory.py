"""``plan_memory`` (the ``PIPELINE`` pass): an SBUF/PSUM address and a number of rotating copies per ``alloc``,
checked on its ``TRN_DUMP`` output, with the verifier after the pass (the capacity rule reads the same liveness).
The placement rules themselves (reuse under pressure, overflow errors, PSUM banks) are pinned by
tests/sim/test_plan_memory.py."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.passes.filecheck import filecheck
from tests.passes.kernels import exp_chain, mm_tn, two_phases
from trnlang.ir.nodes import Kernel
from trnlang.ir.parser import parse_kernel
from trnlang.ir.printer import print_kernel
from trnlang.passes import run_pipeline


@pytest.fixture
def dump_pipeline(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Any:
    def run(k: Kernel) -> str:
        monkeypatch.setenv("TRN_DUMP", "plan_memory")  # tests/conftest.py refreshes trnlang.config
        capsys.readouterr()
        run_pipeline(k, verify_each=True)
        monkeypatch.delenv("TRN_DUMP")
        return capsys.readouterr().err

    return run


def test_every_alloc_gets_an_address_and_copies(dump_pipeline) -> None:
    out = dump_pipeline(two_phases.trace(torch.randn(128, 64), torch.empty(128, 2)))
    filecheck(out, """
        CHECK: IR after plan_memory
        CHECK: %t0 = alloc sbuf f32[128, 64] {addr = (0, 0), bufs = 1}
        CHECK: %t1 = alloc sbuf f32[128, 64] {addr = (0, 256), bufs = 1}
        CHECK: %t2 = alloc sbuf f32[128, 1] {addr = (0, {{[0-9]+}}), bufs = 1}
        CHECK: %t5 = alloc sbuf f32[128, 1] {addr = (0, {{[0-9]+}}), bufs = 1}
    """)
    allocs = [line for line in out.splitlines() if " = alloc " in line]
    assert len(allocs) == 6 and all("{addr = (0, " in line and "bufs = " in line for line in allocs)


def test_loop_bodies_are_multi_buffered_and_psum_is_bank_aligned(dump_pipeline) -> None:
    out = dump_pipeline(mm_tn.trace(torch.randn(256, 128), torch.randn(256, 256), torch.empty(128, 256)))
    filecheck(out, """
        CHECK: %t0 = alloc psum f32[128, 256] {addr = (0, 0), bufs = 1}
        CHECK: affine_range %i0 = 0 to 2
        CHECK-NEXT: %t1 = alloc sbuf f32[128, 128] {addr = (0, {{[0-9]+}}), bufs = 2}
        CHECK: %t2 = alloc sbuf f32[128, 256] {addr = (0, {{[0-9]+}}), bufs = 2}
        CHECK: nc_matmul
        CHECK-NEXT: }
        CHECK-NEXT: %t4 = alloc sbuf f32[128, 256] {addr = (0, {{[0-9]+}}), bufs = 1}
    """)


def test_small_dma_tiles_get_deep_buffers(dump_pipeline) -> None:
    """256-byte rows hold less than a DMA's latency worth of bytes: 4 copies when the trip count allows."""
    out = dump_pipeline(exp_chain.trace(torch.randn(512, 64), torch.empty(512, 64)))
    filecheck(out, """
        CHECK: affine_range %i0 = 0 to 4
        CHECK-NEXT: %t0 = alloc sbuf f32[128, 64] {addr = (0, 0), bufs = 4}
        CHECK: %t1 = alloc sbuf f32[128, 64] {addr = (0, 1024), bufs = 4}
    """)
    out = dump_pipeline(exp_chain.trace(torch.randn(256, 64), torch.empty(256, 64)))
    filecheck(out, "CHECK: affine_range %i0 = 0 to 2\nCHECK-NEXT: %t0 = alloc sbuf f32[128, 64] {{{.*}}bufs = 2}")


def test_the_annotated_ir_round_trips_and_runs() -> None:
    k = mm_tn.trace(torch.randn(256, 128), torch.randn(256, 256), torch.empty(128, 256))
    run_pipeline(k, verify_each=True)
    text = print_kernel(k)
    assert print_kernel(parse_kernel(text)) == text
    a_t, b, out = torch.randn(256, 128), torch.randn(256, 256), torch.empty(128, 256)
    mm_tn(a_t, b, out)
    torch.testing.assert_close(out, a_t.T @ b, rtol=1e-4, atol=1e-3)
