"""segment_reduce (stdlib_kernels/reduction/segment.py) and renorm's gradient (stdlib_kernels/nn/renorm.py) on trn vs
CPU.

segment_reduce forward and backward for sum/mean/max/min/prod with lengths or offsets (int64 and int32), any
axis, ``initial``, empty segments, NaN/zero/tie elements, fp32/bf16/fp16, non-contiguous data, torch's errors for
bad input; renorm forward/backward (p = 0.5, 1, 1.5, 2, 3, inf), in-place and double backward. No CPU fallback.
"""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from stdlib_kernels.reduction import segment as SG
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])
_TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (1e-3, 1e-3)}
REDUCES = ("sum", "mean", "max", "min", "prod")


def _to_trn(kw):
    return {k: (v.to("trn") if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}


def _offsets(lengths, axis):
    zs = list(lengths.shape)
    zs[axis] = 1
    return torch.cat((lengths.new_zeros(zs), lengths), axis).cumsum(axis)


def _check_segment(x, reduce, grad=True, **kw):
    """Forward (and backward) of segment_reduce on trn vs CPU, with no fallback."""
    rtol, atol = _TOL[x.dtype]
    xc = x.clone().requires_grad_(grad)
    exp = torch.segment_reduce(xc, reduce, **kw)
    xt = x.to("trn").requires_grad_(grad)
    trnlang.reset_fallback_stats()
    got = torch.segment_reduce(xt, reduce, **_to_trn(kw))
    assert_same(got.detach(), exp.detach(), rtol=rtol, atol=atol)
    if grad and exp.numel():
        g = torch.randn(exp.shape).to(x.dtype)
        exp.backward(g)
        got.backward(g.to("trn"))
        assert_same(xt.grad, xc.grad, rtol=rtol, atol=atol)
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()


# the OpInfo's cases: (shape, axis, lengths, unsafe)
_S, _M = 5, 10
CASES = [((_S,), 0, [0, 1, 2, 2], False), ((_S,), 0, [2, 0, 3, 0], True), ((_S, _S), 0, [0, 1, 2, 2], False),
         ((_M, _S, _S), 0, [1, 2, 0, 6, 0], True),
         ((_S, _S), 1, [[2, 0, 3, 0], [0, 1, 2, 2], [3, 0, 2, 0], [1, 1, 1, 2], [0, 1, 2, 2]], False),
         ((_S, _S, _S), 1, [[2, 0, 3, 0], [0, 1, 2, 2], [3, 0, 2, 0], [1, 1, 1, 2], [0, 1, 2, 2]], False)]


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("mode", ["lengths", "offsets"])
def test_segment_opinfo_cases(reduce, mode):
    torch.manual_seed(0)
    for k, (shape, axis, lengths, unsafe) in enumerate(CASES):
        lt = torch.tensor(lengths)
        kw = {"axis": axis, "unsafe": unsafe, "initial": (None, 1, 2)[k % 3]}
        kw[mode] = lt if mode == "lengths" else _offsets(lt, axis)
        _check_segment(torch.randn(shape), reduce, **kw)


@_SETTINGS
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3).map(tuple), data=st.data())
def test_segment_random(shape, data):
    axis = data.draw(st.integers(0, len(shape) - 1))
    a = shape[axis]
    n_seg = data.draw(st.integers(1, 6))
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 1000)))
    # random cut points give lengths with empty and size-1 segments, summing to the axis size
    cuts = torch.sort(torch.randint(0, a + 1, (*shape[:axis], n_seg - 1), generator=g), -1).values
    ends = torch.cat((cuts, torch.full((*shape[:axis], 1), a)), -1)
    lengths = torch.diff(ends, dim=-1, prepend=torch.zeros((*shape[:axis], 1), dtype=torch.int64))
    dtype = data.draw(st.sampled_from([torch.float32, torch.bfloat16]))
    reduce = data.draw(st.sampled_from(REDUCES))
    initial = data.draw(st.sampled_from([None, 0.5, -1.0]))
    x = torch.randn(shape, generator=g).to(dtype)
    if data.draw(st.booleans()):
        _check_segment(x, reduce, lengths=lengths, axis=axis, initial=initial)
    else:
        _check_segment(x, reduce, offsets=_offsets(lengths, axis).int(), axis=axis, initial=initial, unsafe=True)


