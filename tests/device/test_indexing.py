"""The indexing families (stdlib_kernels/indexing/gather_scatter.py, index_dim.py, advanced_index.py, masked.py on
the indirect-DMA engine of indexing.py): trn vs CPU, forward and backward, no fallbacks.

gather / scatter(_add, _reduce) / index / index_put / index_select / index_add / index_copy / index_fill /
take / take_along_dim / masked_fill / masked_select / masked_scatter / nonzero / embedding (+ backward):
ragged shapes, size 1, empty, non-contiguous operands, negative indices, fp32 and bf16; bad indices
raise torch's own errors.
"""

import os

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def _no_fallback(monkeypatch):
    """Every call of this file must run natively: a fallback raises."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    trnlang.reset_fallback_stats()
    yield
    assert trnlang.fallback_stats() == {}


def _t(x: torch.Tensor) -> torch.Tensor:
    return x.to("trn")


def _cmp(fn, *args, dtype=torch.float32, **kw):
    """Run ``fn`` on CPU and trn copies of ``args`` and compare."""
    ref = fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args], **kw)
    got = fn(*[_t(a) if isinstance(a, torch.Tensor) else a for a in args], **kw)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    if isinstance(ref, torch.Tensor):
        assert_same(got, ref, rtol=tol, atol=tol)
    return got, ref


def _grads(fn, *args, dtype=torch.float32):
    """d(sum(fn(*args) * w))/d(float args) on CPU and trn."""
    outs = []
    for dev in ("cpu", "trn"):
        xs = [a.detach().to(dev).requires_grad_(a.is_floating_point()) if isinstance(a, torch.Tensor) else a
              for a in args]
        y = fn(*xs)
        w = torch.linspace(-1, 2, y.numel()).reshape(y.shape).to(y.dtype).to(dev)
        (y * w).sum().backward()
        outs.append([x.grad for x in xs if isinstance(x, torch.Tensor) and x.requires_grad])
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for g, r in zip(outs[1], outs[0]):
        assert_same(g, r, rtol=tol, atol=tol)


def _ix(g, high, shape, neg=False):
    i = torch.randint(0, max(high, 1), shape, generator=g)
    if neg:
        i = torch.where(torch.rand(shape, generator=g) < 0.5, i - high, i)
    return i


# ------------------------------------------------------------------------------ forward


@_SETTINGS
@given(n=st.integers(1, 200), d=st.integers(1, 150), k=st.integers(0, 140), dim=st.integers(0, 1),
       seed=st.integers(0, 999))
def test_gather_scatter_random(n, d, k, dim, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    ishape = (k, d) if dim == 0 else (n, k)
    idx = _ix(g, x.shape[dim], ishape)
    _cmp(torch.gather, x, dim, idx)
    src = torch.randn(ishape, generator=g)
    _cmp(lambda a, i, s: a.scatter_add(dim, i, s), x, idx, src)
    _cmp(lambda a, i, s: torch.zeros_like(a).scatter_(dim, i, 1.5), x, idx, src)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gather_noncontiguous_3d(dtype):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(9, 6, 131, generator=g).to(dtype).transpose(0, 2)  # [131, 6, 9], strided
    for dim in range(3):
        shape = list(x.shape)
        shape[dim] = 5
        shape[(dim + 1) % 3] -= 1  # index smaller than x on a non-gathered dim
        idx = _ix(g, x.shape[dim], shape)
        _cmp(torch.gather, x, dim, idx, dtype=dtype)
        _cmp(torch.gather, x, dim, idx.transpose(0, 1).contiguous().transpose(0, 1), dtype=dtype)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(reduce, include_self):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(7, 130, generator=g)
    idx = _ix(g, 7, (20, 130))  # many repeats
    src = torch.rand(20, 130, generator=g) + 0.5
    _cmp(lambda a, i, s: a.scatter_reduce(0, i, s, reduce, include_self=include_self), x, idx, src)


@pytest.mark.filterwarnings("ignore:The reduce argument of torch.scatter")
@pytest.mark.parametrize("reduce", ["add", "multiply"])
def test_scatter_legacy_reduce(reduce):
    g = torch.Generator().manual_seed(12)
    x = torch.randn(5, 9, generator=g)
    idx = _ix(g, 5, (8, 9))
    src = torch.rand(8, 9, generator=g) + 0.5
    _cmp(lambda a, i, s: a.scatter(0, i, s, reduce=reduce), x, idx, src)
    _cmp(lambda a, i: a.scatter_(0, i, 1.5, reduce=reduce), x, idx)


def test_scatter_src_and_index_ops_dims():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 33, 5, generator=g)
    perm = torch.randperm(33, generator=g)[:20]  # unique rows for scatter/index_copy
    for dim in (0, 1, 2, -1):
        n = x.shape[dim]
        idx = _ix(g, n, (7,))
        uniq = perm[perm < n][:3] if n < 33 else perm
        _cmp(torch.index_select, x, dim, idx)
        shape = list(x.shape)
        shape[dim] = idx.numel()
        _cmp(lambda a, i, s: a.index_add(dim, i, s, alpha=0.5), x, idx, torch.randn(shape, generator=g))
        shape[dim] = uniq.numel()
        _cmp(lambda a, i, s: a.index_copy(dim, i, s), x, uniq, torch.randn(shape, generator=g))
        _cmp(lambda a, i: a.index_fill(dim, i, -2.0), x, idx)
        sidx = _ix(g, n, (2, 3, 2))
        _cmp(lambda a, i: a.scatter(dim, i, a[:2, :3, :2] * 2), x, sidx)


@_SETTINGS
@given(n=st.integers(1, 140), d=st.integers(1, 40), k=st.integers(0, 30), seed=st.integers(0, 999))
def test_advanced_index_random(n, d, k, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, 3, generator=g)
    i0 = _ix(g, n, (k,), neg=True)
    i1 = _ix(g, d, (k,), neg=True)
    _cmp(lambda a, i: a[i], x, i0)
    _cmp(lambda a, i, j: a[i, j], x, i0, i1)


def test_advanced_index_shapes():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, 7, 8, 9, generator=g)
    i = _ix(g, 6, (2, 3), neg=True)
    j = _ix(g, 7, (3,))
    k = _ix(g, 8, (2, 1))
    _cmp(lambda a, i, j: a[i, j], x, i, j)            # broadcast index shapes
    _cmp(lambda a, j, k: a[:, j, k], x, j, k)         # adjacent, after a slice
    _cmp(lambda a, i, k: a[i, :, k], x, i, k)         # non-adjacent: broadcast dims go first
    _cmp(lambda a, i, j, k: a[i, j, k], x, i, j, k)   # three indexed dims
    _cmp(lambda a, j: a.transpose(1, 3)[:, :, :, j], x, j)
    _cmp(lambda a, m: a[m], x, torch.randn(6, 7, generator=g) > 0)       # a 2-D mask
    _cmp(lambda a, m: a[:, m], x, torch.randn(7, generator=g) > 0)
    _cmp(lambda a, m: a[m], x, torch.zeros(6, dtype=torch.bool))          # empty result
    xt = _t(x)
    assert torch.equal(xt[i, j].cpu(), x[i, j])                           # CPU index tensors
    assert torch.equal(xt[:, torch.tensor([True] * 3 + [False] * 4)].cpu(), x[:, :3])


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_index_put(accumulate, dtype):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(300, 17, generator=g).to(dtype)
    i = _ix(g, 300, (150,), neg=True) if accumulate else torch.randperm(300, generator=g)[:150]
    v = torch.randn(150, 17, generator=g).to(dtype)
    _cmp(lambda a, i, v: a.index_put_((i,), v, accumulate=accumulate), x, i, v, dtype=dtype)
    _cmp(lambda a, i, v: a.index_put((i,), v[:, :1], accumulate=accumulate), x, i, v, dtype=dtype)  # broadcast
    j = _ix(g, 17, (150,)) if accumulate else torch.arange(150) % 17
    _cmp(lambda a, i, j, v: a.index_put_((i, j), v[:, 0], accumulate=accumulate), x, i, j, v, dtype=dtype)

    def setitem(a, m, v):
        a[m] = v
        return a
    _cmp(setitem, x, x.float() > 0, torch.tensor(3.0).to(dtype), dtype=dtype)
    _cmp(setitem, x.t(), torch.tensor([1, 5, -1]), torch.tensor(1.0).to(dtype), dtype=dtype)


def test_take_and_take_along_dim():
    g = torch.Generator().manual_seed(6)
    x = torch.randn(13, 29, generator=g)
    _cmp(torch.take, x.t(), _ix(g, x.numel(), (4, 50), neg=True))
    _cmp(torch.take, x, torch.zeros(0, dtype=torch.long))
    idx = torch.argsort(x, dim=1)
    _cmp(torch.take_along_dim, x, idx, 1)
    _cmp(torch.take_along_dim, x, idx[:1], 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_masked_ops(dtype):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(37, 130, generator=g).to(dtype)
    m = torch.randn(37, 130, generator=g) > 0
    _cmp(lambda a, m: a.masked_fill(m, -1.5), x, m, dtype=dtype)
    _cmp(lambda a, m: a.t().masked_fill(m[:, 0], torch.tensor(2.0)), x, m, dtype=dtype)  # broadcast mask, 0-dim value
    _cmp(lambda a, m: a.masked_fill_(m[:, :1], 0.25), x, m, dtype=dtype)
    _cmp(torch.masked_select, x, m, dtype=dtype)
    _cmp(torch.masked_select, x, m[0], dtype=dtype)
    _cmp(lambda a, m, s: a.masked_scatter(m, s), x, m, torch.randn(37 * 130, generator=g).to(dtype), dtype=dtype)


@_SETTINGS
@given(shape=st.lists(st.integers(0, 70), min_size=0, max_size=4).map(tuple), p=st.floats(0, 1),
       seed=st.integers(0, 999))
def test_nonzero_random(shape, p, seed):
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(shape, generator=g) < p
    got, ref = _cmp(torch.nonzero, m)
    assert got.dtype == torch.int64


def test_nonzero_float_and_strided():
    g = torch.Generator().manual_seed(10)
    x = torch.randn(300, 7, generator=g).relu()
    _cmp(torch.nonzero, x.t())
    _cmp(torch.nonzero, x.bfloat16())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding_forward_backward(dtype):
    g = torch.Generator().manual_seed(8)
    w = torch.randn(300, 65, generator=g).to(dtype)
    ids = _ix(g, 300, (5, 37))
    ids[0, :3] = 7
    _cmp(F.embedding, ids, w, dtype=dtype)
    _grads(lambda w: F.embedding(ids.to(w.device), w), w, dtype=dtype)
    _grads(lambda w: F.embedding(ids.to(w.device), w, padding_idx=7), w, dtype=dtype)
    _grads(lambda w: F.embedding(ids.to(w.device), w, scale_grad_by_freq=True), w, dtype=dtype)
    for p in (1.0, 2.0):  # max_norm renormalises the looked-up rows of the table in place
        _cmp(lambda i, w: (F.embedding(i, w, max_norm=1.5, norm_type=p), w)[1], ids, w * 3, dtype=dtype)


def test_backward_through_indexing():
    g = torch.Generator().manual_seed(9)
    x = torch.randn(40, 33, generator=g)
    i = _ix(g, 40, (25,), neg=True)
    j = _ix(g, 33, (40, 7))
    m = torch.randn(40, 33, generator=g) > 0
    _grads(lambda a: a[i.to(a.device)], x)
    _grads(lambda a: a[m.to(a.device)], x)
    _grads(lambda a: torch.gather(a, 1, j.to(a.device)), x)
    _grads(lambda a: a.index_select(0, (i % 40).to(a.device)), x)
    _grads(lambda a: a.masked_fill(m.to(a.device), 0.0), x)
    _grads(lambda a, s: a.scatter_add(1, j.to(a.device), s), x, torch.randn(40, 7, generator=g))
    _grads(lambda a, s: a.index_add(0, (i % 40).to(a.device), s), x, torch.randn(25, 33, generator=g))


def test_empty_and_size_one():
    x = torch.randn(1, 1)
    _cmp(torch.gather, x, 0, torch.zeros(1, 1, dtype=torch.long))
    _cmp(torch.gather, x, 1, torch.zeros(1, 0, dtype=torch.long))
    _cmp(torch.index_select, torch.randn(0, 4), 1, torch.tensor([3, 0]))
    _cmp(lambda a, i: a[i], torch.randn(5), torch.zeros(0, dtype=torch.long))
    _cmp(lambda a, i, s: a.index_add(0, i, s), torch.randn(4, 3), torch.zeros(0, dtype=torch.long), torch.ones(0, 3))
    _cmp(torch.gather, torch.tensor(2.5), 0, torch.tensor(0))
    _grads(lambda a: torch.masked_select(a, torch.tensor(True).to(a.device)), torch.tensor(1.5))
    _grads(lambda a: torch.gather(a, 0, torch.zeros(0, dtype=torch.long).to(a.device)), torch.randn(5))


# ------------------------------------------------------------------------------ errors


def test_out_of_range_indices_raise_torch_errors(monkeypatch):
    """Bad indices are caught by the kernel's bounds check; the op declines and torch's CPU check raises."""
    monkeypatch.setenv("TRN_FALLBACK", "silent")
    x = torch.randn(5, 4)
    cases = [
        (lambda a: a[torch.tensor([1, 9]).to(a.device)], IndexError),
        (lambda a: a[torch.tensor([-6]).to(a.device)], IndexError),
        (lambda a: a[torch.tensor([2**32 + 1]).to(a.device)], IndexError),   # does not fit in 32 bits
        (lambda a: torch.gather(a, 1, torch.tensor([[0, 4]]).to(a.device)), RuntimeError),
        (lambda a: torch.gather(a, 1, torch.tensor([[0, -1]]).to(a.device)), RuntimeError),
        (lambda a: a.index_select(0, torch.tensor([5]).to(a.device)), IndexError),
        (lambda a: a.index_add_(0, torch.tensor([7]).to(a.device), torch.ones(1, 4).to(a.device)), RuntimeError),
        (lambda a: F.embedding(torch.tensor([5]).to(a.device), a), IndexError),
        (lambda a: a.index_put_((torch.tensor([5]).to(a.device),), torch.tensor(1.0).to(a.device),
                                accumulate=True), IndexError),
    ]
    try:
        for fn, err in cases:
            with pytest.raises(err) as cpu_err:
                fn(x.clone())
            xt = _t(x)
            with pytest.raises(err) as trn_err:
                fn(xt)
            assert type(trn_err.value) is type(cpu_err.value)
            assert torch.equal(xt.cpu(), x)
    finally:
        trnlang.reset_fallback_stats()


@pytest.mark.parametrize("dtype", [torch.int64, torch.float64, torch.bool, torch.uint8, torch.int16])
def test_data_movement_of_other_dtypes(dtype):
    """Pure data movement is exact for any dtype (8-byte elements move as two int32 words)."""
    g = torch.Generator().manual_seed(13)
    x = (torch.randn(9, 6, generator=g) * 100).to(dtype)
    i = _ix(g, 9, (5,), neg=True)
    j = _ix(g, 6, (9, 3))
    m = torch.randn(9, 6, generator=g) > 0
    for fn, args in [(lambda a, i: a[i], (x, i)), (torch.gather, (x, 1, j)), (torch.index_select, (x, 0, i % 9)),
                     (lambda a, m: a[m], (x, m)), (torch.take, (x, i)),
                     (lambda a, i, v: a.index_put_((i,), v), (x, torch.tensor([1, 4, -2]), x[:3].flip(0)))]:
        got, ref = _cmp(fn, *args)
        assert torch.equal(got.cpu(), ref)


def test_declines_accumulating_8_byte_dtypes(monkeypatch):
    """int64 accumulation runs through fp32 when the sums are provably exact there; past 2^24 it is the CPU's."""
    monkeypatch.setenv("TRN_FALLBACK", "silent")
    i = torch.tensor([3, 1, 3])
    for x, native in ((torch.arange(10, dtype=torch.int64), True), (torch.arange(10, dtype=torch.int64) << 30, False)):
        trnlang.reset_fallback_stats()
        got = _t(x).index_add_(0, _t(i), _t(x[:3]))
        assert torch.equal(got.cpu(), x.clone().index_add_(0, i, x[:3]))
        assert bool(trnlang.fallback_stats()) != native
    trnlang.reset_fallback_stats()


