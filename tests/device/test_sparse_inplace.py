"""In-place and remaining elementwise ops of sparse COO tensors on trn (issue 22: ``add_`` / ``mul_`` / ``sub_`` /
``div_`` / ``zero_`` had no SparsePrivateUse1 kernel): ``dense.add_(sparse)`` scatter-adds, a sparse ``self`` takes
the result's indices and values (``copy_sparse_to_sparse_``); values and sparsity equal the CPU's."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang


def _sparse(shape, nnz, seed, dense_dims=0):
    g = torch.Generator().manual_seed(seed)
    sd = len(shape) - dense_dims
    idx = torch.stack([torch.randint(0, shape[d], (nnz,), generator=g) for d in range(sd)])  # duplicates possible
    vals = torch.randn((nnz, *shape[sd:]), generator=g)
    return torch.sparse_coo_tensor(idx, vals, shape)


def _same(got, want):
    got = got.cpu()
    assert got.is_sparse == want.is_sparse and got.dtype == want.dtype
    if got.is_sparse:
        torch.testing.assert_close(got.to_dense(), want.to_dense(), rtol=1e-6, atol=1e-6)
    else:
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


OPS = {
    "dense.add_(s)": lambda d, s, s2: d.clone().add_(s),
    "dense.add_(s, alpha)": lambda d, s, s2: d.clone().add_(s, alpha=-1.5),
    "dense.sub_(s)": lambda d, s, s2: d.clone().sub_(s),
    "s.add_(s2)": lambda d, s, s2: s.clone().add_(s2),
    "s.sub_(s2, alpha)": lambda d, s, s2: s.clone().sub_(s2, alpha=0.5),
    "s - s2": lambda d, s, s2: s - s2,
    "s.mul_(2.5)": lambda d, s, s2: s.clone().mul_(2.5),
    "s.mul_(d)": lambda d, s, s2: s.clone().mul_(d),
    "s.div_(4)": lambda d, s, s2: s.clone().div_(4.0),
    "s / 0-dim": lambda d, s, s2: s / torch.tensor(3.0, device=d.device),
    "s.zero_()": lambda d, s, s2: s.clone().zero_(),
}


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op=st.sampled_from(sorted(OPS)), shape=st.sampled_from([(4, 5), (3, 1), (2, 3, 4)]),
       nnz=st.sampled_from([0, 1, 7]), coalesced=st.booleans())
def test_inplace_sparse_ops_match_cpu(op, shape, nnz, coalesced):
    s, s2 = _sparse(shape, nnz, 1), _sparse(shape, max(nnz, 2), 2)
    if coalesced:
        s, s2 = s.coalesce(), s2.coalesce()
    d = torch.randn(shape, generator=torch.Generator().manual_seed(3))
    trnlang.reset_fallback_stats()
    got = OPS[op](d.to("trn"), s.to("trn"), s2.to("trn"))
    _same(got, OPS[op](d, s, s2))
    assert trnlang.fallback_stats() == {}


def test_inplace_returns_self_and_division_errors_like_cpu():
    s = _sparse((4, 5), 6, 7).to("trn")
    assert s.add_(s) is s and s.mul_(2.0) is s and s.div_(2.0) is s and s.zero_() is s
    assert s._nnz() == 0 and tuple(s.shape) == (4, 5)
    with pytest.raises(RuntimeError, match="scalar or zero-dim dense tensor divisor"):
        s / torch.randn(4, 5, device="trn")


@pytest.mark.parametrize("op", ["add_", "sub_", "mul_"])
@pytest.mark.parametrize("d1,d2", [(torch.int64, torch.float32), (torch.uint8, torch.float16),
                                   (torch.int32, torch.bfloat16)])
def test_inplace_results_that_do_not_cast_raise_as_torch(op, d1, d2):
    """dense += sparse, sparse += sparse (and sparse *= dense or sparse) into an integer self with a float other:
    torch's cast errors, word for word."""
    a = (torch.arange(12).reshape(3, 4) % 3).to(d1)
    b = (torch.arange(12).reshape(3, 4) % 2).to(d2)
    pairs = ((a.to_sparse(), b), (a.to_sparse(), b.to_sparse())) if op == "mul_" else \
        ((a, b.to_sparse()), (a.to_sparse(), b.to_sparse()))
    for self_, other in pairs:
        with pytest.raises(RuntimeError, match="must match dtype|Can't convert result type") as want:
            getattr(self_.clone(), op)(other)
        with pytest.raises(RuntimeError) as got:
            getattr(self_.to("trn").clone(), op)(other.to("trn"))
        assert str(got.value) == str(want.value)


@pytest.mark.parametrize("coalesced", [True, False])
@pytest.mark.parametrize("d1,d2", [(torch.float32, torch.float32), (torch.int64, torch.uint8),
                                   (torch.float16, torch.bool)])
def test_dense_times_sparse_in_place(coalesced, d1, d2):
    """dense *= sparse: the product on the pattern, zeros elsewhere (it failed: no dense copy from sparse)."""
    a = torch.arange(1, 13).reshape(3, 4).to(d1)
    s = (torch.arange(12).reshape(3, 4) % 3).to(d2).to_sparse()
    if not coalesced:
        s = torch.sparse_coo_tensor(torch.cat((s.indices(), s.indices()), 1), torch.cat((s.values(), s.values())),
                                    s.shape)
    want = a.clone().mul_(s)
    got = a.to("trn").mul_(s.to("trn"))
    assert got.dtype == want.dtype and torch.equal(got.cpu(), want)


@pytest.mark.parametrize("d1,d2", [(torch.int8, torch.uint8), (torch.int32, torch.uint8),
                                   (torch.float32, torch.uint8)])
@pytest.mark.parametrize("coalesced", [True, False])
def test_sub_of_an_unsigned_sparse_other_scales_in_the_result_dtype(d1, d2, coalesced):
    """``x - s`` with uint8 ``s``: the ``-1`` scale applies after promotion (it wrapped modulo 256 before)."""
    g = torch.Generator().manual_seed(3)
    a = torch.randint(-3, 4, (3, 4), generator=g).to(d1)
    s = torch.randint(0, 4, (3, 4), generator=g).to(d2).to_sparse()
    if not coalesced:
        s = torch.sparse_coo_tensor(torch.cat((s.indices(), s.indices()), 1), torch.cat((s.values(), s.values())),
                                    s.shape)
    for x, y in ((a, s), (a.to_sparse(), s)):
        want = (x - y)
        got = x.to("trn") - y.to("trn")
        want = want.to_dense() if want.is_sparse else want
        got = got.to_dense() if got.is_sparse else got
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
