"""``masked_fill`` of int64 and complex64 tensors runs natively (issue 22 item 2): int64 on its (low, high)
int32 words with the value split the same way (exact for every int64, not only int32-range values), complex64
on its float32 planes. Shapes incl. 0-dim, size 1, empty, a broadcast mask, transposed views and in place;
compared with CPU torch under ``TRN_FALLBACK=error``."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture(autouse=True)
def _native_only(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


_VALUES = st.sampled_from([0, 7, -1, 2**31, -(2**40) - 5, 2**63 - 1, -(2**63)])


@settings(max_examples=15, deadline=None)
@given(shape=st.sampled_from([(), (1,), (0,), (4,), (2, 3), (3, 1)]), value=_VALUES, seed=st.integers(0, 2**16),
       bcast=st.booleans(), transpose=st.booleans())
def test_int64_masked_fill(shape, value, seed, bcast, transpose):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-(2**62), 2**62, shape, generator=g)
    m = torch.rand(shape[-1:] if bcast and shape else shape, generator=g) < 0.5
    xd, md = x.to("trn"), m.to("trn")
    if transpose and x.dim() == 2 and not bcast:
        x, m, xd, md = x.t(), m.t(), xd.t(), md.t()
    assert torch.equal(xd.masked_fill(md, value).cpu(), x.masked_fill(m, value))
    assert torch.equal(xd.masked_fill(md, torch.tensor(value)).cpu(), x.masked_fill(m, torch.tensor(value)))
    xd.masked_fill_(md, value)
    assert torch.equal(xd.cpu(), x.masked_fill(m, value))


@pytest.mark.parametrize("value", [2 - 5j, 1.5, 3, torch.tensor(1j, dtype=torch.complex64)])
@pytest.mark.parametrize("shape", [(), (5,), (2, 3)])
def test_complex64_masked_fill(value, shape):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(shape, dtype=torch.complex64, generator=g)
    m = torch.rand(shape, generator=g) < 0.5
    got = x.to("trn").masked_fill(m.to("trn"), value.to("trn") if isinstance(value, torch.Tensor) else value)
    assert torch.equal(got.cpu(), x.masked_fill(m, value))


def test_pair_values_split_and_refuse():
    from stdlib_kernels.indexing.masked import _pair_values

    i64 = torch.ones(1, dtype=torch.int64)
    assert _pair_values(i64, -1) == (-1, -1)
    assert _pair_values(i64, 2**32 + 5) == (5, 1)
    assert _pair_values(i64, 2**31) == (-(2**31), 0)
    assert _pair_values(i64, 1.5) == (1, 0) and _pair_values(i64, -2.7) == (-2, -1)  # truncated, as torch casts
    assert _pair_values(i64, True) == (1, 0)
    for bad in (1j, float("nan"), 1e20, 2**63, torch.tensor([1, 2])):  # left to the CPU, which raises
        assert _pair_values(i64, bad) is None
    c64 = torch.ones(1, dtype=torch.complex64)
    assert _pair_values(c64, 2 - 5j) == (2.0, -5.0)
    assert _pair_values(c64, torch.tensor(3.0)) is None  # a real tensor value: torch's own rules apply


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
@pytest.mark.parametrize("value", [2.5, -1.7, True, False, 3, -5, -255, 0.0, float("nan"), torch.tensor(2.5)])
def test_fill_value_converts_as_torch(monkeypatch, dtype, value):
    """The fill value converts to self's dtype as torch's Scalar cast does (upstream test_reference_numerics tan
    int64 masks with a float): truncated toward zero, a bool as 0/1, any nonzero (NaN too) True for bool, a negative
    int down to -255 wrapped for uint8; values torch refuses raise its error."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    a, m = torch.arange(4).to(dtype), torch.tensor([True, False, True, False])
    try:
        want = a.clone().masked_fill_(m, value)
    except RuntimeError:
        with pytest.raises(RuntimeError, match="cannot be converted"):
            a.to("trn").masked_fill_(m.to("trn"), value)
        return
    assert torch.equal(a.to("trn").masked_fill_(m.to("trn"), value).cpu(), want)
    assert torch.equal(torch.masked_fill(a.to("trn"), m.to("trn"), value).cpu(), want)
