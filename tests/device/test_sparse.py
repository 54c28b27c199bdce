"""Sparse COO and CSR tensors on trn (stdlib_kernels/sparse/coo.py, csr.py) vs the CPU, with TRN_FALLBACK=error."""

import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from stdlib_kernels.sparse import coo

_SETTINGS = settings(max_examples=5, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def _native_only(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")
    trnlang.reset_fallback_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's sparse invariant-check notice
        yield
    assert trnlang.fallback_stats() == {}


@st.composite
def _coo(draw, dense_dims=0):
    """(indices, values, size): random 2-D COO, possibly with duplicate entries (uncoalesced), nnz 0 and 1."""
    m, k = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    nnz = draw(st.sampled_from([0, 1, draw(st.integers(2, 12))]))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    idx = torch.stack([torch.randint(0, m, (nnz,), generator=g), torch.randint(0, k, (nnz,), generator=g)])
    vals = torch.randn((nnz,) + (3,) * dense_dims, generator=g)
    return idx, vals, (m, k) + (3,) * dense_dims


def _pair(spec):
    idx, vals, size = spec
    return torch.sparse_coo_tensor(idx, vals, size), torch.sparse_coo_tensor(idx.to("trn"), vals.to("trn"), size)


def _same(actual, expected, tol=1e-5):
    assert actual.device.type == "trn"
    assert actual.layout == expected.layout
    if expected.layout == torch.sparse_coo:
        assert actual.is_coalesced() == expected.is_coalesced()
        if expected.is_coalesced():
            torch.testing.assert_close(actual.indices().cpu(), expected.indices())
        actual, expected = actual.to_dense(), expected.to_dense()
    torch.testing.assert_close(actual.cpu(), expected, rtol=tol, atol=tol)


@given(spec=st.one_of(_coo(), _coo(dense_dims=1)))
@_SETTINGS
def test_construct_to_dense_coalesce(spec):
    cpu, dev = _pair(spec)
    assert dev.device.type == "trn" and dev._nnz() == cpu._nnz()
    _same(dev.to_dense(), cpu.to_dense())
    c = dev.coalesce()
    ref = cpu.coalesce()
    torch.testing.assert_close(c.indices().cpu(), ref.indices())
    torch.testing.assert_close(c.values().cpu(), ref.values(), rtol=1e-5, atol=1e-5)
    _same(cpu.to("trn"), cpu)
    _same(dev.cpu().to("trn"), cpu)


@given(spec=_coo(), sparse_dim=st.sampled_from([None, 1]))
@_SETTINGS
def test_dense_to_sparse(spec, sparse_dim):
    dense = torch.sparse_coo_tensor(*spec).to_dense()
    args = () if sparse_dim is None else (sparse_dim,)
    _same(dense.to("trn").to_sparse(*args), dense.to_sparse(*args))


@given(spec=_coo(), n=st.integers(1, 4), beta=st.sampled_from([0.0, 1.0, 0.5]))
@_SETTINGS
def test_mm_addmm(spec, n, beta):
    cpu, dev = _pair(spec)
    w = torch.randn(spec[2][1], n)
    b = torch.randn(spec[2][0], n)
    _same(torch.sparse.mm(dev, w.to("trn")), torch.sparse.mm(cpu, w))
    _same(dev @ w.to("trn"), cpu @ w)
    _same(torch.addmm(b.to("trn"), dev, w.to("trn"), beta=beta, alpha=2.0),
          torch.addmm(b, cpu, w, beta=beta, alpha=2.0))


def test_mm_shape_mismatch_raises_like_cpu():
    cpu, dev = _pair((torch.tensor([[0], [1]]), torch.ones(1), (2, 3)))
    with pytest.raises(RuntimeError, match="Expected dim 0 size 3, got 4"):
        torch.sparse.mm(cpu, torch.ones(4, 2))
    with pytest.raises(RuntimeError, match="Expected dim 0 size 3, got 4"):
        torch.sparse.mm(dev, torch.ones(4, 2, device="trn"))


@given(spec=st.one_of(_coo(), _coo(dense_dims=1)))
@_SETTINGS
def test_sum_and_elementwise(spec):
    cpu, dev = _pair(spec)
    d = torch.randn(spec[2])
    _same(dev.sum(), cpu.sum())
    for dims in ([0], [1], [0, 1]) + (([2], [1, 2]) if len(spec[2]) == 3 else ()):
        _same(torch.sparse.sum(dev, dims), torch.sparse.sum(cpu, dims))
    _same(d.to("trn") + dev, d + cpu)
    _same(torch.add(d.to("trn"), dev, alpha=-2.0), torch.add(d, cpu, alpha=-2.0))
    _same(dev + dev, cpu + cpu)
    _same(dev.coalesce() + dev.coalesce(), cpu.coalesce() + cpu.coalesce())
    _same(dev * d.to("trn"), cpu * d)
    _same(dev * 3, cpu * 3)
    _same(-dev, -cpu)


@given(spec=_coo())
@_SETTINGS
def test_sparse_mm_backward(spec):
    idx, vals, size = spec
    w = torch.randn(size[1], 3)
    grads = []
    for dev in ("cpu", "trn"):
        x = torch.sparse_coo_tensor(idx.to(dev), vals.to(dev), size, requires_grad=True)
        wd = w.to(dev, copy=True).requires_grad_()
        torch.sparse.mm(x, wd).sin().sum().backward()
        grads.append((x.grad, wd.grad))
    (xc, wc), (xd, wd) = grads
    _same(xd, xc)
    _same(wd, wc)


def test_linear_keys_row_major():
    idx = torch.tensor([[0, 1, 1], [2, 0, 2]])
    assert coo.linear_keys(idx, (2, 3)).tolist() == [2, 3, 5]


@given(spec=_coo(), n=st.integers(1, 3))
@_SETTINGS
def test_csr(spec, n):
    dense = torch.sparse_coo_tensor(*spec).to_dense()
    cpu = dense.to_sparse_csr()
    dev = dense.to("trn").to_sparse_csr()
    assert dev.layout == torch.sparse_csr and dev.device.type == "trn"
    for name in ("crow_indices", "col_indices", "values"):
        torch.testing.assert_close(getattr(dev, name)().cpu(), getattr(cpu, name)())
    moved = cpu.to("trn")
    assert moved.layout == torch.sparse_csr
    _same(moved.to_dense(), dense)
    w, b = torch.randn(dense.shape[1], n), torch.randn(dense.shape[0], n)
    _same(dev @ w.to("trn"), cpu @ w)
    _same(torch.addmm(b.to("trn"), dev, w.to("trn"), beta=0.5), torch.addmm(b, cpu, w, beta=0.5))
    _same(dev.sum(), cpu.sum())
    _same(dev.to_sparse(), cpu.to_sparse())
    torch.testing.assert_close(dev.cpu().to_dense(), dense)


_BACKWARD = {
    "to_dense": lambda x, d: (x.to_dense() * d).sum(),
    "sparse_sum": lambda x, d: torch.sparse.sum(x),
    "dense_plus_sparse": lambda x, d: (d + x).pow(2).sum(),
    "sparse_times_dense": lambda x, d: torch.sparse.sum(x * d),
    "coalesced_values": lambda x, d: (x.coalesce().values() ** 2).sum(),
}


@pytest.mark.parametrize("name", sorted(_BACKWARD))
def test_backward_gives_the_cpu_sparse_gradient(name):
    idx, vals, size = torch.tensor([[0, 1, 1, 0], [2, 0, 2, 2]]), torch.tensor([3.0, 4.0, 5.0, 1.0]), (2, 3)
    d = torch.randn(size)
    grads = []
    for dev in ("cpu", "trn"):
        x = torch.sparse_coo_tensor(idx.to(dev), vals.to(dev), size, requires_grad=True)
        _BACKWARD[name](x, d.to(dev)).backward()
        grads.append(x.grad)
    assert grads[1].layout == grads[0].layout
    if grads[0].is_sparse:
        grads = [g.coalesce() for g in grads]
    _same(grads[1], grads[0])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mm_low_precision(dtype):
    cpu, dev = _pair((torch.tensor([[0, 1, 1, 0], [2, 0, 2, 2]]), torch.randn(4).to(dtype), (2, 3)))
    w = torch.randn(3, 5).to(dtype)
    out = torch.sparse.mm(dev, w.to("trn"))
    assert out.dtype == dtype
    _same(out.float(), torch.sparse.mm(cpu.float(), w.float()), tol=2e-2)


def test_sparse_times_sparse_and_sparse_plus_number():
    """sparse * sparse keeps the intersection (duplicates of uncoalesced operands summed in the result dtype, bools
    counted, as torch); sparse + number raises torch's error."""
    import itertools

    g = torch.Generator().manual_seed(0)
    dts = [torch.float32, torch.int64, torch.bool, torch.bfloat16]
    for dt1, dt2 in itertools.product(dts, dts):
        t1 = ((torch.rand(4, 5, generator=g) > 0.5) * torch.rand(4, 5, generator=g) * 10).to(dt1)
        t2 = ((torch.rand(4, 5, generator=g) > 0.5) * torch.rand(4, 5, generator=g) * 10).to(dt2)
        s1, s2 = t1.to_sparse(), t2.to_sparse()
        dup = torch.sparse_coo_tensor(torch.cat((s2.indices(), s2.indices()), 1), torch.cat((s2.values(), s2.values())),
                                      s2.size())
        for other in (s2, dup):
            try:
                want = s1 * other
            except NotImplementedError as e:  # bool * bool: torch's error on trn too
                with pytest.raises(NotImplementedError, match=str(e).split(" ")[0]):
                    s1.to("trn") * other.to("trn")
                continue
            got = s1.to("trn") * other.to("trn")
            assert got.dtype == want.dtype and torch.equal(got.cpu().to_dense(), want.to_dense())
    with pytest.raises(RuntimeError, match="add\\(sparse, dense\\) is not supported"):
        torch.tensor([[0, 1.0]]).to_sparse().to("trn") + 2


@pytest.mark.parametrize("m,k,n", [(4, 5, 3), (1, 7, 2), (6, 1, 6), (3, 0, 2)])
def test_sparse_sparse_and_dense_sparse_products(monkeypatch, m, k, n):
    """sparse @ sparse (torch.sparse.mm, @) -> sparse COO and dense @ sparse -> dense natively (they raised:
    upstream test_pca_lowrank / test_svd_lowrank), against the CPU."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(13)
    a = torch.randn(m, k, generator=g).relu().to_sparse()
    b = torch.randn(k, n, generator=g).relu().to_sparse()
    d = torch.randn(n + 1, m, generator=g)
    for got, want in [(torch.sparse.mm(a.to("trn"), b.to("trn")), torch.sparse.mm(a, b)),
                      (a.to("trn") @ b.to("trn"), a @ b)]:
        assert got.layout == torch.sparse_coo and got.is_coalesced() and got.device.type == "trn"
        torch.testing.assert_close(got.to_dense().cpu(), want.to_dense())
    got = torch.mm(d.to("trn"), a.to("trn"))
    assert got.layout == torch.strided
    torch.testing.assert_close(got.cpu(), torch.mm(d, a))
    with pytest.raises(RuntimeError):
        torch.mm(torch.randn(2, m + 1).to("trn"), a.to("trn"))
