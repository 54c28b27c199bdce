"""``sum(x, dtype=...)`` of integer and bool tensors runs natively (issue 22: masked var/std, vector_norm's ord=0
count and nansum's ``dtype=`` reach it): torch converts the input to ``dtype`` first, so integer targets wrap
(int8 + int8 sums wrap as the CPU's do) and float targets round. Compared with CPU torch under
``TRN_FALLBACK=error``."""

import pytest
import torch

_INTS = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


@pytest.fixture(autouse=True)
def _native_only(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


@pytest.mark.parametrize("src", _INTS)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.float16, torch.bfloat16,
                                   torch.float32])
@pytest.mark.parametrize("dim", [None, [1], [0, 2]])
def test_int_sum_with_dtype_vs_cpu(src, dtype, dim):
    g = torch.Generator().manual_seed(hash((str(src), str(dtype))) % 2**16)
    x = torch.randint(-300, 300, (5, 7, 3), generator=g).to(src)
    kw = {"dim": dim} if dim else {}
    got = torch.sum(x.to("trn"), dtype=dtype, **kw).cpu()
    want = torch.sum(x, dtype=dtype, **kw)
    assert got.dtype == want.dtype
    if dtype.is_floating_point:  # the CPU's bf16/fp16 sums round partial sums; the exact sum of the converted input
        want = torch.sum(x.to(dtype).double(), **kw).to(dtype)  # rounded once is what an fp32 accumulation gives
    torch.testing.assert_close(got, want, rtol=1e-2 if dtype.is_floating_point else 0, atol=0)


def test_nansum_of_ints_into_half():
    x = torch.arange(-40, 40, dtype=torch.int16).view(8, 10)
    got = torch.nansum(x.to("trn"), dim=1, dtype=torch.float16).cpu()
    torch.testing.assert_close(got, torch.nansum(x, dim=1, dtype=torch.float16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.uint8])
def test_nansum_native_vs_cpu(dtype):
    x = torch.randn(6, 9).mul(10).to(dtype)
    if dtype.is_floating_point:
        x[::2, 1::3] = float("nan")
    for kw in ({}, {"dim": 1}, {"dim": [0], "keepdim": True}):
        got = torch.nansum(x.to("trn"), **kw).cpu()
        want = torch.nansum(x.float(), **kw).to(torch.nansum(x, **kw).dtype)
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)


def test_nansum_checks_dims_as_torch():
    with pytest.raises(RuntimeError, match="only tensors with up to 64 dims are supported"):
        torch.nansum(torch.ones([1] * 65, device="trn"), dim=0)
    with pytest.raises(RuntimeError, match="appears multiple times"):
        torch.nansum(torch.ones(2, 3, device="trn"), dim=[1, 1])
