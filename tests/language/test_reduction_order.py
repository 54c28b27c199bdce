"""The documented reduction orders (docs/language_reference.md, "Reduction order: interpreter vs JIT")."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

import trnlang as trn
import trnlang.language as tl

_DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs")


@trn.kernel
def row_sum(x, out):
    n = x.shape[1]
    t = tl.load(x[0:1, 0:n])
    tl.store(out[0:1, 0:1], tl.sum(t, axis=1, keepdims=True))


def _sum(x: np.ndarray, interpret: bool) -> float:
    row_sum.interpret = interpret
    try:
        out = np.zeros((1, 1), np.float32)
        row_sum(x, out)
    finally:
        row_sum.interpret = None
    return float(out[0, 0])


def _cancelling_row(n: int, neg_at: int) -> np.ndarray:
    x = np.ones((1, n), np.float32)
    x[0, 0], x[0, neg_at] = 3e38, -3e38
    return x


@pytest.mark.parametrize("n,neg_at", [(3, 1), (16, 1), (16, 8), (64, 4), (200, 100)])
def test_interpreter_sums_in_numpys_float64_order(n, neg_at):
    x = _cancelling_row(n, neg_at)
    assert _sum(x, True) == float(np.float32(np.sum(x.astype(np.float64), axis=1)[0]))


def test_documented_example():
    assert _sum(_cancelling_row(16, 1), True) == 12.0  # partial sums 3e38 + 1 and -3e38 + 1 drop their ones
    assert _sum(_cancelling_row(16, 8), True) == 14.0
    jit = _sum(_cancelling_row(16, 1), False)
    assert jit == _sum(_cancelling_row(16, 1), False)  # one host, one order
    assert 0.0 <= jit <= 14.0 and jit == int(jit)  # some of the fourteen ones survive, none invented


@pytest.mark.parametrize("seed", range(3))
def test_jit_and_interpreter_agree_bit_for_bit_without_cancellation(seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((1, 1000)) * 10.0 ** rng.integers(-3, 4, (1, 1000))).astype(np.float32)
    assert np.float32(_sum(x, False)) == np.float32(_sum(x, True))


def test_language_reference_states_the_reduction_order():
    spec = importlib.util.spec_from_file_location("gen_reference", os.path.join(_DOCS, "gen_reference.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    text = gen.REDUCTION_ORDER
    for fact in ("float64", "pairwise", "reassociable", "rtol=3e-5, atol=1e-5", "TRN_JIT_LIBM=1"):
        assert fact in text
    assert text in gen.generate()
    with open(os.path.join(_DOCS, "language_reference.md")) as f:
        assert text in f.read()  # the committed page is regenerated
