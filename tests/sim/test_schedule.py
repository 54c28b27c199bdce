"""Schedule invariants on generated kernels, physical sanity on every test kernel, extrapolation vs exact.

The dependence check here is independent of the scheduler's bookkeeping: it
takes every instance's accessed boxes (absolute SBUF/PSUM addresses from the
memory plan, HBM index boxes) and checks *all* pairs in program order.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from tests.kernels import CASES
from trnlang.sim.program import ENGINES
from trnlang.sim.schedule import schedule

NE = len(ENGINES)
EPS = 1e-12


def _overlap(key, a, b):
    if isinstance(key, str):  # sbuf/psum: half-open (p0, p1, b0, b1)
        return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]
    return all(a[i] <= b[i + 1] and b[i] <= a[i + 1] for i in range(0, len(a), 2))  # hbm: inclusive


def _no_resource_overlap(s):
    """No engine holds two instructions at once. A DMA transfer holds every DMA engine of its span for the last
    ``occupancy`` seconds (``max(setup, bytes)``) of its duration: its packets' setup may overlap the previous
    packets' bytes, so a stream of packets is spaced at least one setup apart on average, not exactly."""
    end = s.start + s.dur
    hold = end - s.occupancy
    assert np.all(s.occupancy <= s.dur + EPS) and np.all(s.occupancy[~s.is_dma] == s.dur[~s.is_dma])
    for r in range(NE + s.n_dma):  # a DMA transfer occupies every DMA engine of its span
        idx = np.nonzero((s.res == r) | ((s.res >= NE) & (s.res <= r) & (s.res + s.span > r)))[0]
        order = idx[np.argsort(hold[idx], kind="stable")]
        assert np.all(hold[order][1:] >= end[order][:-1] - EPS), f"resource {r} runs two instructions at once"


def _dependences(s, chunk=256):
    """``(i, j)`` arrays of every pair of instances ``i < j`` whose accesses to one space overlap, one of them a
    write: all pairs in program order, compared with numpy a block of rows at a time (the same boxes and rules as
    :func:`_overlap`: on-chip boxes half-open, HBM boxes inclusive)."""
    by_key = defaultdict(list)
    for i, accs in enumerate(s.accesses):
        for key, box, w in accs:
            by_key[key].append((i, box, w))
    pi, pj = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for key, lst in by_key.items():
        inst = np.array([e[0] for e in lst], np.int64)
        wr = np.array([e[2] for e in lst], bool)
        box = np.array([e[1] for e in lst], np.int64)
        lo, hi = box[:, 0::2], box[:, 1::2]
        below = np.less if isinstance(key, str) else np.less_equal
        for r0 in range(0, len(lst), chunk):
            a = slice(r0, min(r0 + chunk, len(lst)))
            b = slice(r0 + 1, len(lst))  # every later access (rows of the block included: masked below)
            later = np.arange(r0 + 1, len(lst))[None, :] > np.arange(a.start, a.stop)[:, None]
            ov = (below(lo[a][:, None, :], hi[b][None, :, :]) & below(lo[b][None, :, :], hi[a][:, None, :])).all(2)
            m = later & ov & (inst[a][:, None] != inst[b][None, :]) & (wr[a][:, None] | wr[b][None, :])
            ra, rb = np.nonzero(m)
            pi.append(inst[a][ra])
            pj.append(inst[b][rb])
    return np.concatenate(pi), np.concatenate(pj)


def check_invariants(s):
    """No resource runs two instructions at once; every dependence is respected; time >= bounds."""
    _no_resource_overlap(s)
    end = s.start + s.dur
    assert s.accesses is not None and len(s.accesses) == s.n
    pi, pj = _dependences(s)
    late = np.nonzero(s.start[pj] < end[pi] - EPS)[0]
    assert not late.size, f"instance {pj[late[0]]} starts before {pi[late[0]]} it depends on ends"
    crit = np.array(s.dur, dtype=float)  # program order is a topological order: the longest chain ending at each
    order = np.lexsort((pi, pj))
    pi, pj = pi[order], pj[order]
    js, first = np.unique(pj, return_index=True)
    for j, preds in zip(js, np.split(pi, first[1:])):
        crit[j] = s.dur[j] + crit[preds].max()
    makespan = s.makespan
    if s.n:
        assert makespan >= crit.max() - EPS
        assert makespan >= s.busy().max() - EPS


# --- generated kernels ---------------------------------------------------------------------------------------
OPS = ["add", "mul_scalar", "exp", "rowmax", "rowsum_bcast", "copy", "iota_add", "matmul", "transpose", "recip"]


