"""The fast lane (trnlang/device/fastlane.py): small same-layout elementwise calls at near-native cost.

Results must equal the lowering's (it is the same compiled kernel), pooled outputs must never be
reused while anything still uses their memory, and the lane must step aside where it cannot keep
torch's semantics (inference mode, other threads, launch plans off, a changed environment).
"""

import threading

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
import trnlang.device.memory as mem
from trnlang.device import fastlane
from trnlang.device.registry import REGISTRY
from trnlang.runtime.launch import PLANS

OPS = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "maximum": torch.maximum,
       "minimum": torch.minimum}
ATEN = {"add": "aten::add.Tensor", "sub": "aten::sub.Tensor", "mul": "aten::mul.Tensor", "div": "aten::div.Tensor",
        "maximum": "aten::maximum", "minimum": "aten::minimum"}


def _lane(op, dtype, shape):
    lanes = REGISTRY[ATEN[op]].fast.lanes
    return lanes.get((dtype, torch.Size(shape)))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(op=st.sampled_from(sorted(OPS)), dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
       shape=st.sampled_from([(16,), (1,), (3, 130), (2, 3, 5), (129,)]))
def test_lane_matches_cpu(op, dtype, shape):
    g = torch.Generator().manual_seed(len(shape))
    x = torch.randn(shape, generator=g).to(dtype)
    y = torch.randn(shape, generator=g).to(dtype) + 0.5
    a, b = x.to("trn"), y.to("trn")
    trnlang.reset_fallback_stats()
    first = OPS[op](a, b)
    lane = _lane(op, dtype, shape)
    assert isinstance(lane, fastlane.Lane)  # made by the first call
    outs = [OPS[op](a, b) for _ in range(6)]  # hits, several alive at once
    assert trnlang.fallback_stats() == {}
    exp = OPS[op](x, y)
    for r in [first, *outs]:
        assert r.device.type == "trn" and r.dtype == exp.dtype and r.shape == exp.shape
        torch.testing.assert_close(r.cpu(), exp, rtol=0, atol=0)
    assert len({r.data_ptr() for r in outs}) == len(outs)


def test_other_layouts_take_the_lowering():
    x = torch.randn(4, 6)
    a = x.to("trn")
    cases = ((a, a.t().contiguous().t(), x, x),  # same shape, one operand transposed in memory
             (a[:, :3], a[:, 3:], x[:, :3], x[:, 3:]),  # non-contiguous views
             (a, a[0], x, x[0]))  # broadcasting
    for lhs, rhs, cl, cr in cases:
        torch.testing.assert_close((lhs + rhs).cpu(), cl + cr)
    # a 0-dim CPU scalar, an int tensor, a Python scalar: all through the lowering, all right
    torch.testing.assert_close((a + torch.tensor(2.0)).cpu(), x + 2)
    i = torch.arange(6, dtype=torch.int32)
    assert torch.equal((i.to("trn") + i.to("trn")).cpu(), i + i)
    torch.testing.assert_close((a * 3).cpu(), x * 3)


def test_pooled_outputs_are_not_reused_while_in_use():
    x, y = torch.randn(32), torch.randn(32)
    a, b = x.to("trn"), y.to("trn")
    a + b
    a + b
    keep = []
    view = (a + b)[5:9]  # only a view keeps the storage
    held = mem.cpu_view(a + b)  # a CPU view keeps the memory block
    arr = mem.np_view(a * b)  # so does a numpy view
    for k in range(10):
        keep.append((a + b) * float(k))  # intermediates are recycled, results kept
    for k, r in enumerate(keep):
        torch.testing.assert_close(r.cpu(), (x + y) * float(k))
    torch.testing.assert_close(view.cpu(), (x + y)[5:9])
    torch.testing.assert_close(held, x + y)
    np.testing.assert_allclose(arr, (x * y).numpy())
    # in place on a pooled output, then more calls: the modified tensor keeps its values
    c = a + b
    c.add_(1)
    d = a + b
    torch.testing.assert_close(c.cpu(), x + y + 1)
    torch.testing.assert_close(d.cpu(), x + y)


def test_memory_accounting_and_empty_cache():
    x, y = torch.randn(256), torch.randn(256)
    a, b = x.to("trn"), y.to("trn")
    a + b
    base = torch.trn.memory_allocated()
    c = a + b
    assert torch.trn.memory_allocated() == base + c.numel() * 4
    del c
    assert torch.trn.memory_allocated() == base  # an idle pooled output is not "allocated"
    assert torch.trn.memory_stats()["allocated_bytes.all.current"] == base
    assert fastlane.idle_bytes() > 0
    torch.trn.empty_cache()
    assert fastlane.idle_bytes() == 0 and torch.trn.memory_allocated() == base
    torch.testing.assert_close((a + b).cpu(), x + y)


