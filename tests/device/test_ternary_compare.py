"""Ternary ops (stdlib_kernels/elementwise/ternary.py) and comparisons / logical / bitwise ops
(stdlib_kernels/elementwise/compare.py): trn vs CPU, forward and backward, no fallbacks."""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from stdlib_kernels.elementwise import ternary as T
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                           HealthCheck.function_scoped_fixture])


def _native(fn, *args):
    trnlang.reset_fallback_stats()
    r = fn(*args)
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    return r


def _dev(xs):
    return [x.to("trn") if isinstance(x, torch.Tensor) else x for x in xs]


def _same(fn, *args, tol=1e-5):
    got = _native(fn, *_dev(args))
    exp = fn(*args)
    assert got.dtype == exp.dtype and got.shape == exp.shape, (got.dtype, exp.dtype, got.shape, exp.shape)
    assert_same(got, exp, rtol=tol, atol=tol)


#: name -> function of (a, b, c) float tensors (c in (0, 1)).
TERNARY = {
    "where": lambda a, b, c: torch.where(a > b, a, b),
    "where_scalar": lambda a, b, c: torch.where(c > 0.5, a, -1.5),
    "clamp": lambda a, b, c: torch.clamp(a, -0.5, 0.75),
    "clamp_min_only": lambda a, b, c: torch.clamp(a, min=0.1),
    "clamp_tensor": lambda a, b, c: torch.clamp(a, b - 1, b + 1),
    "clamp_tensor_max": lambda a, b, c: torch.clamp(a, max=b),
    "lerp": lambda a, b, c: torch.lerp(a, b, 0.3),
    "lerp_big_weight": lambda a, b, c: torch.lerp(a, b, 0.8),
    "lerp_tensor": lambda a, b, c: torch.lerp(a, b, c),
    "addcmul": lambda a, b, c: torch.addcmul(a, b, c, value=-0.5),
    "addcdiv": lambda a, b, c: torch.addcdiv(a, b, c + 0.5, value=0.25),
}
COMPARE = {
    "eq": lambda a, b: torch.eq(a, b.round()), "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt,
    "ge": torch.ge, "gt_scalar": lambda a, b: a > 0.25, "eq_scalar": lambda a, b: a.round() == 1,
    "logical_and": lambda a, b: torch.logical_and(a > 0, b), "logical_or": torch.logical_or,
    "logical_xor": lambda a, b: torch.logical_xor(a > 0, b > 0), "logical_not": lambda a, b: torch.logical_not(a > 0),
    "bool_ops": lambda a, b: ((a > 0) & (b < 1)) | ~(a > b) ^ (b > 0),
}


