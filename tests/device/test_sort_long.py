"""Stable sorts of rows longer than one on-chip sort (``MAX_SORT``) run natively (issue 22): sorted chunks merged
by rank. Compared with CPU torch under ``TRN_FALLBACK=error`` (values and indices exactly: the sort is stable).
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stdlib_kernels.reduction.sort import MAX_SORT


@pytest.fixture(autouse=True)
def _native_only(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


def _data(dtype, shape, seed, spread):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    x = torch.randint(-spread, spread, shape, generator=g)  # few distinct values: many ties across chunks
    return (x.abs() if dtype == torch.uint8 else x).to(dtype)


@settings(max_examples=4, deadline=None)
@given(dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.int64, torch.int16, torch.uint8, torch.bool]),
       extra=st.integers(1, MAX_SORT + 50), rows=st.integers(1, 2), descending=st.booleans(),
       spread=st.sampled_from([2, 100]), seed=st.integers(0, 2**16))
def test_long_stable_sort_vs_cpu(dtype, extra, rows, descending, spread, seed):
    x = _data(dtype, (rows, MAX_SORT + extra), seed, spread)
    v, i = x.to("trn").sort(stable=True, descending=descending)
    ev, ei = x.sort(stable=True, descending=descending)
    assert torch.equal(i.cpu(), ei)
    assert torch.equal(v.cpu(), ev)


def test_long_sort_along_a_leading_dim_and_argsort():
    x = _data(torch.float32, (MAX_SORT + 7, 3), 1, 5)
    v, i = x.to("trn").sort(dim=0, stable=True)
    ev, ei = x.sort(dim=0, stable=True)
    assert torch.equal(i.cpu(), ei) and torch.equal(v.cpu(), ev)
    assert torch.equal(x.to("trn").argsort(dim=0, stable=True).cpu(), x.argsort(dim=0, stable=True))


def test_long_sort_keeps_negative_zero_and_nan():
    x = torch.zeros(MAX_SORT + 3)
    x[::2] = -0.0
    v, i = x.to("trn").sort(stable=True)
    assert torch.equal(i.cpu(), x.sort(stable=True)[1])
    assert torch.equal(v.cpu().signbit(), x.sort(stable=True)[0].signbit())
    x[5] = float("nan")
    v, i = x.to("trn").sort(stable=True)
    assert torch.equal(i.cpu(), x.sort(stable=True)[1]) and bool(v[-1].cpu().isnan())
