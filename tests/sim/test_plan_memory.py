"""The memory planner: disjoint addresses for overlapping lifetimes, reuse, PSUM banks, multi-buffering, overflow."""

from __future__ import annotations

import pytest
import torch

import trnlang as trn
import trnlang.language as tl
from tests.interpret.kbuild import BF16, F32, alloc, hbm, here, instr, kernel, sbuf, whole
from tests.kernels import CASES
from trnlang.ir.equality import kernel_diff
from trnlang.ir.ops import Op
from trnlang.ir.parser import parse_kernel
from trnlang.ir.printer import print_kernel
from trnlang.ir.types import Space
from trnlang.passes.plan_memory import _interval, _Liveness, allocs, plan_memory, slot_bytes
from trnlang.sim.profile import Profile
from trnlang.sim.targets import TARGETS

T2 = TARGETS["trn2"]
BIG = 30720  # fp32 elements per partition = 120 KiB: two of them do not fit in trn2's 224 KiB
HALF = BIG // 2


def _trace(case, n=300, d=64):
    g = torch.Generator().manual_seed(0)
    args = case.make(n, d, g)
    return case.kernel.trace(*args, grid=case.grid(args) if case.grid else (1,))


def _check_disjoint(k):
    live = _Liveness(k)
    by_ins = {id(r.ins): r for r in live.recs}
    placed = []
    for a in allocs(k):
        b = a.outs[0]
        r = by_ins[id(a)]
        lo = a.attrs["addr"][1]
        hi = lo + slot_bytes(b, T2) * a.attrs["bufs"]
        cap = T2.sbuf_bytes_per_partition if b.space is Space.SBUF else T2.psum_bytes_per_partition
        assert 0 <= lo < hi <= cap and a.attrs["addr"][0] == 0
        if b.space is Space.PSUM:
            assert lo % T2.psum_bank_bytes == 0
        placed.append((b.space, _interval(r, live), lo, hi, b.name))
    for i, (sp, (s1, e1), lo1, hi1, n1) in enumerate(placed):
        for sp2, (s2, e2), lo2, hi2, n2 in placed[i + 1:]:
            if sp is sp2 and s1 <= e2 and s2 <= e1:
                assert hi1 <= lo2 or hi2 <= lo1, f"{n1} and {n2} are live together at overlapping addresses"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_overlapping_lifetimes_get_disjoint_addresses(case):
    k = _trace(case)
    assert all("addr" in a.attrs and "bufs" in a.attrs for a in allocs(k))
    _check_disjoint(k)


def test_plan_round_trips_through_the_printer():
    k = _trace(CASES[0])
    assert "bufs = 3" in print_kernel(k)
    assert kernel_diff(k, parse_kernel(print_kernel(k))) is None


def test_space_of_dead_buffers_is_reused_when_needed():
    @trn.kernel
    def three_big(x, out):
        for j in tl.static_range(3):  # six 60 KiB tiles, two live at a time: 360 KiB > 224 KiB in total
            t = tl.load(x[0:128, j * HALF:(j + 1) * HALF])
            tl.store(out[0:128, j * HALF:(j + 1) * HALF], t + 1.0)

    x = torch.randn(128, 3 * HALF)
    k = three_big.trace(x, torch.empty_like(x))
    _check_disjoint(k)
    offs = [a.attrs["addr"][1] for a in allocs(k) if a.outs[0].nbytes_per_partition == HALF * 4]
    assert len(offs) == 6 and len(set(offs)) < len(offs)


def test_multibuffering_chosen_when_space_allows():
    x = torch.randn(1000, 256)
    k = CASES[0].kernel.trace(x, x, torch.empty_like(x))  # vector_add: 8 iterations, small tiles
    assert [a.attrs["bufs"] for a in allocs(k)] == [3, 3, 3]
    plan = plan_memory(k)
    assert [(n, b) for n, b, _ in plan.multi_buffered] == [("t0", 3), ("t1", 3), ("t2", 3)]
    assert all(loc is not None and loc.lineno > 0 for _, _, loc in plan.multi_buffered)


def test_multibuffering_not_chosen_without_space_or_iterations():
    @trn.kernel
    def big_body(x, out):
        for i in tl.affine_range(4):
            t = tl.load(x[i * 128:(i + 1) * 128, :])  # 120 KiB: a second copy does not fit
            tl.store(out[i * 128:(i + 1) * 128, :], t)

    x = torch.randn(512, BIG)
    assert [a.attrs["bufs"] for a in allocs(big_body.trace(x, torch.empty_like(x)))] == [1]

    @trn.kernel
    def two_iters(x, out):
        for i in tl.affine_range(2):
            tl.store(out[i * 128:(i + 1) * 128, :], tl.load(x[i * 128:(i + 1) * 128, :]))

    x = torch.randn(256, 64)
    assert [a.attrs["bufs"] for a in allocs(two_iters.trace(x, torch.empty_like(x)))] == [2]

    @trn.kernel
    def sequential(x, out):
        for i in tl.sequential_range(4):
            tl.store(out[i * 128:(i + 1) * 128, :], tl.load(x[i * 128:(i + 1) * 128, :]))

    x = torch.randn(512, 64)
    assert [a.attrs["bufs"] for a in allocs(sequential.trace(x, torch.empty_like(x)))] == [1]


