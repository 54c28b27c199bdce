"""Integer, bool and complex64 tensors run natively (issue 22 item 2): each op is compared with CPU torch
under ``TRN_FALLBACK=error``, so a CPU fallback fails the test instead of hiding behind a correct result.
"""

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import make_tensor

INTS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]
INTS_BOOL = [*INTS, torch.bool]


@pytest.fixture(autouse=True)
def _native_only(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


def _inputs(shape, dtype, seed=0):
    torch.manual_seed(seed)
    if dtype == torch.bool:
        return make_tensor(shape, dtype=dtype, device="cpu")
    info = torch.iinfo(dtype) if not dtype.is_floating_point and not dtype.is_complex else None
    lo, hi = (max(info.min, -200), min(info.max, 200)) if info else (-9, 9)
    return make_tensor(shape, dtype=dtype, device="cpu", low=lo, high=hi)


def _same(r, e):
    rs, es = (r, e) if isinstance(e, tuple) else ((r,), (e,))
    for a, b in zip(rs, es):
        assert a.device.type == "trn"
        assert a.dtype == b.dtype
        torch.testing.assert_close(a.cpu(), b, rtol=0, atol=0)


SHAPES = [(5, 9), (3, 130, 5), ()]


@pytest.mark.parametrize("dtype", INTS_BOOL)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_and_argsort(dtype, shape, descending):
    a = _inputs(shape, dtype)
    for d in sorted({0, -1}):
        _same(torch.sort(a.to("trn"), dim=d, stable=True, descending=descending),
              torch.sort(a, dim=d, stable=True, descending=descending))
        _same(torch.argsort(a.to("trn"), dim=d, stable=True), torch.argsort(a, dim=d, stable=True))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_sort_of_wide_ints_beyond_fp32_keys_falls_back(dtype, monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "silent")
    a = torch.tensor([2**30, 5, -(2**29) - 1, 2**24 + 1, 2**24], dtype=dtype)
    _same(torch.sort(a.to("trn")), torch.sort(a))  # correct through the CPU: fp32 keys would merge neighbours


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.uint8, torch.int32, torch.int64])
def test_topk_values_of_ints(dtype):
    a = _inputs((6, 40), dtype)
    for largest in (True, False):
        v, i = a.to("trn").topk(3, 1, largest=largest)
        ev, _ = a.topk(3, 1, largest=largest)
        _same(v, ev)
        torch.testing.assert_close(a.gather(1, i.cpu()), ev)  # the indices point at the values (ties: any)


@pytest.mark.parametrize("dtype", INTS_BOOL)
@pytest.mark.parametrize("op", ["neg", "abs", "sign"])
def test_neg_abs_sign_wrap_like_cpu(dtype, op):
    if dtype == torch.bool:
        a = torch.tensor([True, False, True])
    elif dtype == torch.int64:
        a = torch.tensor([-(2**30), -3, 0, 1, 7, 2**30 - 1])  # the int32 range the kernels check for
    else:
        info = torch.iinfo(dtype)
        a = torch.tensor([info.min, info.min + 1, 0, 1, info.max], dtype=torch.int64).to(dtype)
    f = {"neg": torch.neg, "abs": torch.abs, "sign": torch.sign}[op]
    try:
        e = f(a)
    except (RuntimeError, NotImplementedError):
        pytest.skip(f"torch has no {op} of {dtype}")
    _same(f(a.to("trn")), e)
    o = torch.empty_like(a, device="trn")
    _same(f(a.to("trn"), out=o), e)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int64, torch.complex64, torch.bool, torch.uint8])
@pytest.mark.parametrize("shape", [(9,), (4, 33), (2, 3, 4), ()], ids=str)
def test_nonzero(dtype, shape):
    a = _inputs(shape, dtype)
    if a.numel() > 1:
        a.view(-1)[::3] = 0
    _same(torch.nonzero(a.to("trn")), torch.nonzero(a))
    _same(torch.nonzero(a.to("trn"), as_tuple=True), torch.nonzero(a, as_tuple=True))


@pytest.mark.parametrize("shape", [(9,), (4, 5), (2, 3, 4), ()], ids=str)
def test_flip_complex64(shape):
    a = _inputs(shape, torch.complex64)
    for dims in [(0,), tuple(range(a.dim())), (-1,)]:
        _same(a.to("trn").flip(dims), a.flip(dims))


def test_nonzero_into_a_discontiguous_out_keeps_its_strides():
    t = torch.tensor([[0, 1, 1], [1, 0, 1]], dtype=torch.int64)
    e = t.nonzero()
    dst = torch.empty(e.shape[0], e.shape[1] * 2, dtype=torch.long, device="trn")[:, ::2]
    strides, ptr = dst.stride(), dst.data_ptr()
    torch.nonzero(t.to("trn"), out=dst)
    assert dst.stride() == strides and dst.data_ptr() == ptr
    _same(dst, e)


