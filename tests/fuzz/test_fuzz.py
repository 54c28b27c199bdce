"""The fuzzer's slice of the suite: a fixed, seeded budget of random kernels, JIT vs interpreter.

``FUZZ_CASES`` (default 200) seeds from ``FUZZ_SEED`` (default 0) run in two child processes (one per
test, so ``pytest -n 2`` runs them side by side; a crash fails its test with the seed instead of
killing the worker). ``make fuzz`` runs 10,000. The harness's own checks are tested here too: a write
outside a view is caught, the comparison classes, the crash path.
"""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

from tests.fuzz.gen import Arg, generate
from tests.fuzz.harness import (
    FAILURES,
    SENTINEL,
    Result,
    _classify,
    _launch,
    _load,
    _sentinel,
    compare,
    make_frame,
    run_case,
)
from tests.fuzz.session import run_session
from trnlang.device.guard import PAGE

CASES = int(os.environ.get("FUZZ_CASES", "200"))
SEED = int(os.environ.get("FUZZ_SEED", "0"))
CHUNKS = 2


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_fuzz_slice(chunk: int) -> None:
    per = -(-CASES // CHUNKS)
    start = SEED + chunk * per
    count = max(0, min(per, SEED + CASES - start))
    s = run_session(start, count, jobs=1, batch=count)
    print(s.report())
    assert len(s.records) == count, s.report()
    assert not s.failures, s.report()
    assert s.counts["ok"] >= 0.8 * count, s.report()  # explained mismatches stay the exception


def test_generator_is_deterministic_and_varied() -> None:
    a, b = generate(123), generate(123)
    assert a.source == b.source and [x.shape for x in a.args] == [x.shape for x in b.args]
    cases = [generate(s) for s in range(200)]
    assert len({c.source for c in cases}) == 200
    templates = {c.template for c in cases}
    assert templates == {"rows", "matmul"}
    text = "\n".join(c.source for c in cases)
    for needle in ("tl.affine_range", "tl.sequential_range", "tl.program_id", "tl.matmul", "tl.sum(", "tl.where(",
                   "other=", "tl.cumsum(", "transpose_x=True", "(d - 1) - cols"):
        assert needle in text, needle
    shapes = {s for c in cases for a in c.args for s in a.shape}
    assert {1, 127, 128, 129} <= shapes
    assert {a.dtype for c in cases for a in c.args} == {"float32", "bfloat16", "int32"}


def test_frames_hold_the_values_inside_the_sentinel() -> None:
    rng = np.random.default_rng(0)
    layouts = set()
    for k in range(40):
        arg = Arg("x", (5, 7), ["float32", "bfloat16", "int32"][k % 3], out=bool(k % 2))
        f = make_frame(rng, arg)
        layouts.add(f.layout)
        buf, view = f.instantiate(guard=False)
        assert view.shape == (5, 7) and view.dtype == f.dtype
        pattern = np.resize(np.frombuffer(SENTINEL, np.uint8), buf.size)
        assert (buf[~f.cov] == pattern[~f.cov]).all()  # sentinel everywhere outside the view
        assert int(f.cov.sum()) == (7 if f.layout == "bcast_rows" else 35) * f.dtype.itemsize
        if arg.out:
            assert (buf == pattern).all()
    assert {"contig", "rowpad", "colstep", "transposed", "neg_rows", "neg_cols", "bcast_rows"} <= layouts


def test_guard_mode_frames_end_at_a_guard_page() -> None:
    rng = np.random.default_rng(2)
    for k in range(6):
        f = make_frame(rng, Arg("x", (3, 129), ["float32", "bfloat16", "int32"][k % 3], out=bool(k % 2)))
        buf, view = f.instantiate(guard=True)
        assert (buf.ctypes.data + buf.size) % PAGE == 0  # the framed buffer ends right before PROT_NONE
        assert (buf == f.init).all() and view.shape == (3, 129)
    res = run_case(1, guard=True)
    assert res.cls == "ok", res.detail


def test_sentinel_check_catches_a_write_outside_the_view() -> None:
    case = generate(3)
    rng = np.random.default_rng(1)
    frames = [make_frame(rng, a) for a in case.args]
    bufs = [f.instantiate(False)[0] for f in frames]
    assert _sentinel(case, frames, bufs) == ""
    o = next(i for i, a in enumerate(case.args) if a.out)
    outside = np.flatnonzero(~frames[o].cov)
    if outside.size:
        bufs[o][outside[-1]] ^= 1
        assert "outside the view" in _sentinel(case, frames, bufs)
        bufs[o][outside[-1]] ^= 1
    bufs[0][np.flatnonzero(frames[0].cov)[0]] ^= 1  # an input's own bytes must not change either
    assert "input x0" in _sentinel(case, frames, bufs)


def test_compare_classes() -> None:
    exact = Arg("o", (4,), "float32", out=True)
    loose = Arg("o", (4,), "float32", out=True, exact=False)
    mm = Arg("o", (4,), "float32", out=True, exact=False, mm=True)
    w = np.float32([1.0, -2.0, np.nan, 3.0e38])
    assert compare(w.copy(), w, exact)[0] == "ok"
    assert compare(np.float32([1.0, -2.0, np.nan, -0.0]), np.float32([1.0, -2.0, np.nan, 0.0]), exact)[0] == "ok"
    w2 = np.float32([1.0, -2.0, np.nan, 3.0])
    g = w2.copy()
    g[0] = np.nextafter(np.float32(1.0), np.float32(2.0))
    assert compare(g, w2, exact)[0] == "exact"  # one ulp is a bug on an exact path
    assert compare(g, w2, loose)[0] == "ok"  # and within the tolerance elsewhere
    g[1] = -2.5
    assert compare(g, w2, loose)[0] == "tol"
    g[1] = -2.002  # the absolute floor is relative to the output's largest magnitude: next to 3e38 it is noise
    assert compare(g, w2, loose)[0] == "tol"
    assert compare(np.float32([1.0, -2.002, np.nan, 3e38]), np.float32([1.0, -2.0, np.nan, 3e38]), loose)[0] == "ok"
    g = w.copy()
    g[3] = np.inf  # fp32 overflow where the interpreter stayed finite: classified, not hidden
    kind, detail = compare(g, w, mm)
    assert kind == "overflow" and "inf" in detail
    assert compare(w, g, mm)[0] == "nonfinite"  # the other way round is not explained
    i = np.int32([1, 2, 3])
    assert compare(i + np.int32([0, 0, 1]), i, loose)[0] == "exact"
    b = np.asarray([1, 2], ml_dtypes.bfloat16)
    assert compare(b, b, exact)[0] == "ok"


def test_order_class_explains_a_product_only_when_reversing_the_reduction_reproduces_the_jit() -> None:
    # seed 2049: tl.prod over a 512-wide row whose lanes past d=230 are masked zeros; the float64 partial
    # products overflow, so the interpreter's order gives inf * 0 = NaN and the JIT's gives 0
    res = run_case(2049)
    assert res.cls == "order", res.detail
    assert "jit np.float32(0.0) vs interpreter np.float32(nan)" in res.detail
    case = generate(2049)
    rng = np.random.default_rng(2049 + 7_777_777)
    frames = [make_frame(rng, a) for a in case.args]
    fn = _load(case)
    _, iviews, _ = _launch(fn, case, frames, False, interpret=True)
    _, jviews, _ = _launch(fn, case, frames, False, interpret=False)
    o = next(i for i, a in enumerate(case.args) if a.out)
    jviews[o][0, 0] = 1.0  # a JIT answer no reduction order gives is still a real mismatch
    res = Result(2049, case.template, "ok")
    _classify(res, fn, case, frames, False, iviews, jviews)
    assert res.cls == "mismatch", res.detail


def test_one_case_runs_both_executors_in_process() -> None:
    res = run_case(0)
    assert res.cls == "ok", res.detail
    assert res.secs > 0


def test_a_crash_is_reported_with_its_seed_and_the_session_continues() -> None:
    s = run_session(10, 3, jobs=1, batch=3, env={"TRN_FUZZ_CRASH_AT": "11"})
    by_seed = {r["seed"]: r for r in s.records}
    assert sorted(by_seed) == [10, 11, 12]
    assert by_seed[11]["cls"] == "crash" and "SIGSEGV" in by_seed[11]["detail"]
    assert "Fatal Python error" in by_seed[11]["detail"]  # faulthandler's traceback from the child
    assert by_seed[10]["cls"] not in FAILURES and by_seed[12]["cls"] not in FAILURES
    assert [r["seed"] for r in s.failures] == [11]
