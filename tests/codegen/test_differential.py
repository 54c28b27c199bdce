"""Compiled (JIT) vs the reference interpreter.

- every case of tests/kernels.py on hypothesis shapes (ragged tiles, size 1, grids), both ways;
- random kernels (tests/codegen/random_kernels.py): every op, ALU function and dtype;
- transcendental functions within a few ulp of the interpreter's float64 oracle;
- run-time bounds errors, non-contiguous and aliased arrays, device_print, parallel grids;
- the on-disk object cache: corrupt / truncated / foreign entries are rebuilt, the directory is 0700.

Float results are bit-exact where the JIT rounds like the interpreter (everything but the
transcendental functions, whose vecmath kernels are a few ulp off the float64 oracle, and
``nc_matmul``, which accumulates in fp32): the random kernels run twice, on the libm path
(``TRN_JIT_LIBM=1``, bit exact) and on the default vecmath path (tolerance for floats).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang as trn
import trnlang.language as tl
from tests.codegen.random_kernels import generate
from tests.interpret.kbuild import Op, acc, alloc, hbm, instr, kernel, load, sbuf, store, whole
from tests.kernels import CASES, run_case
from trnlang.interpret import alu as ialu
from trnlang.interpret.interpreter import run_kernel as interp_run
from trnlang.ir.ops import Alu, unary_alus
from trnlang.runtime import jit
from trnlang.runtime.jit import run_kernel as jit_run

CASE_IDS = [c.name for c in CASES]
# kernels whose float results the JIT reproduces bit for bit (no transcendental function, no matmul)
EXACT_CASES = {"vector_add", "vector_add_grid", "embedding", "cumsum", "linear_scan"}
NO_MATMUL = {c.name for c in CASES} - {"matmul_kn", "matmul_mk", "flash_attention"}


# ------------------------------------------------------------------------------------------ helpers


def _as_f64(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64)


def assert_same(got: np.ndarray, want: np.ndarray, exact: bool, what: str = "") -> None:
    """Ints and bools exactly; floats bit for bit up to NaN payload and zero sign (``exact``) or within
    a few fp32 ulp."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if got.dtype.kind in "iub":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    g, w = _as_f64(got), _as_f64(want)
    if exact:
        np.testing.assert_array_equal(g, w, err_msg=what)  # NaN == NaN, -0 == 0
    else:
        np.testing.assert_allclose(g, w, rtol=3e-5, atol=1e-5, equal_nan=True, err_msg=what)


def run_both(case, n: int, d: int, seed: int, monkeypatch) -> tuple[torch.Tensor, torch.Tensor]:
    monkeypatch.setenv("TRN_INTERPRET", "1")
    want, _ = run_case(case, n, d, seed)
    monkeypatch.delenv("TRN_INTERPRET")
    got, _ = run_case(case, n, d, seed)
    return got, want


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().numpy() if t.dtype not in (torch.bfloat16,) else t.float().numpy()


# ------------------------------------------------------------------------------------------ test kernels


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.sampled_from([1, 2, 127, 128, 129, 300]) | st.integers(1, 290), d=st.integers(1, 140),
       seed=st.integers(0, 2**16))
def test_cases_compiled_vs_interpreter(case, n, d, seed, monkeypatch):
    got, want = run_both(case, n, d, seed, monkeypatch)
    assert_same(_np(got), _np(want), case.name in EXACT_CASES, case.name)
    if case.name in ("matmul_kn", "matmul_mk", "flash_attention"):
        torch.testing.assert_close(got, want, atol=case.atol, rtol=case.rtol)


@pytest.mark.parametrize("case", [c for c in CASES if c.name in NO_MATMUL], ids=lambda c: c.name)
@pytest.mark.parametrize("n,d", [(1, 1), (129, 33)])
def test_cases_bit_exact_on_libm_path(case, n, d, monkeypatch):
    monkeypatch.setenv("TRN_JIT_LIBM", "1")
    case.kernel._cache.clear()
    try:
        got, want = run_both(case, n, d, 5, monkeypatch)
    finally:
        case.kernel._cache.clear()
    assert_same(_np(got), _np(want), True, case.name)


