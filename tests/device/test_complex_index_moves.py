"""complex64 tensors move through the gather/scatter engine natively (issue 22 item 2): like int64 and float64,
their 8-byte elements move as two int32 words (engine._PAIR_DTYPES), so index_select, advanced indexing,
gather, take, index_copy, scatter, index_put and masked_select of complex64 need no CPU fallback. Compared
with CPU torch under ``TRN_FALLBACK=error``; a conj-bit view still goes to the CPU path (not tested here)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture(autouse=True)
def _native_only(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


def _rows(x, i):
    """An index for dim 0 of ``x`` selecting rows ``i`` whole (gather/scatter form)."""
    return i.unsqueeze(-1).expand(len(i), x.shape[-1]).contiguous()


OPS = {
    "index_select0": lambda x, i: x.index_select(0, i),
    "index_select_last": lambda x, i: x.index_select(-1, i % x.shape[-1]),
    "advanced": lambda x, i: x[i],
    "gather": lambda x, i: x.gather(0, _rows(x, i)),
    "take": lambda x, i: x.take(i),
    "index_put": lambda x, i: x.index_put((i,), x[0]),
    "scatter": lambda x, i: x.scatter(0, _rows(x, i), x[:1].expand(len(i), x.shape[-1]).contiguous()),
    "masked_select": lambda x, i: x.masked_select(x.real > 0),
}


@settings(max_examples=10, deadline=None)
@given(rows=st.integers(1, 6), cols=st.integers(1, 5), k=st.integers(0, 7), seed=st.integers(0, 2**16),
       transpose=st.booleans())
def test_complex64_moves_vs_cpu(rows, cols, k, seed, transpose):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((rows, cols), dtype=torch.complex64, generator=g)
    xd = x.to("trn")
    if transpose:
        x, xd = x.t(), xd.t()
    i = torch.randint(0, x.shape[0], (k,), generator=g)
    for name, f in OPS.items():
        if name == "scatter":
            i = torch.randperm(x.shape[0], generator=g)[: min(k, x.shape[0])]  # no duplicate targets
        want = f(x, i)
        got = f(xd, i.to("trn")).cpu()
        assert got.dtype == torch.complex64 and torch.equal(got, want), name
