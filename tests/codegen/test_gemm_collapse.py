"""Matmul tile loops lowered to one gemm call (``trnlang/passes/collapse_gemm.py`` decides,
``codegen/lowering/gemm_collapse.py`` emits).

Each test checks which loops the pass folds (``plan.gemms`` of the variant's lowering plan) and that the
compiled results match numpy and the interpreter, including the cases that must keep the tile loops:
ragged (masked) tiles, tiles that do not walk K by one tile, an epilogue on the accumulator, aliased
output, and run-time bounds failures.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang as trn
import trnlang.language as tl
from codegen.lowering.kernel import all_loops
from codegen.lowering.plan import Plan
from tests.codegen.test_matmul_operands import (
    mm_transpose_x as mm_grid_tn,  # bench_jit's kernel: one program per 128 rows
)


@trn.kernel
def mm_nest(a, b, out, scale):
    """out = scale * (a @ b) in 128 x 128 x 256 tiles, the stdlib's loop structure (scale != 1: an epilogue)."""
    m, k = a.shape
    n = b.shape[1]
    tm, tk, tn = 128, 128, 256
    ragged = m % tm or k % tk or n % tn
    for i in tl.affine_range(tl.cdiv(m, tm)):
        for j in tl.affine_range(tl.cdiv(n, tn)):
            acc = tl.zeros((tm, tn), tl.float32, buffer=tl.psum)
            im = i * tm + tl.arange(tm)[:, None]
            jn = j * tn + tl.arange(tn)[None, :]
            for kk in tl.affine_range(tl.cdiv(k, tk)):
                kc = kk * tk + tl.arange(tk)[None, :]
                kr = kk * tk + tl.arange(tk)[:, None]
                at = tl.load(a[im, kc], mask=(im < m) & (kc < k) if ragged else None)
                bt = tl.load(b[kr, jn], mask=(kr < k) & (jn < n) if ragged else None)
                acc += tl.matmul(at, bt)
            res = acc if scale == 1.0 else tl.copy(acc) * scale
            tl.store(out[im, jn], res, mask=(im < m) & (jn < n) if ragged else None)


@trn.kernel
def mm_overlapping_k(a, b, out):
    """K tiles of 128 that advance by 64 (overlapping): a sum the whole-K gemm must not replace."""
    acc = tl.zeros((128, 256), tl.float32, buffer=tl.psum)
    for kk in tl.affine_range(3):
        at = tl.load(a[tl.arange(128)[:, None], kk * 64 + tl.arange(128)[None, :]])
        bt = tl.load(b[kk * 64 + tl.arange(128)[:, None], tl.arange(256)[None, :]])
        acc += tl.matmul(at, bt)
    tl.store(out[tl.arange(128)[:, None], tl.arange(256)[None, :]], acc)


def _matches(kernel: Any, args: list[np.ndarray], grid: tuple[int, ...], monkeypatch: Any) -> list[Any]:
    """What the ``collapse_gemm`` pass folds when ``kernel`` is lowered for ``args`` (contiguous): (nest loop
    count, has store) per collapsed loop not inside another collapsed one (the loops inside are planned too:
    the fallback of a failed corner check runs them)."""
    plan = Plan(kernel.trace(*args), grid)
    inner = {id(x) for g in plan.gemms.values() for lp in g.loops for x in all_loops(lp.body)}
    return [(len(g.nest), g.store is not None) for lid, g in plan.gemms.items() if lid not in inner]


def _run(launch: Any, args: list[np.ndarray], monkeypatch: Any, interpret: bool) -> list[np.ndarray]:
    if interpret:
        monkeypatch.setenv("TRN_INTERPRET", "1")
    else:
        monkeypatch.delenv("TRN_INTERPRET", raising=False)
    trn.config.refresh()
    arrs = [x.copy() for x in args]
    launch(*arrs)
    return arrs


def _check(launch: Any, args: list[np.ndarray], want: np.ndarray, monkeypatch: Any, out: int = 2) -> None:
    got = _run(launch, args, monkeypatch, interpret=False)[out]
    ref = _run(launch, args, monkeypatch, interpret=True)[out]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-3)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=2e-3)


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + sum(shape)).standard_normal(shape, dtype=np.float32)


def test_tile_nest_is_one_gemm(monkeypatch):
    a, b, out = _rand(256, 384), _rand(384, 512), np.zeros((256, 512), np.float32)
    assert _matches(mm_nest, [a, b, out, 1.0], (1,), monkeypatch) == [(2, True)]
    _check(lambda *x: mm_nest(*x, 1.0), [a, b, out], a.astype(np.float64) @ b, monkeypatch)


def test_epilogue_keeps_the_nest_and_folds_the_k_loop(monkeypatch):
    a, b, out = _rand(128, 512), _rand(512, 256), np.zeros((128, 256), np.float32)
    assert _matches(mm_nest, [a, b, out, 2.0], (1,), monkeypatch) == [(0, False)]
    _check(lambda *x: mm_nest(*x, 2.0), [a, b, out], 2.0 * (a.astype(np.float64) @ b), monkeypatch)


def test_ragged_tiles_are_not_folded(monkeypatch):
    a, b, out = _rand(130, 200), _rand(200, 300), np.zeros((130, 300), np.float32)
    assert _matches(mm_nest, [a, b, out, 1.0], (1,), monkeypatch) == []
    _check(lambda *x: mm_nest(*x, 1.0), [a, b, out], a.astype(np.float64) @ b, monkeypatch)