def test_segment_nan_zero_ties_and_layouts():
    x = torch.randn(5, 8)
    x[0, 1] = math.nan
    x[1, 2] = x[1, 3] = 0.0              # two zeros in one segment
    x[2, 0] = 0.0
    x[3, 3] = math.nan
    x[3, 4] = 0.0                        # a zero and a NaN in one segment
    x[4, :] = 2.0                        # ties
    lengths = torch.tensor([[2, 6], [4, 4], [8, 0], [6, 2], [3, 5]])
    for reduce in REDUCES:
        _check_segment(x, reduce, lengths=lengths, axis=1)
        _check_segment(x, reduce, lengths=lengths, axis=1, initial=3.0)
    t = torch.randint(0, 3, (300, 600)).float()  # several row tiles and column chunks, many ties
    for reduce in ("max", "min", "sum"):
        _check_segment(t, reduce, lengths=torch.tensor([1, 100, 0, 150, 49]))
    long = torch.randn(2, 5000) * 0.01 + 1.0     # the axis spans several chunks of the plan/id scans
    _check_segment(long, "prod", lengths=torch.tensor([[1000, 0, 3000, 1000]] * 2), axis=1)
    many = torch.randint(0, 3, (3000,))          # many segments (several chunks of the plan kernel)
    _check_segment(torch.randn(int(many.sum()), 3), "mean", offsets=_offsets(many, 0))
    _check_segment(torch.randn(8, 6).t(), "max", lengths=torch.tensor([2, 2, 2, 0]), initial=0.5)  # non-contiguous
    _check_segment(torch.randn(6, 4).half(), "mean", lengths=torch.tensor([1, 5], dtype=torch.int32))
    _check_segment(torch.randn(3, 4), "sum", lengths=torch.tensor([[1, 3]] * 3), axis=-1)
    # empty data, empty inner dims, no segments
    _check_segment(torch.randn(0), "mean", lengths=torch.tensor([0, 0]))
    _check_segment(torch.randn(3, 0), "max", lengths=torch.zeros(3, 1, dtype=torch.int64), axis=1, initial=2)
    _check_segment(torch.randn(5, 0), "sum", lengths=torch.tensor([2, 3]))
    _check_segment(torch.randn(5), "sum", offsets=torch.tensor([0]))
    _check_segment(torch.randn(6), "prod", offsets=torch.tensor([1, 3, 3, 5]))       # offsets not from 0
    _check_segment(torch.randn(5), "max", lengths=torch.tensor([2, 1]), unsafe=True)  # lengths short of A


def _errors(x, reduce, **kw):
    with pytest.raises(RuntimeError) as cpu:
        torch.segment_reduce(x, reduce, **kw)
    with pytest.raises(RuntimeError) as trn:
        torch.segment_reduce(x.to("trn"), reduce, **_to_trn(kw))
    assert str(trn.value) == str(cpu.value)


def test_segment_errors():
    x = torch.randn(5)
    _errors(x, "sum", lengths=torch.tensor([3, -1, 3]))
    _errors(x, "sum", lengths=torch.tensor([3, 1]))
    _errors(x, "sum", offsets=torch.tensor([0, 3, 2, 5]))
    _errors(x, "foo", lengths=torch.tensor([2, 3]))
    _errors(x, "sum")
    _errors(torch.randn(5, 5), "sum", lengths=torch.tensor([2, 3]), axis=1)
    # segments past the data: torch's CPU kernel would read outside it; trn raises
    for kw in ({"lengths": torch.tensor([3, 4]), "unsafe": True}, {"offsets": torch.tensor([0, 3, 7])},
               {"lengths": torch.tensor([2**32 + 2, 3]), "unsafe": True}):
        with pytest.raises(RuntimeError, match="within"):
            torch.segment_reduce(x.to("trn"), "sum", **_to_trn(kw))