def _apply_op(v, op, cols, d, dt):
    """Append the result of ``op`` on the last values of ``v`` (traced inside a generated kernel's loop)."""
    if op == "add":
        v.append(v[-1] + v[-2])
    elif op == "mul_scalar":
        v.append(v[-1] * 0.5)
    elif op == "exp":
        v.append(tl.exp(v[-1] * 0.01))
    elif op == "rowmax":
        v.append(v[-1] - tl.max(v[-1], axis=1, keepdims=True))
    elif op == "rowsum_bcast":
        v.append(v[-1] + tl.sum(v[-2], axis=1, keepdims=True))
    elif op == "copy":
        v.append(tl.copy(v[-1], dtype=dt))
    elif op == "iota_add":
        v.append(v[-1] + (tl.arange(128)[:, None] + cols))
    elif op == "recip":
        v.append(tl.reciprocal(tl.abs(v[-1]) + 1.0))
    elif op == "matmul" and d == 128:
        v.append(tl.copy(tl.matmul(v[-1], v[-2], transpose_x=True)))
    elif op == "transpose" and d == 128:
        v.append(tl.copy(tl.transpose(v[-1])))


def make_kernel(ops, loop_kind, two_pass, carry, dt, inner=0, resident=False):
    @trn.kernel
    def gen(x, y, out):
        n, d = x.shape
        rng = tl.affine_range if loop_kind == "affine" else tl.sequential_range
        state = tl.zeros((128, d), tl.float32) if carry else None
        nt = -(-n // 128)
        if resident:  # tile i is loaded before the loop
            res = tl.ndarray((128, nt, d), x.dtype, buffer=tl.sbuf)
            for t in tl.affine_range(nt):
                isa.dma_copy(res[:, t, :], x[0:128, 0:d])
        for i in rng(nt):
            rows = i * 128 + tl.arange(128)[:, None]
            cols = tl.arange(d)[None, :]
            if resident:  # the loop reads only what the loads before it bring: paced by them at first
                a = tl.copy(res[:, i, :])
                b = a * 0.5
            else:
                a = tl.load(x[rows, cols], mask=rows < n)
                b = tl.load(y[rows, cols], mask=rows < n)
            v = [a, b]
            for op in ops:
                _apply_op(v, op, cols, d, dt)
            if inner:  # a nested loop accumulating into a tile of the outer body
                acc = tl.zeros((128, d), tl.float32)
                for j in tl.affine_range(inner):
                    acc[...] = acc + tl.load(y[rows, cols], mask=rows < n) * 0.5
                v.append(v[-1] + acc)
            if carry:
                state[...] = state + v[-1]
                tl.store(out[rows, cols], state, mask=rows < n)
            else:
                tl.store(out[rows, cols], v[-1], mask=rows < n)
        if two_pass:  # read back what was stored: RAW/WAR through HBM
            for i in rng(tl.cdiv(n, 128)):
                rows = i * 128 + tl.arange(128)[:, None]
                cols = tl.arange(d)[None, :]
                t = tl.load(out[rows, cols], mask=rows < n)
                tl.store(out[rows, cols], t * 2.0, mask=rows < n)

    return gen


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.sampled_from(OPS), min_size=1, max_size=6), loop_kind=st.sampled_from(["affine", "sequential"]),
       two_pass=st.booleans(), carry=st.booleans(), n=st.integers(1, 3000), d=st.sampled_from([8, 64, 128, 200]),
       dt=st.sampled_from([torch.float32, torch.bfloat16]), grid=st.sampled_from([1, 2, 13]),
       inner=st.sampled_from([0, 0, 3, 40]), resident=st.booleans())
def test_generated_kernel_schedules_are_valid(ops, loop_kind, two_pass, carry, n, d, dt, grid, inner, resident):
    if grid > 2 or inner:
        n = min(n, 260)  # keep the all-pairs dependence check small
    if resident and n < 128:
        n = 128  # the resident block loads whole 128-row tiles
    k = make_kernel(ops, loop_kind, two_pass, carry, {torch.float32: tl.float32, torch.bfloat16: tl.bfloat16}[dt],
                    inner, resident)
    x, y = torch.randn(n, d).to(dt), torch.randn(n, d).to(dt)
    ir = k.trace(x, y, torch.empty(n, d, dtype=dt), grid=(grid,))
    s = schedule(ir, extrapolate=False, record=True)
    check_invariants(s)
    fast = schedule(ir)
    assert fast.makespan == pytest.approx(s.makespan, rel=1e-9)


# --- every test kernel ------------------------------------------------------------------------------------------
def _case_args(case, n, d, seed=0):
    g = torch.Generator().manual_seed(seed)
    args = case.make(n, d, g)
    return args, (case.grid(args) if case.grid else (1,))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize(("n", "d"), [(1, 8), (200, 40), (1000, 128)])