# ------------------------------------------------------------------------------------------ random kernels


def _random_kernel(seed: int, debug: bool) -> None:
    g = generate(seed)
    want = [a.copy() for a in g.arrays]
    got = [a.copy() for a in g.arrays]
    err_i = err_j = None
    try:
        interp_run(g.kernel, want, g.grid)
    except Exception as e:  # noqa: BLE001 - the compiled run must fail the same way
        err_i = e
    try:
        jit_run(g.kernel, got, g.grid, debug=debug)
    except Exception as e:  # noqa: BLE001
        err_j = e
    assert type(err_i) is type(err_j), (seed, err_i, err_j)
    if err_i is not None:
        return
    exact = os.environ.get("TRN_JIT_LIBM") == "1"
    for i in range(len(g.kernel.params), len(got)):
        name = f"seed {seed}: output {g.kernel.tensors[i].name} ({g.notes})"
        if i in g.tolerant:
            np.testing.assert_allclose(_as_f64(got[i]), _as_f64(want[i]), rtol=1e-4, atol=1e-3, equal_nan=True,
                                       err_msg=name)
        else:
            assert_same(got[i], want[i], exact, name)


@pytest.mark.parametrize("seed", range(120))
def test_random_kernels_bit_exact(seed, monkeypatch):
    monkeypatch.setenv("TRN_JIT_LIBM", "1")
    _random_kernel(seed, debug=True)


@pytest.mark.parametrize("seed", range(1000, 1060))
def test_random_kernels_vecmath(seed):
    _random_kernel(seed, debug=True)


@pytest.mark.parametrize("seed", range(2000, 2060))
def test_random_kernels_release_mode(seed, monkeypatch):
    """Normal mode (no poisoning): kernels whose outputs never depend on unwritten memory."""
    g = generate(seed)
    if not g.fully_defined:
        pytest.skip("reads never-written tile memory (defined only with poisoning)")
    monkeypatch.setenv("TRN_JIT_LIBM", "1")
    _random_kernel(seed, debug=False)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(10_000, 2**31))
def test_random_kernels_hypothesis(seed, monkeypatch):
    monkeypatch.setenv("TRN_JIT_LIBM", "1")
    _random_kernel(seed, debug=True)


# ------------------------------------------------------------------------------------------ transcendentals


def _activation_kernel(shape, func):
    xt, o = hbm("x", shape), hbm("out", shape, kind="out")
    t, u = sbuf("t", shape), sbuf("u", shape)
    return kernel([xt], [o], [alloc(t), alloc(u), load(whole(t), acc(xt, shape)),
                              instr(Op.ACTIVATION, (whole(u),), (whole(t),), func=func, scale=1.0, reduce_op=None),
                              store(acc(o, shape), whole(u))])


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ai = a.view(np.int32).astype(np.int64)
    bi = b.view(np.int32).astype(np.int64)
    ai = np.where(ai < 0, -(ai & 0x7FFFFFFF), ai)
    bi = np.where(bi < 0, -(bi & 0x7FFFFFFF), bi)
    d = np.abs(ai - bi)
    d[np.isnan(a) & np.isnan(b)] = 0
    d[np.isnan(a) != np.isnan(b)] = 1 << 40
    return d


# max ulp distance to the float64 oracle; gelu / gelu_tanh / silu / sigmoid also get an absolute
# tolerance (their oracle formulas cancel in float64 for large negative x)
_ULP = {Alu.sigmoid: 3, Alu.silu: 4, Alu.softplus: 3, Alu.gelu: 4, Alu.gelu_tanh: 4, Alu.sin: 3, Alu.cos: 3}


