"""Advanced indexing behaves like CPU torch natively (issue 22): torch's IndexError/RuntimeError for bad
indices raised by the lowering itself (no CPU fallback to produce them), complex64 gathered and scattered on
its (real, imaginary) planes, bool ``index_put_(accumulate=True)`` as an OR, masks over more than three dims,
and ``nonzero(out=)``'s dtype check. Every case runs under ``TRN_FALLBACK=error`` and is compared with the CPU.
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture(autouse=True)
def _native_only(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


def _outcome(fn, dev):
    try:
        return "ok", fn(dev)
    except (IndexError, RuntimeError) as e:
        return type(e).__name__, str(e).split("\n")[0]


def _same_as_cpu(fn):
    want, got = _outcome(fn, "cpu"), _outcome(fn, "trn")
    assert got[0] == want[0], (got, want)
    if want[0] == "ok":
        assert got[1].device.type == "trn"
        torch.testing.assert_close(got[1].cpu(), want[1], rtol=0, atol=0)
    else:
        assert got[1] == want[1]


def _t(data, d, **kw):
    return torch.tensor(data, device=d, **kw)


ERRORS = {
    "out_of_range_get": lambda d: torch.zeros(5, device=d)[_t([1, 10], d)],
    "negative_out_of_range_put": lambda d: torch.zeros(5, device=d).index_put_((_t([1, -10], d),), _t(1.0, d)),
    "out_of_range_second_dim": lambda d: torch.zeros(3, 4, device=d)[:, _t([0, 4], d)],
    "indices_do_not_broadcast": lambda d: torch.zeros(5, 5, device=d)[_t([0, 1], d), _t([0, 1, 2], d)],
    "mask_too_short": lambda d: torch.ones(5, 4, 3, device=d)[_t([True], d)],
    "mask_2d_mismatch": lambda d: torch.ones(5, 4, 3, device=d)[:, torch.zeros(4, 4, dtype=torch.bool, device=d)],
    "mask_too_many_dims": lambda d: torch.ones(5, device=d)[torch.ones(5, 2, dtype=torch.bool, device=d)],
    "float_index": lambda d: torch.ones(3, device=d)[_t([1.0], d)],
    "index_into_empty_dim": lambda d: torch.empty(10, 0, device=d)[:, _t([0, 1], d)],
    "values_do_not_broadcast": lambda d: torch.arange(4, device=d).index_put_(
        (torch.arange(4, device=d) > -1,), _t([1, 2, 3], d)),
    "values_of_another_dtype": lambda d: torch.arange(4, device=d).index_put_(
        (torch.arange(4, device=d) > -1,), _t([1.0, 2, 3, 4], d)),
    "nonzero_out_float": lambda d: torch.nonzero(torch.ones(3, device=d), out=torch.empty(0, device=d)),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_torch_errors_natively(case):
    _same_as_cpu(ERRORS[case])


DTYPES = [torch.complex64, torch.bool, torch.float32, torch.int32, torch.int16]


def _data(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype.is_complex:
        return torch.complex(torch.randn(shape, generator=g), torch.randn(shape, generator=g))
    return torch.randint(-50, 50, shape, generator=g).to(dtype)


@settings(max_examples=12, deadline=None)
@given(dtype=st.sampled_from(DTYPES), rows=st.integers(1, 9), cols=st.integers(1, 6), n=st.integers(1, 12),
       accumulate=st.booleans(), seed=st.integers(0, 2**16))
def test_index_put_and_index_vs_cpu(dtype, rows, cols, n, accumulate, seed):
    x = _data((rows, cols), dtype, seed)
    g = torch.Generator().manual_seed(seed + 1)
    idx = torch.randint(-rows, rows, (n,), generator=g)  # repeats and negative indices
    v = _data((n, cols), dtype, seed + 2)
    want = x.clone().index_put_((idx,), v, accumulate=accumulate)
    got = x.to("trn").index_put_((idx.to("trn"),), v.to("trn"), accumulate=accumulate)
    if dtype.is_complex and accumulate:  # repeated complex adds may round in another order
        torch.testing.assert_close(got.cpu(), want)
    else:
        assert torch.equal(got.cpu(), want)
    assert torch.equal(x.to("trn")[idx.to("trn")].cpu(), x[idx])


@settings(max_examples=10, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=2, max_size=5), lead=st.booleans(), seed=st.integers(0, 2**16))
def test_masks_over_many_dims(shape, lead, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    mask = torch.rand(shape[1:] if lead else shape, generator=g) > 0.5
    key = (slice(None), mask) if lead else (mask,)
    assert torch.equal(x.to("trn")[tuple(m.to("trn") if isinstance(m, torch.Tensor) else m for m in key)].cpu(),
                       x[key])
    y, yt = x.clone(), x.to("trn")
    y[key] = 0.0
    yt[tuple(m.to("trn") if isinstance(m, torch.Tensor) else m for m in key)] = 0.0
    assert torch.equal(yt.cpu(), y)


def test_mask_over_dims_a_view_cannot_merge():
    x = torch.randn(4, 5, 6)
    xt = x.to("trn").transpose(0, 2)  # [6, 5, 4], the masked dims 0-1 not mergeable in a view
    mask = torch.rand(6, 5) > 0.4
    assert torch.equal(xt[mask.to("trn")].cpu(), x.transpose(0, 2)[mask])


@pytest.mark.parametrize("key", [(slice(None), slice(None), [0, 9]), ([0, 1], slice(None), [0, 9]),
                                 (slice(None), [0, 7], [0, 1])])
def test_out_of_range_names_the_indexed_dim(key):
    def fn(d):
        return torch.zeros(3, 4, 5, device=d)[tuple(_t(k, d) if isinstance(k, list) else k for k in key)]
    _same_as_cpu(fn)


@pytest.mark.parametrize("accumulate", [False, True])
def test_index_put_over_more_than_three_dims(monkeypatch, accumulate):
    """``x[mask] = v`` with a 4-D mask over a view whose dims do not merge (a diagonal: upstream
    test_linalg_solve_triangular_broadcasting), 4-D integer indices, and non-adjacent ones: natively, through one
    linear index (a view merging the dims, or a contiguous copy written back)."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    base = torch.randn(2, 1, 3, 4, 4, generator=torch.Generator().manual_seed(5))
    a, at = base.clone(), base.to("trn")
    d, dt = a.diagonal(0, -2, -1), at.diagonal(0, -2, -1)
    m = d.abs() < 0.5
    d.index_put_((m,), torch.tensor(7.0), accumulate)
    dt.index_put_((m.to("trn"),), torch.tensor(7.0, device="trn"), accumulate)
    assert torch.equal(at.cpu(), a)
    g = torch.Generator().manual_seed(6)
    idx = [torch.randint(0, n, (6,), generator=g) for n in base.shape]
    for ii in [tuple(idx[:4]), (idx[0], idx[1], idx[2], slice(None), idx[4])]:
        v = torch.randn(base[ii].shape, generator=g)
        a, at = base.clone(), base.to("trn")
        a.index_put_(ii, v, accumulate) if all(isinstance(i, torch.Tensor) for i in ii) else a.__setitem__(ii, v)
        tii = tuple(i.to("trn") if isinstance(i, torch.Tensor) else i for i in ii)
        if all(isinstance(i, torch.Tensor) for i in ii):
            at.index_put_(tii, v.to("trn"), accumulate)
        else:
            at[tii] = v.to("trn")
        torch.testing.assert_close(at.cpu(), a, atol=1e-6, rtol=0)
    with pytest.raises(IndexError, match="out of bounds for dimension 2 with size 3"):
        at.index_put_((idx[0], idx[1], torch.tensor([3]).to("trn"), idx[3]), torch.tensor(1.0, device="trn"))


