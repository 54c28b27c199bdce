"""Unary ops in the dtypes PyTorch's test_unary_ufuncs probes, natively (issue 22), against the CPU.

- ``neg`` / ``sgn`` / ``conj_physical`` of complex32 (computed in complex64, rounded once; bit-identical here),
- ``bitwise_not`` of int8 / int16 / uint8,
- ``abs`` of a complex tensor into a float, half or complex ``out=`` (torch's cast rules and errors),
- ``square`` of bool (torch's ``pow(x, 2)``: int64),
- ``threshold`` of uint8 with a negative int threshold or value (torch's checked cast wraps down to -255).
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

torch_refs = pytest.importorskip("torch._refs")


@pytest.fixture(autouse=True)
def _native(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRN_FALLBACK", "error")


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.cpu()
    return torch.view_as_real(t) if t.is_complex() else t


def _c32(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.view_as_complex(torch.randn(n, 2, generator=g) * 4).to(torch.complex32)
    x[0] = 0
    return x


@pytest.mark.parametrize("fn", [torch.neg, torch.sgn, torch.conj_physical, torch_refs.conj_physical, torch_refs.neg])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "size1"])
def test_complex32_unary_bits(fn: Callable[..., Any], layout: str) -> None:
    x = _c32(600)
    x = {"contiguous": x, "transposed": x.reshape(20, 30).t(), "size1": x[:1]}[layout]
    assert torch.equal(_bits(fn(x.to("trn"))), _bits(fn(x)))


def test_complex32_out_and_in_place() -> None:
    x = _c32(50)
    out = torch.empty(50, dtype=torch.complex32, device="trn")
    torch.neg(x.to("trn"), out=out)
    assert torch.equal(_bits(out), _bits(-x))
    empty = torch.empty(0, dtype=torch.complex32, device="trn")
    torch.sgn(x.to("trn"), out=empty)
    assert torch.equal(_bits(empty), _bits(torch.sgn(x)))
    y = x.to("trn")
    y.neg_()
    assert torch.equal(_bits(y), _bits(-x))


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.uint8])
def test_bitwise_not_narrow_ints(dtype: torch.dtype) -> None:
    x = torch.tensor([0, 1, -1, 127, -128, 100, 5, 255, -200, 3]).to(dtype)
    assert torch.equal(torch.bitwise_not(x.to("trn")).cpu(), torch.bitwise_not(x))
    out = torch.empty(10, dtype=dtype, device="trn")
    torch.bitwise_not(x.to("trn"), out=out)
    assert torch.equal(out.cpu(), torch.bitwise_not(x))
    t = x.reshape(2, 5).t()
    assert torch.equal(torch.bitwise_not(t.to("trn")).cpu(), torch.bitwise_not(t))


@pytest.mark.parametrize("src", [torch.complex64, torch.complex32])
@pytest.mark.parametrize("odt", [torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.complex32,
                                 torch.int32, torch.bool])
def test_complex_abs_into_out(src: torch.dtype, odt: torch.dtype) -> None:
    x = torch.tensor([3 + 4j, -1j, 0, 1e4 + 1e4j], dtype=torch.complex64).to(src)
    try:
        want = torch.abs(x, out=torch.empty(4, dtype=odt))
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match=str(e)[:30]):
            torch.abs(x.to("trn"), out=torch.empty(4, dtype=odt, device="trn"))
        return
    out = torch.empty(4, dtype=odt, device="trn")
    torch.abs(x.to("trn"), out=out)
    torch.testing.assert_close(_bits(out), _bits(want))


def test_square_of_bool_is_int64() -> None:
    x = torch.tensor([True, False, True])
    got = torch.square(x.to("trn"))
    assert got.dtype == torch.int64 and torch.equal(got.cpu(), torch.square(x))
    out = torch.empty(3, device="trn")
    torch.square(x.to("trn"), out=out)
    assert torch.equal(out.cpu(), torch.square(x).float())


@pytest.mark.parametrize("th,v", [(-1, 5), (5, -5), (-255, 0), (2.5, 7), (True, 3), (0, 255), (300, 5), (-256, 0),
                                  (-1.5, 3), (5, 300)])
def test_threshold_uint8_checked_cast(th: Any, v: Any) -> None:
    x = torch.tensor([1, 200, 3, 0, 255], dtype=torch.uint8)
    try:
        want = torch.threshold(x, th, v)
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match="without overflow"):
            torch.threshold(x.to("trn"), th, v)
        assert "without overflow" in str(e)
        return
    assert torch.equal(torch.threshold(x.to("trn"), th, v).cpu(), want)


@pytest.mark.parametrize("fn", [torch.isposinf, torch.isneginf])
@pytest.mark.parametrize("odt", [torch.float32, torch.float64, torch.complex64, torch.int32, torch.bool])
def test_isposinf_out_must_be_bool(fn: Callable[..., Any], odt: torch.dtype) -> None:
    """torch refuses a non-bool out= of isposinf/isneginf for every dtype (the registry checks it before any cast
    or fallback)."""
    t = torch.tensor([float("inf"), -float("inf"), 1.2])
    out = torch.empty(3, dtype=odt, device="trn")
    if odt != torch.bool:
        with pytest.raises(RuntimeError, match="does not support non-boolean outputs"):
            fn(t.to("trn"), out=out)
        return
    fn(t.to("trn"), out=out)
    assert torch.equal(out.cpu(), fn(t))


def test_in_place_abs_of_complex_raises() -> None:
    """abs_ of a complex tensor raises torch's error (abs into a complex out= is allowed; abs_ is routed as out=self
    and had computed |z| in place; upstream test_abs_angle_complex_to_float)."""
    x = torch.tensor([1 + 2j, 3 - 1j], dtype=torch.complex64, device="trn")
    with pytest.raises(RuntimeError, match="In-place abs is not supported for complex tensors"):
        x.abs_()
    out = torch.empty(2, dtype=torch.complex64, device="trn")
    torch.abs(x, out=out)
    assert torch.equal(out.cpu(), torch.abs(x.cpu()).to(torch.complex64))
