"""A grid-(1,) launch's outermost ``affine_range`` loop split across host threads (issue 18 item 1).

``codegen/lowering/split.py`` decides which kernels qualify; ``runtime/split.py`` times the first runs and
splits long ones. Here the threshold is forced to 0 so every qualifying launch splits, with more parts than
the machine has cores, and results are checked against torch and the reference interpreter, on sizes whose
iteration counts do and do not divide by the part count (0, 1, 2 iterations, ragged last tiles).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang as trn
import trnlang.config as config
import trnlang.language as tl
from codegen.lowering.plan import Plan
from codegen.lowering.split import split_loop
from trnlang.frontend.errors import TrnError
from trnlang.runtime import split


def _scaled_rows(x, w, out):
    n, d = x.shape
    cols = tl.arange(d)[None, :]
    wt = tl.load(w[0:1, 0:d])          # prefix: loaded once per part
    for i in tl.affine_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        t = tl.load(x[rows, cols], mask=rows < n)
        tl.store(out[rows, cols], (t - tl.max(t, axis=1, keepdims=True)) * wt, mask=rows < n)


scaled_rows = trn.kernel(_scaled_rows)
scaled_rows_interp = trn.kernel(interpret=True)(_scaled_rows)


@trn.kernel
def carried(x, out):
    acc = tl.zeros((128, 64), tl.float32)
    for i in tl.affine_range(4):
        acc[...] = acc + tl.load(x[i, 0:128, 0:64])
    tl.store(out[0:128, 0:64], acc)


@trn.kernel
def same_place(x, out):
    for i in tl.affine_range(4):
        tl.store(out[0:128, 0:64], tl.load(x[i, 0:128, 0:64]))


@trn.kernel
def sequential(x, out):
    for i in tl.sequential_range(4):
        tl.store(out[i, 0:128, 0:64], tl.load(x[i, 0:128, 0:64]))


@trn.kernel
def prefix_store(x, out):
    tl.store(out[0, 0:128, 0:64], tl.zeros((128, 64), tl.float32))
    for i in tl.affine_range(4):
        tl.store(out[i, 0:128, 0:64], tl.load(x[i, 0:128, 0:64]))


def _per_tile(x, out):
    for i in tl.affine_range(4):
        tl.store(out[i, 0:128, 0:64], tl.load(x[i, 0:128, 0:64]) + 1.0)


per_tile = trn.kernel(_per_tile)


@trn.kernel
def unmasked(x, out):
    n, d = x.shape
    for i in tl.affine_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        cols = tl.arange(d)[None, :]
        tl.store(out[rows, cols], tl.load(x[rows, cols]) + 1.0)   # no mask: the last tile of 300 rows is outside


def _plan(kern, *args):
    return Plan(kern.trace(*args), (1,))


pytestmark = pytest.mark.filterwarnings("ignore::trnlang.ir.carried.CarriedDependenceWarning")


def test_which_loops_split():
    x4, o4 = torch.zeros(4, 128, 64), torch.zeros(4, 128, 64)
    assert split_loop(_plan(per_tile, x4, o4)) is not None
    assert split_loop(_plan(scaled_rows, torch.zeros(300, 64), torch.zeros(1, 64), torch.zeros(300, 64))) is not None
    assert split_loop(_plan(carried, x4, torch.zeros(128, 64))) is None       # an accumulator across iterations
    assert split_loop(_plan(same_place, x4, torch.zeros(128, 64))) is None    # every iteration stores the same tile
    assert split_loop(_plan(sequential, x4, o4)) is None
    assert split_loop(_plan(prefix_store, x4, o4)) is None                   # the prefix writes HBM
    k = per_tile.trace(x4, o4)
    assert split_loop(Plan(k, (2,))) is None                                # grid instances already spread
    assert split_loop(Plan(k, (1,), may_alias=True)) is None
    assert split_loop(Plan(k, (1,), debug=True)) is None


class _always_split:
    """Every qualifying launch splits at once, into 3 parts (more than this machine's cores); ``__enter__``
    returns the part counts of the splits run (a context manager: hypothesis examples take no fixtures)."""

    def __enter__(self) -> list[int]:
        self._saved = split.SPLIT_MIN_NS, split.TIMED_RUNS, split.run_parts
        split.SPLIT_MIN_NS, split.TIMED_RUNS = 0, 0
        seen: list[int] = []
        real = self._saved[2]

        def counting(parts):
            seen.append(len(parts))
            return real(parts)

        split.run_parts = counting
        self._cfg = config.override(TRN_NUM_THREADS="3")
        self._cfg.__enter__()
        return seen

    def __exit__(self, *exc):
        self._cfg.__exit__(*exc)
        split.SPLIT_MIN_NS, split.TIMED_RUNS, split.run_parts = self._saved


@pytest.fixture
def always_split():
    with _always_split() as seen:
        yield seen


def _ref(x, w):
    return (x - x.max(dim=1, keepdim=True).values) * w


@settings(max_examples=25, deadline=None)
@given(n=st.sampled_from([1, 127, 128, 129, 255, 256, 257, 383, 384, 385, 700, 1000]),
       d=st.sampled_from([1, 7, 64, 130]))
def test_split_launch_matches_torch_and_interpreter(n, d):
    with _always_split() as seen:
        g = torch.Generator().manual_seed(n * 131 + d)
        x, w = torch.randn(n, d, generator=g), torch.randn(1, d, generator=g)
        for _ in range(2):  # the general path (cold), then the warm launch plan
            out = torch.full((n, d), float("nan"))
            scaled_rows(x, w, out)
            torch.testing.assert_close(out, _ref(x, w))
        xi, wi = x.numpy(), w.numpy()
        oi = np.zeros_like(xi)
        scaled_rows_interp(xi, wi, oi)
        np.testing.assert_array_equal(out.numpy(), oi)
        on = np.full_like(xi, np.nan)   # numpy arrays: the executor's own split
        scaled_rows(xi, wi, on)
        np.testing.assert_array_equal(on, oi)
        assert len(seen) >= 2 and set(seen) == {3}


def test_fixed_size_kernel_splits(always_split):
    x = torch.randn(4, 128, 64)
    for _ in range(3):
        out = torch.zeros(4, 128, 64)
        per_tile(x, out)
        torch.testing.assert_close(out, x + 1)
    assert always_split and set(always_split) == {3}


def test_kernels_that_do_not_qualify_still_run_whole(always_split):
    x = torch.randn(4, 128, 64)
    out = torch.zeros(128, 64)
    carried(x, out)
    torch.testing.assert_close(out, x.sum(0))
    o4 = torch.zeros(4, 128, 64)
    sequential(x, o4)
    torch.testing.assert_close(o4, x)
    assert not always_split


def test_error_in_a_split_launch_names_the_failing_iteration(always_split):
    x = torch.randn(300, 16)
    with pytest.raises(TrnError) as whole:
        with config.override(TRN_NUM_THREADS="1"):
            unmasked(x, torch.empty(300, 16))
    for _ in range(2):  # cold (general path), warm (launch plan)
        with pytest.raises(TrnError) as parted:
            unmasked(x, torch.empty(300, 16))
        assert "i0=2" in str(parted.value)
        assert str(parted.value) == str(whole.value)
    assert always_split


def test_no_split_below_the_threshold(monkeypatch):
    seen = []
    real = split.run_parts
    monkeypatch.setattr(split, "run_parts", lambda parts: seen.append(len(parts)) or real(parts))
    monkeypatch.setattr(split, "SPLIT_MIN_NS", 10**12)  # nothing is long enough
    fresh = trn.kernel(_per_tile)  # its own launch plans: no decision made by an earlier test
    with config.override(TRN_NUM_THREADS="2"):
        x = torch.randn(4, 128, 64)
        for _ in range(4):
            out = torch.zeros(4, 128, 64)
            fresh(x, out)
            torch.testing.assert_close(out, x + 1)
    assert not seen


def test_one_thread_never_splits(always_split):
    per_tile = trn.kernel(_per_tile)
    with config.override(TRN_NUM_THREADS="1"):
        x = torch.randn(4, 128, 64)
        out = torch.zeros(4, 128, 64)
        for _ in range(3):
            per_tile(x, out)
        torch.testing.assert_close(out, x + 1)
    assert not always_split
