"""An op's ``out=`` variant is routed to the lowering of the overload it belongs to (its argument names *and
types* match), so ``clamp(x, min_tensor, out=o)`` runs ``clamp.Tensor``'s lowering, not ``clamp``'s (Scalar
bounds), and every overload with an ``out=`` form gets one (issue 22: ``clamp.Tensor_out`` had none).
"""

import pytest
import torch

import stdlib_kernels
from trnlang.device.registry import REGISTRY, resolve

stdlib_kernels.register_all()


@pytest.mark.parametrize("out_op, functional", [
    ("aten::clamp.Tensor_out", "aten::clamp.Tensor"), ("aten::clamp.out", "aten::clamp"),
    ("aten::pow.Tensor_Tensor_out", "aten::pow.Tensor_Tensor"), ("aten::pow.Scalar_out", "aten::pow.Scalar"),
    ("aten::where.self_out", "aten::where.self"), ("aten::eq.Tensor_out", "aten::eq.Tensor"),
])
def test_out_variant_routed_from_its_own_overload(out_op, functional):
    ent = REGISTRY[out_op]
    assert ent.routed_from == functional
    out_args = [(a.name, str(a.type)) for a in resolve(out_op)._schema.arguments if not a.kwarg_only]
    fn_args = [(a.name, str(a.type)) for a in resolve(functional)._schema.arguments if not a.kwarg_only]
    assert out_args == fn_args


def _native(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


@pytest.mark.parametrize("case", ["clamp_tensor", "clamp_scalar", "pow_tensor", "eq_tensor", "where"])
def test_out_variants_vs_cpu(case, monkeypatch):
    _native(monkeypatch)
    g = torch.Generator().manual_seed(0)
    x, lo, hi = (torch.randn(4, 5, generator=g) for _ in range(3))
    fns = {
        "clamp_tensor": lambda d, o: torch.clamp(x.to(d), lo.to(d), hi.to(d), out=o),
        "clamp_scalar": lambda d, o: torch.clamp(x.to(d), -0.5, 0.5, out=o),
        "pow_tensor": lambda d, o: torch.pow(x.abs().to(d), lo.to(d), out=o),
        "eq_tensor": lambda d, o: torch.eq(x.to(d), x.to(d).round(), out=o),
        "where": lambda d, o: torch.where(x.to(d) > 0, lo.to(d), hi.to(d), out=o),
    }
    dt = torch.bool if case == "eq_tensor" else torch.float32
    want = fns[case]("cpu", torch.empty(4, 5, dtype=dt))
    o = torch.empty(4, 5, dtype=dt, device="trn")
    got = fns[case]("trn", o)
    assert got is o
    torch.testing.assert_close(o.cpu(), want)


def test_clamp_without_bounds_raises_torchs_error(monkeypatch):
    _native(monkeypatch)
    for dev in ("cpu", "trn"):
        x = torch.ones(3, device=dev)
        for call in (lambda: torch.clamp(x), lambda: torch.clamp(x, out=torch.empty_like(x)), lambda: x.clamp_()):
            with pytest.raises(RuntimeError, match="At least one of 'min' or 'max' must not be None"):
                call()


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64])
def test_non_empty_out_of_another_shape_is_resized_with_torchs_warning(dtype, monkeypatch):
    """A non-empty ``out=`` of another shape (upstream test_lerp's 0-dim out) is resized as torch resizes it, with
    the same deprecation warning; an out that is also an input still raises torch's broadcast error."""
    import warnings

    monkeypatch.setenv("TRN_FALLBACK", "error")
    s, e, w = (torch.randn(5, 5, dtype=dtype) for _ in range(3))
    for fn, args in ((torch.lerp, (s, e, w)), (torch.lerp, (s, e, 0.25)), (torch.add, (s, e)), (torch.mul, (s, w))):
        got, exp = torch.tensor(1.0, dtype=dtype, device="trn"), torch.tensor(1.0, dtype=dtype)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            fn(*[a.to("trn") if isinstance(a, torch.Tensor) else a for a in args], out=got)
        fn(*args, out=exp)
        assert [str(r.message)[:60] for r in rec if "resized" in str(r.message)] == \
            ["An output with one or more elements was resized since it had"]
        torch.testing.assert_close(got.cpu(), exp)
    a = torch.ones(3, dtype=dtype, device="trn")
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        torch.add(a, torch.ones(2, 3, dtype=dtype, device="trn"), out=a)


