"""A cached device scalar keeps the sign of zero: ``x / 0.0`` and ``x / -0.0`` are infinities of opposite signs, in
either order, through the lowering (``out=``: no fast lane) and on the tensor-scalar fast lane."""

from __future__ import annotations

import pytest
import torch

import trnlang  # noqa: F401


@pytest.mark.parametrize("first", [0.0, -0.0])
def test_division_by_signed_zeros_in_either_order(first: float) -> None:
    x = torch.randn(3, 130)
    a = x.to("trn")
    o = torch.empty(3, 130, device="trn")
    for s in [first, -first, 0.001, first, -first] * 2:
        torch.testing.assert_close(torch.div(a, s, out=o).cpu(), x / s, rtol=0, atol=0, equal_nan=True)
        torch.testing.assert_close(torch.mul(a, s, out=o).cpu(), x * s, rtol=0, atol=0, equal_nan=True)
        torch.testing.assert_close((a / s).cpu(), x / s, rtol=0, atol=0, equal_nan=True)
