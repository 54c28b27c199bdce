"""Sampling family (stdlib_kernels/nn/sampling.py, bags.py, distance.py) and addbmm (matmul.py): trn vs CPU, forward
and backward, no fallbacks."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=3, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
_TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (2e-2, 2e-2)}


def _rand(*shape, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _check(fn, inputs, dtype=torch.float32, grads=None, noncontig=False, **kw):
    """``fn(*inputs, **kw)`` on CPU and trn: the output and the gradients of the float inputs; no fallback."""
    rtol, atol = _TOL[dtype]
    grads = grads if grads is not None else [t.is_floating_point() for t in inputs]
    cpu, dev = [], []
    for t, gr in zip(inputs, grads):
        c = t.to(dtype) if t.is_floating_point() else t
        d = c.to("trn")
        if noncontig and d.dim() >= 2:
            d = d.transpose(-1, -2).contiguous().transpose(-1, -2)
        cpu.append(c.detach().requires_grad_(gr))
        dev.append(d.detach().requires_grad_(gr))
    trnlang.reset_fallback_stats()
    ref = fn(*cpu, **kw)
    out = fn(*dev, **kw)
    assert_same(out, ref.detach(), rtol=rtol, atol=atol * max(1.0, float(ref.detach().abs().max()))
                if ref.numel() else atol)
    if any(grads) and ref.numel():
        g = torch.randn(ref.shape, generator=torch.Generator().manual_seed(1)).to(dtype)
        ref.backward(g)
        out.backward(g.to("trn"))
        for a, b, gr in zip(dev, cpu, grads):
            if gr:
                assert_same(a.grad, b.grad, rtol=rtol, atol=atol * max(1.0, float(b.grad.abs().max())))
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()


# --- grid_sample ---------------------------------------------------------------------------------------------------
_MODES = ["bilinear", "nearest", "bicubic"]
_PADS = ["zeros", "border", "reflection"]


@_SETTINGS
@given(mode=st.sampled_from(_MODES), pad=st.sampled_from(_PADS), align=st.booleans(),
       shape=st.sampled_from([(1, 1, 1, 1, 3, 1), (2, 3, 5, 7, 4, 6), (1, 2, 6, 4, 13, 11)]))
def test_grid_sample_2d(mode, pad, align, shape):
    """Every mode and padding; 143 points span two partition tiles; the grid reaches outside [-1, 1]."""
    n, c, h, w, oh, ow = shape
    grid = torch.rand((n, oh, ow, 2), generator=torch.Generator().manual_seed(3)) * 2.6 - 1.3
    _check(F.grid_sample, [_rand(n, c, h, w), grid], mode=mode, padding_mode=pad, align_corners=align)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("pad", _PADS)
def test_grid_sample_3d(mode, pad):
    grid = torch.rand((2, 3, 4, 2, 3), generator=torch.Generator().manual_seed(4)) * 2.4 - 1.2
    _check(F.grid_sample, [_rand(2, 3, 4, 5, 3), grid], mode=mode, padding_mode=pad, align_corners=pad == "border")


def test_grid_sample_bf16_noncontiguous_and_many_channels():
    grid = torch.rand((1, 5, 6, 2), generator=torch.Generator().manual_seed(5)) * 2 - 1
    # bf16: torch's CPU kernel rounds every coordinate step to bf16, so a point near a cell border may pick the
    # neighbouring cell: the grid gradient (discontinuous there) is compared in fp32 only
    _check(F.grid_sample, [_rand(1, 3, 7, 8), grid], dtype=torch.bfloat16, grads=[True, False], align_corners=False)
    _check(F.grid_sample, [_rand(2, 3, 7, 8), grid.expand(2, 5, 6, 2)], noncontig=True, align_corners=True)
    _check(F.grid_sample, [_rand(1, 600, 3, 4), grid], mode="bicubic", align_corners=False)  # two channel chunks


def test_grid_sample_only_input_grad():
    x, grid = _rand(1, 2, 4, 4), torch.rand(1, 3, 3, 2) * 2 - 1
    _check(F.grid_sample, [x, grid], grads=[True, False], align_corners=False)
    _check(F.grid_sample, [x, grid], grads=[False, True], align_corners=False)


# --- embedding_bag -------------------------------------------------------------------------------------------------
@_SETTINGS
@given(mode=st.sampled_from(["sum", "mean", "max"]), padding=st.sampled_from([None, 3]), freq=st.booleans(),
       bags=st.sampled_from([(0, 0, 3), (0, 4, 4, 9), (0,)]))
def test_embedding_bag(mode, padding, freq, bags):
    """Empty bags, a padding index, scale_grad_by_freq (not with max)."""
    g = torch.Generator().manual_seed(len(bags))
    idx = torch.randint(0, 7, (max(bags[-1], 1) + 2,), generator=g)
    kw = dict(offsets=torch.tensor(bags), mode=mode, padding_idx=padding, scale_grad_by_freq=freq and mode != "max")
    _check(lambda w, i, o: F.embedding_bag(i, w, offsets=o, **{k: v for k, v in kw.items() if k != "offsets"}),
           [_rand(7, 5), idx, kw["offsets"]])


def test_embedding_bag_per_sample_weights_2d_last_offset_and_bf16():
    idx = torch.tensor([5, 1, 6, 5, 6, 0])
    _check(lambda w, i, o, p: F.embedding_bag(i, w, offsets=o, per_sample_weights=p, mode="sum", padding_idx=1),
           [_rand(10, 5), idx, torch.tensor([0, 2]), _rand(6, seed=1)])
    _check(lambda w, i: F.embedding_bag(i, w, mode="mean"), [_rand(10, 5), torch.randint(0, 10, (4, 3))])
    _check(lambda w, i, o: F.embedding_bag(i, w, offsets=o, mode="max", include_last_offset=True),
           [_rand(10, 600), idx, torch.tensor([0, 3, 6])])  # two column chunks
    _check(lambda w, i, o: F.embedding_bag(i, w, offsets=o, mode="mean"), [_rand(10, 5), idx, torch.tensor([0, 4])],
           dtype=torch.bfloat16)


def test_embedding_bag_scale_grad_by_freq_matches_torchs_cpu_rule():
    """torch's CPU divides by the count of the index at the unique-group rank (here row 4 gets 1/2: index 3 occurs
    twice), not by the index's own count; trn reproduces the CPU."""
    _check(lambda w, i, o: F.embedding_bag(i, w, offsets=o, mode="sum", scale_grad_by_freq=True),
           [_rand(7, 3), torch.tensor([5, 3, 3, 4, 0]), torch.tensor([0, 0, 3])])


