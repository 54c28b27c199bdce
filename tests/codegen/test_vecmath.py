"""Accuracy and special values of codegen.mathlib.vecmath through JIT-compiled map kernels."""

from __future__ import annotations

import numpy as np
import pytest
from llvmlite import ir

from codegen import llvm
from codegen.irutil import F32, VF32
from codegen.mathlib import vecmath
from codegen.mathlib.mapkernel import MapKernels, add_map_function
from tools.vecmath_accuracy import REFERENCES, SWEEPS, Sweep, measure, ulp_error

POINTS = 1 << 16

INF, NAN = np.inf, np.nan
SPECIAL = np.array(
    [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 1e-45, -1e-45, 1e-38, -1e-38, 1e-20, -1e-20, 3.0, -3.0, 20.0,
     -20.0, 20.5, 88.5, 88.72283, 88.72284, 89.0, -87.0, -103.0, -103.9, -104.0, -110.0, -150.0, 1e10, -1e10,
     3.4e38, -3.4e38, INF, -INF, NAN],
    dtype=np.float32,
)


@pytest.fixture(scope="module")
def kernels() -> MapKernels:
    return MapKernels()


@pytest.mark.parametrize("sweep", SWEEPS, ids=[f"{s.func}:{s.label}" for s in SWEEPS])
def test_sweep_ulp(kernels: MapKernels, sweep: Sweep) -> None:
    r = measure(kernels, sweep, POINTS)
    assert r.max_ulp <= sweep.bound, f"{sweep.func} {sweep.label}: {r.max_ulp:.2f} ulp at {r.worst}"


def _expected_special(name: str, x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        ref = REFERENCES[name](x.astype(np.float64))
    with np.errstate(over="ignore"):
        expected = ref.astype(np.float32)
    # the JIT follows the literal formulas (torch, the interpreter): x * 0 at -inf is NaN
    limits = {"silu": NAN, "gelu": NAN, "gelu_tanh": NAN, "sigmoid": 0.0, "softplus": 0.0}
    if name in limits:
        expected[x == -INF] = limits[name]
    if name in ("silu", "gelu", "gelu_tanh"):
        expected[x == INF] = INF
    if name == "sigmoid":
        expected[x == INF] = 1.0
    if name == "softplus":
        expected[x == INF] = INF
    return expected


@pytest.mark.parametrize("name", sorted(vecmath.UNARY))
def test_special_values(kernels: MapKernels, name: str) -> None:
    x = SPECIAL
    got = kernels(name, x)
    expected = _expected_special(name, x)
    # NaN exactly where expected, infinities and zeros (with sign) exact, the rest within 4 ulp
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected), err_msg=f"{name} NaN pattern, x={x}")
    exact = np.isinf(expected) | (expected == 0)
    assert np.array_equal(got[exact].view(np.int32), expected[exact].view(np.int32)), (
        name, x[exact], got[exact], expected[exact])
    finite = ~np.isnan(expected) & ~exact
    with np.errstate(all="ignore"):
        err = ulp_error(got[finite], REFERENCES[name](x[finite].astype(np.float64)))
    assert err.max(initial=0) <= 8, (name, x[finite], got[finite], err)


def test_special_exact_values(kernels: MapKernels) -> None:
    assert kernels("exp", np.array([0.0, 88.73, -104.0], np.float32)).tolist() == [1.0, INF, 0.0]
    assert kernels("exp", np.array([-103.0], np.float32))[0] > 0  # subnormal, not flushed
    assert kernels("log", np.array([1.0, 0.0, -1e-30], np.float32))[:2].tolist() == [0.0, -INF]
    assert np.isnan(kernels("log", np.array([-1e-30], np.float32))[0])
    assert kernels("tanh", np.array([10.0, -10.0, 100.0], np.float32)).tolist() == [1.0, -1.0, 1.0]
    assert kernels("erf", np.array([INF, -INF, 4.0], np.float32)).tolist() == [1.0, -1.0, 1.0]
    assert kernels("softplus", np.array([20.5, 30.0], np.float32)).tolist() == [20.5, 30.0]
    assert kernels("rsqrt", np.array([4.0, 0.0, INF], np.float32)).tolist() == [0.5, INF, 0.0]


POW_VALUES = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, 2.5, -2.5, 1e-40, 1e30, -1e30,
                       1.7e38, 16777216.0, 16777217.0, INF, -INF, NAN], dtype=np.float32)


def test_pow_special_grid(kernels: MapKernels) -> None:
    x, y = np.meshgrid(POW_VALUES, POW_VALUES, indexing="ij")
    x, y = x.ravel(), y.ravel()
    got = kernels("power", x, y)
    with np.errstate(all="ignore"):
        expected = np.power(x, y)  # numpy float32 power follows C powf
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    exact = np.isinf(expected) | (expected == 0) | np.isnan(expected)
    mism = exact & ~np.isnan(expected) & (got.view(np.int32) != expected.view(np.int32))
    assert not mism.any(), list(zip(x[mism], y[mism], got[mism], expected[mism]))
    with np.errstate(all="ignore"):
        err = ulp_error(got[~exact], np.power(x[~exact].astype(np.float64), y[~exact].astype(np.float64)))
    assert err.max(initial=0) <= 1