def test_psum_multibuffering_respects_the_eight_banks():
    @trn.kernel
    def four_banks(a, b, out):
        for i in tl.affine_range(4):
            acc = tl.zeros((128, 4, 512), tl.float32, buffer=tl.psum)  # 4 banks: 2 copies fit, 3 do not
            for j in tl.static_range(4):
                acc[:, j, :] += tl.matmul(tl.load(a[:, 0:128]), tl.load(b[:, j * 512:(j + 1) * 512]),
                                          transpose_x=True)
            for j in tl.static_range(4):
                tl.store(out[i * 128:(i + 1) * 128, j * 512:(j + 1) * 512], acc[:, j, :])

    a, b = torch.randn(128, 128), torch.randn(128, 2048)
    k = four_banks.trace(a, b, torch.empty(512, 2048))
    ps = [x for x in allocs(k) if x.outs[0].space is Space.PSUM]
    assert [x.attrs["bufs"] for x in ps] == [2]
    _check_disjoint(k)


def test_max_bufs_one_turns_multibuffering_off_and_costs_time():
    x = torch.randn(4096, 512)
    k = CASES[0].kernel.trace(x, x, torch.empty_like(x))
    multi = Profile.simulate(k).time_us
    k1 = parse_kernel(print_kernel(k))
    plan_memory(k1, max_bufs=1)
    assert all(a.attrs["bufs"] == 1 for a in allocs(k1))
    assert Profile.simulate(k1).time_us > 1.2 * multi


def test_overflow_error_lists_the_allocations_and_lines():
    @trn.kernel
    def too_big(x, out):
        a = tl.load(x[0:128, 0:BIG])
        b = tl.load(x[0:128, BIG:2 * BIG])
        tl.store(out[0:128, 0:BIG], a + b)

    x = torch.randn(128, 2 * BIG)
    first = too_big.fn.__code__.co_firstlineno
    with pytest.raises(trn.SbufOverflowError) as ei:
        too_big(x, torch.empty(128, BIG))
    msg = str(ei.value)
    assert "SBUF overflow" in msg and "224 KiB" in msg
    for line in (first + 2, first + 3):
        assert f"test_plan_memory.py:{line}" in msg


def test_planner_raises_on_hand_built_ir_with_the_alloc_line():
    x = hbm("x", (128, 64))
    bufs = [sbuf(f"big{i}", (128, BIG)) for i in range(2)]
    loc = here()
    body = [alloc(b) for b in bufs]
    for b in body:
        b.loc = loc
    body += [instr(Op.MEMSET, (whole(b),), (), value=0.0) for b in bufs]
    k = kernel([x], [], body)
    with pytest.raises(trn.SbufOverflowError) as ei:
        plan_memory(k)
    assert ei.value.loc == loc
    assert "big0" in str(ei.value) and "big1" in str(ei.value) and f":{loc.lineno}" in str(ei.value)


def test_psum_overflow_counts_banks():
    loc = here()
    bufs = [sbuf(f"acc{i}", (128, 600), F32, Space.PSUM) for i in range(5)]  # 2 banks each: 10 > 8
    body = [alloc(b) for b in bufs] + [instr(Op.MEMSET, (whole(b),), (), value=0.0) for b in bufs]
    for s in body[:5]:
        s.loc = loc
    with pytest.raises(trn.SbufOverflowError, match="PSUM overflow.*10 banks") as ei:
        plan_memory(kernel([], [], body))
    assert "acc4 [128, 600] float32: 2400 B per partition = 2 banks" in str(ei.value)


def test_small_buffers_pack_tightly():
    bufs = [sbuf(f"b{i}", (128, 3), BF16) for i in range(3)] + [sbuf("w", (128, 1), F32)]
    body = [alloc(b) for b in bufs] + [instr(Op.MEMSET, (whole(b),), (), value=0.0) for b in bufs]
    k = kernel([], [], body)
    plan = plan_memory(k)
    assert plan.sbuf_bytes <= 3 * 6 + 4 + 2  # at most alignment padding
    _check_disjoint(k)


def test_small_dma_tiles_get_deep_buffers_to_cover_the_dma_latency():
    """Deep buffering: a loop whose DMA tiles hold less than the DMA latency's worth of bytes per partition
    (1.3 us x 368 GB/s / 128 = ~3.7 KiB on trn2) gets 8 copies, which keeps the transfers in flight; tiles of
    4 KiB keep 3; PSUM accumulators are not deepened; max_bufs=3 is the former plan and is slower."""
    @trn.kernel
    def stream(x, out):
        for i in tl.affine_range(x.shape[0] // 128):
            tl.store(out[i * 128:(i + 1) * 128, :], tl.load(x[i * 128:(i + 1) * 128, :]))

    small = torch.randn(128 * 64, 64)  # 256 B per partition per tile
    k = stream.trace(small, torch.empty_like(small))
    assert [a.attrs["bufs"] for a in allocs(k)] == [8]
    _check_disjoint(k)
    wide = torch.randn(128 * 64, 1024)  # 4 KiB: already more than the latency's worth
    assert [a.attrs["bufs"] for a in allocs(stream.trace(wide, torch.empty_like(wide)))] == [3]
    k3 = parse_kernel(print_kernel(k))
    plan_memory(k3, max_bufs=3)
    assert [a.attrs["bufs"] for a in allocs(k3)] == [3]
    assert Profile.simulate(k3).time_us > 1.3 * Profile.simulate(k).time_us

    @trn.kernel
    def acc_loop(a, b, out):
        for i in tl.affine_range(16):
            acc = tl.zeros((128, 512), tl.float32, buffer=tl.psum)
            acc += tl.matmul(tl.load(a[:, i * 128:(i + 1) * 128]), tl.load(b[:, 0:512]), transpose_x=True)
            tl.store(out[i * 128:(i + 1) * 128, :], acc)

    k = acc_loop.trace(torch.randn(128, 2048), torch.randn(128, 512), torch.empty(2048, 512))
    assert all(a.attrs["bufs"] <= 3 for a in allocs(k) if a.outs[0].space is Space.PSUM)
    _check_disjoint(k)
