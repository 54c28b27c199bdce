"""Native lowerings (stdlib_kernels) against torch's CPU ops: shapes, strides, broadcasting, promotion."""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang.device as td
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _no_fallback(fn):
    before = td.fallback_stats()
    r = fn()
    after = td.fallback_stats()
    assert after == before, {k: v for k, v in after.items() if v != before.get(k)}
    return r


@_SETTINGS
@given(rows=st.integers(1, 300), cols=st.integers(1, 2600), op=st.sampled_from(["add", "sub", "mul", "div"]))
def test_binary_ragged_shapes(rows, cols, op):
    g = torch.Generator().manual_seed(rows * 7919 + cols)
    a, b = torch.randn(rows, cols, generator=g), torch.rand(rows, cols, generator=g) + 0.5
    f = getattr(torch, op)
    assert_same(_no_fallback(lambda: f(a.to("trn"), b.to("trn"))), f(a, b))


@pytest.mark.parametrize("sa,sb", [((4, 1, 6), (5, 1)), ((1,), (3, 7)), ((2, 3, 4, 5, 6), (4, 1, 6)), ((), (5, 3)),
                                   ((7, 1), (1, 9)), ((3000,), (3000,)), ((2, 1, 3, 1, 2), (1, 4, 1, 5, 1))])
def test_binary_broadcasting(sa, sb):
    a, b = torch.randn(sa), torch.randn(sb)
    assert_same(_no_fallback(lambda: a.to("trn") * b.to("trn")), a * b)
    assert_same(_no_fallback(lambda: torch.sub(a.to("trn"), b.to("trn"), alpha=0.25)), torch.sub(a, b, alpha=0.25))


@pytest.mark.parametrize("da,db", [(torch.float32, torch.bfloat16), (torch.bfloat16, torch.bfloat16),
                                   (torch.float16, torch.float32), (torch.int32, torch.float32),
                                   (torch.int32, torch.int32), (torch.bfloat16, torch.float16)])
def test_type_promotion(da, db):
    a = (torch.randn(33, 70) * 8).to(da)
    b = (torch.randn(70) * 8 + 20).to(db)
    for op in (torch.add, torch.mul, torch.div):
        exp = op(a, b)
        got = op(a.to("trn"), b.to("trn"))
        assert got.dtype == exp.dtype
        tol = 0 if exp.dtype == torch.int32 else (1e-2 if exp.dtype in (torch.bfloat16, torch.float16) else 1e-6)
        assert_same(got, exp, rtol=tol, atol=tol)


def test_scalars_alpha_and_strides():
    a = torch.randn(40, 50)
    t = a.to("trn")
    for s in (2, -0.5, True, torch.tensor(3.0), torch.tensor(2, dtype=torch.int32)):
        assert_same(_no_fallback(lambda: t + s), a + s)
        assert_same(_no_fallback(lambda: t * s), a * s)
    assert_same(_no_fallback(lambda: torch.add(t, t.t().t(), alpha=3)), torch.add(a, a, alpha=3))
    assert_same(_no_fallback(lambda: t.t() / (t.t() + 4)), a.t() / (a.t() + 4))
    assert_same(_no_fallback(lambda: t[:-1:3, 1::2] - t[1::3, ::2]), a[:-1:3, 1::2] - a[1::3, ::2])
    ti = torch.arange(10, dtype=torch.int32)
    assert_same(_no_fallback(lambda: ti.to("trn") * 3 - 1), ti * 3 - 1, rtol=0, atol=0)
    assert torch.equal((ti.to("trn") / 4).cpu(), ti / 4)
    # unsupported dtypes fall back (and stay correct)
    d = torch.randn(5, dtype=torch.float64)
    assert_same(d.to("trn") + 1, d + 1)


def test_inplace_out_and_variants():
    a, b = torch.randn(6, 130), torch.randn(130)
    t = a.to("trn")
    _no_fallback(lambda: t.mul_(b.to("trn")))
    assert_same(t, a * b)
    o = torch.empty(6, 130, device="trn", dtype=torch.bfloat16)
    _no_fallback(lambda: torch.add(t, 1, out=o))
    assert_same(o, (a * b + 1).bfloat16(), rtol=1e-2, atol=1e-2)
    with pytest.raises(RuntimeError, match="can't be cast"):
        torch.add(t, 1, out=torch.empty(6, 130, device="trn", dtype=torch.int32))


@_SETTINGS
@given(m=st.integers(1, 300), k=st.integers(1, 300), n=st.integers(1, 700))
def test_mm_ragged(m, k, n):
    g = torch.Generator().manual_seed(m * 1000003 + k * 1009 + n)
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    assert_same(_no_fallback(lambda: a.to("trn") @ b.to("trn")), a @ b, rtol=1e-4, atol=1e-4)


