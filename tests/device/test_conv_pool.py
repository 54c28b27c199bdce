"""Convolution and pooling (stdlib_kernels/nn/conv.py, pool.py): trn vs CPU, forward and backward, no fallbacks."""

import copy

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import trnlang
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=3, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
_TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}


def _noncontig(t: torch.Tensor) -> torch.Tensor:
    """The same values on trn, with transposed (non-contiguous) strides in the last two dims."""
    return t.to("trn").transpose(-1, -2).contiguous().transpose(-1, -2)


def _check(fn, inputs, dtype=torch.float32, noncontig=False, grads=True, **kw):
    """Run ``fn`` on CPU and trn (forward, then backward with one random cotangent); compare everything."""
    rtol, atol = _TOL[dtype]
    cpu = [t.to(dtype).detach().requires_grad_(grads) if t is not None else None for t in inputs]
    dev = [((_noncontig(t.to(dtype)) if noncontig and t.dim() >= 3 else t.to(dtype).to("trn")).detach()
            .requires_grad_(grads)) if t is not None else None for t in inputs]
    ref = fn(*cpu, **kw)
    trnlang.reset_fallback_stats()
    got = fn(*dev, **kw)
    if isinstance(ref, tuple):  # (values, int64 indices)
        assert got[1].dtype == torch.int64
        assert torch.equal(got[1].cpu(), ref[1])
        ref, got = ref[0], got[0]
    assert_same(got, ref.detach(), rtol=rtol, atol=atol)
    if grads and ref.numel():
        g = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
        ref.backward(g)
        got.backward(g.to("trn"))
        for a, b in zip(dev, cpu):
            if a is not None:
                assert_same(a.grad, b.grad, rtol=rtol, atol=atol * max(1.0, float(b.grad.abs().max())))
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()