def test_fmod_special_grid(kernels: MapKernels) -> None:
    vals = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 7.0, -7.0, 1e-45, 1e-40, 3e38, -3e38, 1e20, 0.1, INF, -INF,
                     NAN], dtype=np.float32)
    x, y = np.meshgrid(vals, vals, indexing="ij")
    x, y = x.ravel(), y.ravel()
    got = kernels("fmod", x, y)
    with np.errstate(all="ignore"):
        expected = np.fmod(x, y)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    ok = np.isnan(expected) | (got.view(np.int32) == expected.view(np.int32))
    assert ok.all(), list(zip(x[~ok], y[~ok], got[~ok], expected[~ok]))


def test_fmod_huge_quotients(kernels: MapKernels) -> None:
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(4099) * 10.0 ** rng.uniform(-30, 38, 4099)).astype(np.float32)
    y = (rng.standard_normal(4099) * 10.0 ** rng.uniform(-40, 5, 4099)).astype(np.float32)
    got = kernels("fmod", x, y)
    expected = np.fmod(x, y)
    assert np.array_equal(got.view(np.int32), expected.view(np.int32))


@pytest.mark.parametrize("name", sorted(vecmath.UNARY))
def test_scalar_tail_matches_vector_body(kernels: MapKernels, name: str) -> None:
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.uniform(-5, 5, 61), SPECIAL]).astype(np.float32)
    x = x[np.abs(x) < 1e9] if name in ("sin", "cos") else x
    whole = kernels(name, x)  # mostly the 8-wide body
    one_by_one = np.concatenate([kernels(name, x[i:i + 1]) for i in range(x.size)])  # scalar tail only
    assert np.array_equal(whole.view(np.int32), one_by_one.view(np.int32))


def test_binary_scalar_tail_matches_vector_body(kernels: MapKernels) -> None:
    rng = np.random.default_rng(5)
    x = rng.uniform(-5, 5, 37).astype(np.float32)
    y = rng.uniform(-3, 3, 37).astype(np.float32)
    for name in ("power", "fmod"):
        whole = kernels(name, x, y)
        single = np.concatenate([kernels(name, x[i:i + 1], y[i:i + 1]) for i in range(x.size)])
        assert np.array_equal(whole.view(np.int32), single.view(np.int32)), name


def test_inline_and_vectorized() -> None:
    """The emitters expand to inline SIMD code: no calls (but sin/cos's rare large-argument helper)."""
    module = ir.Module("chk")
    for name, emit in vecmath.UNARY.items():
        add_map_function(module, f"k_{name}", emit, 1)
    asm = llvm.emit_assembly(llvm.optimize(llvm.build(module)))
    assert "vfmadd" in asm and "ymm" in asm
    calls = [ln for ln in asm.splitlines() if ln.strip().startswith(("call", "jmp")) and "trn_vecmath" not in ln
             and ".LBB" not in ln]
    assert not calls, calls[:5]


def test_fused_chain_single_function() -> None:
    """Several emitters chained in one loop body (what the lowering will do)."""
    module = ir.Module("chain")

    def chain(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        return vecmath.emit_tanh(b, vecmath.emit_log1p(b, vecmath.emit_exp(b, x)))

    add_map_function(module, "chain", chain, 1)
    k = MapKernels({"chain": (chain, 1)})
    x = np.linspace(-5, 5, 1003).astype(np.float32)
    ref = np.tanh(np.log1p(np.exp(x.astype(np.float64))))
    assert ulp_error(k("chain", x), ref).max() <= 6


def test_emitters_accept_scalar_and_vector_types() -> None:
    for ty in (F32, VF32):
        module = ir.Module("types")
        fn = ir.Function(module, ir.FunctionType(ty, [ty, ty]), "f")
        b = ir.IRBuilder(fn.append_basic_block())
        x, y = fn.args
        acc = x
        for emit in vecmath.UNARY.values():
            acc = b.fadd(acc, emit(b, x))
        acc = b.fadd(acc, vecmath.emit_pow(b, x, y))
        acc = b.fadd(acc, vecmath.emit_fmod(b, x, y))
        b.ret(acc)
        llvm.build(module)  # verifies


def test_exp_precise_matches_float64_oracle(kernels: MapKernels) -> None:
    """emit_exp_precise is bit-identical to np.exp in float64 rounded once (the interpreter's oracle)."""
    x = np.concatenate([np.linspace(-110, 95, 1 << 20).astype(np.float32), SPECIAL])
    got = kernels("exp_precise", x)
    with np.errstate(over="ignore"):
        ref = np.exp(x.astype(np.float64)).astype(np.float32)
    same = (got.view(np.int32) == ref.view(np.int32)) | (np.isnan(got) & np.isnan(ref))
    assert same.all(), x[~same][:10]


@pytest.mark.parametrize("name", ["exp", "sigmoid", "tanh", "silu", "gelu_tanh", "softplus"])
def test_power_of_two_scaling_paths_agree_bitwise(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """``Ops.scale2``: ``llvm.ldexp`` (one ``vscalefps`` on AVX-512 paths) and the two exact power-of-two factors
    (other paths) give the same bits, subnormal and overflowing results included, vector body and scalar tail."""
    from codegen.mathlib import vecmath_ops

    ops = {name: (vecmath.UNARY[name], 1)}
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(20001).astype(np.float32) * 40,
                        np.linspace(-110.0, 95.0, 20001, dtype=np.float32), SPECIAL])
    got = {}
    for flag in (True, False):
        monkeypatch.setattr(vecmath_ops, "_ldexp_ok", lambda ty, flag=flag: flag)
        got[flag] = MapKernels(ops, prefix=f"sc{int(flag)}_")(name, x)
    assert np.array_equal(got[True].view(np.uint32), got[False].view(np.uint32))
