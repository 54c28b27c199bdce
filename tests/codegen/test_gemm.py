"""codegen.mathlib.gemm against numpy: random shapes, leading dimensions, accumulate."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codegen.mathlib.gemm import CONFIGS, Gemm, GemmConfig, default_gemm


@pytest.fixture(scope="module")
def gemm() -> Gemm:
    return default_gemm()


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def tiny_gemm(request: pytest.FixtureRequest) -> Gemm:
    """Each ISA path's micro-kernel (``codegen.mathlib.gemm.CONFIGS``) with small cache blocks, so that every blocking
    loop runs several times on small shapes (a wider path than the host's still runs: LLVM splits the vectors)."""
    c = CONFIGS[request.param]
    return Gemm(dataclasses.replace(c, kc=8, mc=2 * c.mr, nc=2 * c.nr))


def _padded(rng: np.random.Generator, rows: int, cols: int, pad: int) -> np.ndarray:
    """A [rows, cols] view of a wider array (leading dimension cols + pad), NaN in the padding."""
    full = np.full((rows, cols + pad), np.nan, np.float32)
    full[:, :cols] = rng.standard_normal((rows, cols)).astype(np.float32)
    return full[:, :cols]


def _tol(K: int) -> float:
    return 1e-5 * (K + 1) ** 0.5 * 4


def _check_tn(g: Gemm, M: int, N: int, K: int, pads: tuple[int, int, int], accumulate: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    s = _padded(rng, K, M, pads[0])
    v = _padded(rng, K, N, pads[1])
    out_full = np.full((M, N + pads[2]), -7.0, np.float32)
    out = out_full[:, :N]
    out[...] = rng.standard_normal((M, N)).astype(np.float32)
    before = out.copy()
    g.gemm_tn(out, s, v, accumulate=accumulate)
    ref = s.T.astype(np.float64) @ v.astype(np.float64) + (before if accumulate else 0.0)
    scale = np.abs(s.T).astype(np.float64) @ np.abs(v).astype(np.float64) + 1.0
    assert np.all(np.abs(out - ref) <= _tol(K) * scale), (M, N, K, accumulate)
    assert np.all(out_full[:, N:] == -7.0), "wrote outside the output"


def _check_sgemm(g: Gemm, M: int, N: int, K: int, pads: tuple[int, int, int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = _padded(rng, M, K, pads[0])
    b = _padded(rng, K, N, pads[1])
    c_full = np.full((M, N + pads[2]), -7.0, np.float32)
    c = c_full[:, :N]
    g.matmul(a, b, c)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64) + 1.0
    assert np.all(np.abs(c - ref) <= _tol(K) * scale), (M, N, K)
    assert np.all(c_full[:, N:] == -7.0), "wrote outside the output"


dims = st.integers(1, 70)
pads = st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(0, 9))
hyp = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@hyp
@given(M=dims, N=dims, K=dims, pads=pads, accumulate=st.booleans(), seed=st.integers(0, 2**31))
def test_gemm_tn_random(gemm: Gemm, M: int, N: int, K: int, pads: tuple[int, int, int], accumulate: bool,
                        seed: int) -> None:
    _check_tn(gemm, M, N, K, pads, accumulate, seed)


@hyp
@given(M=dims, N=dims, K=dims, pads=pads, accumulate=st.booleans(), seed=st.integers(0, 2**31))
def test_gemm_tn_small_blocks(tiny_gemm: Gemm, M: int, N: int, K: int, pads: tuple[int, int, int],
                              accumulate: bool, seed: int) -> None:
    _check_tn(tiny_gemm, M, N, K, pads, accumulate, seed)


@hyp
@given(M=dims, N=dims, K=dims, pads=pads, seed=st.integers(0, 2**31))
def test_sgemm_random(gemm: Gemm, M: int, N: int, K: int, pads: tuple[int, int, int], seed: int) -> None:
    _check_sgemm(gemm, M, N, K, pads, seed)


@hyp
@given(M=dims, N=dims, K=dims, pads=pads, seed=st.integers(0, 2**31))
def test_sgemm_small_blocks(tiny_gemm: Gemm, M: int, N: int, K: int, pads: tuple[int, int, int], seed: int) -> None:
    _check_sgemm(tiny_gemm, M, N, K, pads, seed)


@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (6, 16, 1), (7, 17, 257), (150, 3100, 3), (300, 200, 700),
                                   (128, 512, 128)])
def test_block_boundaries(gemm: Gemm, M: int, N: int, K: int) -> None:
    """Shapes crossing the default MC=144 / NC=3072 / KC=256 blocks."""
    _check_sgemm(gemm, M, N, K, (3, 0, 5), 1)
    _check_tn(gemm, M, N, K, (0, 2, 1), True, 2)