def _rand(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


# --- convolution --------------------------------------------------------------------------------------------------
@st.composite
def _conv_case(draw, transposed: bool):
    g = draw(st.sampled_from([1, 2]))
    cin, cout = g * draw(st.integers(1, 5)), g * draw(st.integers(1, 4))
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    s = (draw(st.integers(1, 2)), draw(st.integers(1, 3)))
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    p = (draw(st.integers(0, 2)), draw(st.integers(0, 1)))
    hw = (draw(st.integers(1, 9)), draw(st.integers(1, 11)))
    n = draw(st.integers(1, 2))
    bias = draw(st.booleans())
    if transposed:
        op = tuple(draw(st.integers(0, max(0, min(si, di) - 1))) for si, di in zip(s, d))
        assume(all((h - 1) * si - 2 * pi + di * (ki - 1) + oi + 1 > 0
                   for h, si, pi, di, ki, oi in zip(hw, s, p, d, k, op)))
        return (n, cin, hw), (cin, cout // g, *k), cout if bias else None, dict(stride=s, padding=p, dilation=d,
                                                                                  groups=g, output_padding=op)
    assume(all(h + 2 * pi >= di * (ki - 1) + 1 for h, pi, di, ki in zip(hw, p, d, k)))
    return (n, cin, hw), (cout, cin // g, *k), cout if bias else None, dict(stride=s, padding=p, dilation=d, groups=g)


@_SETTINGS
@given(case=_conv_case(False), noncontig=st.booleans())
def test_conv2d_random(case, noncontig):
    (n, c, hw), wshape, bias, kw = case
    b = _rand(bias, seed=2) if bias else None
    _check(F.conv2d, [_rand(n, c, *hw), _rand(*wshape, seed=1), b], noncontig=noncontig, **kw)


@_SETTINGS
@given(case=_conv_case(True))
def test_conv_transpose2d_random(case):
    (n, c, hw), wshape, bias, kw = case
    b = _rand(bias, seed=2) if bias else None
    _check(F.conv_transpose2d, [_rand(n, c, *hw), _rand(*wshape, seed=1), b], **kw)


def test_conv1d_and_transpose1d():
    _check(F.conv1d, [_rand(2, 4, 19), _rand(6, 2, 3, seed=1), _rand(6, seed=2)], stride=2, padding=1, groups=2)
    _check(F.conv_transpose1d, [_rand(2, 4, 7), _rand(4, 3, 4, seed=1), _rand(3, seed=2)], stride=3, padding=2,
           dilation=2, output_padding=1)


def test_conv2d_many_channels_and_wide_rows():
    """More than 128 input channels (K tiles) and rows longer than one 512-pixel PSUM bank."""
    _check(F.conv2d, [_rand(1, 130, 3, 520), _rand(3, 130, 1, 3, seed=1), None], padding=(0, 1))


def test_conv2d_bf16():
    _check(F.conv2d, [_rand(2, 4, 9, 8), _rand(6, 4, 3, 3, seed=1), _rand(6, seed=2)], dtype=torch.bfloat16,
           padding=1, stride=(1, 2))


def test_conv2d_empty_batch_and_output_mask():
    _check(F.conv2d, [_rand(0, 3, 5, 5), _rand(4, 3, 3, 3, seed=1), _rand(4, seed=2)], grads=False)
    x = _rand(2, 3, 6, 6).to("trn")
    w = _rand(4, 3, 3, 3, seed=1).to("trn").requires_grad_()
    trnlang.reset_fallback_stats()
    F.conv2d(x, w).sum().backward()  # input needs no gradient: output_mask = [False, True, False]
    wc = _rand(4, 3, 3, 3, seed=1).requires_grad_()
    F.conv2d(x.cpu(), wc).sum().backward()
    assert_same(w.grad, wc.grad, rtol=1e-4, atol=1e-4)
    assert trnlang.fallback_stats() == {}


def test_conv3d_and_transpose3d():
    """3-D convolutions: a depth loop and depth phases around the 2-D tiles; the weight gradient's taps are loops."""
    _check(F.conv3d, [_rand(2, 4, 5, 6, 7), _rand(6, 2, 3, 2, 3, seed=1), _rand(6, seed=2)], noncontig=True,
           padding=(1, 0, 1), groups=2, stride=(2, 1, 1), dilation=(1, 2, 1))
    _check(F.conv_transpose3d, [_rand(2, 4, 3, 4, 5), _rand(4, 3, 2, 3, 2, seed=1), _rand(3, seed=2)],
           stride=(2, 1, 2), padding=(0, 1, 1), output_padding=(1, 0, 1))
    _check(F.conv3d, [_rand(1, 3, 4, 5, 4), _rand(2, 3, 3, 3, 3, seed=1), None], dtype=torch.bfloat16, padding=1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_transposed_conv_on_torchs_slow_path_is_native_and_closer_to_float64(dtype):
    """torch's CPU rounds every tap to the half type on its col2im path (output_padding >= stride here); trn
    accumulates in fp32: native, and element by element at least as close to a float64 result as the CPU's."""
    x, w = _rand(2, 2, 4, 4).to(dtype), _rand(2, 2, 4, 5, seed=1).to(dtype)
    kw = dict(stride=(3, 2), padding=(1, 2), output_padding=(2, 3), groups=2, dilation=4)
    trnlang.reset_fallback_stats()
    out_trn = F.conv_transpose2d(x.to("trn"), w.to("trn"), **kw)
    assert trnlang.fallback_stats() == {}
    out = out_trn.cpu().double()
    ref = F.conv_transpose2d(x.double(), w.double(), **kw)
    cpu = F.conv_transpose2d(x, w, **kw).double()
    eps = torch.finfo(dtype).eps
    assert bool(((out - ref).abs() <= (cpu - ref).abs() + eps * ref.abs()).all())
    assert_same(out_trn, cpu.to(dtype), rtol=4 * eps, atol=4 * eps)


def test_conv_errors_are_torchs():
    x, w = _rand(1, 3, 5, 5), _rand(4, 2, 3, 3)
    with pytest.raises(RuntimeError) as cpu_err:
        F.conv2d(x, w)
    with pytest.raises(RuntimeError) as trn_err:
        F.conv2d(x.to("trn"), w.to("trn"))
    assert str(trn_err.value) == str(cpu_err.value)


# --- pooling --------------------------------------------------------------------------------------------------------
@st.composite
def _pool_case(draw, dilation: bool):
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    s = (draw(st.integers(1, 3)), draw(st.integers(1, 2)))
    p = tuple(draw(st.integers(0, ki // 2)) for ki in k)
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2))) if dilation else (1, 1)
    hw = (draw(st.integers(1, 10)), draw(st.integers(1, 12)))
    assume(all(h + 2 * pi >= di * (ki - 1) + 1 for h, pi, di, ki in zip(hw, p, d, k)))
    planes = draw(st.sampled_from([(1, 3), (2, 70)]))  # 140 planes: two partition tiles, the last ragged
    return planes, hw, dict(kernel_size=k, stride=s, padding=p, ceil_mode=draw(st.booleans())), d


@_SETTINGS
@given(case=_pool_case(True), noncontig=st.booleans())
def test_max_pool2d_random(case, noncontig):
    planes, hw, kw, d = case
    _check(F.max_pool2d, [_rand(*planes, *hw)], noncontig=noncontig, dilation=d, return_indices=True, **kw)


@_SETTINGS
@given(case=_pool_case(False), include_pad=st.booleans(), divisor=st.sampled_from([None, 3]))
def test_avg_pool2d_random(case, include_pad, divisor):
    planes, hw, kw, _ = case
    _check(F.avg_pool2d, [_rand(*planes, *hw)], count_include_pad=include_pad, divisor_override=divisor, **kw)


def test_max_pool_ties_nan_and_inf_follow_torch():
    x = torch.randint(0, 3, (2, 3, 7, 8)).float()
    x[0, 0, :3, :3] = -float("inf")
    x[1, 2, 2, 2] = float("nan")
    _check(F.max_pool2d, [x], grads=False, kernel_size=3, stride=2, padding=1, return_indices=True)
    _check(F.adaptive_max_pool2d, [x], grads=False, output_size=(3, 5), return_indices=True)


def test_pool1d_forms():
    x = _rand(2, 5, 17)
    _check(F.max_pool1d, [x], kernel_size=3, stride=2, padding=1, return_indices=True)
    _check(F.avg_pool1d, [x], kernel_size=4, stride=3, ceil_mode=True)
    _check(F.adaptive_avg_pool1d, [x], output_size=5)
    _check(F.adaptive_max_pool1d, [x], output_size=5, return_indices=True)


def test_adaptive_pools_2d():
    x = _rand(2, 3, 9, 10)
    _check(F.adaptive_avg_pool2d, [x], output_size=(4, 3))
    _check(F.adaptive_max_pool2d, [x], output_size=(3, 5), return_indices=True)  # divisible: max-pool kernels
    _check(F.adaptive_max_pool2d, [x], output_size=(4, 3), return_indices=True)  # overlapping windows
    _check(F.adaptive_avg_pool3d, [_rand(2, 2, 5, 4, 6)], output_size=(2, 3, 4))


def test_large_uneven_adaptive_max_is_declined_not_wrong():
    """Unrolled adaptive-max windows have a size limit; beyond it the op runs on the CPU (counted), still right."""
    x = _rand(1, 2, 301, 5)
    trnlang.reset_fallback_stats()
    out, idx = F.adaptive_max_pool2d(x.to("trn"), (7, 3), return_indices=True)
    assert any("adaptive_max_pool2d" in k for k in trnlang.fallback_stats())
    ref, ridx = F.adaptive_max_pool2d(x, (7, 3), return_indices=True)
    assert_same(out, ref, rtol=0, atol=0)
    assert torch.equal(idx.cpu(), ridx)


def test_pool3d():
    x = _rand(2, 3, 5, 6, 7)
    _check(F.max_pool3d, [x], kernel_size=2, return_indices=True)
    _check(F.max_pool3d, [x], kernel_size=(3, 2, 2), stride=(2, 1, 2), padding=(1, 1, 0), dilation=(1, 2, 1),
           ceil_mode=True, return_indices=True)
    _check(F.avg_pool3d, [x], kernel_size=(3, 2, 3), stride=(2, 1, 2), padding=(1, 1, 1), ceil_mode=True,
           count_include_pad=False)
    _check(F.avg_pool3d, [x], kernel_size=3, stride=2, padding=1, divisor_override=5)
    _check(F.adaptive_max_pool3d, [x], output_size=(5, 3, 7), return_indices=True)  # divisible: max pooling
    _check(F.adaptive_max_pool3d, [x], output_size=(3, 4, 5), return_indices=True)  # uneven: separable + scatter
    _check(F.max_pool3d, [x], dtype=torch.bfloat16, kernel_size=2, stride=1)  # (the CPU has no bf16 avg_pool3d)


def test_pool_bf16_and_empty():
    x = _rand(2, 3, 8, 9)
    _check(F.max_pool2d, [x], dtype=torch.bfloat16, kernel_size=2)
    _check(F.avg_pool2d, [x], dtype=torch.bfloat16, kernel_size=3, padding=1)
    _check(F.max_pool2d, [_rand(0, 3, 8, 9)], grads=False, kernel_size=2)


def test_pool_errors_are_torchs():
    x = _rand(1, 2, 3, 3)
    with pytest.raises(RuntimeError) as cpu_err:
        F.max_pool2d(x, 2, padding=2)
    with pytest.raises(RuntimeError) as trn_err:
        F.max_pool2d(x.to("trn"), 2, padding=2)
    assert str(trn_err.value) == str(cpu_err.value)


# --- a small CNN, training step -----------------------------------------------------------------------------------
def test_small_cnn_conv_and_pool_parts_native():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                            torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3, stride=2, padding=1),
                            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10))
    mt = copy.deepcopy(m).to("trn")
    x, y = _rand(4, 3, 16, 16), torch.arange(4)
    trnlang.reset_fallback_stats()
    lt = F.cross_entropy(mt(x.to("trn")), y.to("trn"))
    lt.backward()
    mine = ("convolution", "pool", "upsample")
    assert not [k for k in trnlang.fallback_stats() if any(s in k for s in mine)], trnlang.fallback_stats()
    loss = F.cross_entropy(m(x), y)
    loss.backward()
    assert_same(lt, loss.detach(), rtol=1e-4, atol=1e-5)
    for a, b in zip(mt.parameters(), m.parameters()):
        assert_same(a.grad, b.grad, rtol=1e-3, atol=1e-5)


