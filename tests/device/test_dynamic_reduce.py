"""Reductions on ``trn`` reuse compiled variants across sizes (issue 15 item 4).

``row_reduce``, ``row_arg_reduce``, ``row_var`` and ``col_sum`` are shape-polymorphic: sizes are runtime values,
the host passes tile buckets (``stdlib_kernels.tiling``) and the size-dependent divisors of ``mean`` / ``var``
as ``[1, 1]`` device scalars (runtime values, not constants). Checked against torch's CPU kernels over sizes 0,
1, ragged tiles and the column bucket edges.
"""

from __future__ import annotations

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang as trn
from stdlib_kernels import _util as U
from stdlib_kernels import tiling as T

SIZES = [0, 1, 2, 3, 127, 128, 129, 511, 512, 513, 2047, 2048, 2049]


def loaded(name: str) -> int:
    """Variants of kernel ``name`` compiled or loaded from disk since the last reset."""
    k = trn.compile_stats()["kernels"].get(name, {})
    return k.get("compiles", 0) + k.get("disk_hits", 0)


def _check(x: torch.Tensor, dim: int) -> None:
    xt = x.to("trn")
    for name, f in [("sum", lambda t: t.sum(dim)), ("mean", lambda t: t.mean(dim)), ("amax", lambda t: t.amax(dim)),
                    ("argmax", lambda t: t.argmax(dim)), ("var", lambda t: t.var(dim)),
                    ("logsumexp", lambda t: torch.logsumexp(t, dim)), ("norm", lambda t: t.norm(dim=dim))]:
        if x.shape[dim] == 0 and name in ("amax", "argmax"):
            continue  # torch raises for an empty max
        exp = f(x)
        got = f(xt).cpu()
        torch.testing.assert_close(got, exp, rtol=1e-4, atol=1e-4, equal_nan=True, msg=f"{name} {tuple(x.shape)}")


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(r=st.one_of(st.sampled_from(SIZES[:8]), st.integers(0, 300)),
       c=st.one_of(st.sampled_from(SIZES), st.integers(0, 3000)), dim=st.sampled_from([0, 1]))
def test_reductions_match_cpu(r: int, c: int, dim: int) -> None:
    _check(torch.randn(r, c), dim)


def test_argmax_ignores_the_masked_tail_of_a_bucket() -> None:
    # every value equal to the reduction's identity (-inf): the first index must still win, not a masked column
    x = torch.full((3, 513), -float("inf"))
    torch.testing.assert_close(x.to("trn").argmax(1).cpu(), x.argmax(1))
    torch.testing.assert_close(x.to("trn").max(1).values.cpu(), x.max(1).values)


def test_new_row_and_column_counts_reuse_the_bucket_variants() -> None:
    trn.reset_compile_stats()
    seen = set()
    shapes = [(r, c) for r in (130, 200, 257) for c in (600, 700, 1000)] + [(5, 70), (7, 100), (6, 120)]
    for r, c in shapes:
        x = torch.randn(r, c)
        torch.testing.assert_close(x.to("trn").sum(1).cpu(), x.sum(1), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(x.to("trn").mean(1).cpu(), x.mean(1), rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(x.to("trn").var(1).cpu(), x.var(1), rtol=1e-4, atol=1e-5)
        seen.add(T.tile_of(r, c, U.FREE_CHUNK))
    # 12 shapes in 2 buckets; sum and mean are the same kernel (the divisor is a runtime operand)
    assert len(seen) == 2
    assert loaded("row_reduce") <= len(seen) * 2, trn.compile_stats()["kernels"].get("row_reduce")  # sum, mean
    assert loaded("row_var") <= len(seen), trn.compile_stats()["kernels"].get("row_var")


def test_sums_over_leading_dims_reuse_the_column_sum_variant() -> None:
    trn.reset_compile_stats()
    for r, c in [(300, 130), (257, 200), (400, 150), (129, 300)]:
        x = torch.randn(r, c)
        torch.testing.assert_close(x.to("trn").sum(0).cpu(), x.sum(0), rtol=1e-4, atol=1e-4)
    assert loaded("col_sum") <= 2, trn.compile_stats()["kernels"].get("col_sum")  # buckets 256 and 512 of C