# ------------------------------------------------------------------------------ profile


def test_profile_gather_kernel():
    from stdlib_kernels.indexing.engine import Layout, Move, Spec, gather_scatter

    w = torch.randn(1000, 256, device="trn")
    ids = torch.randint(0, 1000, (512,), device="trn")
    out = torch.empty(512, 256, device="trn")
    lo = ids.view(torch.int32)
    iv = torch.as_strided(lo, (1, 512, 256), (0, 2, 0), 0)
    hv = torch.as_strided(lo, (1, 512, 256), (0, 2, 0), 1)
    spec = Spec((1, 512, 256), (1000,), (1,), wrap=False, move=Move.GATHER, layout=Layout.PK, idx_c=True)
    prof = gather_scatter.profile(w.view(1, 1000, 256), out.view(1, 512, 256), None, iv, hv, None, None, None, None,
                                  spec)
    assert torch.equal(out.cpu(), w.cpu()[ids.cpu()])
    assert prof.time_us > 0
    assert prof.engines["dma"].busy_us > 0 and prof.dma_bytes >= 512 * 256 * 4 * 2
    for name, es in prof.engines.items():
        assert 0 <= es.utilization <= 1.0 + 1e-9, (name, es.utilization)
    assert 0 < prof.mbu <= 1.0 + 1e-9
    if os.environ.get("TRN_SHOW_PROFILE"):
        print(prof.summary())


