"""Type-promotion probes of PyTorch's ``test_binary_ufuncs.test_type_promotion`` run natively (issue 22).

Each case mixes dtypes, CPU 0-dim tensors, Python numbers and ``out=`` tensors of other dtypes the way the upstream
test does; with ``TRN_FALLBACK=error`` trn must give the CPU's result dtype and values, or raise the CPU's error:

- ``where`` with a CPU 0-dim bool condition (``torch._refs.xlogy`` / ``special.xlog1py`` build one for a 0-dim
  operand),
- the orthogonal polynomials with an integer tensor and a float CPU 0-dim tensor (a float32 result),
- real ``div`` / ``true_divide`` into a complex64 ``out=``,
- ``eq`` / ``ne`` of a real tensor and a complex number or complex CPU 0-dim tensor (compared in complex64),
- int64 shifts into an ``out=`` of another dtype (cast as torch casts; bool raises).
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

INTS = [torch.int16, torch.int32, torch.int64, torch.uint8]
FLOATS = [torch.float32, torch.float16, torch.bfloat16]


@pytest.fixture(autouse=True)
def _native(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRN_FALLBACK", "error")


def _on(v: Any, dev: str) -> Any:
    """A tensor moved to ``dev`` unless it is a 0-dim CPU tensor (those stay: torch's CPU-scalar rule)."""
    if isinstance(v, torch.Tensor) and v.dim() > 0:
        return v.to(dev)
    return v


def _same(fn: Callable[..., Any], *args: Any, out_dtype: torch.dtype | None = None) -> None:
    """``fn`` on trn equals ``fn`` on the CPU: values, dtype, or the same error type and message start."""
    def call(dev: str) -> Any:
        kw = {"out": torch.empty(args[0].shape if isinstance(args[0], torch.Tensor) else (4,), dtype=out_dtype,
                                 device=dev)} if out_dtype is not None else {}
        return fn(*(_on(a, dev) for a in args), **kw)

    try:
        want = call("cpu")
    except (RuntimeError, TypeError, NotImplementedError) as e:
        with pytest.raises(type(e), match=str(e).split("\n")[0][:40].replace("(", r"\(").replace(")", r"\)")):
            call("trn")
        return
    got = call("trn")
    assert got.device.type == "trn" and got.dtype == want.dtype
    tol = {"atol": 1e-5, "rtol": 1e-5} if want.dtype in (torch.float32, torch.complex64) else {}  # else dtype's
    torch.testing.assert_close(got.cpu(), want, equal_nan=True, **tol)


def _vals(dtype: torch.dtype, n: int = 6, lo: int = -4) -> torch.Tensor:
    if dtype == torch.uint8:
        lo = 0
    return torch.arange(lo, lo + n).to(dtype)


@pytest.mark.parametrize("fn", [torch.xlogy, torch.special.xlog1py])
@pytest.mark.parametrize("dtype", INTS[:3] + FLOATS)
@pytest.mark.parametrize("other", [torch.tensor(3.5), torch.tensor(2), torch.tensor(float("nan")), 0.5])
def test_xlogy_with_a_cpu_scalar(fn: Callable[..., Any], dtype: torch.dtype, other: Any) -> None:
    _same(fn, _vals(dtype), other)
    if isinstance(other, torch.Tensor):
        _same(fn, other, _vals(dtype).abs())


@pytest.mark.parametrize("cond", [True, False])
def test_where_with_a_cpu_scalar_condition(cond: bool) -> None:
    x = torch.arange(6.0)
    _same(torch.where, torch.tensor(cond), x, x * 2)
    _same(torch.where, torch.tensor(cond), float("nan"), x)
    _same(torch.where, torch.tensor(cond), x, 3)


@pytest.mark.parametrize("fn", [torch.special.chebyshev_polynomial_t, torch.special.hermite_polynomial_h,
                                torch.special.legendre_polynomial_p, torch.special.laguerre_polynomial_l])
@pytest.mark.parametrize("dtype", INTS)
def test_polynomials_promote_an_integer_tensor_beside_a_float_scalar(fn: Callable[..., Any],
                                                                      dtype: torch.dtype) -> None:
    _same(fn, _vals(dtype, lo=0) / 8 if dtype == torch.float32 else _vals(dtype, lo=0), torch.tensor(3.0))
    _same(fn, torch.tensor(0.25), _vals(dtype, lo=0))
    _same(fn, _vals(dtype, lo=0), torch.tensor(3))  # both integral: the default float dtype


@pytest.mark.parametrize("fn", [torch.div, torch.true_divide])
@pytest.mark.parametrize("dtypes", [(torch.int16, torch.int32), (torch.float32, torch.int64),
                                    (torch.float16, torch.float16)])
def test_real_division_into_a_complex_out(fn: Callable[..., Any], dtypes: tuple[torch.dtype, ...]) -> None:
    a, b = _vals(dtypes[0]), _vals(dtypes[1], lo=1)
    _same(fn, a, b, out_dtype=torch.complex64)
    _same(fn, a, b, out_dtype=torch.int64)  # float result into an integer out=: torch's error


@pytest.mark.parametrize("fn", [torch.eq, torch.ne])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.uint8,
                                   torch.bool])