# --- profile ------------------------------------------------------------------------------------------------------
def test_conv_kernel_profile_is_sane():
    from stdlib_kernels.nn.conv import conv_kernel

    x = _rand(2, 32, 12, 12).to("trn")
    w = _rand(1, 48, 32, 3, 3, seed=1).to("trn")
    out = torch.empty(2, 48, 12, 12, device="trn")
    prof = conv_kernel.profile(x.unsqueeze(2), w.unsqueeze(3), None, out.unsqueeze(2), "1,1,1,0,1,1,1,1,1,1,1,1",
                               False)
    ref = F.conv2d(x.cpu(), w.cpu()[0], padding=1)
    assert_same(out, ref, rtol=1e-4, atol=1e-4)
    assert prof.time_us > 0 and prof.flops > 0
    assert prof.engines["tensor"].instructions > 0
    for e in prof.engines.values():
        assert 0.0 <= e.utilization <= 1.0
    assert 0.0 < prof.mfu <= 1.0 and 0.0 < prof.mbu <= 1.0


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(nd=st.sampled_from([1, 2, 3]), data=st.data())
def test_int64_avg_pool_is_native_and_truncates_like_torch(nd, data):
    """torch's int64 average pooling sums in int64 and divides toward zero: native, bit-equal, negatives and
    padding and divisor_override included; values of 2^24 / window or more decline (fp32 sums would round)."""
    k = [data.draw(st.integers(1, 3)) for _ in range(nd)]
    s = [data.draw(st.integers(1, 3)) for _ in range(nd)]
    p = [data.draw(st.integers(0, ki // 2)) for ki in k]
    shape = [data.draw(st.integers(0, 2)), data.draw(st.integers(1, 3))] + [data.draw(st.integers(3, 7))
                                                                            for _ in range(nd)]
    hi = data.draw(st.sampled_from([3, 1000, (1 << 24) // 27]))
    x = torch.randint(-hi, hi, shape, generator=torch.Generator().manual_seed(data.draw(st.integers(0, 99))))
    kw = dict(kernel_size=k, stride=s, padding=p, ceil_mode=data.draw(st.booleans()),
              count_include_pad=data.draw(st.booleans()))
    if nd > 1 and data.draw(st.booleans()):
        kw["divisor_override"] = data.draw(st.integers(1, 7))
    fn = (F.avg_pool1d, F.avg_pool2d, F.avg_pool3d)[nd - 1]
    trnlang.reset_fallback_stats()
    out = fn(x.to("trn"), **kw)
    assert trnlang.fallback_stats() == {}
    assert_same(out, fn(x, **kw), rtol=0, atol=0)


def test_int64_avg_pool_of_large_values_declines_to_the_cpu():
    x = torch.full((1, 1, 4, 4), 1 << 22, dtype=torch.int64)
    x[0, 0, 0, 0] = (1 << 22) + 1
    trnlang.reset_fallback_stats()
    out = F.avg_pool2d(x.to("trn"), 3, stride=1)
    assert "aten::avg_pool2d" in trnlang.fallback_stats()
    assert_same(out, F.avg_pool2d(x, 3, stride=1), rtol=0, atol=0)