def test_physical_sanity(case, n, d):
    args, grid = _case_args(case, n, d)
    prof = case.kernel.profile(*args, grid=grid)
    t = prof.target
    time_s = prof.time_us * 1e-6
    assert prof.time_us > 0 and prof.cycles > 0
    assert 0.0 <= prof.mfu <= 1.0 and 0.0 <= prof.mbu <= 1.0
    assert prof.flops / time_s <= t.tensor.peak_flops("bf16") * (1 + 1e-9)
    assert prof.dma_bytes / time_s <= t.dma_bandwidth_bytes_per_s * (1 + 1e-9)
    for st_ in prof.engines.values():
        assert 0.0 <= st_.utilization <= 1.0 + 1e-9
    assert prof.time_us >= 1.3  # at least one DMA's fixed cost
    assert prof.sbuf_peak_bytes <= t.sbuf_bytes_per_partition and prof.psum_peak_bytes <= t.psum_bytes_per_partition
    # the launch was real: outputs written as by a normal call
    got = prof.result if case.out_index is None else args[case.out_index]
    torch.testing.assert_close(got, case.ref(*args).to(got.dtype), atol=case.atol, rtol=case.rtol)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_invariants_on_test_kernels(case):
    args, grid = _case_args(case, 300, 72)
    s = schedule(case.kernel.trace(*args, grid=grid), grid, extrapolate=False, record=True)
    check_invariants(s)


def test_dependence_pairs_match_the_pairwise_rule():
    """:func:`_dependences` (numpy, blocks of rows) finds exactly the pairs a plain loop over all pairs with
    :func:`_overlap` finds, on kernels with SBUF, PSUM and read-back HBM accesses, over several row blocks."""
    x = torch.randn(200, 128)
    for ops, two_pass in ((["matmul", "rowmax", "add"], True), (["transpose", "exp"], False)):
        ir = make_kernel(ops, "sequential", two_pass, True, tl.float32, inner=3).trace(x, x, torch.empty_like(x))
        s = schedule(ir, extrapolate=False, record=True)
        flat = [(i, key, box, w) for i, accs in enumerate(s.accesses) for key, box, w in accs]
        want = {(i, j) for a, (i, ki, bi, wi) in enumerate(flat) for j, kj, bj, wj in flat[a + 1:]
                if ki == kj and j != i and (wi or wj) and _overlap(ki, bi, bj)}
        pi, pj = _dependences(s, chunk=7)
        assert len(want) > 100 and set(zip(pi.tolist(), pj.tolist())) == want


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize(("n", "d"), [(5000, 64), (3001, 200)])
def test_extrapolation_matches_exact_schedule(case, n, d):
    args, grid = _case_args(case, n, d)
    ir = case.kernel.trace(*args, grid=grid)
    exact, fast = schedule(ir, grid, extrapolate=False), schedule(ir, grid)
    assert fast.n == exact.n
    assert fast.makespan == pytest.approx(exact.makespan, rel=1e-6)
    np.testing.assert_allclose(fast.busy()[:NE], exact.busy()[:NE], rtol=1e-9)
    assert fast.nbytes.sum() == pytest.approx(exact.nbytes.sum())


def _tutorial():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "tutorials" / "03_matmul.py"
    spec = importlib.util.spec_from_file_location("tutorial_03_matmul", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name", ["matmul_naive", "matmul_hoisted", "matmul_blocked", "matmul_optimized"])
def test_extrapolation_matches_exact_on_the_tutorial_matmuls(name):
    mod = _tutorial()
    ir = getattr(mod, name).trace(*mod._inputs(4096, 1024, 2048))
    exact, fast = schedule(ir, extrapolate=False), schedule(ir)
    assert fast.extrapolated > 0
    assert fast.makespan == pytest.approx(exact.makespan, rel=1e-9)


def test_extrapolated_schedule_keeps_invariants():
    x = torch.randn(40 * 128, 256)
    ir = CASES[0].kernel.trace(x, x, torch.empty_like(x))
    s = schedule(ir)
    assert s.extrapolated > 0
    _no_resource_overlap(s)


def test_big_matmul_schedules_quickly():
    import time

    from tests.kernels import matmul_kn

    a, b = torch.randn(4096, 1024).bfloat16(), torch.randn(4096, 2048).bfloat16()
    ir = matmul_kn.trace(a, b, torch.empty(1024, 2048, dtype=torch.bfloat16))
    t0 = time.process_time()  # CPU time: the shared machine's load does not count (0.2 s unloaded)
    s = schedule(ir)
    assert time.process_time() - t0 < 5.0
    assert (s.res == 0).sum() == 32 * 8 * 4  # every matmul instance is in the schedule


def test_grid_instances_share_one_core():
    from tests.kernels import vector_add_grid

    x = torch.randn(128 * 8, 256)
    one = vector_add_grid.profile(x[:128], x[:128], torch.empty(128, 256), grid=1, simulate_only=True)
    eight = vector_add_grid.profile(x, x, torch.empty_like(x), grid=8, simulate_only=True)
    assert eight.engines["vector"].instructions == 8 * one.engines["vector"].instructions
    assert one.time_us < eight.time_us < 8 * one.time_us  # back to back, overlapping where dependences allow