@pytest.mark.parametrize("func", [a for a in unary_alus() if a is not Alu.bitwise_not], ids=lambda a: a.name)
def test_transcendental_accuracy(func):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(20000).astype(np.float32) * s for s in (0.01, 1.0, 6.0, 40.0)]
                       + [np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, -1e-30, 88.5, -87.0, 1e4])])
    x = x.reshape(1, -1)
    got = np.zeros_like(x)
    jit_run(_activation_kernel(x.shape, func), [x, got])
    with np.errstate(all="ignore"):
        want = ialu.to_f32(ialu.unary(func, x))
    d = _ulps(got, want)
    tol = _ULP.get(func, 2)
    with np.errstate(invalid="ignore"):
        near = np.abs(got.astype(np.float64) - want.astype(np.float64)) <= 1e-6
    bad = (d > tol) & ~near
    assert not bad.any(), (func.name, x[bad][:5], got[bad][:5], want[bad][:5])


# ------------------------------------------------------------------------------------------ errors


def test_oob_gather_raises_bounds_error():
    from tests.kernels import embedding

    idx = torch.tensor([[1], [70], [2]], dtype=torch.int32)  # 70 is outside a 50-row table
    table = torch.randn(50, 4)
    out = torch.full((3, 4), 7.0)
    with pytest.raises(trn.BoundsError) as e:
        embedding(idx, table, out)
    msg = str(e.value)
    assert "tests/kernels.py" in msg and "index [70, 0]" in msg and "tensor table of shape (50, 4)" in msg
    assert "pid=(0, 0, 0) i0=0" in msg
    assert torch.equal(out, torch.full((3, 4), 7.0))  # the failing instruction wrote nothing


@pytest.mark.parametrize("parallel", [False, True])
def test_grid_sequential_and_on_the_thread_pool(parallel, monkeypatch):
    if parallel:
        monkeypatch.setattr(jit, "_PARALLEL_MIN_NS", 0)
        monkeypatch.setenv("TRN_NUM_THREADS", "3")  # more threads than this host's 2 cores (config follows: conftest)
    _grid_kernel_checks()


