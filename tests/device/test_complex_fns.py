"""complex64 elementary functions natively on real/imaginary planes (stdlib_kernels/elementwise/complex_fns.py):
close to the CPU's (c10::complex) across magnitudes, on the axes and branch cuts (signed zeros), and for
non-finite inputs the CPU's own special values (those calls fall back)."""

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang
from stdlib_kernels.elementwise.complex_fns import NONFINITE_OK, UNARY

_AXIS = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 1e-4, -1e-4, 30.0, -30.0, 100.0, -100.0, 0.999, 3.0]


#: ops whose signed zeros on the axes follow C99's (the others may give +0 for -0 there, as formulas do)
_SIGNED_ZEROS = {"exp", "exp2", "log", "log2", "log10", "sqrt", "sin", "sinh", "tan", "tanh", "atan", "atanh"}


def _fn(op):
    """The torch function of ``op`` (``torch.nn.functional`` for the activations)."""
    return getattr(torch, op, None) or getattr(torch.nn.functional, op)


def _close(got: torch.Tensor, want: torch.Tensor, op: str = "") -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    got = got.cpu()
    same = [(g == w) | (g.isnan() & w.isnan()) for g, w in ((got.real, want.real), (got.imag, want.imag))]
    ok = ((got - want).abs() <= 1e-5 + 2e-5 * want.abs()) | (same[0] & same[1])
    assert bool(ok.all()), [(g, w) for g, w in zip(got[~ok][:4].tolist(), want[~ok][:4].tolist())]
    if op in _SIGNED_ZEROS:
        for gp, wp in ((got.real, want.real), (got.imag, want.imag)):
            z = (wp == 0) & (gp == 0)
            assert torch.equal(torch.signbit(gp[z]), torch.signbit(wp[z])), (gp[z], wp[z])


@pytest.mark.parametrize("op", sorted(UNARY))
def test_axes_and_branch_cuts_match_the_cpu_natively(op):
    axis = [v for v in _AXIS if abs(v) < 25] if op == "sinc" else _AXIS  # sinc past |Im z| 25: the CPU (tested below)
    z = torch.tensor([complex(a, b) for a, b in itertools.product(axis, axis)], dtype=torch.complex64)
    trnlang.reset_fallback_stats()
    got = _fn(op)(z.to("trn"))
    assert trnlang.fallback_stats() == {}
    _close(got, _fn(op)(z), op)


@pytest.mark.parametrize("op", sorted(UNARY))
@settings(max_examples=6, deadline=None, derandomize=True)
@given(scale=st.sampled_from([1e-3, 1.0, 10.0]), shape=st.sampled_from([(0,), (1,), (37,), (3, 129)]),
       seed=st.integers(0, 999))
def test_random_values_match_the_cpu(op, scale, shape, seed):
    g = torch.Generator().manual_seed(seed)
    z = torch.complex(torch.randn(shape, generator=g), torch.randn(shape, generator=g)) * scale
    if op == "sinc":
        z = torch.complex(z.real, z.imag.clamp(-20, 20))
    trnlang.reset_fallback_stats()
    got = _fn(op)(z.to("trn"))
    assert trnlang.fallback_stats() == {}
    _close(got, _fn(op)(z))
    out = torch.empty(shape, dtype=torch.complex64, device="trn")  # out= and the in-place variant
    if op != "silu":  # F.silu takes no out=
        _close(_fn(op)(z.to("trn"), out=out), _fn(op)(z))
    if hasattr(torch.Tensor, op + "_"):
        t = z.to("trn")
        getattr(t, op + "_")()
        _close(t, _fn(op)(z))