SMALL = [torch.int8, torch.int16, torch.uint8]
REDUCTIONS = {
    "sum": lambda x: x.sum(), "sum0": lambda x: x.sum(0), "sum_last_keep": lambda x: x.sum(-1, keepdim=True),
    "sum_int64": lambda x: x.sum(0, dtype=torch.int64), "amax": lambda x: x.amax(), "amin0": lambda x: x.amin(0),
    "max": lambda x: x.max(), "min": lambda x: x.min(), "max0": lambda x: x.max(0), "min_last": lambda x: x.min(-1),
    "argmax": lambda x: x.argmax(), "argmin0": lambda x: x.argmin(0), "all": lambda x: x.all(),
    "any0": lambda x: x.any(0), "all_last": lambda x: x.all(-1),
}


@pytest.mark.parametrize("dtype", SMALL)
@pytest.mark.parametrize("shape", [(5, 7), (3, 130, 5), ()], ids=str)
def test_small_int_reductions(dtype, shape):
    info = torch.iinfo(dtype)
    torch.manual_seed(1)
    a = make_tensor(shape, dtype=dtype, device="cpu", low=info.min, high=info.max)
    for name, f in sorted(REDUCTIONS.items()):
        try:
            e = f(a)
        except (RuntimeError, IndexError):
            continue  # torch raises (a dim of a 0-dim tensor)
        _same(f(a.to("trn")), e)


def _outcome(fn):
    """(result or torch's error, number of resize warnings) of one call."""
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        try:
            r = fn()
        except RuntimeError as ex:
            return ("raises", str(ex))
    return (r.cpu().tolist(), r.dtype, sum("resized" in str(x.message) for x in w))


@pytest.mark.parametrize("src", [torch.uint8, torch.int32, torch.bool, torch.float32])
@pytest.mark.parametrize("out_dtype", [torch.bool, torch.uint8, torch.int32])
@pytest.mark.parametrize("call", ["all", "any_dim", "all_dims", "any_keepdim"])
def test_all_any_out_dtype_rules(src, out_dtype, call):
    """all/any(out=): bool or uint8 outputs only (torch's message otherwise); results cast into them, the
    out tensor resized with torch's warning."""
    def run(dev):
        x = torch.tensor([[1, 0, 2], [3, 4, 5]]).to(src).to(dev)
        o = torch.empty((2,), dtype=out_dtype, device=dev)
        return {"all": lambda: torch.all(x, out=o), "any_dim": lambda: torch.any(x, 0, out=o),
                "all_dims": lambda: torch.all(x, dim=(0, 1), out=o),
                "any_keepdim": lambda: torch.any(x, 1, keepdim=True, out=o)}[call]

    cpu = _outcome(run("cpu"))
    assert _outcome(run("trn")) == cpu


@given(st.integers(1, 40), st.integers(1, 6), st.sampled_from(INTS_BOOL), st.booleans())
@settings(max_examples=15, deadline=None)
def test_sort_hypothesis_shapes(cols, rows, dtype, descending):
    a = _inputs((rows, cols), dtype, seed=cols * 7 + rows)
    _same(torch.sort(a.to("trn"), dim=1, stable=True, descending=descending),
          torch.sort(a, dim=1, stable=True, descending=descending))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64, torch.bfloat16, torch.int32,
                                   torch.bool])
@pytest.mark.parametrize("shape", [(), (3,)], ids=str)
def test_complex_number_promotes_like_cpu(dtype, shape, monkeypatch):
    """A Python complex with a float tensor takes its precision (float16 -> complex32, float64 -> complex128),
    also when the op runs through the CPU fallback (the wrapped number is rebuilt as a 0-dim tensor)."""
    monkeypatch.setenv("TRN_FALLBACK", "silent")
    t = make_tensor(shape, dtype=dtype, device="cpu")
    for f in (lambda x: x * (2 + 1j), lambda x: (1j) + x, lambda x: torch.result_type(x, 1j)):
        e, r = f(t), f(t.to("trn"))
        assert (r if isinstance(r, torch.dtype) else r.dtype) == (e if isinstance(e, torch.dtype) else e.dtype)


@pytest.mark.parametrize("dtype", INTS)
def test_searchsorted_and_isin_of_ints(dtype):
    torch.manual_seed(3)
    bd = torch.sort(_inputs((40,), dtype)).values
    v = _inputs((3, 7), dtype, seed=4)
    for right in (False, True):
        _same(torch.searchsorted(bd.to("trn"), v.to("trn"), right=right), torch.searchsorted(bd, v, right=right))
    _same(torch.searchsorted(bd.to("trn"), 5), torch.searchsorted(bd, 5))
    _same(torch.isin(v.to("trn"), bd[::3].to("trn")), torch.isin(v, bd[::3]))