def test_addmm_linear_and_transposes():
    a, b, c = torch.randn(70, 130), torch.randn(90, 130), torch.randn(90)
    lin = _no_fallback(lambda: torch.nn.functional.linear(a.to("trn"), b.to("trn"), c.to("trn")))
    assert_same(lin, torch.nn.functional.linear(a, b, c), rtol=1e-4, atol=1e-4)
    got = _no_fallback(lambda: torch.addmm(c.to("trn"), a.to("trn"), b.to("trn").t(), beta=0.5, alpha=-2))
    assert_same(got, torch.addmm(c, a, b.t(), beta=0.5, alpha=-2), rtol=1e-4, atol=1e-4)
    x = torch.randn(3, 20, 30)
    assert_same(_no_fallback(lambda: x.to("trn") @ b[:, :30].to("trn").t()), x @ b[:, :30].t(), rtol=1e-4,
                atol=1e-4)
    bf = _no_fallback(lambda: a.bfloat16().to("trn") @ b.bfloat16().to("trn").t())
    assert_same(bf, a.bfloat16() @ b.bfloat16().t(), rtol=2e-2, atol=0.3)


@pytest.mark.parametrize("shape,dim,keep", [((5, 7), 1, False), ((5, 7), 0, True), ((4, 5, 6), (0, 2), False),
                                            ((3, 200, 33), -1, True), ((2, 3, 4, 5), (1, 3), False),
                                            ((70000,), None, False), ((130, 2500), 1, False), ((6,), 0, False)])
def test_sum_mean(shape, dim, keep):
    x = torch.randn(shape)
    t = x.to("trn")
    kw = {} if dim is None else {"dim": dim, "keepdim": keep}
    assert_same(_no_fallback(lambda: t.sum(**kw)), x.sum(**kw), rtol=1e-4, atol=1e-3)
    assert_same(_no_fallback(lambda: t.mean(**kw)), x.mean(**kw), rtol=1e-4, atol=1e-5)
    if x.dim() > 1:
        assert_same(_no_fallback(lambda: t.transpose(0, -1).sum(**kw)), x.transpose(0, -1).sum(**kw), rtol=1e-4,
                    atol=1e-3)
    assert_same(_no_fallback(lambda: t.bfloat16().sum(**kw)), x.bfloat16().sum(**kw), rtol=2e-2, atol=2e-1)


@pytest.mark.parametrize("shape,dim", [((5, 7), -1), ((4, 6, 8), 1), ((3, 9000), 1), ((200, 3), 0), ((2, 3, 4, 5), 2)])
def test_softmax_forward_backward(shape, dim):
    x = torch.randn(shape) * 3
    xt = x.to("trn").requires_grad_()
    xc = x.clone().requires_grad_()
    g = torch.randn(shape)
    yt = _no_fallback(lambda: torch.softmax(xt, dim))
    yc = torch.softmax(xc, dim)
    assert_same(yt.detach(), yc.detach(), rtol=1e-5, atol=1e-6)
    _no_fallback(lambda: yt.backward(g.to("trn")))
    yc.backward(g)
    assert_same(xt.grad, xc.grad, rtol=1e-4, atol=1e-6)


def test_copy_kernel_casts():
    x = torch.randn(70, 300)
    t = x.to("trn")
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        o = torch.empty(70, 300, dtype=dt, device="trn")
        _no_fallback(lambda: o.copy_(t))
        assert torch.equal(o.cpu(), x.to(dt))
    c = _no_fallback(lambda: t.t().contiguous())
    assert c.is_contiguous() and torch.equal(c.cpu(), x.t().contiguous())
    assert torch.equal(_no_fallback(lambda: t[:, :7].clone()).cpu(), x[:, :7])


def test_user_kernels_run_on_trn_tensors_in_place():
    import sys

    sys.path.insert(0, __file__.rsplit("/tests/", 1)[0])
    from tests.kernels import layernorm, softmax

    x = torch.randn(130, 40)
    xt, o = x.to("trn"), torch.empty(130, 40, device="trn")
    softmax(xt, o)  # a user kernel launched with device tensors: zero-copy views of device memory
    assert_same(o, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    w, b = torch.randn(1, 40), torch.randn(1, 40)
    layernorm(xt, w.to("trn"), b.to("trn"), o, 1e-5)
    assert_same(o, torch.nn.functional.layer_norm(x, (40,), w[0], b[0], 1e-5), rtol=1e-4, atol=1e-4)
    view = torch.zeros(260, 40, device="trn")[::2]  # a strided destination
    softmax(xt, view)
    assert_same(view, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)


def test_kernel_returned_outputs_on_trn():
    from tests.kernels import new_output

    x = torch.randn(130, 40)
    r = new_output(x.to("trn"))
    assert r.device.type == "trn"
    assert_same(r, torch.nn.functional.gelu(x) * 2.0, rtol=1e-5, atol=1e-5)
