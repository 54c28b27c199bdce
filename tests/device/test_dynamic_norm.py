"""Layer norm and RMS norm on ``trn`` reuse compiled variants across row counts (issue 15 item 4).

``ln_fwd`` / ``ln_bwd`` are shape-polymorphic in the row count; the normalised size ``N`` sets the tile shapes
(one-pass moments of a whole row) and stays a compile-time constant: a model's hidden size is fixed while its
token count changes. Checked against torch's CPU kernels, forward and backward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang as trn


def loaded(name: str) -> int:
    """Variants of kernel ``name`` compiled or loaded from disk since the last reset."""
    k = trn.compile_stats()["kernels"].get(name, {})
    return k.get("compiles", 0) + k.get("disk_hits", 0)


def _ln(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, g: torch.Tensor) -> list[torch.Tensor]:
    xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
    y = F.layer_norm(xs, (x.shape[-1],), ws, bs)
    y.backward(g)
    return [y.detach(), xs.grad, ws.grad, bs.grad]


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(r=st.one_of(st.sampled_from([0, 1, 2, 127, 128, 129, 257]), st.integers(0, 600)),
       n=st.sampled_from([1, 16, 100, 512]))
def test_layer_norm_forward_and_backward_match_cpu(r: int, n: int) -> None:
    x, g = torch.randn(r, n), torch.randn(r, n)
    w, b = torch.randn(n), torch.randn(n)
    got = _ln(*(t.to("trn") for t in (x, w, b, g)))
    for a, e in zip(got, _ln(x, w, b, g)):
        torch.testing.assert_close(a.cpu(), e, rtol=1e-4, atol=1e-4)


def test_new_token_counts_reuse_the_layer_norm_variants() -> None:
    trn.reset_compile_stats()
    w, b = torch.randn(64), torch.randn(64)
    for r in (130, 131, 200, 257, 300, 411, 500):
        x, g = torch.randn(r, 64), torch.randn(r, 64)
        got = _ln(*(t.to("trn") for t in (x, w, b, g)))
        for a, e in zip(got, _ln(x, w, b, g)):
            torch.testing.assert_close(a.cpu(), e, rtol=1e-4, atol=1e-4)
        y = F.rms_norm(x.to("trn"), (64,), w.to("trn"))
        torch.testing.assert_close(y.cpu(), F.rms_norm(x, (64,), w), rtol=1e-4, atol=1e-5)
    s = trn.compile_stats()["kernels"]
    # layer norm and RMS norm are one ln_fwd each (same row bucket for all 7 counts); the backward one ln_bwd
    assert loaded("ln_fwd") <= 2, s.get("ln_fwd")
    assert loaded("ln_bwd") <= 1, s.get("ln_bwd")