def _grid_kernel_checks():
    @trn.kernel
    def k(idx, table, out):
        r = tl.program_id(0) * 4 + tl.arange(4)[:, None]
        ids = tl.load(idx[r])
        tl.store(out[r, tl.arange(8)[None, :]], tl.load(table[ids, tl.arange(8)[None, :]]))

    n = 4 * 64
    idx = torch.randint(0, 10, (n, 1), dtype=torch.int32)
    table = torch.randn(10, 8)
    out = torch.empty(n, 8)
    for _ in range(4):  # launches after the first timed ones may run on the thread pool
        k[n // 4](idx, table, out)
        assert torch.equal(out, table[idx[:, 0].long()])
    idx[77, 0] = -3
    with pytest.raises(trn.BoundsError, match=r"index \[-3, 0\].*pid=\(19, 0, 0\)"):
        k[n // 4](idx, table, out)


def test_grid_of_psum_accumulating_matmuls_runs_on_the_thread_pool(monkeypatch):
    """A matmul's PSUM accumulation stays inside its program instance: such a grid may run on the pool
    (only DMA stores that accumulate into HBM force a grid onto one thread)."""
    monkeypatch.setattr(jit, "_PARALLEL_MIN_NS", 0)
    monkeypatch.setenv("TRN_NUM_THREADS", "2")

    @trn.kernel
    def mm_row_blocks(a_t, b, out):  # program m: out[128 m: 128 m + 128, :] = a_t[:, block].T @ b
        k_dim = a_t.shape[0]
        m = tl.program_id(0)
        acc = tl.zeros((128, 128), tl.float32, buffer=tl.psum)
        im = m * 128 + tl.arange(128)[None, :]
        jn = tl.arange(128)[None, :]
        for k in tl.affine_range(tl.cdiv(k_dim, 128)):
            ik = k * 128 + tl.arange(128)[:, None]
            acc += tl.matmul(tl.load(a_t[ik, im]), tl.load(b[ik, jn]), transpose_x=True)
        tl.store(out[m * 128 + tl.arange(128)[:, None], jn], acc)

    rng = np.random.default_rng(4)
    a_t = rng.standard_normal((256, 512)).astype(np.float32)
    b = rng.standard_normal((256, 128)).astype(np.float32)
    for _ in range(4):  # launches after the first timed ones run on the pool
        out = np.full((512, 128), np.nan, np.float32)
        mm_row_blocks[4](a_t, b, out)
        np.testing.assert_allclose(out, a_t.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)
    ex = next(iter(mm_row_blocks._cache.values())).executor
    assert not ex._has_accumulate


def test_dtype_error_is_raised_at_run_time_like_the_interpreter():
    xt, o = hbm("x", (2, 2)), hbm("out", (2, 2), kind="out")
    t, u = sbuf("t", (2, 2)), sbuf("u", (2, 2))
    k = kernel([xt], [o], [alloc(t), alloc(u), load(whole(t), acc(xt, (2, 2))),
                           instr(Op.TENSOR_TENSOR, (whole(u),), (whole(t), whole(t)), op=Alu.bitwise_and),
                           store(acc(o, (2, 2)), whole(u))])
    with pytest.raises(trn.DTypeError, match="bitwise_and"):
        jit_run(k, [np.zeros((2, 2), np.float32), np.zeros((2, 2), np.float32)])


# ------------------------------------------------------------------------------------------ layouts


def test_non_contiguous_and_broadcast_inputs():
    from tests.kernels import softmax, vector_add

    base = torch.randn(70, 90)
    x = base.T[::2]                   # (45, 70), strides (2, 90)
    y = torch.randn(1, 70).expand(45, 70)  # stride 0 rows
    out = torch.empty(70, 45).T        # transposed output view
    vector_add(x, y, out)
    torch.testing.assert_close(out, x + y, rtol=0, atol=0)
    xn = np.random.default_rng(1).standard_normal((40, 33)).astype(np.float32)[::-1]  # negative strides
    on = np.empty((40, 33), np.float32)
    softmax(xn, on)
    np.testing.assert_allclose(on, torch.softmax(torch.from_numpy(xn.copy()), -1).numpy(), rtol=1e-5, atol=1e-6)


def test_aliased_arrays_in_place():
    from tests.kernels import vector_add

    x = torch.randn(300, 20)
    y = torch.randn(300, 20)
    want = x + y
    vector_add(x, y, x)  # output aliases an input
    torch.testing.assert_close(x, want, rtol=0, atol=0)


def test_device_print_runs_at_run_time(capsys):
    @trn.kernel
    def k(x):
        for i in tl.affine_range(2):
            tl.device_print("row block", tl.load(x[i * 2:(i + 1) * 2, :]))

    k(np.arange(8, dtype=np.float32).reshape(4, 2))
    out = capsys.readouterr().out
    assert out.count("row block: f32[2, 2]") == 2 and "i0=1" in out and "7." in out


def test_llvm_ir_text():
    from tests.kernels import softmax

    x = torch.randn(10, 8)
    text = softmax.llvm_ir(x, torch.empty_like(x))
    assert "define i32 @\"kernel_entry\"" in text and "trn.instance" in text


def test_shape_errors_are_raised_only_when_the_instruction_runs():
    import sympy

    from tests.interpret.kbuild import I0, Loop

    x, o = hbm("x", (4, 6)), hbm("out", (4, 6), kind="out")
    t, u = sbuf("t", (4, 6)), sbuf("u", (4, 6))
    v = whole(sbuf("v", (3, 8)))
    bad = instr(Op.TENSOR_COPY, (v,), (whole(t),), reshape=True)  # partition count differs: a ShapeError
    body = [alloc(t), alloc(u), load(whole(t), acc(x, (4, 6))),
            Loop("affine", I0, sympy.Integer(0), sympy.Integer(0), sympy.Integer(1), [bad]),
            store(acc(o, (4, 6)), whole(t))]
    xv = np.arange(24, dtype=np.float32).reshape(4, 6)
    for run in (interp_run, jit_run):
        out = np.zeros((4, 6), np.float32)
        run(kernel([x], [o], body), [xv, out])  # the loop never runs: no error
        np.testing.assert_array_equal(out, xv)
    body[3] = Loop("affine", I0, sympy.Integer(0), sympy.Integer(2), sympy.Integer(1), [bad])
    for run in (interp_run, jit_run):
        with pytest.raises(trn.ShapeError, match="partition count"):
            run(kernel([x], [o], body), [xv, np.zeros((4, 6), np.float32)])