@pytest.mark.parametrize("dtype", [torch.float64, torch.int64, torch.complex128])
def test_index_fill_with_a_cpu_index_through_the_fallback(dtype, monkeypatch):
    """A declined index_fill (a dtype its kernel lacks) still takes the CPU index: the fallback sees it on trn."""
    monkeypatch.setenv("TRN_FALLBACK", "silent")
    x = torch.arange(12).to(dtype).view(3, 4)
    i = torch.tensor([0, 2])
    _same(x.to("trn").index_fill(0, i, 7), x.index_fill(0, i, 7))
    _same(x.to("trn").index_fill_(1, i, torch.tensor(5)), x.clone().index_fill_(1, i, torch.tensor(5)))


@pytest.mark.parametrize("index_dev", ["cpu", "trn"])
def test_index_fill_takes_a_cpu_index_like_cuda(index_dev):
    x = torch.arange(12.0).view(3, 4)
    i = torch.tensor([0, 2])
    _same(x.to("trn").index_fill(0, i.to(index_dev), -1.0), x.index_fill(0, i, -1.0))
    five = torch.tensor(5.0)
    _same(x.to("trn").index_fill_(1, i.to(index_dev), five), x.clone().index_fill_(1, i, five))
    with pytest.raises(RuntimeError, match="Index has to be a vector/scalar"):
        x.to("trn").index_fill(0, torch.tensor([[0]], device=index_dev), 1.0)


@pytest.mark.parametrize("shape,dim", [((5, 0, 0), 1), ((5, 0, 5), 2), ((0, 0), 0), ((5, 0, 5), 1), ((3, 4), 1)],
                         ids=str)
@pytest.mark.parametrize("consecutive", [False, True])
def test_unique_dim_zero_sized_rules(shape, dim, consecutive):
    """unique(dim=) raises torch's errors for zero-sized dims other than ``dim`` (natively, before any fallback)."""
    f = torch.unique_consecutive if consecutive else torch.unique
    x = torch.zeros(shape)

    def run(t):
        try:
            return [r.cpu() for r in f(t, return_inverse=True, return_counts=True, dim=dim)]
        except RuntimeError as e:
            return str(e)

    e, r = run(x), run(x.to("trn"))
    if isinstance(e, str):
        assert r == e
    else:
        assert [a.shape for a in r] == [b.shape for b in e] and all(torch.equal(a, b) for a, b in zip(r, e))


def test_complex64_elementwise_on_planes():
    """add/sub (alpha, in place, out=), eq/ne, isnan/isinf/isfinite and abs of complex64 run natively."""
    a = _inputs((3, 4), torch.complex64)
    b = _inputs((1, 4), torch.complex64, seed=1)
    a[0, 1] = complex(float("nan"), 1.0)
    a[2, 2] = complex(0.0, float("inf"))
    at, bt = a.to("trn"), b.to("trn")
    cases = [lambda x, y: x + y, lambda x, y: torch.add(x, y, alpha=2), lambda x, y: x - y,
             lambda x, y: x.clone().sub_(y, alpha=3), lambda x, y: torch.add(x, y, out=torch.empty_like(x)),
             lambda x, y: x == x.clone(), lambda x, y: x != y, lambda x, y: torch.isnan(x),
             lambda x, y: torch.isinf(x), lambda x, y: torch.isfinite(x), lambda x, y: torch.abs(x)]
    for f in cases:
        r, e = f(at, bt), f(a, b)
        assert r.dtype == e.dtype
        torch.testing.assert_close(r.cpu(), e, equal_nan=True)


def test_complex64_random_fills_both_planes():
    """normal_ of complex64: each plane N(mean, std / sqrt(2)) as torch; uniform_: each plane in [from, to)."""
    torch.manual_seed(0)
    v = torch.view_as_real(torch.empty(20000, dtype=torch.complex64, device="trn").normal_(0.5, 2.0).cpu())
    assert torch.allclose(v.mean(0), torch.tensor([0.5, 0.5]), atol=0.05)
    assert torch.allclose(v.std(0), torch.full((2,), 2.0 / 2**0.5), rtol=0.05)
    u = torch.view_as_real(torch.empty(5000, dtype=torch.complex64, device="trn").uniform_(-2.0, 3.0).cpu())
    assert bool((u >= -2.0).all()) and bool((u < 3.0).all()) and float(u.std()) > 1.0
    assert make_tensor((3,), dtype=torch.complex64, device="trn").device.type == "trn"
