"""Accumulating into bool tensors runs natively (issue 22 item 2): torch's bool sum is a logical OR and its
product a logical AND, so index_add / index_put_(accumulate=True) / put(accumulate=True) / scatter_add /
scatter(reduce='add'|'multiply') / scatter_reduce(sum|prod|amax|amin) accumulate the 0/1 bytes, seen as
uint8, by max or min (engine._run). Duplicate indices included. Compared with CPU torch under
``TRN_FALLBACK=error``."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture(autouse=True)
def _native_only(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


def _t(x):
    return x.to("trn") if isinstance(x, torch.Tensor) else x


def _same(fn, *args):
    want = fn(*args)
    got = fn(*[_t(a) for a in args])
    assert got.dtype == want.dtype == torch.bool
    assert torch.equal(got.cpu(), want), (got.cpu(), want)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 6), m=st.integers(0, 3), k=st.integers(0, 9), seed=st.integers(0, 2**16))
def test_bool_index_and_scatter_accumulate(n, m, k, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand((n, m), generator=g) < 0.3
    idx = torch.randint(0, n, (k,), generator=g)  # duplicates likely
    src = torch.rand((k, m), generator=g) < 0.5
    _same(lambda a, i, s: a.index_add(0, i, s), x, idx, src)
    _same(lambda a, i, s: a.clone().index_put_((i,), s, accumulate=True), x, idx, src)
    flat = x.reshape(-1)
    if flat.numel():
        pidx = torch.randint(0, flat.numel(), (k,), generator=g)
        _same(lambda a, i, s: a.put(i, s, accumulate=True), flat, pidx, src[:, 0] if m else src.reshape(-1)[:0])
    if m:
        sidx = torch.randint(0, m, (n, m), generator=g)
        ssrc = torch.rand((n, m), generator=g) < 0.5
        _same(lambda a, i, s: a.scatter_add(1, i, s), x, sidx, ssrc)
        _same(lambda a, i, s: a.scatter(1, i, s, reduce="add"), x, sidx, ssrc)
        _same(lambda a, i, s: a.scatter(1, i, s, reduce="multiply"), x, sidx, ssrc)
        for red in ("sum", "prod", "amax", "amin"):
            for inc in (True, False):
                _same(lambda a, i, s: a.scatter_reduce(1, i, s, red, include_self=inc), x, sidx, ssrc)


def test_bool_accumulate_zero_dim_and_transposed():
    x = torch.tensor(False)
    _same(lambda a, i, s: a.index_add(0, i, s), x, torch.tensor([0]), torch.tensor(True))
    _same(lambda a, i, s: a.index_add(0, i, s), x.reshape(1), torch.tensor([0, 0]), torch.tensor([False, True]))
    y = torch.tensor([[True, False, False], [False, False, True]])
    idx = torch.tensor([[2, 2], [0, 0], [1, 0]])
    src = torch.tensor([[True, False], [False, True], [True, True]])
    _same(lambda a, i, s: a.t().scatter_add(0, i, s), y, idx, src)
