"""``nonzero`` (and boolean-mask indexing through it) compiles per size bucket, not per mask shape (issue 22).

PyTorch's ``test_view_ops.test_atleast`` builds its inputs with ``x[mask] = value`` over ~180 random shapes; when
the nonzero kernels took the mask's shape as a constant every shape was a new compilation (320 compiles, the
complex64 case ran 544 s against 120 s allowed, and killed its worker once). The kernels now see the mask padded
to a power of two and write flat positions; coordinates come from shape-free int32 torch ops. Results are
checked against torch's CPU ``nonzero`` with no CPU fallback allowed.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang as trn

KERNELS = ("count_nonzero_rows", "nonzero_scatter")


def loaded() -> int:
    """Variants of the nonzero kernels compiled or loaded from disk since the last reset."""
    ks = trn.compile_stats()["kernels"]
    return sum(ks.get(n, {}).get("compiles", 0) + ks.get(n, {}).get("disk_hits", 0) for n in KERNELS)


@pytest.fixture(autouse=True)
def _native(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRN_FALLBACK", "error")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.lists(st.integers(0, 11), min_size=0, max_size=5), p=st.floats(0.0, 1.0),
       dtype=st.sampled_from([torch.bool, torch.uint8, torch.float32, torch.int64, torch.complex64]))
def test_nonzero_matches_cpu(shape: list[int], p: float, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(len(shape) * 31 + sum(shape))
    x = (torch.rand(shape, generator=g) < p).to(dtype)
    xt = x.to("trn")
    assert torch.equal(torch.nonzero(xt).cpu(), torch.nonzero(x))
    for a, b in zip(torch.nonzero(xt, as_tuple=True), torch.nonzero(x, as_tuple=True)):
        assert torch.equal(a.cpu(), b)


def test_mask_assignment_matches_cpu_and_reuses_buckets() -> None:
    torch.manual_seed(0)
    for shape in [(5, 6), (6, 7), (7, 8), (9, 7)]:  # 30..63 elements: one bucket (64) -- warms it
        m = torch.randn(shape) > 0.5
        x = torch.randn(shape)
        xt = x.to("trn")
        xt[m] = 0.0
        x[m] = 0.0
        assert torch.equal(xt.cpu(), x)
    trn.reset_compile_stats()
    for shape in [(5, 10), (8, 6), (3, 4, 5), (61,), (2, 2, 2, 7)]:  # new shapes of the same bucket
        m = torch.randn(shape) > 0.5
        x = torch.randn(shape, dtype=torch.complex64)
        xt = x.to("trn")
        xt[m] = complex("nan")
        x[m] = complex("nan")
        torch.testing.assert_close(xt.cpu(), x, equal_nan=True)
    assert loaded() == 0, trn.compile_stats()["kernels"]