@pytest.mark.parametrize("op", sorted(UNARY))
def test_non_finite_inputs_take_the_cpus_special_values(op):
    """C99's special values: natively for the ops whose formulas give them (NONFINITE_OK), through the CPU for the
    others (a counted fallback)."""
    vals = [0.0, -0.0, 0.5, -2.0, 100.0, float("inf"), float("-inf"), float("nan")]
    z = torch.tensor([complex(a, b) for a, b in itertools.product(vals, vals)], dtype=torch.complex64)
    trnlang.reset_fallback_stats()
    got = _fn(op)(z.to("trn")).cpu()
    assert (f"aten::{op}" in trnlang.fallback_stats()) == (op not in NONFINITE_OK)
    want = _fn(op)(z)
    for g, w in ((got.real, want.real), (got.imag, want.imag)):
        same = (g.isnan() & w.isnan()) | (g == w) | ((g - w).abs() <= 1e-5 + 2e-5 * w.abs())
        assert bool(same.all()), (z[~same], g[~same], w[~same])


@settings(max_examples=12, deadline=None, derandomize=True)
@given(seed=st.integers(0, 999), exponent=st.sampled_from(["tensor", "real tensor", 2, 3, 0.5, -0.5, -1, -2, 1.7,
                                                           -3, 0, 2 - 1j]),
       zeros=st.booleans())
def test_complex_pow(seed, exponent, zeros):
    g = torch.Generator().manual_seed(seed)
    z = torch.complex(torch.randn(40, generator=g), torch.randn(40, generator=g)) * 2
    if zeros:
        z[:5] = 0
    if exponent == "tensor":
        w = torch.complex(torch.randn(40, generator=g), torch.randn(40, generator=g))
    elif exponent == "real tensor":
        w = torch.randn(40, generator=g)
    else:
        w = exponent
    wt = w.to("trn") if isinstance(w, torch.Tensor) else w
    want = torch.pow(z, w)
    trnlang.reset_fallback_stats()
    got = torch.pow(z.to("trn"), wt)
    assert trnlang.fallback_stats() == {}
    _close(got, want)
    if isinstance(w, torch.Tensor):  # the base a number, the exponent a tensor
        _close(torch.pow(1.5 - 0.5j, wt.to(torch.complex64)), torch.pow(1.5 - 0.5j, w.to(torch.complex64)))


def test_sinc_of_large_imaginary_parts_goes_to_the_cpu():
    z = torch.tensor([1 + 30j, 0.5 - 100j, 2 + 1j], dtype=torch.complex64)
    trnlang.reset_fallback_stats()
    got = torch.sinc(z.to("trn")).cpu()
    assert "aten::sinc" in trnlang.fallback_stats()
    want = torch.sinc(z)
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got[~want.isnan()], want[~want.isnan()])


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int64, torch.uint8, torch.bfloat16,
                                   torch.float16, torch.bool])