def test_unary_and_binary_out_resize_warnings_match_cpu(monkeypatch):
    """upstream test_out_resize_warning: no warning for a right-shaped or empty out=, one for another shape (unary
    ceil/exp too), multi-dim outs resized to the broadcast shape."""
    import warnings

    monkeypatch.setenv("TRN_FALLBACK", "error")
    for dev in ("cpu", "trn"):
        a, b = torch.tensor((1.0, 2.0, 3.0), device=dev), torch.tensor((4.0, 5.0, 6.0), device=dev)
        for op in (torch.ceil, torch.exp, torch.add, torch.sub):
            ins = (a,) if op in (torch.ceil, torch.exp) else (a, b)
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                op(*ins, out=torch.empty(3, device=dev))
                op(*ins, out=torch.empty(0, device=dev))
                assert len(w) == 0, (dev, op)
                op(*ins, out=torch.empty(2, device=dev))
                assert len(w) == 1, (dev, op)
        for a1, a2, o in zip((torch.ones(2, 1, device=dev), torch.ones(1, device=dev)),
                             (torch.ones(2, device=dev), torch.ones(1, 1, device=dev)),
                             (torch.ones(2, 1, 1, 1, device=dev), torch.ones(2, 2, 2, 2, device=dev))):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                torch.mul(a1, a2, out=o)
            assert len(w) == 1 and o.shape == torch.broadcast_shapes(a1.shape, a2.shape), (dev, o.shape)


def test_out_of_a_wider_dtype_gets_the_result_dtypes_value(monkeypatch):
    """torch computes in the result dtype, then casts into out=: uint8/int8 results wrap before an int64/int32 out,
    a bf16 sum rounds before a float32 out (upstream test_pow_scalar_type_promotion)."""
    import warnings

    monkeypatch.setenv("TRN_FALLBACK", "error")
    x = torch.tensor([1.001, 2.003, 3.007], dtype=torch.bfloat16)
    y = torch.tensor([0.0011, 0.0013, 0.0017], dtype=torch.bfloat16)
    i8 = torch.tensor([100, 120, -77], dtype=torch.int8)
    cases = [(lambda o, d: torch.pow(2, torch.tensor([17, 3], dtype=torch.uint8, device=d), out=o), torch.int64),
             (lambda o, d: torch.add(x.to(d), y.to(d), out=o), torch.float32),
             (lambda o, d: torch.mul(i8.to(d), i8.to(d), out=o), torch.int32),
             (lambda o, d: torch.pow(2, torch.tensor([17], dtype=torch.int64, device=d), out=o), torch.int64)]
    for fn, odt in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a 0-dim out= is resized, with torch's warning
            exp, got = torch.tensor(0, dtype=odt), torch.tensor(0, dtype=odt, device="trn")
            fn(exp, "cpu")
            fn(got, "trn")
        assert got.dtype == exp.dtype and torch.equal(got.cpu(), exp), (got.cpu(), exp)


@pytest.mark.parametrize("fn", [torch.add, torch.sub, torch.maximum, torch.atan2, torch.fmod, torch.copysign,
                                torch.lt, torch.eq, torch.mul])
@pytest.mark.parametrize("out_dtype", [torch.complex64, torch.float32, torch.int64])
def test_out_of_a_dtype_the_lowering_does_not_store(fn, out_dtype, monkeypatch):
    """An out= of a dtype outside the lowering's (complex64 for a real result, ...): the functional result cast into
    it natively, as torch casts; torch's cast error where it cannot (upstream test_type_promotion)."""
    import warnings

    monkeypatch.setenv("TRN_FALLBACK", "error")
    for dt in (torch.float32, torch.int32, torch.float16):
        x, y = torch.tensor([1.5, -2.25, 3.0]).to(dt), torch.tensor([0.5, 4.0, -1.0]).to(dt)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                exp = fn(x, y, out=torch.empty(0, dtype=out_dtype))
            except RuntimeError as e:
                with pytest.raises(RuntimeError, match=str(e)[:30]):
                    fn(x.to("trn"), y.to("trn"), out=torch.empty(0, dtype=out_dtype, device="trn"))
                continue
            got = fn(x.to("trn"), y.to("trn"), out=torch.empty(0, dtype=out_dtype, device="trn"))
        assert got.dtype == exp.dtype and torch.equal(got.cpu(), exp), (dt, got.cpu(), exp)
