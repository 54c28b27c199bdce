"""The loss family (stdlib_kernels/nn/loss.py): nll / cross_entropy / mse / l1-style / bce, forward and backward."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from stdlib_kernels.nn import loss as L
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=4, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
_TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (2e-2, 2e-2)}
REDUCTIONS = ["none", "mean", "sum"]


def _compare(fn, x, dtype, extra=()):
    """``fn(x, *extra)`` on CPU and trn: outputs and the gradient of ``x``; no fallback."""
    rtol, atol = _TOL[dtype]
    xc = x.detach().clone().requires_grad_()
    xd = x.detach().to("trn").requires_grad_()
    ed = [e.to("trn") if isinstance(e, torch.Tensor) else e for e in extra]
    trnlang.reset_fallback_stats()
    ref = fn(xc, *extra)
    out = fn(xd, *ed)
    assert_same(out, ref, rtol=rtol, atol=atol * max(1.0, float(ref.detach().abs().max())) if ref.numel() else atol)
    g = torch.randn(ref.shape, generator=torch.Generator().manual_seed(2)).to(dtype)
    ref.backward(g)
    out.backward(g.to("trn"))
    scale = max(1.0, float(xc.grad.abs().max())) if xc.grad.numel() else 1.0
    assert_same(xd.grad, xc.grad, rtol=rtol, atol=atol * scale)
    assert trnlang.fallback_stats() == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@_SETTINGS
@given(n=st.sampled_from([1, 5, 130]), c=st.sampled_from([1, 3, 17]), reduction=st.sampled_from(REDUCTIONS),
       weighted=st.booleans(), ignore=st.sampled_from([-100, 0]))
def test_nll_and_cross_entropy(dtype, n, c, reduction, weighted, ignore):
    g = torch.Generator().manual_seed(n * 100 + c)
    x = torch.randn(n, c, generator=g).to(dtype)
    t = torch.randint(0, c, (n,), generator=g)
    if n > 1:
        t[0] = ignore
    w = (torch.rand(c, generator=g) + 0.1).to(dtype) if weighted else None
    if reduction == "mean" and (t == ignore).all():
        return  # nan either way; covered by the CPU's own semantics
    _compare(lambda x, t, w: F.nll_loss(F.log_softmax(x, 1), t, w, reduction=reduction, ignore_index=ignore),
             x, dtype, (t, w))
    _compare(lambda x, t, w: F.cross_entropy(x, t, w, reduction=reduction, ignore_index=ignore), x, dtype, (t, w))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nll_totals_in_the_kernel(dtype, monkeypatch):
    """sum/mean are totalled by nll_fwd itself (a PSUM matmul over 3 row tiles here): no native sum or div runs;
    every target ignored gives the CPU's nan (mean) and 0 (sum)."""
    g = torch.Generator().manual_seed(7)
    x = torch.log_softmax(torch.randn(300, 11, generator=g), 1).to(dtype)
    t = torch.randint(0, 11, (300,), generator=g)
    t[::7] = -100
    w = (torch.rand(11, generator=g) + 0.1).to(dtype)
    from trnlang.device.registry import REGISTRY

    torch.ones(2, device="trn").sum() / 2  # the families are registered
    for op in [k for k in REGISTRY if k.startswith(("aten::sum", "aten::div."))]:
        monkeypatch.setattr(REGISTRY[op], "fn", None)  # would raise if called
        monkeypatch.setattr(REGISTRY[op], "fast", None)
    xd, td_, wd = x.to("trn"), t.to("trn"), w.to("trn")
    for red in ("mean", "sum"):
        for ww, wwd in ((None, None), (w, wd)):
            assert_same(F.nll_loss(xd, td_, wwd, reduction=red), F.nll_loss(x, t, ww, reduction=red),
                        rtol=_TOL[dtype][0], atol=_TOL[dtype][1])
        ign = torch.full((300,), -100)
        assert_same(F.nll_loss(xd, ign.to("trn"), reduction=red), F.nll_loss(x, ign, reduction=red))