def test_complex_number_to_a_real_tensor_power(dtype, monkeypatch):
    """``complex ** real_tensor`` (pow.Scalar) natively: complex64 (ComplexHalf for a float16 exponent, computed in
    complex64 and rounded, as CUDA does; the CPU raises there) against the CPU's complex64 power."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(4)
    e = (torch.rand(100, generator=g) * 4 - 2).to(dtype) if dtype.is_floating_point else \
        torch.randint(0 if dtype in (torch.uint8, torch.bool) else -2, 2, (100,), generator=g).to(dtype)
    for base in (0.5j, 1.0 + 1.0j, -1.5j, 2.2 - 1.6j, 1 + 0j):
        got = torch.pow(base, e.to("trn")).cpu()
        exp = torch.pow(base, e.to(torch.complex64))
        if dtype == torch.float16:
            assert got.dtype == torch.complex32
            torch.testing.assert_close(got.to(torch.complex64), exp.to(torch.complex32).to(torch.complex64),
                                       rtol=2e-3, atol=2e-3)
        else:
            assert got.dtype == torch.pow(base, e).dtype
            torch.testing.assert_close(got, exp)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int64, torch.uint8, torch.bfloat16, torch.float16])
def test_real_tensor_to_a_complex_power(dtype, monkeypatch):
    """``real_tensor ** complex`` (pow.Tensor_Scalar) natively: complex64 (ComplexHalf for float16, computed in
    complex64 and rounded), against the CPU's complex64 power; a 0-dim out= is resized as torch resizes it."""
    import warnings

    monkeypatch.setenv("TRN_FALLBACK", "error")
    x = torch.tensor([0.5, 2, 3, 0, 1, 7]).to(dtype)
    for ex in (1j, 0.5 + 2j, -1.5 - 0.5j):
        got = torch.pow(x.to("trn"), ex).cpu()
        exp = torch.pow(x.to(torch.complex64), ex)
        if dtype == torch.float16:
            assert got.dtype == torch.complex32
            torch.testing.assert_close(got.to(torch.complex64), exp.to(torch.complex32).to(torch.complex64),
                                       rtol=2e-3, atol=2e-3, equal_nan=True)
        else:
            assert got.dtype == torch.pow(x, ex).dtype
            torch.testing.assert_close(got, exp, equal_nan=True)
    if dtype == torch.float32:
        out = torch.tensor(1j, device="trn")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's resize warning (a non-empty out=)
            torch.pow(x.to("trn"), 1j, out=out)
        torch.testing.assert_close(out.cpu(), torch.pow(x.to(torch.complex64), 1j), equal_nan=True)


@pytest.mark.parametrize("op", ["exp", "exp2", "expm1", "square", "sigmoid", "sin", "cos", "tan", "sinh", "cosh",
                                "tanh", "log1p"])
def test_complex_special_values_match_the_cpu(monkeypatch, op):
    """complex64 functions of infinite / NaN / signed-zero / huge planes take C99's values as the CPU's (glibc's
    cexpf, csinhf, ccoshf, ctanhf, csinf, ...) do, natively (upstream test_reference_numerics_extremal, test_exp):
    NaN placement, infinities and signs of zeros exactly, finite values to float32 rounding, over every pairing."""
    import itertools

    monkeypatch.setenv("TRN_FALLBACK", "error")
    inf, nan = float("inf"), float("nan")
    xs = [0.0, -0.0, 1.5, -1.5, 3.0, 80.0, -100.0, 1e30, inf, -inf, nan]
    z = torch.view_as_complex(torch.tensor([[x, y] for x, y in itertools.product(xs, xs)], dtype=torch.float32))
    fn = getattr(torch, op)

    def canon(t):
        r = torch.view_as_real(t.cpu())
        return torch.where(r.isnan(), torch.full_like(r, nan), r)

    want, got = canon(fn(z)), canon(fn(z.to("trn")))
    assert torch.equal(want.isnan(), got.isnan()) and torch.equal(want.isinf(), got.isinf())
    tiny = want.abs() < 1e-30  # zeros (and denormal-range values): the sign must match
    assert torch.equal(want.signbit()[~want.isnan() & ~tiny], got.signbit()[~want.isnan() & ~tiny])
    assert torch.equal(want[tiny & ~want.isnan()].signbit(), got[tiny & ~want.isnan()].signbit())
    torch.testing.assert_close(got, want, rtol=4e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("op", ["atan", "atanh"])
@pytest.mark.parametrize("scale", [1e3, 1e9, 1e12, 1e20, 1e38])
def test_complex_atan_far_out_matches_the_cpu(monkeypatch, op, scale):
    """atan / atanh of large complex64 values (upstream test_reference_numerics_large): the squares of the plane
    formula overflowed to NaN past |z| ~ 1e19; far out atanh z = 1/z + i pi/2 sign(Im z)."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    g = torch.Generator().manual_seed(0)
    z = torch.view_as_complex((torch.rand(4000, 2, generator=g) * 2 - 1) * scale)
    fn = getattr(torch, op)
    torch.testing.assert_close(fn(z.to("trn")).cpu(), fn(z), rtol=2e-6, atol=1e-5)