def test_autograd_through_the_lane():
    x = torch.randn(8, 5, requires_grad=True)
    y = torch.randn(8, 5, requires_grad=True)
    a = x.detach().to("trn").requires_grad_()
    b = y.detach().to("trn").requires_grad_()
    for _ in range(3):
        loss = ((a * b) + a - b).sum()
    loss.backward()
    ((x * y) + x - y).sum().backward()
    torch.testing.assert_close(a.grad.cpu(), x.grad)
    torch.testing.assert_close(b.grad.cpu(), y.grad)


def test_inference_mode_results_are_inference_tensors():
    a, b = torch.randn(16).to("trn"), torch.randn(16).to("trn")
    a + b
    with torch.inference_mode():
        r = a + b
        assert r.is_inference()
    assert not (a + b).is_inference()


def test_lane_steps_aside_without_plans_and_on_other_threads():
    x, y = torch.randn(16), torch.randn(16)
    a, b = x.to("trn"), y.to("trn")
    a - b
    lane = _lane("sub", torch.float32, (16,))
    assert lane(a, b) is not None
    PLANS.enabled = False
    try:
        assert lane(a, b) is None
        torch.testing.assert_close((a - b).cpu(), x - y)
    finally:
        PLANS.enabled = True
    got = []
    th = threading.Thread(target=lambda: got.append((lane(a, b), (a - b).cpu())))
    th.start()
    th.join()
    assert got[0][0] is None and torch.equal(got[0][1], x - y)