def test_put_and_broadcast_masks():
    g = torch.Generator().manual_seed(11)
    x = torch.randn(6, 9, generator=g)
    i = _ix(g, 54, (20,), neg=True)
    s = torch.randn(20, generator=g)
    _cmp(lambda a, i, s: a.put_(i, s, accumulate=True), x, i, s)
    _cmp(lambda a, i, s: a.put(i[:5], s[:5]), x, i, s)
    _grads(lambda a: torch.take(a, i.to(a.device)), x)
    m = torch.randn(4, 6, 9, generator=g) > 0
    _cmp(lambda a, m: a.masked_fill(m, 1.0), x, m)       # the result takes the broadcast shape
    _cmp(lambda a, m, s: a.masked_scatter(m, s), x, m, torch.randn(216, generator=g))
    y = x.clone()
    y2 = _t(y)
    y2.masked_scatter(_t(m[0]), _t(s.repeat(3)))
    assert torch.equal(y2.cpu(), y)  # out of place: the input is untouched


@pytest.mark.filterwarnings("ignore:index_reduce")
@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
def test_index_reduce_and_unsafe_index(reduce):
    g = torch.Generator().manual_seed(14)
    x = torch.randn(6, 130, generator=g)
    i = _ix(g, 130, (40,))
    s = torch.rand(6, 40, generator=g) + 0.5
    for inc in (True, False):
        _cmp(lambda a, i, s: a.index_reduce(1, i, s, reduce, include_self=inc), x, i, s)
    _cmp(lambda a, i: torch.ops.aten._unsafe_index(a, [None, i]), x, i)
    _cmp(lambda a, i, v: torch.ops.aten._unsafe_index_put(a, [None, i], v, True), x, i, s)