def test_zero_sizes(gemm: Gemm) -> None:
    out = np.full((3, 4), 5.0, np.float32)
    gemm.gemm_tn(out, np.zeros((0, 3), np.float32), np.zeros((0, 4), np.float32), accumulate=True)
    assert np.all(out == 5.0)
    gemm.gemm_tn(out, np.zeros((0, 3), np.float32), np.zeros((0, 4), np.float32), accumulate=False)
    assert np.all(out == 0.0)
    empty = gemm.matmul(np.zeros((0, 5), np.float32), np.zeros((5, 4), np.float32))
    assert empty.shape == (0, 4)
    assert gemm.matmul(np.zeros((3, 0), np.float32), np.zeros((0, 2), np.float32)).tolist() == [[0, 0]] * 3


def test_special_values_propagate(gemm: Gemm) -> None:
    a = np.ones((5, 7), np.float32)
    b = np.ones((7, 9), np.float32)
    a[2, 3] = np.nan
    b[4, 6] = np.inf
    c = gemm.matmul(a, b)
    ref = a @ b
    np.testing.assert_array_equal(np.isnan(c), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(c), np.isinf(ref))


def test_threads(gemm: Gemm) -> None:
    """Concurrent calls (ctypes releases the GIL) do not interfere."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((90, 200)).astype(np.float32)
    b = rng.standard_normal((200, 70)).astype(np.float32)
    ref = a.astype(np.float64) @ b
    errors: list[float] = []

    def work() -> None:
        for _ in range(20):
            errors.append(float(np.abs(gemm.matmul(a, b) - ref).max()))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(errors) == 80 and max(errors) < 1e-3


def test_shape_errors(gemm: Gemm) -> None:
    with pytest.raises(ValueError):
        gemm.matmul(np.zeros((2, 3), np.float32), np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError):
        gemm.gemm_tn(np.zeros((2, 2), np.float32), np.zeros((3, 2), np.float32), np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError):
        GemmConfig(mr=6, nr=12)


def test_non_contiguous_inputs(gemm: Gemm) -> None:
    rng = np.random.default_rng(9)
    a = rng.standard_normal((40, 30)).astype(np.float32)
    b = rng.standard_normal((40, 20)).astype(np.float32)
    for x, y in ((a[::-1, :], b[:30, ::-1]), (a.T, b), (a[::2, ::3], b[:10])):
        np.testing.assert_allclose(gemm.matmul(x, y), x.astype(np.float64) @ y, rtol=1e-4, atol=1e-4)


def _maybe_t(rng: np.random.Generator, rows: int, cols: int, pad: int, transposed: bool) -> np.ndarray:
    """A [rows, cols] operand: a padded row-major view, or the transpose of a padded [cols, rows] one (read in place
    by ``gemm_tn`` / the ``_vt`` entries)."""
    return _padded(rng, cols, rows, pad).T if transposed else _padded(rng, rows, cols, pad)


@hyp
@given(M=dims, N=dims, K=dims, pads=pads, a_t=st.booleans(), b_t=st.booleans(), seed=st.integers(0, 2**31))
def test_transposed_operands_small_blocks(tiny_gemm: Gemm, M: int, N: int, K: int, pads: tuple[int, int, int],
                                          a_t: bool, b_t: bool, seed: int) -> None:
    """Every entry (gemm_nn, gemm_tn, gemm_nn_vt, gemm_tn_vt) on every ISA path's micro-kernel, with several
    blocks per loop: a transposed ``b`` is packed from its rows (register-transposed WIDTH x WIDTH blocks, the
    rest one element at a time), and nothing outside the output is written."""
    rng = np.random.default_rng(seed)
    a, b = _maybe_t(rng, M, K, pads[0], a_t), _maybe_t(rng, K, N, pads[1], b_t)
    c_full = np.full((M, N + pads[2]), -7.0, np.float32)
    c = c_full[:, :N]
    tiny_gemm.matmul(a, b, c)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64) + 1.0
    assert np.all(np.abs(c - ref) <= _tol(K) * scale), (M, N, K, a_t, b_t)
    assert np.all(c_full[:, N:] == -7.0), "wrote outside the output"


@pytest.mark.parametrize("M,N,K", [(1, 1, 1), (7, 17, 257), (130, 200, 300), (64, 128, 64)])
def test_transposed_moving_operand_full_blocks(gemm: Gemm, M: int, N: int, K: int) -> None:
    """The host's own blocking (whole WIDTH x WIDTH transposes in the packed panels) with ``b`` given as ``w.T``."""
    rng = np.random.default_rng(M + N + K)
    a = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((N, K + 3)).astype(np.float32)[:, :K]
    np.testing.assert_allclose(gemm.matmul(a, w.T), a.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-3)
