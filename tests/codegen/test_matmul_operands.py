"""``nc_matmul`` operands read in place (``trnlang/passes/plan_matmul_operands.py``, ``codegen/lowering/mmfuse.py``).

The JIT may skip the staged copies of an NKI-style matmul (load -> nc_transpose -> tensor_copy ->
nc_matmul) and let the gemm read HBM or the transpose's source. These tests check that it does so
for the standard pattern, that it does not when a write in between would change what the gemm
reads, and that results match numpy and the interpreter in every case (contiguous, transposed and
ragged operands).
"""

from __future__ import annotations

import numpy as np
import pytest

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from codegen.lowering.plan import Plan
from trnlang.ir.ops import Op


@trn.kernel
def mm_tiles(a, b, out):
    """out = a @ b with 128 x 128 x 256 tiles (masked ragged edges)."""
    m, k = a.shape
    n = b.shape[1]
    tm, tk, tn = 128, 128, 256
    for i in tl.affine_range(tl.cdiv(m, tm)):
        for j in tl.affine_range(tl.cdiv(n, tn)):
            acc = tl.zeros((tm, tn), tl.float32, buffer=tl.psum)
            im = i * tm + tl.arange(tm)[:, None]
            jn = j * tn + tl.arange(tn)[None, :]
            for kk in tl.affine_range(tl.cdiv(k, tk)):
                kc = kk * tk + tl.arange(tk)[None, :]
                kr = kk * tk + tl.arange(tk)[:, None]
                ragged = m % tm or k % tk or n % tn
                at = tl.load(a[im, kc], mask=(im < m) & (kc < k) if ragged else None)
                bt = tl.load(b[kr, jn], mask=(kr < k) & (jn < n) if ragged else None)
                acc += tl.matmul(at, bt)
            tl.store(out[im, jn], acc, mask=(im < m) & (jn < n) if ragged else None)


@trn.kernel
def mm_clobbered(a, b, out):
    """The transpose's source tile is overwritten after the transpose, before the matmul: the gemm must
    read the transposed copy, not the source."""
    at = tl.load(a[tl.arange(128)[:, None], tl.arange(128)[None, :]])
    bt = tl.load(b[tl.arange(128)[:, None], tl.arange(256)[None, :]])
    st = tl.copy(isa.nc_transpose(at))
    at[...] = at * 0.0 + 7.0
    acc = isa.nc_matmul(st, bt)
    tl.store(out[tl.arange(128)[:, None], tl.arange(256)[None, :]], acc + at[:, 0:1])


@trn.kernel
def mm_after_store(a, b, out):
    """A store to ``b`` between its load and the matmul: the gemm must see the loaded (old) values."""
    at = tl.load(a[tl.arange(128)[:, None], tl.arange(128)[None, :]])
    bt = tl.load(b[tl.arange(128)[:, None], tl.arange(256)[None, :]])
    tl.store(b[tl.arange(128)[:, None], tl.arange(256)[None, :]], bt * 2.0)
    acc = tl.zeros((128, 256), tl.float32, buffer=tl.psum)
    acc += tl.matmul(at, bt)
    tl.store(out[tl.arange(128)[:, None], tl.arange(256)[None, :]], acc)


@trn.kernel
def mm_transpose_x(a_t, b, out):
    """out = a_t.T @ b from [K, M] stationary tiles (``transpose_x=True``: no transpose chain), as bench_jit's
    matmul; one program instance per 128-row block of M."""
    k_dim, m_dim = a_t.shape
    n_dim = b.shape[1]
    m = tl.program_id(0)
    im = m * 128 + tl.arange(128)[None, :]
    om = m * 128 + tl.arange(128)[:, None]
    for n in tl.affine_range(tl.cdiv(n_dim, 256)):
        jn = n * 256 + tl.arange(256)[None, :]
        acc = tl.zeros((128, 256), tl.float32, buffer=tl.psum)
        for k in tl.affine_range(tl.cdiv(k_dim, 128)):
            ik = k * 128 + tl.arange(128)[:, None]
            acc += tl.matmul(tl.load(a_t[ik, im]), tl.load(b[ik, jn]), transpose_x=True)
        tl.store(out[om, jn], acc)


