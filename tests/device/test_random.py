"""Random ops on trn (stdlib_kernels/tensor/random.py): distributions, seeding, streams, dropout forward/backward.

The device's counter-based generator does not reproduce the CPU generator's numbers, so the tests check
statistics (1e5 samples, tolerances of several standard errors), reproducibility and independence.
"""

import math
import re

import pytest
import torch
import torch.nn.functional as F

import trnlang
from tests.device.conftest import assert_same

N = 100_000


@pytest.fixture(autouse=True)
def _no_fallback(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")
    trnlang.reset_fallback_stats()
    yield
    assert trnlang.fallback_stats() == {}


def _moments(t: torch.Tensor) -> tuple[float, float]:
    c = t.detach().cpu().double()
    return c.mean().item(), c.var().item()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_uniform(dtype):
    torch.manual_seed(0)
    u = torch.empty(N, device="trn", dtype=dtype).uniform_(-2.0, 3.0)
    m, v = _moments(u)
    assert abs(m - 0.5) < 5 * math.sqrt(25 / 12 / N) + (0.01 if dtype == torch.bfloat16 else 0)
    assert abs(v - 25 / 12) < 0.05
    c = u.cpu()
    assert c.min() >= -2.0 and c.max() <= 3.0
    hist = torch.histc(c.float(), 10, -2.0, 3.0)
    assert (hist - N / 10).abs().max() < 6 * math.sqrt(N / 10)


def test_rand_randn_factories_and_normal():
    torch.manual_seed(1)
    r = torch.rand(317, 331, device="trn")
    assert r.shape == (317, 331) and 0.0 <= r.cpu().min() and r.cpu().max() < 1.0
    z = torch.randn(N, device="trn")
    m, v = _moments(z)
    assert abs(m) < 5 / math.sqrt(N) and abs(v - 1) < 0.03
    c = z.cpu()
    assert abs((c.abs() < 1).double().mean().item() - 0.6827) < 0.01  # the shape, not only two moments
    y = torch.empty(N, device="trn").normal_(3.0, 0.5)
    m, v = _moments(y)
    assert abs(m - 3.0) < 0.01 and abs(v - 0.25) < 0.01


def test_normal_tensor_args_and_exponential():
    torch.manual_seed(2)
    mean = torch.linspace(-5, 5, 1000, device="trn").unsqueeze(1).expand(1000, 100)
    std = torch.full((100,), 2.0, device="trn")
    z = (torch.normal(mean, std) - mean) / 2.0
    m, v = _moments(z)
    assert abs(m) < 0.02 and abs(v - 1) < 0.03
    e = torch.empty(N, device="trn").exponential_(4.0)
    m, v = _moments(e)
    assert abs(m - 0.25) < 0.005 and abs(v - 1 / 16) < 0.004 and e.cpu().min() >= 0


def test_log_normal_geometric_cauchy():
    torch.manual_seed(13)
    ln = torch.empty(N, device="trn").log_normal_(0.5, 0.3).cpu().log()
    assert abs(ln.mean().item() - 0.5) < 0.005 and abs(ln.std().item() - 0.3) < 0.005
    g = torch.empty(N, device="trn").geometric_(0.25).cpu()
    assert g.min() == 1 and abs(g.mean().item() - 4) < 0.05 and abs((g == 1).double().mean().item() - 0.25) < 0.01
    assert torch.equal(torch.empty(5, device="trn").geometric_(1.0).cpu(), torch.ones(5))
    c = torch.empty(N, device="trn").cauchy_(1.0, 2.0).cpu()
    assert abs(c.median().item() - 1.0) < 0.05 and abs((c.quantile(0.75) - c.quantile(0.25)).item() / 2 - 2) < 0.06


def test_bernoulli_float_and_tensor_p():
    torch.manual_seed(3)
    b = torch.empty(N, device="trn").bernoulli_(0.3)
    assert set(b.cpu().unique().tolist()) <= {0.0, 1.0}
    assert abs(b.cpu().mean().item() - 0.3) < 5 * math.sqrt(0.21 / N)
    p = torch.tensor([0.0, 0.1, 0.9, 1.0], device="trn").repeat(N // 4)
    d = torch.bernoulli(p).cpu().view(-1, 4).mean(0)
    assert d[0] == 0 and d[3] == 1 and abs(d[1] - 0.1) < 0.01 and abs(d[2] - 0.9) < 0.01
    i = torch.empty(1000, dtype=torch.int64, device="trn").bernoulli_(0.5)
    assert i.dtype == torch.int64 and set(i.cpu().unique().tolist()) <= {0, 1}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32, torch.float64, torch.bfloat16])