def _inputs(sa, sb, sc, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return ((torch.randn(sa, generator=g) * 2).to(dtype), (torch.randn(sb, generator=g) * 2).to(dtype),
            torch.rand(sc, generator=g).to(dtype))


SHAPES = [((0,), (0,), (0,)), ((1,), (1,), (1,)), ((130, 33), (33,), (130, 1)), ((3, 1, 5), (4, 1), (5,)),
          ((5000,), (5000,), (5000,)), ((2, 3, 4, 5, 6), (4, 1, 6), (1,))]


@pytest.mark.parametrize("name", sorted(TERNARY))
def test_ternary_fixed_shapes(name):
    for sa, sb, sc in SHAPES:
        _same(TERNARY[name], *_inputs(sa, sb, sc))


@pytest.mark.parametrize("name", ["where", "clamp_tensor", "lerp_tensor", "addcdiv"])
@_SETTINGS
@given(shape=st.lists(st.integers(1, 300), min_size=1, max_size=3).map(tuple), bcast=st.booleans())
def test_ternary_random_shapes(name, shape, bcast):
    _same(TERNARY[name], *_inputs(shape, shape[-1:] if bcast else shape, shape))


@pytest.mark.parametrize("name", sorted(TERNARY))
def test_ternary_bf16(name):
    _same(TERNARY[name], *_inputs((130, 33), (33,), (130, 33), torch.bfloat16), tol=1e-2)


def test_ternary_non_contiguous():
    a, b, c = _inputs((40, 70), (70, 40), (40, 70))
    for name in ("where", "clamp_tensor", "lerp_tensor", "addcmul"):
        fn = TERNARY[name]
        got = _native(lambda: fn(a.to("trn")[:, ::2], b.to("trn").t()[:, 1::2], c.to("trn")[:, ::2]))
        assert_same(got, fn(a[:, ::2], b.t()[:, 1::2], c[:, ::2]))


def test_ternary_special_values_and_dtypes():
    v = torch.tensor([0.0, -0.0, 0.4, -2.0, math.inf, -math.inf, math.nan, 3.0])
    _same(lambda x: torch.clamp(x, -1, 1), v)
    _same(lambda x, lo: torch.clamp(x, lo, lo + 1), v, v.flip(0))
    _same(lambda x: torch.clamp(x, 2, 1), v)  # min > max gives max, as torch
    i = torch.randint(-50, 50, (64, 9), dtype=torch.int32)
    i64 = torch.randint(-50, 50, (64, 9))
    _same(lambda x: torch.clamp(x, -5, 7), i)
    _same(lambda x: torch.clamp(x, max=7), i64)
    _same(lambda x: torch.clamp(x, -2.5, 3), i)  # int tensor with float bounds: a float result
    _same(lambda x, y: torch.where(x > 0, x, y), i64, i)
    _same(lambda x: torch.where(x > 0, x, 0), i64)
    _same(lambda x, y: torch.where(x > 0, y, 1.5), i, torch.randn(64, 9).bfloat16())
    _same(lambda x, y, z: torch.addcmul(x, y, z, value=3), i, i, i)
    x = torch.randn(20, 30)
    t = x.to("trn")
    _native(lambda: t.clamp_(-0.3, 0.3).lerp_(t * 2, 0.25).addcmul_(t, t, value=2).addcdiv_(t, t.abs() + 1))
    assert_same(t, x.clamp_(-0.3, 0.3).lerp_(x * 2, 0.25).addcmul_(x, x, value=2).addcdiv_(x, x.abs() + 1))
    out = torch.empty(20, 30, device="trn")
    _native(lambda: torch.where(t > 0, t, torch.zeros((), device="trn"), out=out))
    assert_same(out, torch.where(x > 0, x, torch.zeros(())))


def test_ternary_errors_are_torchs():
    t = torch.ones(3, device="trn")
    with pytest.raises(RuntimeError, match="At least one of 'min' or 'max' must not be None"):
        torch.clamp(t)
    with pytest.raises(RuntimeError, match="size of tensor"):
        torch.where(torch.ones(3, dtype=torch.bool, device="trn"), t, torch.ones(4, device="trn"))
    with pytest.raises(RuntimeError, match="expected dtype"):
        torch.lerp(t, t.bfloat16(), 0.5)


@pytest.mark.parametrize("name", ["where", "clamp", "clamp_tensor", "lerp", "lerp_tensor", "addcmul", "addcdiv"])
def test_ternary_backward(name):
    fn = TERNARY[name]
    cpu = [x.requires_grad_() for x in _inputs((37, 20), (20,), (37, 1))]
    dev = [x.detach().to("trn").requires_grad_() for x in cpu]
    g = torch.randn(37, 20)
    fn(*cpu).backward(g)
    trnlang.reset_fallback_stats()
    fn(*dev).backward(g.to("trn"))
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    for c, d in zip(cpu, dev):
        if c.grad is None:
            assert d.grad is None
        else:
            assert_same(d.grad, c.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", sorted(COMPARE))
def test_compare_shapes(name):
    for sa, sb, _ in SHAPES:
        a, b, _ = _inputs(sa, sb, (1,))
        _same(COMPARE[name], a, b)
    a, b, _ = _inputs((40, 70), (70, 40), (1,))
    _same(lambda x, y: COMPARE[name](x[:, 1::2], y.t()[:, ::2]), a, b)


@pytest.mark.parametrize("name", ["lt", "eq", "logical_xor"])
@_SETTINGS
@given(shape=st.lists(st.integers(1, 300), min_size=1, max_size=3).map(tuple))
def test_compare_random_shapes(name, shape):
    a, b, _ = _inputs(shape, shape[-1:], (1,))
    _same(COMPARE[name], a, b)


def test_compare_dtypes_and_overloads():
    g = torch.Generator().manual_seed(3)
    f = torch.randn(50, 8, generator=g)
    h = f.bfloat16()
    i = torch.randint(-5, 5, (50, 8), dtype=torch.int32, generator=g)
    i64 = torch.randint(-5, 5, (8,), generator=g)
    u = torch.randint(0, 255, (50, 8), dtype=torch.uint8, generator=g)
    m = f > 0
    for fn, args in [(torch.lt, (h, f)), (torch.eq, (i, i64)), (torch.ge, (i, 0.5)), (torch.ne, (u, 7)),
                     (torch.eq, (m, m.flip(0))), (torch.le, (i64, 2)), (torch.gt, (h, torch.tensor(0.25))),
                     (torch.logical_and, (i, f)), (torch.logical_or, (u, m)), (torch.logical_not, (i,)),
                     (torch.bitwise_and, (i, 6)), (torch.bitwise_or, (i, i64)), (torch.bitwise_xor, (m, m.flip(0))),
                     (torch.bitwise_and, (i64, i64)), (torch.bitwise_or, (u, 3)),
                     (lambda x: x == x, (torch.tensor([1.0, math.nan, math.inf]),))]:
        _same(fn, *args)
    x = f.to("trn")
    out = torch.empty(50, 8, dtype=torch.float32, device="trn")
    _native(lambda: torch.gt(x, 0, out=out))  # a bool result cast into a float out=
    assert_same(out, torch.gt(f, 0, out=torch.empty(50, 8)))
    y = i.to("trn")
    _native(lambda: y.bitwise_and_(3))
    assert_same(y, i & 3)
    with pytest.raises(RuntimeError, match="bitwise_and"):
        torch.bitwise_and(x, x)


def test_mask_arithmetic_and_backward_through_masks():
    a = torch.randn(64, 33)
    ca = a.clone().requires_grad_()
    ta = a.to("trn").requires_grad_()
    fn = lambda x: (x * (x > 0) + torch.where(x.abs() < 0.5, x * x, 0.0) - torch.clamp(x, -1, 1).pow(3)).sum()  # noqa
    fn(ca).backward()
    trnlang.reset_fallback_stats()
    fn(ta).backward()
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    assert_same(ta.grad, ca.grad, rtol=1e-4, atol=1e-5)


def test_profile_is_sane():
    a, b, c = _inputs((256, 1000), (256, 1000), (256, 1000))
    out = torch.empty(256, 1000, device="trn")
    prof = T.ternary.profile(a.to("trn"), b.to("trn"), c.to("trn"), None, out, "lerp", (False, False, False),
                             ("f32", "f32", "f32"))
    assert prof.time_us > 0 and prof.cycles > 0
    assert prof.engines and all(0 <= e.utilization <= 1 for e in prof.engines.values()), prof.engines
    assert 0 < prof.mbu <= 1 and prof.dma_bytes >= 4 * 4 * 256 * 1000
    assert_same(out, torch.lerp(a, b, c))


def test_bool_clamp_with_one_tensor_bound(monkeypatch):
    """clamp of bools with one tensor bound (``self | min`` / ``self & max``, as the CPU; _refs.clamp_min/max use it),
    in place too; both bounds raise as on the CPU."""
    import torch._refs as refs

    monkeypatch.setenv("TRN_FALLBACK", "error")
    x = torch.tensor([True, False, True, False])
    lo, hi = torch.tensor([False, False, True, True]), torch.tensor([True, False, False, True])
    for args in ((lo, None), (None, hi), (lo[:1], None)):
        got = torch.clamp(x.to("trn"), *[a.to("trn") if a is not None else None for a in args]).cpu()
        assert torch.equal(got, torch.clamp(x, *args))
    assert torch.equal(refs.clamp_min(x.to("trn"), lo.to("trn")).cpu(), refs.clamp_min(x, lo))
    assert torch.equal(refs.clamp_max(x.to("trn"), hi.to("trn")).cpu(), refs.clamp_max(x, hi))
    y = x.to("trn")
    y.clamp_(min=lo.to("trn"))
    assert torch.equal(y.cpu(), x.clone().clamp_(min=lo))
    with pytest.raises(NotImplementedError, match="Bool"):
        torch.clamp(x.to("trn"), lo.to("trn"), hi.to("trn"))