@pytest.mark.parametrize("other", [complex(1, 1), complex(2, 0), torch.tensor(2 + 0j),
                                   torch.tensor(1 + 0j, dtype=torch.complex128),
                                   torch.tensor(2 + 1j, dtype=torch.complex128)])
def test_real_tensor_against_a_complex_number(fn: Callable[..., Any], dtype: torch.dtype, other: Any,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    if isinstance(other, torch.Tensor) and other.dtype == torch.complex128:
        monkeypatch.setenv("TRN_FALLBACK", "f64only")  # a complex128 operand is the documented fallback class
    x = _vals(dtype, lo=0)
    _same(fn, x, other)
    _same(fn, x, other, out_dtype=torch.bool)


@pytest.mark.parametrize("fn", [torch.bitwise_left_shift, torch.bitwise_right_shift])
@pytest.mark.parametrize("dtypes", [(torch.int32, torch.int64), (torch.int64, torch.int8), (torch.int64, torch.int64)])
@pytest.mark.parametrize("out_dtype", [torch.int16, torch.uint8, torch.float16, torch.float32, torch.complex64,
                                       torch.bool])
def test_int64_shift_into_another_dtype(fn: Callable[..., Any], dtypes: tuple[torch.dtype, ...],
                                        out_dtype: torch.dtype) -> None:
    a = torch.tensor([1, -3, 1 << 40, 7, -(1 << 35), 0]).to(dtypes[0])
    b = torch.tensor([0, 1, 3, 40, 2, 63]).to(dtypes[1])
    _same(fn, a, b, out_dtype=out_dtype)


@pytest.mark.parametrize("num", [-2.5j, 1 + 1j, 3.3j, 0j])
def test_complex32_tensor_powers(num: complex) -> None:
    """``complex32 ** float16`` and friends (upstream test_pow float16): computed in complex64 and rounded once, as
    CUDA's ComplexHalf kernels compute (the CPU has no ComplexHalf pow)."""
    m = torch.rand(12, generator=torch.Generator().manual_seed(1)).half() + 0.5
    b = torch.tensor(num, dtype=torch.complex32)

    def ref(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        up = {torch.complex32: torch.complex64, torch.float16: torch.float32}
        return (x.to(up[x.dtype]) ** y.to(up[y.dtype])).to(torch.complex32)

    for x, y in ((b, m), (m, b), (b.expand(12).contiguous(), m)):
        got = (x.to("trn") ** y.to("trn")).cpu()
        assert got.dtype == torch.complex32
        assert torch.equal(torch.view_as_real(got), torch.view_as_real(ref(x, y)))


@pytest.mark.parametrize("out_dtype", [torch.complex64, torch.complex128])
def test_heaviside_refuses_a_complex_out_even_of_real_operands(monkeypatch, out_dtype):
    """heaviside into a complex out= raises torch's error before computing, real operands too (the real result was
    cast into it: upstream test_heaviside_complex); a real out of another dtype still takes the cast result."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    x = torch.tensor([-1.0, 0.0, 2.0], device="trn")
    with pytest.raises(RuntimeError, match="heaviside is not yet implemented for complex tensors"):
        torch.heaviside(x, x, out=torch.empty(3, dtype=out_dtype, device="trn"))
    o = torch.empty(3, dtype=torch.float16, device="trn")
    torch.heaviside(x, torch.tensor([0.5], device="trn"), out=o)
    assert torch.equal(o.cpu(), torch.tensor([0.0, 0.5, 1.0], dtype=torch.float16))
