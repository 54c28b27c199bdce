"""complex64 times an integer or bool trn tensor (either order) natively: the integer operand promotes through its
float32 values, as torch's type promotion does (test_type_promotion's test_many_promotions)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture(autouse=True)
def _native(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


@settings(max_examples=20, deadline=None)
@given(dt=st.sampled_from([torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool]),
       shape=st.sampled_from([(), (0,), (5,), (3, 4)]), swap=st.booleans(), seed=st.integers(0, 2**16))
def test_complex64_times_integers_matches_cpu(dt, shape, swap, seed):
    g = torch.Generator().manual_seed(seed)
    hi = 2 if dt == torch.bool else 100
    a = torch.randint(0, hi, shape, generator=g).to(dt)
    z = torch.randn(shape, dtype=torch.complex64, generator=g)
    x, y = (z, a) if swap else (a, z)
    got = torch.mul(x.to("trn"), y.to("trn")).cpu()
    want = torch.mul(x, y)
    assert got.dtype == want.dtype == torch.complex64
    torch.testing.assert_close(got, want)
