"""The FileCheck matcher the pass tests use: it accepts what matches and rejects what does not."""

from __future__ import annotations

import pytest

from tests.passes.filecheck import CheckFailure, filecheck

TEXT = "kernel @k {\n  %t0 = alloc sbuf f32[128, 64]\n  dma_copy %t0 <- %x\n  activation %t1 <- %t0\n}\n"


def test_accepts_in_order_and_next() -> None:
    filecheck(TEXT, """
        CHECK: alloc sbuf
        CHECK-SAME: [128, {{[0-9]+}}]
        CHECK-NEXT: dma_copy
        CHECK-NOT: tensor_tensor
        CHECK: activation
    """)


@pytest.mark.parametrize("checks", [
    "CHECK: activation\nCHECK: dma_copy",          # order matters
    "CHECK: alloc\nCHECK-NEXT: activation",         # NEXT is the very next line
    "CHECK: alloc\nCHECK-NOT: dma_copy\nCHECK: activation",  # NOT between two matches
    "CHECK: dma_copy\nCHECK-SAME: alloc",           # SAME stays on the line
    "CHECK: {{t[2-9]}}",                            # regex blocks
    "CHECK: activation\nCHECK-NOT: }",              # NOT up to the end
])
def test_rejects(checks: str) -> None:
    with pytest.raises(CheckFailure):
        filecheck(TEXT, checks)


def test_needs_a_directive() -> None:
    with pytest.raises(ValueError):
        filecheck(TEXT, "no directives here")