def test_lane_steps_aside_when_the_environment_changes(monkeypatch):
    x, y = torch.randn(16), torch.randn(16)
    a, b = x.to("trn"), y.to("trn")
    a * b
    lane = _lane("mul", torch.float32, (16,))
    monkeypatch.setenv("TRN_INTERPRET", "1")
    assert lane(a, b) is None
    torch.testing.assert_close((a * b).cpu(), x * y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_lane_result_values_are_the_lowerings(dtype):
    """Same kernel, same bits: compare a lane hit with the lowering run directly."""
    x, y = torch.randn(3, 50).to(dtype), torch.randn(3, 50).to(dtype)
    a, b = x.to("trn"), y.to("trn")
    a / b
    hit = a / b
    direct = REGISTRY["aten::div.Tensor"].fn(a, b)
    assert torch.equal(hit.cpu(), direct.cpu())


def test_an_operand_passed_twice_makes_no_lane():
    """x * x first: the launch has the same tensor in two roles; a later x * y must not reuse it as x * x."""
    x, y = torch.randn(2, 7), torch.randn(2, 7)
    a, b = x.to("trn"), y.to("trn")
    for _ in range(2):
        torch.testing.assert_close((a * a).cpu(), x * x)
    for _ in range(3):
        torch.testing.assert_close((a * b).cpu(), x * y)
        torch.testing.assert_close((b * a).cpu(), y * x)
        torch.testing.assert_close((a * a).cpu(), x * x)


def test_negative_bit_views_take_the_lowering():
    x, y = torch.randn(9), torch.randn(9)
    a, b = x.to("trn"), y.to("trn")
    a - b
    a - b
    nb = torch._neg_view(b)
    assert nb.is_neg()
    torch.testing.assert_close((a - nb).cpu(), x + y)


def test_small_outputs_are_pooled_and_never_shared_while_alive():
    """Lowerings' small outputs come from per-thread pools: a template is lent again only once nothing holds it
    (a live result, a view of it or a CPU view keep it out), pools are dropped past SMALL_KEYS, inference mode
    allocates plainly, and idle templates are not counted as allocated."""
    from stdlib_kernels import _util as U
    from trnlang.device import fastlane as FL

    a = U.new_output((3, 5), torch.float32)
    pa = a.data_ptr()
    b = U.new_output((3, 5), torch.float32)
    assert b.data_ptr() != pa  # a is alive: another template
    v = a[1:]
    del a
    c = U.new_output((3, 5), torch.float32)
    assert c.data_ptr() != pa  # a view still holds a's memory
    del v
    d = U.new_output((3, 5), torch.float32)
    assert d.data_ptr() == pa  # nothing holds it now: lent again
    d.fill_(2.0)
    assert torch.equal(b.fill_(1.0).cpu(), torch.ones(3, 5)) and torch.equal(d.cpu(), torch.full((3, 5), 2.0))
    del b, c, d
    before = torch.trn.memory_allocated()
    e = U.new_output((3, 5), torch.float32)
    assert torch.trn.memory_allocated() >= before  # a lent template counts again while in use
    del e
    for n in range(FL.SMALL_KEYS + 8):  # more shapes than the per-thread cap: old pools dropped
        U.new_output((n + 1,), torch.int32)
    assert len(FL._tls.small) == FL.SMALL_KEYS
    with torch.inference_mode():
        f = U.new_output((3, 5), torch.float32)
    assert f.is_inference()


def _views(x):
    """(name, view builder) pairs: the layouts of model code (transposes, halves, broadcasts, permutes)."""
    return [("t", lambda v: v.t()), ("half", lambda v: v[:, 3:]), ("step", lambda v: v[:, ::2]),
            ("col", lambda v: v[:, :1].expand(v.shape[0], 4)), ("perm", lambda v: v.unsqueeze(0).permute(2, 0, 1))]


@pytest.mark.parametrize("op", ["add", "mul", "sub", "div"])
@pytest.mark.parametrize("which", ["t", "half", "step", "col", "perm"])
def test_strided_lanes_match_cpu(op, which):
    """Views get lanes keyed on their strides: repeated calls (new values each time, several results alive) equal
    the CPU's values and output strides; a tensor-scalar call on a view too (``-x[..., 32:]`` is ``x * -1``)."""
    g = torch.Generator().manual_seed(7)
    view = dict(_views(None))[which]
    OPS[op](torch.ones(2, device="trn"), torch.ones(2, device="trn"))  # the stdlib registers on first use
    fast = REGISTRY[ATEN[op]].fast
    before = len(fast.lanes)
    outs = []
    for step in range(4):
        x, y = torch.randn(6, 8, generator=g), torch.randn(6, 8, generator=g) + 3.0
        a, b = x.to("trn"), y.to("trn")
        lhs, rhs, cl, cr = view(a), b[:, :4] if which == "col" else view(b), view(x), y[:, :4] if which == "col" \
            else view(y)
        got, exp = OPS[op](lhs, rhs), OPS[op](cl, cr)
        assert got.stride() == exp.stride() and got.shape == exp.shape
        torch.testing.assert_close(got.cpu(), exp, rtol=0, atol=0)
        s_got, s_exp = OPS[op](lhs, 2.5), OPS[op](cl, 2.5)
        assert s_got.stride() == s_exp.stride()
        torch.testing.assert_close(s_got.cpu(), s_exp, rtol=0, atol=0)
        outs.append((got, exp))
    assert len(fast.lanes) > before  # the views' layout got a lane
    for got, exp in outs:  # earlier results were not overwritten by later hits
        torch.testing.assert_close(got.cpu(), exp, rtol=0, atol=0)


def test_inplace_on_views_takes_the_lowering():
    """In-place calls keep contiguous-only lanes (their overlap check reads contiguous spans): a view written in
    place, also one overlapping its operand, behaves as on the CPU."""
    x = torch.randn(6, 8)
    for _ in range(3):
        a, c = x.to("trn"), x.clone()
        a[:, 2:].add_(a[:, :6])
        c[:, 2:].add_(c[:, :6])
        torch.testing.assert_close(a.cpu(), c)
        a.t().mul_(0.5)
        c.t().mul_(0.5)
        torch.testing.assert_close(a.cpu(), c)
    assert all(len(k) != 5 for k in REGISTRY[ATEN["add"]].fast.inplace.lanes)


def test_parameters_get_lanes():
    """A module's weights are Parameters: ``weight * x`` (RMSNorm), ``p * 0.9`` and ``p.mul_(0.9)`` take lanes too,
    with the CPU's values, a plain tensor result (the in-place one returns the Parameter itself)."""
    w = torch.nn.Parameter(torch.randn(64))
    wt = torch.nn.Parameter(w.detach().to("trn"))
    x = torch.randn(3, 64)
    xt = x.to("trn")
    for _ in range(4):
        with torch.no_grad():
            got, exp = wt * xt, w * x
            torch.testing.assert_close(got.cpu(), exp, rtol=0, atol=0)
            assert type(got) is torch.Tensor
            torch.testing.assert_close((wt * 0.5).cpu(), w * 0.5, rtol=0, atol=0)
    assert isinstance(REGISTRY[ATEN["mul"]].fast.lanes.get((torch.float32, torch.Size([64]), torch.Size([3, 64]))),
                      fastlane.Lane)
    with torch.no_grad():
        for _ in range(3):
            r = wt.mul_(0.9)
            w.mul_(0.9)
            assert r is wt
    torch.testing.assert_close(wt.detach().cpu(), w.detach(), rtol=0, atol=0)
    loss = (wt * xt).sum()  # autograd through a lane still reaches the Parameter
    loss.backward()
    torch.testing.assert_close(wt.grad.cpu(), x.sum(0))
