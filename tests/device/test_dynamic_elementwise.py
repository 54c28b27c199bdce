"""Elementwise ops on ``trn`` (binary, comparison, ternary, unary / activations) reuse compiled variants across sizes
(issue 15 item 4).

``pointwise.elementwise``, ``ternary.ternary`` and ``unary.ew`` are shape-polymorphic: every size of a launch
piece is a runtime value and the host passes the piece's row and free-axis buckets (``pointwise.tile3``).
Checked against torch's CPU kernels over sizes 0, 1, ragged tiles, bucket edges and broadcasts.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang as trn
from stdlib_kernels.pointwise import tile3

SIZES = [0, 1, 2, 3, 127, 128, 129, 511, 512, 513, 2047, 2048, 2049, 4095, 4096, 4097]


def loaded(name: str) -> int:
    """Variants of kernel ``name`` compiled or loaded from disk since the last reset."""
    k = trn.compile_stats()["kernels"].get(name, {})
    return k.get("compiles", 0) + k.get("disk_hits", 0)


def _ops(a: torch.Tensor, b: torch.Tensor) -> list:
    return [a + b, a * 0.5 - b, a > b, torch.where(a > 0, a, b), torch.clamp(a, -0.5, 0.5), F.gelu(a), torch.exp(b),
            torch.maximum(a, b[..., :1])]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(r=st.one_of(st.sampled_from(SIZES[:7]), st.integers(0, 300)),
       c=st.one_of(st.sampled_from(SIZES), st.integers(1, 5000)))
def test_elementwise_ops_match_cpu(r: int, c: int) -> None:
    a, b = torch.randn(r, c), torch.randn(r, c)
    for got, exp in zip(_ops(a.to("trn"), b.to("trn")), _ops(a, b)):
        torch.testing.assert_close(got.cpu(), exp, rtol=1e-5, atol=1e-5)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.one_of(st.sampled_from(SIZES), st.integers(0, 20000)))
def test_one_dimensional_ops_match_cpu(n: int) -> None:
    a, b = torch.randn(n), torch.randn(n)
    for got, exp in zip(_ops(a.to("trn"), b.to("trn")), _ops(a, b)):
        torch.testing.assert_close(got.cpu(), exp, rtol=1e-5, atol=1e-5)


def test_new_lengths_reuse_the_bucket_variants() -> None:
    trn.reset_compile_stats()
    seen = set()
    lengths = list(range(600, 1024, 37))  # 12 lengths, all in the bucket of 1024 columns
    for n in lengths:
        a, b = torch.randn(n), torch.randn(n)
        torch.testing.assert_close((a.to("trn") * b.to("trn")).cpu(), a * b)
        torch.testing.assert_close(F.silu(a.to("trn")).cpu(), F.silu(a), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(torch.where(a.to("trn") > 0, a.to("trn"), 0.0).cpu(), torch.where(a > 0, a, 0.0))
        seen.add(tile3((n,)))
    assert len(seen) == 1
    for name in ("elementwise", "ew", "ternary"):
        assert loaded(name) <= 1, (name, trn.compile_stats()["kernels"].get(name))


def test_growing_rows_of_a_2d_tensor_reuse_one_variant() -> None:
    trn.reset_compile_stats()
    for r in range(129, 140):
        a = torch.randn(r, 3, 64)
        row = torch.randn(64)
        torch.testing.assert_close((a.to("trn") + row.to("trn")).cpu(), a + row)
    assert loaded("elementwise") <= 1, trn.compile_stats()["kernels"].get("elementwise")