def test_cross_entropy_variants_noncontiguous_and_2d():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(7, 9, generator=g)
    t = torch.randint(0, 7, (9,), generator=g)
    _compare(lambda x, t: F.cross_entropy(x.t(), t, label_smoothing=0.2), x, torch.float32, (t,))
    p = torch.softmax(torch.randn(9, 7, generator=g), 1)
    _compare(lambda x, p: F.cross_entropy(x.t(), p), x, torch.float32, (p,))
    x4 = torch.randn(2, 5, 3, 4, generator=g)
    t4 = torch.randint(0, 5, (2, 3, 4), generator=g)
    t4[0, 0, 0] = -100
    for red in REDUCTIONS:
        _compare(lambda x, t: F.cross_entropy(x, t, reduction=red), x4, torch.float32, (t4,))
    _compare(lambda x: F.nll_loss(x, torch.tensor(2).to(x.device)), torch.randn(6, generator=g), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("loss", ["mse", "l1", "smooth_l1", "huber", "bce", "bce_logits"])
@settings(max_examples=2, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from([(1,), (3, 5), (130, 3), (2, 3, 700)]), reduction=st.sampled_from(REDUCTIONS))
def test_pointwise_losses(dtype, loss, shape, reduction):
    g = torch.Generator().manual_seed(len(shape))
    if loss == "bce":
        x = (torch.rand(shape, generator=g) * 0.9 + 0.05).to(dtype)
        y = torch.rand(shape, generator=g).to(dtype)
        w = torch.rand(shape[-1:], generator=g).to(dtype)
        fn = lambda x, y, w: F.binary_cross_entropy(x, y, w.expand(x.shape), reduction=reduction)  # noqa: E731
    elif loss == "bce_logits":
        x = torch.randn(shape, generator=g).to(dtype)
        y = torch.rand(shape, generator=g).to(dtype)
        w = torch.rand(shape[-1:], generator=g).to(dtype) + 0.5
        fn = lambda x, y, w: F.binary_cross_entropy_with_logits(x, y, pos_weight=w, reduction=reduction)  # noqa
    else:
        x = torch.randn(shape, generator=g).to(dtype)
        y = torch.randn(shape, generator=g).to(dtype)
        w = None
        f = {"mse": F.mse_loss, "l1": F.l1_loss, "smooth_l1": lambda a, b, reduction: F.smooth_l1_loss(
            a, b, reduction=reduction, beta=0.5), "huber": lambda a, b, reduction: F.huber_loss(
            a, b, reduction=reduction, delta=0.7)}[loss]
        fn = lambda x, y, w: f(x, y, reduction=reduction)  # noqa: E731
    _compare(fn, x, dtype, (y, w))


def test_noncontiguous_broadcast_target_mse():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 40, generator=g)
    y = torch.randn(40, 1, generator=g)
    _compare(lambda x, y: F.mse_loss(x.t(), y.expand(40, 6)), x, torch.float32, (y,))


def test_bad_targets_raise_torch_errors():
    x = torch.randn(4, 3).to("trn")
    with pytest.raises((IndexError, RuntimeError), match="out of bounds|Target"):
        F.nll_loss(x, torch.tensor([0, 1, 5, 2]).to("trn"))
    with pytest.raises(RuntimeError):
        F.binary_cross_entropy(torch.full((3,), 1.5).to("trn"), torch.rand(3).to("trn"))


def test_profile_nll_is_sane():
    n, c = 256, 64
    x = torch.randn(n, c).to("trn")
    t = torch.randint(0, c, (n, 1)).to("trn")
    loss = torch.empty(n, 1, device="trn")
    ws, bad = torch.empty(n, 1, device="trn"), torch.empty(n, 1, device="trn")
    prof = L.nll_fwd.profile(x.view(-1, 1), t, x.view(-1, 1), loss, ws, bad, n, c, c, 1, L.Nll(-100, False))
    assert prof.time_us > 0 and prof.cycles > 0
    assert all(0 <= e.utilization <= 1 for e in prof.engines.values()), prof.engines
    assert 0 < prof.mbu <= 1
    ref = -x.cpu().gather(1, t.cpu())
    assert_same(loss, ref)