def test_segment_profile():
    x = torch.randn(1000, 64).to("trn")
    tgt = (torch.arange(1000, dtype=torch.int32) // 10).view(1000, 1).to("trn")
    acc = torch.zeros(101, 64, device="trn")
    prof = SG.seg_reduce.profile(x, tgt, acc, "add")
    assert_same(acc[:100], x.cpu().view(100, 10, 64).sum(1), rtol=1e-4, atol=1e-4)
    assert prof.time_us > 0
    for name, e in prof.engines.items():
        assert 0 <= e.utilization <= 1.0 + 1e-9, (name, e)
    assert 0 < prof.mbu <= 1.0


# ------------------------------------------------------------------------------------------ renorm

RENORM = [(2, 1, 0.5), (2, -1, 0.5), (1, 2, 3.0), (math.inf, 2, 0.5), (0.5, 0, 1.0), (1.5, 1, 0.7), (3, 0, 0.2)]


def _check_renorm(x, p, dim, maxnorm):
    rtol, atol = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1.6e-2, 1e-2)}[x.dtype]
    g = torch.randn(x.shape).to(x.dtype)
    xc = x.clone().requires_grad_()
    exp = torch.renorm(xc, p, dim, maxnorm)
    exp.backward(g)
    xt = x.to("trn").requires_grad_()
    trnlang.reset_fallback_stats()
    got = torch.renorm(xt, p, dim, maxnorm)
    got.backward(g.to("trn"))
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    assert_same(got.detach(), exp.detach(), rtol=rtol, atol=atol)
    assert_same(xt.grad, xc.grad, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_renorm_grad(dtype):
    torch.manual_seed(0)
    for p, dim, maxnorm in RENORM:
        _check_renorm(torch.randn(5, 5, 5).to(dtype), p, dim, maxnorm)


@_SETTINGS
@given(shape=st.lists(st.integers(1, 7), min_size=2, max_size=3).map(tuple), data=st.data())
def test_renorm_random(shape, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    p = data.draw(st.sampled_from([1, 2, 3, math.inf]))
    x = torch.randn(shape) * data.draw(st.sampled_from([0.1, 1.0, 3.0]))
    _check_renorm(x, p, dim, 1.0)


def test_renorm_inplace_double_backward_and_errors():
    x, g = torch.randn(4, 6), torch.randn(4, 6)
    a = x.clone().requires_grad_()
    b = a * 1
    b.renorm_(2, 0, 0.5)
    b.backward(g)
    at = x.to("trn").requires_grad_()
    trnlang.reset_fallback_stats()
    bt = at * 1
    bt.renorm_(2, 0, 0.5)
    bt.backward(g.to("trn"))
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    assert_same(bt.detach(), b.detach())
    assert_same(at.grad, a.grad)
    # double backward (the fp32 backward is made of differentiable trn ops)
    a = x.clone().requires_grad_()
    ga = torch.autograd.grad(torch.renorm(a, 2, 1, 0.5).pow(2).sum(), a, create_graph=True)[0]
    at = x.to("trn").requires_grad_()
    gt = torch.autograd.grad(torch.renorm(at, 2, 1, 0.5).pow(2).sum(), at, create_graph=True)[0]
    assert_same(torch.autograd.grad(gt.sum(), at)[0], torch.autograd.grad(ga.sum(), a)[0])
    with pytest.raises(RuntimeError, match="leaf Variable"):
        torch.randn(3, 3, device="trn", requires_grad=True).renorm_(2, 0, 1.0)
    for args in ((0, 0, 1.0), (2, 0, -1.0)):
        with pytest.raises(RuntimeError, match="renorm"):
            torch.renorm(torch.randn(3, 3, device="trn", requires_grad=True), *args)
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.renorm(torch.randn(5, device="trn", requires_grad=True), 2, 0, 1.0)