def _plan(kernel, *args) -> Plan:
    return Plan(kernel.trace(*args), (1,))


def _run(kernel, args, monkeypatch, interpret: bool):
    if interpret:
        monkeypatch.setenv("TRN_INTERPRET", "1")
    else:
        monkeypatch.delenv("TRN_INTERPRET", raising=False)
    arrs = [x.copy() for x in args]
    kernel(*arrs)
    return arrs


def test_standard_pattern_reads_operands_in_place():
    a = np.zeros((256, 384), np.float32)
    b = np.zeros((384, 512), np.float32)
    plan = _plan(mm_tiles, a, b, np.zeros((256, 512), np.float32))
    (mo,) = plan.mm_ops.values()
    assert mo.transpose is not None and mo.copy is not None and mo.a_load is not None and mo.v_load is not None
    deferred = {i.instr.op for i in plan.infos if id(i.instr) in plan.mm_defer}
    assert deferred == {Op.DMA_COPY, Op.TRANSPOSE, Op.TENSOR_COPY}


@pytest.mark.parametrize("shape", [(256, 384, 512), (130, 200, 300), (1, 1, 1), (128, 128, 256)])
@pytest.mark.parametrize("layout", ["contiguous", "transposed_a", "transposed_b"])
def test_results_match_numpy_and_interpreter(shape, layout, monkeypatch):
    m, k, n = shape
    rng = np.random.default_rng(m * 7 + k)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    if layout == "transposed_a":
        a = np.asfortranarray(a)   # strided rows: the load is not read in place (strides not unit)
    if layout == "transposed_b":
        b = np.asfortranarray(b)
    out = np.zeros((m, n), np.float32)
    got = _run(mm_tiles, [a, b, out], monkeypatch, interpret=False)[2]
    want = _run(mm_tiles, [a, b, out], monkeypatch, interpret=True)[2]
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def _operands(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((128, 128), dtype=np.float32), rng.standard_normal((128, 256), dtype=np.float32),
            np.zeros((128, 256), np.float32))


def test_clobbered_transpose_source_is_not_read_in_place(monkeypatch):
    a, b, out = _operands(1)
    assert all(mo.transpose is None for mo in _plan(mm_clobbered, a, b, out).mm_ops.values())
    got = _run(mm_clobbered, [a, b, out], monkeypatch, interpret=False)[2]
    want = _run(mm_clobbered, [a, b, out], monkeypatch, interpret=True)[2]
    np.testing.assert_allclose(got, a @ b + 7.0, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


def test_store_between_load_and_matmul_keeps_the_loaded_values(monkeypatch):
    a, b, out = _operands(2)
    assert all(mo.v_load is None for mo in _plan(mm_after_store, a, b.copy(), out).mm_ops.values())
    _, got_b, got = _run(mm_after_store, [a, b, out], monkeypatch, interpret=False)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(got_b, b * 2.0)



def test_transpose_x_stationary_is_read_in_place(monkeypatch):
    rng = np.random.default_rng(3)
    a_t = rng.standard_normal((384, 256), dtype=np.float32)
    b = rng.standard_normal((384, 512), dtype=np.float32)
    out = np.zeros((256, 512), np.float32)
    plan = Plan(mm_transpose_x.trace(a_t, b, out), (2,))
    (mo,) = plan.mm_ops.values()
    assert mo.s_load is not None and mo.v_load is not None and mo.transpose is None
    got = a_t.copy(), b.copy(), out.copy()
    mo_launch = mm_transpose_x[2]
    monkeypatch.delenv("TRN_INTERPRET", raising=False)
    mo_launch(*got)
    np.testing.assert_allclose(got[2], a_t.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    monkeypatch.setenv("TRN_INTERPRET", "1")
    want = a_t.copy(), b.copy(), out.copy()
    mm_transpose_x[2](*want)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-4, atol=1e-3)
