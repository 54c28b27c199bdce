"""``addmm`` / ``baddbmm`` with a bias: for fp32 with ``alpha`` 1 the bias is put in the output and one gemm adds the
product (the tile loops fold, ``collapse_gemm``); every bias shape, ``beta``, in place (``addmm_``: the output is
the bias) and ``out=`` equal the CPU's; other cases keep the bias epilogue."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang


def _close(got: torch.Tensor, exp: torch.Tensor) -> None:
    assert got.device.type == "trn" and got.dtype == exp.dtype and got.shape == exp.shape
    torch.testing.assert_close(got.cpu(), exp, rtol=2e-4, atol=2e-4)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(m=st.sampled_from([1, 7, 128, 300]), k=st.sampled_from([1, 64, 129, 512]), n=st.sampled_from([1, 33, 512, 640]),
       bias_kind=st.sampled_from(["row", "row2", "col", "full", "scalar"]), beta=st.sampled_from([1.0, 0.5, 0.0]),
       alpha=st.sampled_from([1.0, 2.0]))
def test_addmm_matches_cpu(m, k, n, bias_kind, beta, alpha) -> None:
    g = torch.Generator().manual_seed(m * 7 + k * 3 + n)
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    shape = {"row": (n,), "row2": (1, n), "col": (m, 1), "full": (m, n), "scalar": ()}[bias_kind]
    bias = torch.randn(shape, generator=g)
    trnlang.reset_fallback_stats()
    got = torch.addmm(bias.to("trn"), a.to("trn"), b.to("trn"), beta=beta, alpha=alpha)
    _close(got, torch.addmm(bias, a, b, beta=beta, alpha=alpha))
    assert trnlang.fallback_stats() == {}


@pytest.mark.parametrize("beta", [1.0, 0.25])
def test_addmm_in_place_and_out(beta: float) -> None:
    a, b, c = torch.randn(200, 256), torch.randn(256, 384), torch.randn(200, 384)
    ct = c.to("trn")
    ct.addmm_(a.to("trn"), b.to("trn"), beta=beta)  # the output holds the bias already
    _close(ct, c.clone().addmm_(a, b, beta=beta))
    o = torch.empty(200, 384, device="trn")
    r = torch.addmm(c[0].to("trn"), a.to("trn"), b.to("trn"), beta=beta, out=o)
    assert r is o
    _close(o, torch.addmm(c[0], a, b, beta=beta))


def test_linear_and_baddbmm_and_bf16() -> None:
    x, w, bb = torch.randn(4, 128, 512), torch.randn(1536, 512), torch.randn(1536)
    _close(torch.nn.functional.linear(x.to("trn"), w.to("trn"), bb.to("trn")), torch.nn.functional.linear(x, w, bb))
    p, q, s = torch.randn(3, 130, 64), torch.randn(3, 64, 257), torch.randn(3, 1, 257)
    _close(torch.baddbmm(s.to("trn"), p.to("trn"), q.to("trn")), torch.baddbmm(s, p, q))
    xb, wb, cb = (t.bfloat16() for t in (torch.randn(64, 128), torch.randn(128, 96), torch.randn(96)))
    got = torch.addmm(cb.to("trn"), xb.to("trn"), wb.to("trn"))  # bf16: the bias epilogue, rounded once
    torch.testing.assert_close(got.cpu().float(), torch.addmm(cb, xb, wb).float(), rtol=2e-2, atol=2e-2)


def test_nan_bias_with_beta_zero_is_ignored() -> None:
    a, b = torch.randn(16, 32), torch.randn(32, 8)
    bias = torch.full((8,), float("nan"))
    _close(torch.addmm(bias.to("trn"), a.to("trn"), b.to("trn"), beta=0.0), torch.addmm(bias, a, b, beta=0.0))
