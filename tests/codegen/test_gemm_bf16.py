"""bf16 matmul on AMX-BF16 tiles / AVX512-BF16 dot products (``codegen/mathlib/gemm_bf16.py``) and its use by
``nc_matmul``.

The gemm kinds this host can run are checked directly against torch's fp32 product of the same bf16
values (sizes 0, 1, ragged edges, transposed and strided operands, accumulation); kernels with bf16
``nc_matmul`` are checked against the interpreter and the ``trn`` device's bf16 ``mm``/``bmm``/``addmm``
against torch's CPU bf16 ops, on the process's ISA path (``tests/codegen/test_isa.py`` runs this file
under every path the host can force).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang as trn
import trnlang.language as tl
from codegen import isa
from codegen.lowering.plan import Plan
from codegen.mathlib.gemm_bf16 import BF16_CONFIGS, GemmBf16, default_gemm_bf16, runnable_kinds

_KINDS = list(runnable_kinds())


def _check(kind: str, m: int, n: int, k: int, trans: bool, accumulate: bool, pad: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(k, m + pad, generator=g)[:, :m] if trans else torch.randn(m, k + pad, generator=g)[:, :k]
    a = a.bfloat16()
    b = torch.randn(k, n + pad, generator=g).bfloat16()[:, :n]
    ref = ((a.float().T if trans else a.float()) @ b.float()).double().numpy()
    base = np.full((m, n + pad), 0.5, np.float32)
    out = base[:, :n]  # a strided output (ldo > n) whose padding must stay untouched
    default_gemm_bf16(kind).matmul(a, b, out=out, accumulate=accumulate, a_transposed=trans)
    want = ref + (0.5 if accumulate else 0.0)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4 * max(1.0, float(np.abs(ref).max(initial=0))))
    np.testing.assert_array_equal(base[:, n:], 0.5)


@pytest.mark.parametrize("kind", _KINDS)
@pytest.mark.parametrize("mnk", [(0, 3, 4), (3, 0, 4), (3, 4, 0), (1, 1, 1), (16, 16, 32), (33, 17, 65),
                                 (128, 512, 128), (100, 70, 600)])
@pytest.mark.parametrize("trans", [False, True])
def test_gemm_bf16_matches_fp32_product(kind, mnk, trans):
    m, n, k = mnk
    _check(kind, m, n, k, trans, accumulate=False, pad=0, seed=m + n + k)
    _check(kind, m, n, k, trans, accumulate=True, pad=3, seed=m * n + k)


@pytest.mark.parametrize("kind", _KINDS)
@settings(max_examples=15, deadline=None)
@given(m=st.integers(0, 80), n=st.integers(0, 80), k=st.integers(0, 140), trans=st.booleans(),
       accumulate=st.booleans(), pad=st.integers(0, 5))
def test_gemm_bf16_any_shape(kind, m, n, k, trans, accumulate, pad):
    _check(kind, m, n, k, trans, accumulate, pad, seed=m * 1000 + n * 10 + k)


def test_blocking_covers_several_cache_blocks():
    """Products bigger than one KC x NC / MC block (the driver's loops and the K-block accumulation)."""
    for kind in _KINDS:
        c = BF16_CONFIGS[kind]
        _check(kind, c.mc + 5, c.nc + 17, c.kc + 33, trans=False, accumulate=False, pad=1, seed=7)


def test_kinds_wider_than_the_path_are_refused_with_a_clear_error():
    """A forced narrower path compiles without the wider features: building such a kind would abort in LLVM."""
    for kind in ("amx", "avx512bf16"):
        if kind not in runnable_kinds():
            with pytest.raises(ValueError, match=f"kind '{kind}' is not available on ISA path"):
                GemmBf16(kind)
    assert set(runnable_kinds()) <= {"amx", "avx512bf16"}
    assert ("avx512bf16" in runnable_kinds()) == (isa.selected().name in ("amx", "avx512bf16"))


def test_selected_path_has_a_bf16_kind_when_the_host_does():
    p = isa.selected()
    assert p.bf16 == (p.name if p.name in ("amx", "avx512bf16") else "widen")
    if p.name == "amx":
        assert isa.request_amx() and isa.amx_refusal() is None


def test_refused_amx_permission_falls_back_with_the_reason(monkeypatch):
    monkeypatch.setattr(isa, "_amx_state", ["arch_prctl(...) refused: Operation not permitted"])
    amx = isa.path_for({"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512bf16", "amx-tile", "amx-bf16"},
                       "x86_64")
    assert amx.name == "amx"
    with pytest.warns(RuntimeWarning, match="AMX path not taken: arch_prctl.*refused"):
        got = isa._granted(amx, set())
    assert got.name == "avx512bf16" and got.bf16 == "avx512bf16"


@trn.kernel
def mm_bf16(a, b, out):
    """out = a @ b (bf16 in, fp32 out) with 128 x 128 x 256 tiles and masked ragged edges."""
    m, k = a.shape
    n = b.shape[1]
    ragged = m % 128 or k % 128 or n % 256
    for i in tl.affine_range(tl.cdiv(m, 128)):
        for j in tl.affine_range(tl.cdiv(n, 256)):
            acc = tl.zeros((128, 256), tl.float32, buffer=tl.psum)
            im = i * 128 + tl.arange(128)[:, None]
            jn = j * 256 + tl.arange(256)[None, :]
            for kk in tl.affine_range(tl.cdiv(k, 128)):
                kc = kk * 128 + tl.arange(128)[None, :]
                kr = kk * 128 + tl.arange(128)[:, None]
                at = tl.load(a[im, kc], mask=(im < m) & (kc < k) if ragged else None)
                bt = tl.load(b[kr, jn], mask=(kr < k) & (jn < n) if ragged else None)
                acc += tl.matmul(at, bt)
            tl.store(out[im, jn], acc, mask=(im < m) & (jn < n) if ragged else None)


@pytest.mark.parametrize("shape", [(130, 200, 300), (1, 1, 1), (256, 128, 256)])
def test_bf16_kernel_matches_interpreter(shape, monkeypatch):
    m, k, n = shape
    g = torch.Generator().manual_seed(m + k + n)
    a, b = torch.randn(m, k, generator=g).bfloat16(), torch.randn(k, n, generator=g).bfloat16()
    res = {}
    for interp in (False, True):
        if interp:
            monkeypatch.setenv("TRN_INTERPRET", "1")
        else:
            monkeypatch.delenv("TRN_INTERPRET", raising=False)
        out = torch.zeros(m, n)
        mm_bf16(a.clone(), b.clone(), out)
        res[interp] = out.double().numpy()
    ref = (a.double() @ b.double()).numpy()
    np.testing.assert_allclose(res[False], ref, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(res[False], res[True], rtol=1e-5, atol=1e-4)


def test_bf16_operands_are_read_in_place_on_a_bf16_path():
    """On a path with a bf16 gemm the transpose chain and the HBM loads of bf16 tiles are skipped, as for fp32."""
    a, b, out = torch.zeros(256, 256).bfloat16(), torch.zeros(256, 512).bfloat16(), torch.zeros(256, 512)
    plan = Plan(mm_bf16.trace(a, b, out), (1,))
    (mo,) = plan.mm_ops.values() if plan.mm_ops else (None,)
    if isa.selected().bf16 == "widen":
        assert mo is None or (mo.transpose is None and mo.v_load is None)
    else:
        assert mo is not None and mo.transpose is not None and mo.a_load is not None and mo.v_load is not None


@pytest.fixture(scope="module")
def trn_device():
    import trnlang.device as td

    td.register()
    return td


@pytest.mark.parametrize("mkn", [(1, 1, 1), (5, 7, 3), (130, 200, 515), (256, 256, 256), (1, 300, 700)])
@pytest.mark.parametrize("layout", ["nn", "tn", "nt"])
def test_trn_mm_bf16_matches_cpu(trn_device, mkn, layout):
    m, k, n = mkn
    g = torch.Generator().manual_seed(m * k + n)
    a = (torch.randn(k, m, generator=g).t() if layout == "tn" else torch.randn(m, k, generator=g)).bfloat16()
    b = (torch.randn(n, k, generator=g).t() if layout == "nt" else torch.randn(k, n, generator=g)).bfloat16()
    with warnings.catch_warnings():
        warnings.simplefilter("error", trn_device.FallbackWarning)
        got = (a.to("trn") @ b.to("trn")).cpu()
    ref = a @ b
    assert got.dtype == torch.bfloat16
    # both sum exact products in fp32 and round once to bf16: at most one bf16 ulp apart
    torch.testing.assert_close(got, ref, rtol=1e-2, atol=1e-2)


def test_trn_bmm_addmm_strided_bf16_match_cpu(trn_device):
    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(3, 70, 40, generator=g).bfloat16(), torch.randn(3, 40, 90, generator=g).bfloat16()
    torch.testing.assert_close(torch.bmm(x.to("trn"), y.to("trn")).cpu(), torch.bmm(x, y), rtol=1e-2, atol=1e-2)
    bias = torch.randn(90, generator=g).bfloat16()
    got = torch.addmm(bias.to("trn"), x[0].to("trn"), y[0].to("trn"), alpha=0.5, beta=2).cpu()
    torch.testing.assert_close(got, torch.addmm(bias, x[0], y[0], alpha=0.5, beta=2), rtol=1e-2, atol=2e-2)
    big = torch.randn(300, 400, generator=g).bfloat16()
    bt = big.to("trn")
    got = (bt[::2, 10:310] @ bt[:300, ::4]).cpu()
    torch.testing.assert_close(got, big[::2, 10:310] @ big[:300, ::4], rtol=1e-2, atol=1e-2)