def test_multi_dim_index_of_widely_strided_tensors_natively(monkeypatch):
    """Two indexed dims with large strides (a 5 x 100 x 100 x 2 tensor: linear span 99,801, row stride 20,000) were
    declined: the out-of-range sentinel times the stride could pass 2^31. Each index now has its own sentinel (the
    smallest that lands past the end), so the launch takes them, and out-of-range indices still raise."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    x = torch.randn(5, 100, 100, 2, generator=torch.Generator().manual_seed(19))
    xt = x.to("trn")
    r, p = torch.tensor([0, 1, 2, 3, 4]), torch.tensor([99, 0, 50, -3, 98])
    assert torch.equal(xt[r.to("trn"), p.to("trn"), :].cpu(), x[r, p, :])
    v = torch.randn(5, 100, 2)
    x[r, p] = v
    xt[r.to("trn"), p.to("trn")] = v.to("trn")
    assert torch.equal(xt.cpu(), x)
    for rr, pp, dim in [(r, torch.tensor([100, 0, 0, 0, 0]), 1), (torch.tensor([5, 0, 0, 0, 0]), p, 0),
                        (r, torch.tensor([-101, 0, 0, 0, 0]), 1)]:
        with pytest.raises(IndexError, match=f"out of bounds for dimension {dim}"):
            xt[rr.to("trn"), pp.to("trn"), :]
