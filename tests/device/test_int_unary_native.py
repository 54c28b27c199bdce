"""Unary ops of integer, bool and complex64 tensors run natively in every layout (issue 22 item 2): int64 relu,
signbit and bitwise_not on the tensor's (low, high) int32 words (``_util.int32_words``: 0-dim, size 1,
transposed, strided and empty tensors), float-valued ops (sin, exp, erf, ...) of int64 by torch's promotion to
float32, sgn/round/square/logical_not of integers, logical_not of complex64. Compared with CPU torch under
``TRN_FALLBACK=error``."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from stdlib_kernels import _util as U


@pytest.fixture(autouse=True)
def _native_only(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


_BIG = torch.tensor([0, 1, -1, 2**31, -(2**31) - 1, 2**40 + 3, -(2**62), 2**63 - 1, -(2**63)])


def _layouts(x: torch.Tensor):
    """(cpu view, trn view of the same layout) pairs: as is, transposed, every other element."""
    yield x, x.to("trn")
    if x.dim() >= 2:
        yield x.t(), x.to("trn").t()
    if x.dim() >= 1 and x.shape[-1] > 1:
        yield x[..., ::2], x.to("trn")[..., ::2]


@settings(max_examples=12, deadline=None)
@given(shape=st.sampled_from([(), (1,), (0,), (5,), (3, 4), (2, 0), (1, 1)]), seed=st.integers(0, 2**16))
def test_int64_word_ops_any_layout(shape, seed):
    g = torch.Generator().manual_seed(seed)
    n = max(1, U.prod(shape))
    vals = _BIG[torch.randint(0, len(_BIG), (n,), generator=g)]
    x = vals[: U.prod(shape)].reshape(shape)
    for c, d in _layouts(x):
        for op in (torch.relu, torch.signbit, torch.bitwise_not):
            got, want = op(d).cpu(), op(c)
            assert got.dtype == want.dtype and torch.equal(got, want), (op, c)


def test_int32_words_alias_and_roundtrip():
    x = torch.tensor([[5, -2**40], [7, 2**33]]).to("trn").t()  # non-contiguous
    w = U.int32_words(x)
    assert w.shape == (2, 2, 2)
    assert torch.equal(w.cpu(), x.cpu().contiguous().view(torch.int32).view(2, 2, 2))
    assert torch.equal(U.from_int32_words(w).cpu(), x.cpu())
    s = torch.tensor(-3).to("trn")
    U.int32_words(s)[1].fill_(0)  # writes through: the high word of -3 cleared
    assert s.item() == 2**32 - 3
    with pytest.raises(TypeError, match="8-byte"):
        U.int32_words(torch.ones(2, dtype=torch.int32, device="trn"))


_FLOAT_OPS = [torch.sin, torch.exp, torch.log, torch.sqrt, torch.erf, torch.tanh, torch.sigmoid, torch.reciprocal,
              torch.lgamma]


@pytest.mark.parametrize("op", _FLOAT_OPS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape", [(), (1,), (3, 4), (0, 2)])
def test_float_ops_of_int64_promote(op, shape):
    x = torch.arange(-6, -6 + U.prod(shape)).reshape(shape) if shape else torch.tensor(3)
    got, want = op(x.to("trn")).cpu(), op(x)
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, equal_nan=True, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dt", [torch.int64, torch.int16, torch.int8, torch.uint8, torch.bool])
@pytest.mark.parametrize("op", [torch.sgn, torch.round, torch.square, torch.logical_not, torch.signbit, torch.sign],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("shape", [(), (1,), (3, 4)])
def test_integer_unary_vs_cpu(op, dt, shape):
    x = torch.randint(-5, 6, shape, generator=torch.Generator().manual_seed(1)).to(dt)
    try:
        want = op(x)
    except RuntimeError:
        pytest.skip("the CPU refuses this dtype")
    if op is torch.square and dt == torch.bool:
        pytest.skip("square of bool is int64 pow: not lowered")
    for c, d in _layouts(x):
        got, want = op(d).cpu(), op(c)
        assert got.dtype == want.dtype and torch.equal(got, want)


def test_logical_not_complex64_and_out():
    x = torch.tensor([0j, 1j, 2 + 0j, 0 * 1j, 3 - 1j], dtype=torch.complex64)
    assert torch.equal(torch.logical_not(x.to("trn")).cpu(), torch.logical_not(x))
    i = torch.tensor([0, 2**32, -1, 0])  # 2**32: low word 0, nonzero
    out = torch.empty(4, dtype=torch.bool, device="trn")
    torch.logical_not(i.to("trn"), out=out)
    assert torch.equal(out.cpu(), torch.logical_not(i))


@pytest.mark.parametrize("dt", [torch.int64, torch.int32, torch.uint8, torch.bool])
@pytest.mark.parametrize("op", [torch.angle, torch.logit, torch.nan_to_num, lambda x: torch.logit(x, 0.25)],
                         ids=["angle", "logit", "nan_to_num", "logit_eps"])
@pytest.mark.parametrize("shape", [(), (1,), (0,), (3, 4)])
def test_angle_logit_nan_to_num_of_integers(op, dt, shape):
    x = torch.randint(-3, 4, shape, generator=torch.Generator().manual_seed(5)).to(dt)
    for c, d in _layouts(x):
        got, want = op(d).cpu(), op(c)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_wide_unsigned_inputs_of_float_ops(dtype, monkeypatch):
    """uint16/32/64 inputs of ops torch computes in float32 (unary math, special functions, orthogonal polynomials,
    Bessel functions): a native cast to float32 first, as torch promotes them; values up to the type's maximum."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    top = {torch.uint16: 2**16 - 1, torch.uint32: 2**32 - 1, torch.uint64: 2**64 - 1}[dtype]
    x = torch.tensor([0, 1, 2, 7, 9, 100, top], dtype=dtype)
    fns = (torch.sin, torch.exp, torch.sqrt, torch.sigmoid, torch.erf, torch.lgamma, torch.digamma,
           torch.special.erfcx, torch.special.i0e, torch.special.bessel_j0, torch.special.ndtri,
           lambda t: torch.special.chebyshev_polynomial_t(t, t), lambda t: torch.special.hermite_polynomial_h(t, t),
           lambda t: torch.special.zeta(t[:-1], t[:-1]), lambda t: torch.polygamma(1, t))
    # (zeta at x = q = 2^64 - 1 is NaN on the CPU, 0 on trn: the largest uint64 is left out for it)
    for fn in fns:
        exp, got = fn(x), fn(x.to("trn")).cpu()
        assert got.dtype == exp.dtype == torch.float32
        torch.testing.assert_close(got, exp, equal_nan=True, rtol=2e-5, atol=1e-6)