# --- margin losses -------------------------------------------------------------------------------------------------
@_SETTINGS
@given(n=st.sampled_from([1, 7, 130]), c=st.sampled_from([1, 4, 9]), p=st.sampled_from([1, 2]),
       margin=st.sampled_from([1.0, -0.5]), weighted=st.booleans(), reduction=st.sampled_from(REDUCTIONS))
def test_multi_margin_loss(n, c, p, margin, weighted, reduction):
    g = torch.Generator().manual_seed(n * 31 + c)
    x = torch.randn(n, c, generator=g)
    t = torch.randint(0, c, (n,), generator=g)
    w = torch.rand(c, generator=g) if weighted else None
    _compare(lambda a, tt, ww: F.multi_margin_loss(a, tt, p=p, margin=margin, weight=ww, reduction=reduction),
             x, torch.float32, (t, w))


def test_multi_margin_loss_1d_and_0d():
    _compare(lambda a, tt: F.multi_margin_loss(a, tt), torch.randn(6), torch.float32, (torch.tensor(2),))
    _compare(lambda a, tt: F.multi_margin_loss(a, tt, reduction="none"), torch.randn(()), torch.float32,
             (torch.tensor(0),))


@_SETTINGS
@given(n=st.sampled_from([1, 6, 130]), c=st.sampled_from([1, 5, 12]), reduction=st.sampled_from(REDUCTIONS))
def test_multilabel_margin_loss(n, c, reduction):
    g = torch.Generator().manual_seed(n * 17 + c)
    x = torch.randn(n, c, generator=g)
    t = torch.randint(-1, c, (n, c), generator=g)  # class ids, the first -1 ends each row's list
    _compare(lambda a, tt: F.multilabel_margin_loss(a, tt, reduction=reduction), x, torch.float32, (t,))


def test_multilabel_margin_loss_1d_and_is_target():
    x, t = torch.randn(5), torch.tensor([3, 0, -1, 1, 4])
    _compare(lambda a, tt: F.multilabel_margin_loss(a, tt), x, torch.float32, (t,))
    trnlang.reset_fallback_stats()
    out, is_t = torch.ops.aten.multilabel_margin_loss_forward(x.view(1, 5).to("trn"), t.view(1, 5).to("trn"), 1)
    ref, ref_t = torch.ops.aten.multilabel_margin_loss_forward(x.view(1, 5), t.view(1, 5), 1)
    assert_same(out, ref)
    assert_same(is_t, ref_t, rtol=0, atol=0)
    assert trnlang.fallback_stats() == {}


def test_margin_losses_bad_targets_raise_torch_errors():
    x = torch.randn(3, 4)
    for fn, t in ((F.multi_margin_loss, torch.tensor([0, 5, 1])),
                  (F.multilabel_margin_loss, torch.tensor([[0, 7, -1, 0]] * 3))):
        with pytest.raises(RuntimeError) as cpu_err:
            fn(x, t)
        with pytest.raises(RuntimeError) as trn_err:
            fn(x.to("trn"), t.to("trn"))
        assert str(trn_err.value) == str(cpu_err.value)


# --- CTC -------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("flat", [False, True])
def test_ctc_loss(reduction, flat):
    """Ragged input/target lengths (an empty target, an ended input), padded or concatenated targets."""
    g = torch.Generator().manual_seed(7)
    lp = torch.randn(30, 4, 9, generator=g).log_softmax(2)
    tgt = torch.randint(1, 9, (4, 8), generator=g)
    il, tl_ = [30, 30, 21, 12], [8, 5, 0, 3]
    if flat:
        tgt = torch.cat([tgt[i, :n] for i, n in enumerate(tl_)])
    _compare(lambda x, t: F.ctc_loss(x, t, il, tl_, reduction=reduction), lp, torch.float32, (tgt,))