def test_masked_ops_more_than_3_dims():
    """``torch.combinations(x, r=4)``: 4-D masks and expanded (stride-0) operands, forward and backward."""
    g = torch.Generator().manual_seed(15)
    x = torch.randn(3, 2, 4, 5, generator=g)
    m = torch.randn(3, 2, 4, 5, generator=g) > 0
    _cmp(torch.masked_select, x, m)
    _cmp(torch.masked_select, torch.randn(5, generator=g).expand(3, 2, 4, 5), m)
    _cmp(lambda a, m, s: a.masked_scatter(m, s), x, m, torch.randn(120, generator=g))
    _cmp(lambda a, m, s: a.masked_scatter_(m, s.expand(120)), x, m, torch.randn(1, generator=g))
    for n in (1, 2, 4):
        _grads(lambda a: torch.combinations(a, 4, with_replacement=True), torch.randn(n, generator=g))
        _grads(lambda a: torch.combinations(a, 4), torch.randn(n, generator=g))


@settings(max_examples=20, deadline=None, derandomize=True)
@given(seed=st.integers(0, 999), pattern=st.sampled_from(["0123", "01234", "_1234", "0_234", "012_4", "0_2_4"]),
       bshape=st.sampled_from([(), (3,), (2, 3)]), transposed=st.booleans())