def test_tiles_that_do_not_walk_k_are_not_folded(monkeypatch):
    a, b, out = _rand(128, 256), _rand(256, 256), np.zeros((128, 256), np.float32)
    assert _matches(mm_overlapping_k, [a, b, out], (1,), monkeypatch) == []
    want = sum(a[:, 64 * k:64 * k + 128].astype(np.float64) @ b[64 * k:64 * k + 128] for k in range(3))
    _check(mm_overlapping_k, [a, b, out], want, monkeypatch)


def test_aliased_output_keeps_the_tiles(monkeypatch):
    """``out`` is ``a``: tile order matters (later tiles read rows earlier ones wrote), as in the interpreter."""
    a, b = _rand(256, 256), _rand(256, 256, seed=1)
    monkeypatch.delenv("TRN_INTERPRET", raising=False)
    trn.config.refresh()
    x = a.copy()
    mm_nest(x, b, x, 1.0)
    monkeypatch.setenv("TRN_INTERPRET", "1")
    trn.config.refresh()
    y = a.copy()
    mm_nest(y, b, y, 1.0)
    np.testing.assert_allclose(x, y, rtol=1e-4, atol=2e-3)


def test_checked_grid_kernel_folds_with_corner_checks(monkeypatch):
    a_t, b, out = _rand(384, 256), _rand(384, 512), np.zeros((256, 512), np.float32)
    got = _matches(mm_grid_tn, [a_t, b, out], (2,), monkeypatch)
    assert got[0] == (1, True)  # the N loop and its K loop: one gemm per program
    _check(mm_grid_tn[2], [a_t, b, out], a_t.T.astype(np.float64) @ b, monkeypatch)


def test_checked_grid_kernel_out_of_bounds_reports_like_the_interpreter(monkeypatch):
    """A grid one program too large: the corner check fails and the tile loops report the first bad tile."""
    a_t, b, out = _rand(256, 256), _rand(256, 256), np.zeros((256, 256), np.float32)
    msgs = []
    for interpret in (False, True):
        with pytest.raises(trn.BoundsError) as e:
            _run(mm_grid_tn[3], [a_t, b, out], monkeypatch, interpret=interpret)
        msgs.append(str(e.value).splitlines()[0])
    assert msgs[0] == msgs[1]
    assert "a_t" in msgs[0]


@settings(max_examples=5, deadline=None)
@given(mt=st.integers(1, 3), kt=st.integers(1, 4), nt=st.integers(1, 2))
def test_tile_counts(mt, kt, nt):
    """Whole tiles in every direction (1 tile included): folded to one gemm, equal to numpy."""
    a, b = _rand(128 * mt, 128 * kt), _rand(128 * kt, 256 * nt, seed=2)
    out = np.zeros((128 * mt, 256 * nt), np.float32)
    mm_nest(a, b, out, 1.0)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=2e-3)


def test_bf16_operands(monkeypatch):
    """bf16 tiles (the bf16 gemm where the ISA path has one): the folded loops sum the same exact products."""
    torch = pytest.importorskip("torch")
    a = torch.randn(256, 512).bfloat16()
    b = torch.randn(512, 512).bfloat16()
    out = torch.zeros(256, 512)
    mm_nest(a, b, out, 1.0)
    want = a.double() @ b.double()
    assert torch.allclose(out.double(), want, rtol=1e-4, atol=2e-3)


def _layout_plan(args: list[Any]) -> Any:
    from trnlang.runtime.jit import layout_of

    return Plan(mm_nest.trace(*args), (1,), layouts=[layout_of(x) for x in args[:3]])


@pytest.mark.parametrize("a_t,b_t", [(False, True), (True, False), (True, True)])
def test_transposed_operands_fold(monkeypatch, a_t, b_t):
    """``x @ w.T`` (nn.Linear), ``x.T @ dy`` (a weight gradient) and both: operand tiles whose rows have the unit
    stride are read in place as their transposes (fp32: the ``_vt`` gemm entries for the moving operand), so the
    nest is one gemm as for row-major operands; results equal numpy and the interpreter. The leading dimensions
    are wider than the operands (views of bigger arrays)."""
    a = _rand(384 + 5, 256)[:384].T if a_t else _rand(256, 384)
    b = _rand(512 + 3, 384, seed=1)[:512].T if b_t else _rand(384, 512, seed=1)
    out = np.zeros((256, 512), np.float32)
    plan = _layout_plan([a, b, out, 1.0])
    (g,) = [g for g in plan.gemms.values() if len(g.nest) == 2]
    assert (g.s_t, g.v_t) == (a_t, b_t)
    assert g.entry == f"gemm_{'t' if a_t else 'n'}n{'_vt' if b_t else ''}"
    _check(lambda *x: mm_nest(*x, 1.0), [a, b, out], a.astype(np.float64) @ b, monkeypatch)


def test_transposed_bf16_operands_keep_the_tiles(monkeypatch):
    """The bf16 gemm library has no transposed entries: a bf16 ``x @ w.T`` folds only where its operands have unit
    columns, and the tile loops give the same products otherwise."""
    torch = pytest.importorskip("torch")
    a = torch.randn(256, 512).bfloat16()
    w = torch.randn(512, 512).bfloat16()
    out = torch.zeros(256, 512)
    plan = Plan(mm_nest.trace(a, w.T, out, 1.0), (1,), layouts=[True, (1, None), True])
    assert not any(g.v_t for g in plan.gemms.values())
    mm_nest(a, w.T, out, 1.0)
    assert torch.allclose(out.double(), a.double() @ w.T.double(), rtol=1e-4, atol=2e-3)