def test_ctc_loss_tensor_lengths_zero_infinity_and_many_rows():
    g = torch.Generator().manual_seed(8)
    lp = torch.randn(6, 130, 5, generator=g).log_softmax(2)  # 130 rows: two partition tiles
    tgt = torch.randint(1, 5, (130, 4), generator=g)
    il, tl_ = torch.full((130,), 6), torch.randint(0, 5, (130,), generator=g)
    il[0], tl_[0] = 2, 4  # impossible alignment: an infinite loss, zeroed
    _compare(lambda x, t, a, b: F.ctc_loss(x, t, a, b, zero_infinity=True), lp, torch.float32, (tgt, il, tl_))


@pytest.mark.parametrize("multilabel", [False, True])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_margin_losses_of_an_empty_batch(multilabel, reduction, monkeypatch):
    """An empty batch of a [0, C] input is valid: no losses, an empty gradient, natively (the CPU's sum and mean
    of it are uninitialised memory; trn gives 0 and NaN). Other empty shapes raise torch's error."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    mod = (torch.nn.MultiLabelMarginLoss if multilabel else torch.nn.MultiMarginLoss)(reduction=reduction)
    x = torch.randn(0, 10, device="trn", requires_grad=True)
    y = torch.ones(0, 10, dtype=torch.long) if multilabel else torch.ones(0, dtype=torch.long)
    out = mod(x, y.to("trn"))
    out.sum().backward()
    assert x.grad.shape == (0, 10)
    if reduction == "none":
        assert out.shape == (0,)
    else:
        assert out.shape == () and (out.item() == 0.0 if reduction == "sum" else out.isnan().item())
    for bad_x, bad_y in [(torch.randn(0), torch.ones(10, dtype=torch.long)),
                         (torch.randn(10, 0), torch.ones(10, 0, dtype=torch.long) if multilabel
                          else torch.ones(10, dtype=torch.long))]:
        with pytest.raises(RuntimeError, match="Expected non-empty vector or matrix"):
            mod(bad_x.to("trn"), bad_y.to("trn"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("red", ["mean", "sum"])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "vector"])
def test_nll_fast_path_repeats_the_lowering(dtype, red, layout):
    """Repeated nll_loss calls on one layout run the kept pointer call (the fast function): every call's values
    equal the CPU's, a bad target after warm calls still raises torch's error, ignore_index still applies."""
    g = torch.Generator().manual_seed(3)
    L._NLL_FAST.table.clear()
    n, c = (1, 7) if layout == "vector" else (9, 7)
    for step in range(5):
        x = torch.randn(n, c, generator=g).to(dtype)
        if layout == "transposed":
            x = torch.randn(c, n, generator=g).to(dtype).t()
        t = torch.randint(0, c, (n,), generator=g)
        t[0] = -100 if step == 3 else t[0]
        xd = x.to("trn") if layout != "transposed" else x.t().contiguous().to("trn").t()
        xa, xda, ta, tda = (x[0], xd[0], t[0], t.to("trn")[0]) if layout == "vector" else (x, xd, t, t.to("trn"))
        out, ref = F.nll_loss(xda, tda, reduction=red), F.nll_loss(xa, ta, reduction=red)
        assert_same(out, ref, rtol=_TOL[dtype][0], atol=_TOL[dtype][1])
        assert out.shape == ref.shape and out.dtype == ref.dtype
    if layout != "vector":
        assert len(L._NLL_FAST.table) == 1  # learned once, then hit
        with pytest.raises((IndexError, RuntimeError), match="out of bounds|Target"):
            F.nll_loss(xd, torch.full((n,), c).to("trn"), reduction=red)
        with pytest.raises(RuntimeError, match="device"):
            F.nll_loss(xd, t, reduction=red)  # a CPU target: torch's device error, not the fast path