def test_more_than_three_indexed_dims(seed, pattern, bshape, transposed):
    """Four or five advanced indices (adjacent or not: torch's result order) through one linear index; negative
    indices wrap; an out-of-range one raises torch's IndexError."""
    x = torch.randn(3, 4, 5, 6, 7, generator=torch.Generator().manual_seed(seed))
    xt = x.to("trn")
    if transposed:
        x, xt = x.transpose(1, 3), xt.transpose(1, 3)
    g = torch.Generator().manual_seed(seed + 1)
    idx = [slice(None) if c == "_" else torch.randint(-x.shape[d], x.shape[d], bshape, generator=g)
           for d, c in enumerate(pattern)]
    dev = [i.to("trn") if isinstance(i, torch.Tensor) else i for i in idx]
    trnlang.reset_fallback_stats()
    got = xt[tuple(dev)]
    assert trnlang.fallback_stats() == {}
    assert torch.equal(got.cpu(), x[tuple(idx)])
    bad = list(dev)
    k = pattern.index("0") if "0" in pattern else 1
    bad[k] = torch.full(bshape, x.shape[k], device="trn")
    with pytest.raises(IndexError):
        xt[tuple(bad)]


def test_index_put_rows_of_a_tensor_beyond_2_30_positions(monkeypatch):
    """A leading-dim index into a tensor of 2^30+ positions goes row chunk by row chunk (torch's
    test_index_put_accumulate_large_tensor, at a small chunk size so the test stays small)."""
    from stdlib_kernels.indexing import advanced_index as A

    monkeypatch.setattr(A, "_CHUNK_ELEMS", 64)
    a = torch.arange(300 * 3, dtype=torch.float32).reshape(300, 3)
    idx = torch.tensor([-2, 0, -2, -1, 0, -1, 1, 150, 149])
    vals = torch.arange(27, dtype=torch.float32).reshape(9, 3)
    t = a.to("trn")
    real = A._plan
    plan = real(t, [idx.to("trn")])
    monkeypatch.setattr(A, "_plan", lambda x, i: "2^30 or more elements or linear positions" if x.numel() == 900
                        else real(x, i))  # the whole tensor "too large", its chunks not
    trnlang.reset_fallback_stats()
    for acc in (True, False):
        want = a.clone().index_put_((idx,), vals, accumulate=acc)
        got = t.clone().index_put_((idx.to("trn"),), vals.to("trn"), accumulate=acc)
        assert torch.equal(got.cpu(), want) if acc else torch.equal(got.cpu()[idx], want[idx])
    assert trnlang.fallback_stats() == {} and not isinstance(plan, str)
    with pytest.raises(IndexError, match="index 300 is out of bounds for dimension 0 with size 300"):
        t.clone().index_put_((torch.tensor([1, 300], device="trn"),), vals[:2].to("trn"), accumulate=True)
    b = torch.arange(900, dtype=torch.float32).reshape(2, 150, 3)  # two leading dims indexed, flattened to rows
    i0, i1 = torch.tensor([0, -1, 0, 1, 1]), torch.tensor([-2, -1, 0, 1, 77])
    want = b.clone().index_put_((i0, i1), vals[:5], accumulate=True)
    got = b.to("trn").index_put_((i0.to("trn"), i1.to("trn")), vals[:5].to("trn"), accumulate=True)
    assert torch.equal(got.cpu(), want) and trnlang.fallback_stats() == {}
    with pytest.raises(IndexError, match="index 150 is out of bounds for dimension 1 with size 150"):
        b.to("trn").index_put_((i0.to("trn"), i1.to("trn") + 73), vals[:5].to("trn"), accumulate=True)
