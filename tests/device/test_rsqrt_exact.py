"""``rsqrt`` is ``1 / sqrt(x)`` in fp32 on every path, as torch's CPU kernel computes it: equal bit for bit to torch,
and the compiled kernel equal to the interpreter, over subnormals, huge values, zeros, negatives, inf and NaN."""

from __future__ import annotations

import os

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang as trn
import trnlang.language as tl
from trnlang import config


@trn.kernel
def _rsqrt_kernel(x, out):
    n = x.shape[0]
    for i in tl.affine_range(tl.cdiv(n, 128)):
        r = i * 128 + tl.arange(128)[:, None]
        c = tl.arange(x.shape[1])[None, :]
        tl.store(out[r, c], tl.rsqrt(tl.load(x[r, c], mask=r < n)), mask=r < n)


def _special() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(0, 2**31 - 1, (4000,), generator=g, dtype=torch.int64).to(torch.int32).view(torch.float32)
    extra = torch.tensor([0.0, -0.0, -1.0, float("inf"), float("-inf"), float("nan"), 1e-45, 3.4e38, 1.0, 4.0])
    return torch.cat([bits, extra])


def test_device_rsqrt_equals_torch_bit_for_bit() -> None:
    x = _special()
    got = torch.rsqrt(x.to("trn")).cpu()
    exp = torch.rsqrt(x)
    assert torch.equal(got.view(torch.int32)[~exp.isnan()], exp.view(torch.int32)[~exp.isnan()])
    assert torch.equal(got.isnan(), exp.isnan())


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.sampled_from([1, 127, 128, 300]), cols=st.sampled_from([1, 16, 33]))
def test_compiled_rsqrt_equals_interpreter(rows: int, cols: int) -> None:
    x = _special()[: rows * cols]
    x = torch.cat([x, torch.rand(rows * cols - x.numel()) * 10]).reshape(rows, cols)
    out_c = torch.empty_like(x)
    out_i = torch.empty_like(x)
    _rsqrt_kernel(x, out_c)
    os.environ["TRN_INTERPRET"] = "1"
    config.refresh()
    try:
        _rsqrt_kernel(x, out_i)
    finally:
        del os.environ["TRN_INTERPRET"]
        config.refresh()
    assert torch.equal(out_c.nan_to_num(7.0), out_i.nan_to_num(7.0))
    exp = torch.rsqrt(x)
    assert torch.equal(out_c.nan_to_num(7.0), exp.nan_to_num(7.0))
