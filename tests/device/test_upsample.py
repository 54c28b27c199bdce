"""Upsampling (stdlib_kernels/nn/upsample.py): every interpolate mode vs CPU, forward and backward, no fallbacks."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=4, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _check(x: torch.Tensor, dtype=torch.float32, noncontig=False, **kw):
    """``F.interpolate(x, **kw)`` and its input gradient, trn vs CPU, with no fallback."""
    rtol, atol = (1e-4, 1e-4) if dtype == torch.float32 else (2e-2, 2e-2)
    xc = x.to(dtype).detach().requires_grad_()
    xt = x.to(dtype).to("trn")
    if noncontig:
        xt = xt.transpose(-1, -2).contiguous().transpose(-1, -2)
    xt = xt.detach().requires_grad_()
    ref = F.interpolate(xc, **kw)
    trnlang.reset_fallback_stats()
    got = F.interpolate(xt, **kw)
    assert_same(got, ref.detach(), rtol=rtol, atol=atol)
    if ref.numel():
        g = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
        ref.backward(g)
        got.backward(g.to("trn"))
        assert_same(xt.grad, xc.grad, rtol=rtol, atol=atol * max(1.0, float(xc.grad.abs().max())))
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()


def _rand(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


@_SETTINGS
@given(mode=st.sampled_from(["nearest", "nearest-exact", "bilinear", "bicubic"]),
       hw=st.tuples(st.integers(1, 9), st.integers(1, 12)), align=st.booleans(),
       target=st.one_of(st.tuples(st.integers(1, 20), st.integers(1, 20)),
                        st.sampled_from([2.0, 0.5, 1.7, 3.0])), noncontig=st.booleans())
def test_interpolate_2d_random(mode, hw, align, target, noncontig):
    kw = dict(mode=mode, size=target) if isinstance(target, tuple) else dict(mode=mode, scale_factor=target)
    if mode in ("bilinear", "bicubic"):
        kw["align_corners"] = align
    _check(_rand(2, 3, *hw), noncontig=noncontig, **kw)


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "linear"])
def test_interpolate_1d(mode):
    kw = {"align_corners": True} if mode == "linear" else {}
    _check(_rand(2, 3, 11), mode=mode, scale_factor=2.5, **kw)
    _check(_rand(2, 3, 11), mode=mode, size=4, **kw)


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_antialias(mode):
    x = _rand(2, 3, 17, 19)
    _check(x, mode=mode, antialias=True, scale_factor=0.37)
    _check(x, mode=mode, antialias=True, size=(9, 30), align_corners=True)


def test_interpolate_3d_and_area():
    x = _rand(2, 2, 3, 4, 5)
    _check(x, mode="trilinear", scale_factor=1.5)
    _check(x, mode="nearest", size=(5, 2, 7))
    _check(x, mode="area", size=(2, 3, 4))
    _check(_rand(2, 3, 9, 7), mode="area", size=(4, 3))


@pytest.mark.filterwarnings("ignore:`nn.functional.upsample:UserWarning")
def test_recompute_scale_factor_and_legacy_aliases():
    x = _rand(1, 2, 5, 7)
    _check(x, mode="bilinear", scale_factor=1.3, recompute_scale_factor=True)
    xt = x.to("trn")
    trnlang.reset_fallback_stats()
    assert_same(F.upsample_bilinear(xt, scale_factor=2), F.upsample_bilinear(x, scale_factor=2), rtol=1e-4,
                atol=1e-5)
    assert_same(F.upsample_nearest(xt, scale_factor=3), F.upsample_nearest(x, scale_factor=3), rtol=0, atol=0)
    assert trnlang.fallback_stats() == {}


def test_large_planes_tile_over_partitions_and_banks():
    """Rows and planes beyond 128 partitions and output rows beyond one 512-column PSUM bank."""
    _check(_rand(1, 2, 140, 300), mode="bilinear", scale_factor=2)


def test_bf16_and_empty():
    _check(_rand(2, 3, 6, 7), dtype=torch.bfloat16, mode="bilinear", scale_factor=2)
    _check(_rand(2, 3, 6, 7), dtype=torch.bfloat16, mode="nearest", scale_factor=2)
    _check(_rand(0, 3, 6, 7), mode="bicubic", scale_factor=2)


def test_out_variant_writes_into_out():
    x = _rand(1, 2, 4, 5).to("trn")
    out = torch.empty(1, 2, 8, 10, device="trn")
    trnlang.reset_fallback_stats()
    r = torch._C._nn.upsample_bilinear2d(x, [8, 10], False, out=out)
    assert r.data_ptr() == out.data_ptr()
    assert_same(out, torch._C._nn.upsample_bilinear2d(x.cpu(), [8, 10], False), rtol=1e-5, atol=1e-6)
    assert trnlang.fallback_stats() == {}


def test_errors_are_torchs():
    x = _rand(1, 2, 4, 5)
    with pytest.raises(RuntimeError) as cpu_err:
        torch._C._nn.upsample_bilinear2d(x, [0, 3], False)
    with pytest.raises(RuntimeError) as trn_err:
        torch._C._nn.upsample_bilinear2d(x.to("trn"), [0, 3], False)
    assert str(trn_err.value) == str(cpu_err.value)


def test_sep_rows_profile_is_sane():
    from stdlib_kernels.nn.upsample import linear_matrix, sep_rows

    x = _rand(256, 40).to("trn")
    m = torch.from_numpy(linear_matrix(40, 80, False, None)).t().contiguous()
    y = torch.empty(256, 80, device="trn")
    prof = sep_rows.profile(x, m.to("trn"), y)
    assert_same(y, x.cpu() @ m, rtol=1e-5, atol=1e-5)
    assert prof.time_us > 0 and prof.flops > 0 and prof.dma_bytes > 0
    for e in prof.engines.values():
        assert 0.0 <= e.utilization <= 1.0
    assert 0.0 < prof.mfu <= 1.0 and 0.0 < prof.mbu <= 1.0


_U8_MODES = [("nearest", {}), ("nearest-exact", {}), ("bilinear", {"align_corners": False}),
             ("bilinear", {"align_corners": True}), ("bicubic", {"align_corners": False}),
             ("bilinear", {"antialias": True}), ("bicubic", {"antialias": True, "align_corners": True})]


@pytest.mark.parametrize("mode,kw", _U8_MODES)
@pytest.mark.parametrize("channels_last", [False, True])
def test_uint8_images_match_the_cpu(mode, kw, channels_last):
    """uint8 resizes natively: nearest modes bit-identical; the others one separable pass per axis, rounded
    between passes as the CPU's kernels do: at most 1 off, on under 1% of the pixels."""
    x = torch.randint(0, 256, (2, 3, 37, 53), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    wrong = total = 0
    for size in [(61, 90), (17, 20), (5, 53), (1, 7)]:  # (1, 1): the CPU kernel asserts (torch 2.13)
        ref = F.interpolate(x, size=size, mode=mode, **kw)
        trnlang.reset_fallback_stats()
        got = F.interpolate(x.to("trn"), size=size, mode=mode, **kw)
        assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
        assert got.dtype == torch.uint8 and got.shape == ref.shape
        d = (got.cpu().int() - ref.int()).abs()
        assert int(d.max()) <= (0 if mode.startswith("nearest") else 1), (size, int(d.max()))
        wrong, total = wrong + int((d > 0).sum()), total + d.numel()
    assert wrong <= 0.01 * total, wrong / total


def test_uint8_rounds_each_pass_like_the_cpu():
    """Bicubic overshoot is clamped between the passes (a float resize rounded once differs by up to ~30 here)."""
    x = torch.zeros(1, 1, 8, 8, dtype=torch.uint8)
    x[..., ::2, ::2] = 255
    ref = F.interpolate(x, size=(13, 13), mode="bicubic", align_corners=False)
    got = F.interpolate(x.to("trn"), size=(13, 13), mode="bicubic", align_corners=False).cpu()
    once = F.interpolate(x.float(), size=(13, 13), mode="bicubic", align_corners=False).round().clamp(0, 255)
    assert (got.int() - ref.int()).abs().max() <= 1
    assert (once.int() - ref.int()).abs().max() > 1  # the test can tell the two roundings apart
    out = torch.empty(1, 1, 13, 13, dtype=torch.uint8, device="trn")
    r = torch._C._nn.upsample_bicubic2d(x.to("trn"), (13, 13), False, out=out)
    assert r is out and torch.equal(out.cpu(), got)


def test_uint8_modes_torch_lacks_raise_as_on_the_cpu():
    x = torch.randint(0, 256, (1, 2, 9), dtype=torch.uint8)
    with pytest.raises(RuntimeError, match="Byte") as cpu:
        F.interpolate(x, size=5, mode="linear")
    with pytest.raises(RuntimeError, match="Byte") as trn:
        F.interpolate(x.to("trn"), size=5, mode="linear")
    assert str(cpu.value).split("\n")[0] in str(trn.value)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.uint8])
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_nearest_copies_elements_in_every_dtype(dtype, mode):
    """Nearest modes gather: bit-identical to the CPU, inf/NaN kept in place (a 0/1 matmul spread NaN over the
    row), float64 natively (a copy needs no float64 arithmetic)."""
    x = (torch.randn(2, 3, 5, 7, generator=torch.Generator().manual_seed(0)) * 50).to(dtype)
    if dtype.is_floating_point:
        x[0, 0, 1, 2], x[1, 2, 4, 0] = float("inf"), float("nan")
    for size in [(11, 13), (3, 4), (5, 7), (10, 14)]:
        ref = F.interpolate(x, size=size, mode=mode)
        trnlang.reset_fallback_stats()
        got = F.interpolate(x.to("trn"), size=size, mode=mode)
        assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
        assert torch.equal(got.cpu(), ref) or torch.allclose(got.cpu().double(), ref.double(), equal_nan=True,
                                                             rtol=0, atol=0)
    x3 = torch.randn(1, 2, 3, 4, 5, dtype=torch.float64)
    assert torch.equal(F.interpolate(x3.to("trn"), scale_factor=2.0, mode=mode).cpu(),
                       F.interpolate(x3, scale_factor=2.0, mode=mode))


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "bicubic"])
def test_channels_last_in_channels_last_out(mode):
    x = torch.randn(2, 3, 6, 5).contiguous(memory_format=torch.channels_last).requires_grad_()
    xt = x.detach().to("trn").contiguous(memory_format=torch.channels_last).requires_grad_()
    ref, got = F.interpolate(x, size=(9, 7), mode=mode), F.interpolate(xt, size=(9, 7), mode=mode)
    assert got.is_contiguous(memory_format=torch.channels_last) == ref.is_contiguous(memory_format=torch.channels_last)
    assert_same(got, ref.detach(), rtol=1e-4, atol=1e-4)
    g = torch.randn(ref.shape).contiguous(memory_format=torch.channels_last)
    ref.backward(g)
    got.backward(g.to("trn").contiguous(memory_format=torch.channels_last))
    assert xt.grad.is_contiguous(memory_format=torch.channels_last) == \
        x.grad.is_contiguous(memory_format=torch.channels_last)
    assert_same(xt.grad, x.grad, rtol=1e-4, atol=1e-4)
