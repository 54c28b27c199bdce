"""complex64 movement, scans, logical ops, equal and angle natively on (real, imaginary) planes: the CPU's values,
shapes and dtypes, noncontiguous inputs included."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang

_SHAPES = [(), (0,), (1,), (5,), (3, 7), (2, 3, 4)]


def _z(shape, seed, zeros=False):
    g = torch.Generator().manual_seed(seed)
    z = torch.complex(torch.randn(shape, generator=g), torch.randn(shape, generator=g))
    if zeros and z.numel():
        z.view(-1)[::3] = 0
    return z


def _native(fn):
    trnlang.reset_fallback_stats()
    r = fn()
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    return r


def _same(got, want, exact=True):
    assert got.device.type == "trn" and got.dtype == want.dtype and got.shape == want.shape
    if exact:
        assert torch.equal(got.cpu(), want)
    else:
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(shape=st.sampled_from(_SHAPES), seed=st.integers(0, 999), data=st.data())
def test_roll_and_cumsum(shape, seed, data):
    z = _z(shape, seed)
    zt = z.to("trn")
    if len(shape) >= 2 and data.draw(st.booleans()):  # a noncontiguous input
        z, zt = z.transpose(0, 1), zt.transpose(0, 1)
    shift = data.draw(st.integers(-9, 9))
    _same(_native(lambda: zt.roll(shift)), z.roll(shift))
    if z.dim():
        d = data.draw(st.integers(-z.dim(), z.dim() - 1))
        _same(_native(lambda: zt.roll(shift, d)), z.roll(shift, d))
        _same(_native(lambda: zt.cumsum(d)), z.cumsum(d), exact=False)
        _same(_native(lambda: (zt * 0.6).cumprod(d)), (z * 0.6).cumprod(d), exact=False)
    else:
        _same(_native(lambda: zt.cumsum(0)), z.cumsum(0))
        _same(_native(lambda: zt.cumprod(0)), z.cumprod(0))


@settings(max_examples=20, deadline=None, derandomize=True)
@given(shape=st.sampled_from(_SHAPES[1:]), seed=st.integers(0, 999),
       op=st.sampled_from(["logical_and", "logical_or", "logical_xor"]),
       other=st.sampled_from(["complex", "float", "bool"]))
def test_logical_ops_of_complex_operands(shape, seed, op, other):
    z = _z(shape, seed, zeros=True)
    o = {"complex": _z(shape, seed + 1, zeros=True), "float": torch.randn(shape).round(),
         "bool": torch.rand(shape) > 0.5}[other]
    ot = o.to("trn") if isinstance(o, torch.Tensor) else o
    _same(_native(lambda: getattr(torch, op)(z.to("trn"), ot)), getattr(torch, op)(z, o))
    if isinstance(o, torch.Tensor):
        _same(_native(lambda: getattr(torch, op)(ot, z.to("trn"))), getattr(torch, op)(o, z))


@settings(max_examples=15, deadline=None, derandomize=True)
@given(shape=st.sampled_from(_SHAPES), seed=st.integers(0, 999))
def test_equal_and_angle(shape, seed):
    z = _z(shape, seed, zeros=True)
    zt = z.to("trn")
    assert _native(lambda: torch.equal(zt, zt.clone())) is True
    if z.numel():
        w = z.clone()
        w.view(-1)[-1] += 1j
        assert _native(lambda: torch.equal(zt, w.to("trn"))) is False
    assert _native(lambda: torch.equal(zt, zt.reshape(-1))) is (z.dim() == 1)
    _same(_native(lambda: torch.angle(zt)), torch.angle(z), exact=False)


def test_complex32_results_compute_in_complex64():
    """ComplexHalf results (a complex32 tensor, or float16 with a complex number / 0-dim tensor): add, sub and mul
    natively, rounded once per plane; eq, isnan, abs of complex32; CPU dtypes throughout; division declines as the
    CPU has none."""
    g = torch.Generator().manual_seed(0)
    h = torch.randn(6, generator=g).half()
    c = torch.complex(torch.randn(6, generator=g), torch.randn(6, generator=g)).to(torch.complex32)
    s64 = torch.tensor(1.5 - 2j)
    cases = [(c, c), (c, h), (h, c), (h, s64), (s64, h), (c, 2.2), (c, 1 - 1j), (c, 5)]
    for x, y in cases:
        xt = x.to("trn") if isinstance(x, torch.Tensor) else x
        yt = y.to("trn") if isinstance(y, torch.Tensor) else y
        for f in (torch.add, torch.sub, torch.mul):
            want = f(x, y)
            got = _native(lambda: f(xt, yt))
            assert got.dtype == want.dtype == torch.complex32
            torch.testing.assert_close(torch.view_as_real(got.cpu()).float(), torch.view_as_real(want).float(),
                                       rtol=2e-3, atol=2e-3)
    ct = c.to("trn")
    assert _native(lambda: torch.equal((ct == ct).cpu(), torch.ones(6, dtype=torch.bool)))
    assert not _native(lambda: ct.isnan().any().item())
    _same(_native(lambda: ct.abs()), c.abs(), exact=False)
    assert _native(lambda: (ct * torch.ones(6, device="trn")).dtype) == torch.complex64  # past complex32


def test_cat_promotes_real_tensors_to_complex64():
    g = torch.Generator().manual_seed(1)
    z = torch.complex(torch.randn(2, 3, generator=g), torch.randn(2, 3, generator=g))
    reals = [torch.randn(2, 3, generator=g), torch.arange(6).view(2, 3), torch.ones(2, 3, dtype=torch.bool),
             torch.randn(2, 3, generator=g).half()]
    for r in reals:
        for ts in ([z, r], [r, z, r], [z, torch.empty(0)]):
            for d in (0, 1, -1):
                _same(_native(lambda: torch.cat([t.to("trn") for t in ts], d)), torch.cat(ts, d))


@settings(max_examples=15, deadline=None, derandomize=True)
@given(shape=st.sampled_from(_SHAPES), seed=st.integers(0, 999),
       weight=st.sampled_from(["tensor", 0.3, 0.7, 0.2 + 0.6j, -1.5]), value=st.sampled_from([1, 0.5, 2 - 1j]))
def test_lerp_addcmul_addcdiv(shape, seed, weight, value):
    a, b, c = _z(shape, seed), _z(shape, seed + 1), _z(shape, seed + 2)
    w = _z(shape, seed + 3) * 0.6 if weight == "tensor" else weight
    wt = w.to("trn") if isinstance(w, torch.Tensor) else w
    at, bt, ct = a.to("trn"), b.to("trn"), c.to("trn")
    _same(_native(lambda: torch.lerp(at, bt, wt)), torch.lerp(a, b, w), exact=False)
    _same(_native(lambda: torch.addcmul(at, bt, ct, value=value)), torch.addcmul(a, b, c, value=value), exact=False)
    _same(_native(lambda: torch.addcdiv(at, bt, ct, value=value)), torch.addcdiv(a, b, c, value=value), exact=False)
    real = torch.randn(shape)  # a real tensor operand promotes
    _same(_native(lambda: torch.addcmul(at, real.to("trn"), ct)), torch.addcmul(a, real, c), exact=False)


@settings(max_examples=15, deadline=None, derandomize=True)
@given(seed=st.integers(0, 999), mode=st.sampled_from(["reflect", "replicate"]), nd=st.sampled_from([1, 2, 3]),
       transposed=st.booleans())
def test_reflection_and_replication_padding(seed, mode, nd, transposed):
    shape = (2, 3, 4, 5, 6)[-(nd + 2):] if nd < 3 else (2, 3, 4, 5, 6)
    z = _z(shape, seed)
    zt = z.to("trn")
    if transposed:
        z, zt = z.transpose(-1, -2), zt.transpose(-1, -2)
    pad = [1, 2] * nd
    _same(_native(lambda: torch.nn.functional.pad(zt, pad, mode=mode)), torch.nn.functional.pad(z, pad, mode=mode))


@settings(max_examples=15, deadline=None, derandomize=True)
@given(seed=st.integers(0, 999), dim=st.sampled_from([0, 1, -1]), alpha=st.sampled_from([1, 2, -0.5, 1 - 2j]))
def test_complex_accumulations_and_triangles(seed, dim, alpha):
    g = torch.Generator().manual_seed(seed)
    z = _z((5, 4), seed)
    idx = torch.randint(0, z.shape[dim], (3, 4) if dim == 0 else (5, 3), generator=g)
    src = _z(idx.shape, seed + 1)
    zt = z.to("trn")
    _same(_native(lambda: zt.scatter_add(dim, idx.to("trn"), src.to("trn"))), z.scatter_add(dim, idx, src),
          exact=False)
    i1 = torch.randint(0, z.shape[dim], (6,), generator=g)
    s1 = _z((6, 4) if dim == 0 else (5, 6), seed + 2)
    _same(_native(lambda: zt.index_add(dim, i1.to("trn"), s1.to("trn"), alpha=alpha)),
          z.index_add(dim, i1, s1, alpha=alpha), exact=False)
    j = torch.randint(-20, 20, (9,), generator=g)
    s2 = _z((9,), seed + 3)
    t = z.to("trn")
    _native(lambda: t.put_(j.to("trn"), s2.to("trn"), accumulate=True))
    _same(t, z.clone().put_(j, s2, accumulate=True), exact=False)
    for f in (torch.tril, torch.triu):
        _same(_native(lambda: f(zt.t(), dim)), f(z.t(), dim))
    z0 = _z((), seed)  # 0-dim
    _same(_native(lambda: z0.to("trn").scatter_add(0, torch.tensor(0, device="trn"), z0.to("trn"))),
          z0.scatter_add(0, torch.tensor(0), z0), exact=False)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(steps=st.integers(0, 40), start=st.sampled_from([0, -2.5 + 1j, 3j]), end=st.sampled_from([1 + 1j, -4, 10j]),
       base=st.sampled_from([10.0, 2.0, 0.5]))
def test_complex_linspace_and_logspace(steps, start, end, base):
    kw = dict(dtype=torch.complex64)
    _same(_native(lambda: torch.linspace(start, end, steps, device="trn", **kw)),
          torch.linspace(start, end, steps, **kw), exact=False)
    _same(_native(lambda: torch.logspace(start, end, steps, base=base, device="trn", **kw)),
          torch.logspace(start, end, steps, base=base, **kw), exact=False)


@settings(max_examples=10, deadline=None, derandomize=True)
@given(seed=st.integers(0, 999), dim=st.sampled_from([0, 1, -1]), value=st.sampled_from([1.5 - 2j, 3, 0.25, "t"]))
def test_complex_index_fill(seed, dim, value):
    z = _z((4, 5), seed)
    i = torch.tensor([0, 2])
    v = torch.tensor(2 + 1j) if value == "t" else value
    vt = v.to("trn") if isinstance(v, torch.Tensor) else v
    _same(_native(lambda: z.to("trn").index_fill(dim, i.to("trn"), vt)), z.index_fill(dim, i, v))
    t = z.to("trn")
    _native(lambda: t.index_fill_(dim, i.to("trn"), vt))
    _same(t, z.index_fill(dim, i, v))
