"""``check_placement``: which accesses get a run-time bounds check, for the variant's launch grid."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.kernels import vector_add
from tests.passes.filecheck import filecheck
from tests.passes.kernels import gather_rows, pid_rows
from trnlang.frontend.errors import BoundsError


def test_gathered_access_is_checked(dump_after) -> None:
    k = gather_rows.trace(torch.randint(0, 50, (128, 1)).int(), torch.randn(50, 64), torch.empty(128, 64))
    out, plan = dump_after("check_placement", k)
    filecheck(out, """
        CHECK: IR after check_placement (grid (1,)
        CHECK: // #3 check access table:0
        CHECK-NEXT: dma_copy{{.*}}gather(
        CHECK-NOT: check access
    """)
    assert list(plan.access_checks.values()) == [(0,)]


def test_masked_tiles_need_no_check(dump_after) -> None:
    x = torch.randn(200, 64)
    out, plan = dump_after("check_placement", vector_add.trace(x, x, torch.empty(200, 64)))
    filecheck(out, "CHECK: IR after check_placement\nCHECK-NOT: check access")
    assert not plan.access_checks and not plan.region_checks


def test_checks_follow_the_variant_grid(dump_after) -> None:
    """Traced for 2 instances the accesses are provably in bounds; a variant launched on 3 checks them."""
    k = pid_rows.trace(torch.randn(256, 64), torch.empty(256, 64), grid=(2,))
    out2, _ = dump_after("check_placement", k, (2,))
    filecheck(out2, "CHECK: (grid (2,)\nCHECK-NOT: check access")
    out3, plan = dump_after("check_placement", k, (3,))
    filecheck(out3, """
        CHECK: (grid (3,)
        CHECK: check access x:0
        CHECK-NEXT: dma_copy
        CHECK: check access out:0
        CHECK-NEXT: dma_copy[dma] %out
    """)
    assert len(plan.access_checks) == 2


def test_a_checked_access_stops_the_launch() -> None:
    """What the check guards: the grid-3 launch raises at the kernel's line instead of reading past ``x``."""
    x, out = np.ones((256, 64), np.float32), np.zeros((256, 64), np.float32)
    pid_rows[2](x, out)
    np.testing.assert_array_equal(out, x + 1.0)
    with pytest.raises(BoundsError, match="test_check_placement|kernels.py"):
        pid_rows[3](x, out)