def test_randint(dtype):
    torch.manual_seed(4)
    r = torch.randint(-3, 7, (N,), device="trn", dtype=dtype).cpu()
    assert r.dtype == dtype and r.min() == -3 and r.max() == 6
    counts = torch.bincount((r.long() + 3), minlength=10).double()
    assert (counts - N / 10).abs().max() < 6 * math.sqrt(N / 10)
    big = torch.randint(0, 1 << 24, (1000,), device="trn").cpu()
    assert big.max() > 1 << 20 and big.min() >= 0


def test_int_to_f64_words_is_exact():
    """float64 integer draws are built as bit patterns from int32 values: exact for every |v| < 2^24."""
    from stdlib_kernels.tensor.random import int_to_f64_words

    p2 = 2 ** torch.arange(24)
    v = torch.cat([torch.randint(-2**24 + 1, 2**24, (60_000,)), torch.arange(-3000, 3000), p2, -p2, p2 - 1,
                   -(p2 - 1), p2 + 1]).int()
    v = v[:128 * (v.numel() // 128)]
    cols = v.numel() // 128
    out = torch.empty(v.numel(), dtype=torch.float64, device="trn")
    w = out.view(torch.int32)
    int_to_f64_words(v.to("trn").view(128, cols), torch.as_strided(w, (128, cols), (2 * cols, 2), 0),
                     torch.as_strided(w, (128, cols), (2 * cols, 2), 1))
    assert torch.equal(out.cpu(), v.double())
    t = torch.empty(30, 40, dtype=torch.float64, device="trn").t()  # a non-contiguous float64 self
    t.random_(-5, 9)
    assert t.cpu().min() == -5 and t.cpu().max() == 8 and torch.equal(t.cpu(), t.cpu().round())


def test_seed_reproducibility_and_streams():
    torch.manual_seed(5)
    a = torch.rand(1000, device="trn").cpu()
    b = torch.rand(1000, device="trn").cpu()
    torch.manual_seed(5)
    a2 = torch.rand(1000, device="trn").cpu()
    torch.trn.manual_seed(6)
    c = torch.rand(1000, device="trn").cpu()
    assert torch.equal(a, a2)
    assert not torch.equal(a, b) and not torch.equal(a, c)
    for x, y in ((a, b), (a, c)):
        assert abs(torch.corrcoef(torch.stack([x, y]))[0, 1].item()) < 0.15
    lag = torch.rand(N, device="trn").cpu()
    assert abs(torch.corrcoef(torch.stack([lag[:-1], lag[1:]]))[0, 1].item()) < 0.02
    g = torch.Generator().manual_seed(7)
    d1 = torch.empty(100, device="trn").uniform_(generator=g).cpu()
    g.manual_seed(7)
    d2 = torch.empty(100, device="trn").uniform_(generator=g).cpu()
    assert torch.equal(d1, d2)


def test_randperm():
    for n in (0, 1, 10, 4096):
        p = torch.randperm(n, device="trn").cpu()
        assert p.dtype == torch.int64 and torch.equal(p.sort().values, torch.arange(n))
    torch.manual_seed(12)
    a = torch.randperm(100, device="trn").cpu()
    torch.manual_seed(12)
    assert torch.equal(torch.randperm(100, device="trn").cpu(), a)
    first = torch.stack([torch.randperm(4096, device="trn")[:64] for _ in range(3)]).cpu().double()
    assert abs(first.mean().item() - 2047.5) < 6 * 1182 / math.sqrt(first.numel())


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_randperm_past_the_sort_row(dtype):
    """Past the sort kernel's 8192-element row the keys are full-range int32 (merge and radix passes)."""
    for n in (8193, 20000):
        torch.manual_seed(3)
        p = torch.randperm(n, dtype=dtype, device="trn")
        torch.manual_seed(3)
        q = torch.empty(0, dtype=dtype, device="trn")
        torch.randperm(n, out=q, dtype=dtype, device="trn")
        p, q = p.cpu(), q.cpu()
        assert p.dtype == dtype and torch.equal(p, q)
        assert torch.equal(p.sort().values.long(), torch.arange(n))
        # a permutation, not the identity or a rotation: positions move, about uniformly
        moved = (p.long() != torch.arange(n)).double().mean().item()
        assert moved > 0.99
        head = p[: n // 2].double()
        assert abs(head.mean().item() - (n - 1) / 2) < 6 * (n / math.sqrt(12)) / math.sqrt(head.numel())


def test_noncontiguous_self_gets_the_contiguous_values():
    torch.manual_seed(8)
    a = torch.empty(40, 30, device="trn").uniform_().cpu()
    torch.manual_seed(8)
    t = torch.empty(30, 40, device="trn").t()
    t.uniform_()
    assert torch.equal(t.cpu(), a)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", [0.0, 0.25, 1.0])
def test_dropout_forward_backward(dtype, p):
    torch.manual_seed(9)
    x = (torch.randn(500, 200) + 3).to(dtype).to("trn").requires_grad_()
    y = F.dropout(x, p, training=True)
    kept = y.detach().cpu() != 0
    frac = kept.double().mean().item()
    assert abs(frac - (1 - p)) < 0.01
    scale = 1 / (1 - p) if p < 1 else 0.0
    exp = torch.where(kept, x.detach().cpu().float() * scale, torch.zeros(()))
    assert_same(y.float(), exp, rtol=1e-2 if dtype == torch.bfloat16 else 1e-6, atol=1e-6)
    g = torch.randn(500, 200).to(dtype)
    y.backward(g.to("trn"))
    exp_g = torch.where(kept, g.float() * scale, torch.zeros(()))
    assert_same(x.grad.float(), exp_g, rtol=1e-2 if dtype == torch.bfloat16 else 1e-6, atol=1e-6)


def test_dropout_eval_empty_and_native_ops():
    x = torch.randn(7, 9)
    xt = x.to("trn")
    assert_same(F.dropout(xt, 0.5, training=False), x)
    out, mask = torch.ops.aten.native_dropout(xt, 0.5, False)
    assert mask.dtype == torch.bool and bool(mask.cpu().all())
    e = F.dropout(torch.empty(0, 3, device="trn"), 0.5)
    assert e.shape == (0, 3)
    torch.manual_seed(10)
    out, mask = torch.ops.aten.native_dropout(xt.t(), 0.4, True)
    gi = torch.ops.aten.native_dropout_backward(torch.ones(9, 7, device="trn"), mask, 2.5)
    assert_same(gi, mask.cpu().float() * 2.5)
    assert_same(out, torch.where(mask.cpu(), x.t() / 0.6, torch.zeros(())), rtol=1e-6, atol=1e-6)


def test_bad_arguments_raise_torchs_errors(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "silent")
    for call in (lambda d: torch.empty(3, device=d).uniform_(2.0, 1.0),
                 lambda d: torch.empty(3, device=d).normal_(0.0, -1.0),
                 lambda d: torch.empty(3, device=d).bernoulli_(1.5)):
        with pytest.raises(RuntimeError) as ce:
            call("cpu")
        with pytest.raises(RuntimeError) as te:
            call("trn")
        assert str(te.value) == str(ce.value)
    trnlang.reset_fallback_stats()


def test_profile_rng_kernel():
    from stdlib_kernels.tensor.random import Draw, rng

    out = torch.empty(128, 512, device="trn")
    keys = torch.tensor([[11, 12]], dtype=torch.int32).to("trn")
    params = torch.tensor([[0.0, 1.0]]).to("trn")
    prof = rng.profile(out, keys, params, None, None, Draw.UNIFORM, 0)
    assert prof.time_us > 0
    assert all(0 <= e.utilization <= 1 for e in prof.engines.values()), prof.engines
    assert prof.engines["vector"].utilization > 0.3  # the hash is integer ALU work on the Vector engine
    c = out.cpu()
    assert 0 <= c.min() and c.max() < 1 and abs(c.mean().item() - 0.5) < 0.01


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rrelu_train_eval_inplace_backward(dtype):
    torch.manual_seed(14)
    x = torch.randn(400, 250).to(dtype)
    xt = x.to("trn").requires_grad_()
    y = F.rrelu(xt, 0.1, 0.3, training=True)
    yc, neg = y.detach().cpu().float(), x <= 0
    assert torch.equal(yc[~neg], x[~neg].float())
    slope = yc[neg] / x[neg].float()
    tol = 2e-3 if dtype == torch.bfloat16 else 1e-6
    assert slope.min() >= 0.1 - tol and slope.max() <= 0.3 + tol and abs(slope.mean().item() - 0.2) < 0.005
    g = torch.randn(400, 250).to(dtype)
    y.backward(g.to("trn"))  # rrelu_with_noise_backward: grad * noise (decomposed into native ops)
    gc = xt.grad.cpu().float()
    assert torch.equal(gc[~neg], g.float()[~neg])
    assert_same(gc[neg].to("trn"), (g.float()[neg] * slope), rtol=1e-2 if dtype == torch.bfloat16 else 1e-5,
                atol=1e-2 if dtype == torch.bfloat16 else 1e-6)
    xs = x.to("trn").t()  # eval: leaky_relu with the mean slope, any layout
    assert_same(F.rrelu(xs, 0.1, 0.3, training=False), F.rrelu(x.t(), 0.1, 0.3, training=False))
    xi = x.to("trn").t()
    F.rrelu(xi, training=True, inplace=True)
    assert torch.equal(xi.cpu()[~neg.t()], x.t()[~neg.t()])
    assert F.rrelu(torch.empty(1, 0, 3, device="trn", dtype=dtype), training=True).shape == (1, 0, 3)
    assert F.rrelu(torch.tensor(2.0, device="trn", dtype=dtype), training=True).item() == 2.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_multinomial_frequencies(dtype):
    torch.manual_seed(15)
    p = torch.tensor([[0.1, 0.0, 0.6, 0.3], [1.0, 1.0, 0.0, 2.0]], dtype=dtype)
    n = 40_000
    r = torch.multinomial(p.to("trn"), n, replacement=True).cpu()  # few categories: samples on the free axis
    assert r.dtype == torch.int64 and r.shape == (2, n)
    for row, probs in zip(r, p.float()):
        freq = torch.bincount(row, minlength=4).double() / n
        assert (freq - probs / probs.sum()).abs().max() < 0.015 and freq[probs == 0].sum() == 0
    wide = torch.rand(3, 3000)
    wide[:, ::2] = 0  # zero-probability categories are never drawn
    r = torch.multinomial(wide.to(dtype).to("trn").t().contiguous().t(), 50, True).cpu()  # few samples
    assert r.shape == (3, 50) and (r % 2 == 1).all() and r.max() < 3000
    one = torch.multinomial(torch.tensor([0.2, 0.3, 0.5], dtype=dtype).to("trn").expand(n, 3), 1).cpu()
    assert ((torch.bincount(one.flatten(), minlength=3).double() / n - torch.tensor([.2, .3, .5])).abs() < .015).all()
    two = torch.multinomial(torch.tensor([0.2, 0.3, 0.5], dtype=dtype).to("trn").expand(n, 3), 2).cpu()
    assert (two[:, 0] != two[:, 1]).all()  # without replacement (Gumbel top-k)
    second = torch.bincount(two[:, 1], minlength=3).double() / n  # P(second = i) = sum_j p_j p_i / (1 - p_j)
    assert (second - torch.tensor([0.2857, 0.375, 0.3393], dtype=torch.float64)).abs().max() < 0.015
    perm = torch.multinomial(torch.rand(7, dtype=dtype).to("trn") + 0.1, 7).cpu()
    assert torch.equal(perm.sort().values, torch.arange(7))
    out = torch.empty(0, dtype=torch.int64, device="trn")
    torch.multinomial(torch.ones(5, dtype=dtype, device="trn"), 3, True, out=out)
    assert out.shape == (3,) and out.cpu().max() < 5


def test_multinomial_bad_arguments_raise_torchs_errors(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "silent")
    for args in ((torch.tensor([0.5, -0.1]), 1), (torch.tensor([[0.0, 0.0], [1.0, 1.0]]), 1, True),
                 (torch.tensor([0.5, 0.5]), 3), (torch.tensor([0.5, math.inf]), 1), (torch.ones(2, 2, 2), 1),
                 (torch.tensor([0.5, 0.5]), 0)):
        with pytest.raises(RuntimeError) as ce:
            torch.multinomial(*args)
        with pytest.raises(RuntimeError) as te:
            torch.multinomial(args[0].to("trn"), *args[1:])
        assert str(te.value) == str(ce.value)
    trnlang.reset_fallback_stats()


_FRAC_CASES = [((2, 3, 9, 9), (2, 2), (4, 5), torch.float32), ((3, 9, 10), (3, 2), (1, 5), torch.float32),
               ((1, 2, 40, 40), (3, 3), (20, 20), torch.bfloat16),
               ((2, 3, 7, 8, 9), (2, 3, 2), (4, 3, 5), torch.float32),
               ((3, 7, 8, 9), (2, 2, 2), (5, 6, 7), torch.bfloat16)]


@pytest.mark.parametrize("shape,k,o,dtype", _FRAC_CASES)
def test_fractional_max_pool_matches_cpu_given_samples(shape, k, o, dtype):
    """The windows come from ``random_samples`` (torch's interval formula, rounded per step in bf16): with the
    same samples the values and indices equal the CPU's; the backward scatter-adds by the indices."""
    nd = len(k)
    op = torch.ops.aten.fractional_max_pool2d if nd == 2 else torch.ops.aten.fractional_max_pool3d
    bop = torch.ops.aten.fractional_max_pool2d_backward if nd == 2 else torch.ops.aten.fractional_max_pool3d_backward
    gen = torch.Generator().manual_seed(16)
    x = torch.randn(shape, generator=gen).to(dtype)
    x.view(-1)[::7] = 0.5  # ties: the first maximum in (t, h, w) order wins
    planes = (shape[0] * shape[1], shape[0], shape[1]) if len(shape) == nd + 2 else (shape[0], 1, shape[0])
    s = torch.rand(planes[1], planes[2], nd, generator=gen).to(dtype)
    out, idx = op(x, k, o, s)
    t_out, t_idx = op(x.to("trn").transpose(-1, -2).contiguous().transpose(-1, -2), k, o, s.to("trn"))
    assert torch.equal(t_out.cpu(), out) and torch.equal(t_idx.cpu(), idx)
    g = torch.randn(out.shape, generator=gen).to(dtype)
    tol = 1.6e-2 if dtype == torch.bfloat16 else 1e-6
    assert_same(bop(g.to("trn"), x.to("trn"), k, o, t_idx), bop(g, x, k, o, idx), rtol=tol, atol=tol)


def test_fractional_max_pool_functional_nan_and_autograd():
    nan, inf = math.nan, math.inf
    x = torch.tensor([[[[1., nan, 3.], [nan, 2., 3.], [-inf, -inf, 3.]]]])
    s = torch.tensor([[[0.3, 0.7]]])
    ref = torch.ops.aten.fractional_max_pool2d(x, (2, 2), (2, 2), s)
    got = torch.ops.aten.fractional_max_pool2d(x.to("trn"), (2, 2), (2, 2), s.to("trn"))
    assert torch.equal(got[1].cpu(), ref[1])  # the last NaN of a window wins, as on the CPU
    torch.manual_seed(17)
    xt = torch.randn(2, 4, 12, 12, device="trn", requires_grad=True)
    y, i = F.fractional_max_pool2d(xt, 3, output_ratio=(0.5, 0.5), return_indices=True)  # samples: the device rng
    assert y.shape == (2, 4, 6, 6) and i.dtype == torch.int64
    assert torch.equal(y.detach().cpu(), xt.detach().cpu().flatten(2).gather(2, i.cpu().flatten(2)).view(y.shape))
    y.sum().backward()
    counts = torch.zeros(2, 4, 144).scatter_add_(2, i.cpu().flatten(2), torch.ones(2, 4, 36))
    assert torch.equal(xt.grad.cpu().flatten(2), counts)


def test_profile_fractional_max_pool():
    from stdlib_kernels.nn.random_pool import frac_max_pool

    x = torch.randn(128, 32 * 32, 1, device="trn")
    s = torch.rand(128, 2, device="trn")
    out = torch.empty(128, 16, 16, device="trn")
    idx = torch.empty(128, 16, 16, dtype=torch.int64, device="trn")
    prof = frac_max_pool.profile(x, s, out, idx, "1,32,32,1,16,16,1,2,2,0,1,0", (0.0, 2.0, 2.0), None)
    assert prof.time_us > 0 and all(0 <= e.utilization <= 1 for e in prof.engines.values())
    assert torch.equal(out.cpu(), x.cpu()[:, :, 0].gather(1, idx.cpu().view(128, -1)).view(128, 16, 16))


@pytest.mark.parametrize("dtype,top", [(torch.uint8, 255), (torch.int8, 127), (torch.int16, 32767), (torch.bool, 1),
                                       (torch.bfloat16, 256), (torch.float16, 2048)])
def test_random_default_range(dtype, top):
    """``x.random_()`` with no bounds draws torch's default range natively, ``[0, 2^mantissa_bits]`` for floats and
    ``[0, max]`` for integers: every value in range, both ends reached, roughly uniform, seeded reproducibly."""
    trnlang.reset_fallback_stats()
    torch.manual_seed(11)
    x = torch.empty(200_000, dtype=dtype, device="trn").random_()
    c = x.cpu().to(torch.int64)
    assert c.min().item() == 0 and c.max().item() == top
    counts = torch.bincount(c, minlength=top + 1).double()
    assert counts.min() > 0.5 * counts.mean() or top > 4096  # int16: too many bins for 200K draws to all land
    torch.manual_seed(11)
    assert torch.equal(torch.empty(200_000, dtype=dtype, device="trn").random_().cpu(), x.cpu())
    assert trnlang.fallback_stats() == {}


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
def test_geometric_of_integer_tensors(dtype):
    """Integer tensors draw geometric trials natively: positive integers, mean 1/p, P(1) = p, in place."""
    torch.manual_seed(5)
    trnlang.reset_fallback_stats()
    x = torch.empty(N, dtype=dtype, device="trn")
    assert x.geometric_(0.25) is x
    assert trnlang.fallback_stats() == {}
    g = x.cpu().double()
    assert x.dtype == dtype and g.min() == 1 and abs(g.mean().item() - 4) < 0.05
    assert abs((g == 1).double().mean().item() - 0.25) < 0.01


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("lo,hi", [(-2**31, 2**31 - 1), (-5, 40_000_001), (2**30, 2**31)])
def test_random_over_wide_integer_ranges(dtype, lo, hi):
    """Ranges wider than 2^24 natively (16-bit limbs, redrawn past the range): inside [lo, hi), uniform (each
    eighth of the range holds 12.5% +- 1% of the draws), almost no repeats."""
    torch.manual_seed(11)
    trnlang.reset_fallback_stats()
    x = torch.empty(N, dtype=dtype, device="trn").random_(lo, hi)
    assert trnlang.fallback_stats() == {} and x.dtype == dtype
    v = x.cpu().double()
    assert v.min() >= lo and v.max() < hi
    counts = torch.histc(v, bins=8, min=lo, max=hi)
    assert bool(((counts / N - 1 / 8).abs() < 0.01).all())
    assert len(v.unique()) > 0.99 * N


def test_random_over_the_full_int64_range():
    torch.manual_seed(12)
    info = torch.iinfo(torch.int64)
    trnlang.reset_fallback_stats()
    x = torch.randint(info.min, info.max, (N,), device="trn")
    assert trnlang.fallback_stats() == {}
    v = x.cpu()
    assert (v < 0).double().mean().item() == pytest.approx(0.5, abs=0.01)
    assert v.max().item() > 2**62 and v.min().item() < -2**62 and len(v.unique()) == N


_TOP = {torch.float32: 2**24, torch.float16: 2**11, torch.bfloat16: 2**8, torch.int8: 127, torch.int16: 2**15 - 1,
        torch.int32: 2**31 - 1, torch.uint8: 255, torch.bool: 1}


@pytest.mark.parametrize("dtype", list(_TOP))
def test_random_default_and_open_ranges_natively(dtype, monkeypatch):
    """``random_()`` and ``random_(from, None)``: integers from ``from`` (0) up to the dtype's maximum (2^mantissa
    bits for floats) inclusive, as torch; float32's 2^24 + 1 values and int32's range from 16-bit limbs."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    t = torch.empty(100000, dtype=dtype, device="trn")
    for lo, fill in ((0, lambda: t.random_()), (0 if dtype in (torch.uint8, torch.bool) else -5,
                                                 lambda: t.random_(0 if dtype in (torch.uint8, torch.bool) else -5,
                                                                   None))):
        fill()
        c = t.cpu().double()
        assert c.min() >= lo and c.max() <= _TOP[dtype] and bool((c == c.round()).all())
        assert c.max() - c.min() > 0.9 * (_TOP[dtype] - lo)  # the whole range is reached


_I64 = torch.iinfo(torch.int64)


@pytest.mark.parametrize("lo,hi", [(0, _I64.max), (_I64.min, -42), (-42, _I64.max), (_I64.min, 42),
                                   (-(2**40), 2**41 + 7), (0, 2**33 + 5)])
def test_int64_ranges_of_any_width_natively(lo, hi, monkeypatch):
    """int64 draws over any range: two int32 words (redrawn past the range), ``from`` added with the carry."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    t = torch.empty(20000, dtype=torch.int64, device="trn").random_(lo, hi)
    c = t.cpu()
    d = (hi - lo) // 10
    assert lo <= c.min().item() < lo + d and hi - d <= c.max().item() < hi



@pytest.mark.parametrize("lo,span", [(2**40, 3), (-(2**40) - 5, 5), (2**62, 2**31 + 7), (_I64.min, 1)])
def test_int64_short_spans_past_int32(lo, span, monkeypatch):
    """A span below 2^32 at an offset past int32's range: one low word below the span, every value reached."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    c = torch.empty(20000, dtype=torch.int64, device="trn").random_(lo, lo + span).cpu() - lo
    assert c.min().item() == 0 and c.max().item() == span - 1 if span < 10 else 0 <= c.min() and c.max() < span
    assert abs(c.double().mean().item() - (span - 1) / 2) < 6 * (span / math.sqrt(12)) / math.sqrt(c.numel()) + 1e-9


@pytest.mark.parametrize("dtype,top", [(torch.uint16, 2**16), (torch.uint32, 2**32), (torch.uint64, 2**63)])
def test_unsigned_draws(dtype, top, monkeypatch):
    """uint16/32/64 ``random_(from, to)`` natively, in the ranges the CPU takes (and its errors outside them)."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    for lo, hi in ((0, 10), (3, top)):
        c = torch.empty(20000, dtype=dtype, device="trn").random_(lo, hi).cpu().long() if hi < 2**63 else \
            torch.empty(20000, dtype=dtype, device="trn").random_(lo, hi - 1).cpu().view(torch.int64)
        d = (hi - lo) // 10
        assert lo <= c.min().item() < lo + max(d, 1) and hi - max(d, 1) <= c.max().item() < hi
    if dtype != torch.uint64:
        c = torch.empty(20000, dtype=dtype, device="trn").random_(5, None).cpu().long()  # to: the dtype's top
        assert 5 <= c.min().item() and top - top // 10 <= c.max().item() < top
    for args in ((), (-1, 3), (3, None) if dtype == torch.uint64 else (0, top + 1)):  # the CPU's errors
        with pytest.raises((RuntimeError, NotImplementedError)) as cpu_err:
            torch.empty(3, dtype=dtype).random_(*args)
        with pytest.raises(type(cpu_err.value), match=re.escape(str(cpu_err.value).split("\n")[0][:40])):
            torch.empty(3, dtype=dtype, device="trn").random_(*args)

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_float_ranges_past_exact_integers(dtype, monkeypatch):
    """Ranges past the dtype's exact integers (the CPU draws them with a precision warning): integer-valued floats
    over the whole range, inside [from, to)."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    top = int(min(torch.finfo(dtype).max, _I64.max))
    for lo, hi in ((max(-(2**40), int(torch.finfo(dtype).min)), -42), (-42, top >> 1)):
        t = torch.empty(4000, dtype=dtype, device="trn")
        with pytest.warns(UserWarning, match="is out of bounds .* Due to precision limitations"):
            t.random_(lo, hi)  # torch's precision warning, on every such call
        c = t.cpu().double()
        d = 0.1 * (hi - lo)
        assert lo <= c.min().item() < lo + d and hi - d <= c.max().item() < hi and bool((c == c.round()).all())


def test_draws_of_new_lengths_compile_nothing_and_match_the_2d_path():
    """Contiguous draws run as one flat launch whose variant serves every length (PyTorch's test_indexing draws
    511 sizes: each compiled once before, ~0.5 s a size on a cold cache), with the same element indices, hence the
    same numbers, as the 2-D views the kernel takes for other layouts."""
    import trnlang
    from stdlib_kernels import _util as U
    from stdlib_kernels.tensor import random as R
    from stdlib_kernels.tensor.creation import flat_views

    keys = torch.tensor([[123456, -98765]], dtype=torch.int32).to("trn")
    for n in (1, 7, 4095, 4100, 70000):
        for kind in (R.Draw.UNIFORM, R.Draw.NORMAL, R.Draw.RANDINT, R.Draw.BERNOULLI):
            dt = torch.int32 if kind == R.Draw.RANDINT else torch.float32
            a, b = torch.empty(n, device="trn", dtype=dt), torch.empty(n, device="trn", dtype=dt)
            for v, base in flat_views(a):
                R.rng(v, keys, R._params(0.0, 5.0), None, None, kind, base)
            R.rng_flat(U.piece(b, (n,), (1,), 0), keys, R._params(0.0, 5.0), None, None, kind, 0, True)
            assert torch.equal(a.cpu(), b.cpu())
    torch.randn(99, device="trn")
    torch.empty(99, device="trn").uniform_()
    before = trnlang.compile_stats()["compiles"]
    for i in range(100, 140):
        torch.randn(i, device="trn")
        torch.empty(i, 3, device="trn").uniform_(-1, 1)
    assert trnlang.compile_stats()["compiles"] == before
