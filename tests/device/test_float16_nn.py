"""float16 through the spatial layers (convolution, pooling, upsampling, grid sampling): native, forward and backward,
and element by element at least as close to a float64 computation as the CPU's own float16 kernels (which round
some sums to float16 where trn keeps fp32), within a few float16 ulps of the CPU."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang

_SETTINGS = settings(max_examples=4, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
_EPS = torch.finfo(torch.float16).eps


def _grid(n: int, h: int, w: int, seed: int) -> torch.Tensor:
    return torch.rand(n, h, w, 2, generator=torch.Generator().manual_seed(seed)) * 2.2 - 1.1


#: name -> (function of (x, aux), rank of x); aux is a weight, a sampling grid or None
_OPS = {
    "conv2d": (lambda x, w: F.conv2d(x, w, padding=1), 4),
    "conv_transpose2d": (lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=1), 4),
    "conv1d": (lambda x, w: F.conv1d(x, w[..., 0], stride=2), 3),
    "max_pool2d": (lambda x, _: F.max_pool2d(x, 2, ceil_mode=True), 4),
    "avg_pool2d": (lambda x, _: F.avg_pool2d(x, 3, stride=2, padding=1), 4),
    "adaptive_avg_pool2d": (lambda x, _: F.adaptive_avg_pool2d(x, (3, 2)), 4),
    "adaptive_max_pool1d": (lambda x, _: F.adaptive_max_pool1d(x, 3), 3),
    "interpolate_bilinear": (lambda x, _: F.interpolate(x, scale_factor=1.5, mode="bilinear"), 4),
    "interpolate_nearest": (lambda x, _: F.interpolate(x, size=(5, 3), mode="nearest"), 4),
    "interpolate_bicubic": (lambda x, _: F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=True), 4),
    "grid_sample": (lambda x, g: F.grid_sample(x, g, align_corners=False), 4),
}


def _aux(name: str, c: int, seed: int) -> torch.Tensor | None:
    if name.startswith("conv"):
        return torch.randn(c, c, 3, 3, generator=torch.Generator().manual_seed(seed)) * 0.3
    if name == "grid_sample":
        return _grid(2, 4, 3, seed)
    return None


@pytest.mark.parametrize("name", sorted(_OPS))
@_SETTINGS
@given(c=st.integers(1, 3), h=st.integers(2, 9), w=st.integers(3, 10),
       seed=st.integers(0, 2**16))
def test_float16_spatial_layers_are_native_and_as_accurate_as_the_cpu(name, c, h, w, seed):
    fn, rank = _OPS[name]
    g = torch.Generator().manual_seed(seed)
    shape = (2, c, h, w) if rank == 4 else (2, c, w)
    x = (torch.randn(shape, generator=g) * 3).half()
    aux = _aux(name, c, seed + 1)
    aux16 = aux.half() if aux is not None else None

    def run(xv, av, dev, dtype):
        xv = xv.to(dev, dtype).requires_grad_()
        av = av.to(dev, dtype) if av is not None else None
        out = fn(xv, av)
        go = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 2)).to(dev, dtype)
        (grad,) = torch.autograd.grad(out, xv, go)
        return out.detach().cpu().double(), grad.cpu().double()

    trnlang.reset_fallback_stats()
    out_t, grad_t = run(x, aux16, "trn", torch.float16)
    assert trnlang.fallback_stats() == {}
    out_c, grad_c = run(x, aux16, "cpu", torch.float16)
    out_r, grad_r = run(x.double(), aux16.double() if aux16 is not None else None, "cpu", torch.float64)
    for t, c_, r in ((out_t, out_c, out_r), (grad_t, grad_c, grad_r)):
        tol = 2 * _EPS * (1 + r.abs())
        assert bool(((t - r).abs() <= (c_ - r).abs() + tol).all()), name
        torch.testing.assert_close(t, c_, rtol=8 * _EPS, atol=8 * _EPS * max(1.0, float(r.abs().max())))


@pytest.mark.parametrize("name", ["max_pool2d", "avg_pool2d", "interpolate_bilinear", "conv2d"])
def test_float16_empty_batch(name):
    fn, rank = _OPS[name]
    x = torch.zeros((0, 2, 5, 6) if rank == 4 else (0, 2, 6), dtype=torch.float16)
    aux = _aux(name, 2, 0)
    aux = aux.half() if aux is not None else None
    out = fn(x.to("trn"), aux.to("trn") if aux is not None else None)
    assert out.device.type == "trn"
    assert out.shape == fn(x, aux).shape
