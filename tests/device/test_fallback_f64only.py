"""TRN_FALLBACK=f64only: strict, except the documented float64/complex128 CPU fallback (warned, counted)."""

import warnings

import pytest
import torch

import trnlang.device as td
from tests.device.conftest import UNLOWERED, unlowered
from trnlang.device import fallback


def _eigvals(dtype):
    # nothing lowers the general eigenvalue problem: it always takes the CPU fallback
    a = torch.tensor([[2.0, -1.0, 0.5], [1.0, 3.0, 0.0], [0.0, 4.0, 1.0]], dtype=dtype)
    return a, torch.linalg.eigvals(a.to("trn"))


def test_f64only_refuses_float32_fallbacks(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "f64only")
    x = torch.ones(3, device="trn")
    assert torch.equal((x + x).cpu(), torch.full((3,), 2.0))  # native work is unaffected
    with pytest.raises(td.FallbackError, match=UNLOWERED + r" .*TRN_FALLBACK=f64only"):
        unlowered(x, x * 0.5)
    with pytest.raises(td.FallbackError, match="aten::_linalg_eigvals"):
        _eigvals(torch.float32)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
def test_f64only_lets_wide_calls_fall_back_with_a_warning(monkeypatch, dtype):
    monkeypatch.setenv("TRN_FALLBACK", "f64only")
    monkeypatch.setattr(fallback, "_warned", set())
    td.reset_fallback_stats()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        a, got = _eigvals(dtype)
    torch.testing.assert_close(got.cpu(), torch.linalg.eigvals(a))
    assert td.fallback_stats()["aten::_linalg_eigvals"] == 1
    assert any(issubclass(m.category, td.FallbackWarning) and "aten::_linalg_eigvals" in str(m.message) for m in w)


def test_f64only_counts_a_float64_dtype_argument_as_wide(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "f64only")
    calls = []
    monkeypatch.setattr(fallback, "note", lambda name, reason=fallback.NO_LOWERING, wide=False:
                        calls.append((name, wide)))
    x = torch.arange(6.0).reshape(2, 3)
    got = fallback.run_on_cpu(torch.ops.aten.logaddexp.default, (x.to("trn"), x.to("trn")), {})
    fallback.run_on_cpu(torch.ops.aten.sum.dim_IntList, (x.to("trn"), [1]), {"dtype": torch.float64})
    fallback.run_on_cpu(torch.ops.aten.cat.default, ([x.to("trn"), x.double().to("trn")],), {})
    assert calls == [("aten::logaddexp", False), ("aten::sum.dim_IntList", True), ("aten::cat", True)]
    torch.testing.assert_close(got.cpu(), torch.logaddexp(x, x))


def test_touches_wide():
    f32, f64 = torch.ones(1), torch.ones(1, dtype=torch.float64)
    assert not fallback.touches_wide((f32, 2.0, [f32]), {"dtype": torch.float16, "out": f32})
    assert fallback.touches_wide((f32,), {"out": f64})
    assert fallback.touches_wide((f32, torch.complex128), {})
    assert fallback.touches_wide(((f32, f64.to(torch.complex128)),), {})


def test_unknown_policy_is_refused(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "f32only")
    with pytest.raises(ValueError, match="f64only"):
        fallback.policy()


def test_f64only_counts_a_float64_result_as_wide(monkeypatch):
    """Integer true division under ``torch.set_default_dtype(torch.float64)`` (torch's
    ``float_double_default_dtype`` tests) makes float64 from int32 inputs: the documented float64 fallback, allowed
    and equal to the CPU; the same division with the float32 default stays native, and a fallback whose result is
    not float64 (an unlowered op on float32) is still refused."""
    monkeypatch.setenv("TRN_FALLBACK", "f64only")
    x = torch.tensor([7, -3, 0, 5], dtype=torch.int32)
    y = torch.tensor([2, 2, 4, -5], dtype=torch.int32)
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float64)
        got = torch.div(x.to("trn"), y.to("trn"))
        assert got.dtype == torch.float64
        torch.testing.assert_close(got.cpu(), torch.div(x, y))
        assert torch.equal(torch.lt(x.to("trn"), 2.5).cpu(), torch.lt(x, 2.5))  # compared in float64
    finally:
        torch.set_default_dtype(old)
    torch.testing.assert_close(torch.div(x.to("trn"), y.to("trn")).cpu(), torch.div(x, y))
    with pytest.raises(td.FallbackError, match=UNLOWERED):
        unlowered(torch.ones(3, device="trn"), torch.zeros(3, device="trn"))


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
def test_fallback_result_of_empty_inputs_is_its_own_storage(monkeypatch, dtype):
    """An empty result of the CPU fallback is not taken for a view of an empty input (both have no memory, address
    0): ``torch._refs.floor_divide`` on empty float64 tensors runs ``prims.sub``, a custom op whose aliasing check
    raised; a result that shares an input's storage would also see that input's later resize."""
    monkeypatch.setenv("TRN_FALLBACK", "f64only")
    x = torch.ones(0, dtype=dtype, device="trn")
    y = x * 2
    got = torch.sub(x, y)
    assert got.shape == (0,) and got.device.type == "trn"
    assert got.untyped_storage()._cdata not in (x.untyped_storage()._cdata, y.untyped_storage()._cdata)
    if dtype == torch.float64:
        import torch._refs as refs

        assert refs.floor_divide(x, y).shape == (0,)
