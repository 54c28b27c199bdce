"""``layout_arena``: buffers never live together share arena bytes, except in debug builds."""

from __future__ import annotations

import torch

from tests.passes.filecheck import filecheck
from tests.passes.kernels import two_phases


def test_disjoint_buffers_share_bytes(dump_after) -> None:
    k = two_phases.trace(torch.randn(128, 64), torch.empty(128, 2))
    out, plan = dump_after("layout_arena", k)
    filecheck(out, """
        CHECK: IR after layout_arena
        CHECK: // #4 arena 0+512 live #4..#6
        CHECK-NEXT: alloc sbuf f32[128, 1]
        CHECK: // #11 arena 0+512 live #11..#13
        CHECK-NEXT: alloc sbuf f32[128, 1]
    """)
    assert plan.bufs_size == 512
    out, plan = dump_after("layout_arena", k, debug=True)
    filecheck(out, "CHECK: debug True\nCHECK: // #4 arena 0+512\nCHECK: // #11 arena 512+512")
    assert plan.bufs_size == 1024


def test_shared_bytes_keep_both_results() -> None:
    x, out = torch.randn(128, 64), torch.empty(128, 2)
    two_phases(x, out)
    torch.testing.assert_close(out[:, 0], (x * x).sum(1), rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(out[:, 1], (x * 2.0).amax(1))