def test_embedding_bag_bad_input_raises_torchs_error():
    w = _rand(10, 5)
    for idx, off in ((torch.tensor([1, 11]), torch.tensor([0])), (torch.tensor([1, 2]), torch.tensor([1]))):
        with pytest.raises(RuntimeError) as cpu_err:
            F.embedding_bag(idx, w, offsets=off)
        with pytest.raises(RuntimeError) as trn_err:
            F.embedding_bag(idx.to("trn"), w.to("trn"), offsets=off.to("trn"))
        assert str(trn_err.value) == str(cpu_err.value)


# --- cdist / pdist --------------------------------------------------------------------------------------------------
@_SETTINGS
@given(p=st.sampled_from([0.0, 1.0, 2.0, 3.0, 0.5, 1.5, math.inf]),
       shapes=st.sampled_from([((5, 4, 3), (5, 6, 3)), ((2, 1, 3, 2), (2, 4, 2)), ((130, 3), (7, 3))]))
def test_cdist(p, shapes):
    a, b = shapes
    _check(torch.cdist, [_rand(*a), _rand(*b, seed=1)], p=p, compute_mode="donot_use_mm_for_euclid_dist")


def test_cdist_wide_and_empty():
    _check(torch.cdist, [_rand(3, 2), _rand(600, 2, seed=1)], p=1.0)  # two chunks of x2 rows
    _check(torch.cdist, [_rand(0, 4, 5), _rand(3, 5, seed=1)], p=1.5)


@pytest.mark.parametrize("p", [2.0, 1.0, 0.5, 10.0, math.inf])
def test_pdist(p):
    _check(F.pdist, [_rand(6, 4)], p=p)


# --- addbmm ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_addbmm(dtype):
    b1, b2 = _rand(5, 3, 140), _rand(5, 140, 6, seed=1)  # K spans two partition tiles
    _check(lambda s, x, y: torch.addbmm(s, x, y, beta=0.6, alpha=0.2), [_rand(3, 6, seed=2), b1, b2], dtype=dtype)
    _check(torch.addbmm, [_rand(6, seed=2), b1, b2], dtype=dtype)  # broadcast self


# --- profile --------------------------------------------------------------------------------------------------------
def test_grid_sample_kernel_profile_is_sane():
    from stdlib_kernels.nn.sampling import _channels_last, grid_sample_fwd

    x = _rand(1, 16, 8, 8).to("trn")
    grid = (torch.rand(1, 128, 2) * 2 - 1).to("trn")
    out = torch.empty(1, 16, 128, device="trn")
    prof = grid_sample_fwd.profile(_channels_last(x), grid, _channels_last(out), "8,8", 0, 0, False)
    ref = F.grid_sample(x.cpu(), grid.cpu().view(1, 128, 1, 2), align_corners=False).view(1, 16, 128)
    assert_same(out, ref, rtol=1e-4, atol=1e-5)
    assert prof.time_us > 0
    assert prof.engines["vector"].instructions > 0
    for e in prof.engines.values():
        assert 0.0 <= e.utilization <= 1.0
    assert 0.0 < prof.mbu <= 1.0
