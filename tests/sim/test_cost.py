"""The cost model against DEVICE.md's table, and the scheduler on hand-sized examples."""

from __future__ import annotations

import pytest
import torch

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
from trnlang.ir.nodes import Buf, Instr, Region
from trnlang.ir.ops import Alu, Op
from trnlang.ir.types import DType, Engine, Space
from trnlang.sim import cost
from trnlang.sim.targets import TARGETS

T2 = TARGETS["trn2"]
F32, BF16 = DType.float32, DType.bfloat16


def _tile(shape, dt=F32, space=Space.SBUF, name="t"):
    return Region.whole(Buf(name, tuple(shape), dt, space))


def _ins(kind, outs, ins, /, engine=None, **attrs):
    return Instr(kind, tuple(outs), tuple(ins), dict(attrs), engine)


@pytest.mark.parametrize(("m", "n", "dt", "want"), [
    (128, 512, "bf16", 512),   # max(min(64, M), N)
    (128, 32, "bf16", 64),     # min(64, M) dominates small N
    (16, 16, "bf16", 16),
    (128, 512, "f32", 2048),   # x4 for fp32 inputs
    (128, 512, "f8e4m3", 256),  # fp8 runs at 158/79 = 2x bf16 on trn2
])
def test_matmul_cycles(m, n, dt, want):
    assert cost.matmul_cycles(m, n, dt, T2) == want


@pytest.mark.parametrize("name", list(TARGETS))
def test_matmul_at_full_tile_never_beats_published_peak(name):
    t = TARGETS[name]
    flops = 2 * 128 * 128 * 512
    for dt, peak in (("bf16", t.tensor.peak_bf16_flops), ("f32", t.tensor.peak_fp32_flops)):
        rate = flops / (cost.matmul_cycles(128, 512, dt, t) / t.tensor.clock_hz)
        assert 0.95 * peak <= rate <= peak


def test_matmul_instruction_cycles_and_flops():
    st, mv, out = _tile((128, 128), BF16), _tile((128, 512), BF16), _tile((128, 512), F32, Space.PSUM)
    ins = _ins(Op.MATMUL, [out], [st, mv], accumulate=False)
    assert cost.instr_cycles(ins, T2) == 512
    assert cost.matmul_flops(ins) == 2 * 128 * 128 * 512
    assert cost.matmul_peak(ins, T2) == 79e12


def test_elementwise_costs():
    big, small = _tile((128, 1000)), _tile((128, 10))
    act = _ins(Op.ACTIVATION, [big], [big], func=Alu.exp, scale=1.0, reduce_op=None)
    assert cost.instr_cycles(act, T2, Engine.SCALAR) == 1000  # max(MIN_II, N)
    assert cost.instr_cycles(_ins(Op.ACTIVATION, [small], [small], func=Alu.exp), T2, Engine.SCALAR) == 64  # MIN_II
    ts = _ins(Op.TENSOR_SCALAR, [big], [big], op0=Alu.add, op1=None)
    assert cost.instr_cycles(ts, T2, Engine.VECTOR) == 1000
    # bf16 on trn2's Vector engine: 512 elem/cycle vs 256 for fp32 -> half the cycles (no dtype term in the table)
    hb = _tile((128, 1000), BF16)
    assert cost.instr_cycles(_ins(Op.TENSOR_SCALAR, [hb], [hb], op0=Alu.add), T2, Engine.VECTOR) == 500
    assert cost.instr_cycles(_ins(Op.TENSOR_SCALAR, [hb], [hb], op0=Alu.add), T2, Engine.SCALAR) == 1000


def test_tensor_tensor_costs():
    a, b, o = _tile((128, 512)), _tile((128, 512)), _tile((128, 512))
    assert cost.instr_cycles(_ins(Op.TENSOR_TENSOR, [o], [a, b], op=Alu.add), T2, Engine.VECTOR) == 1024  # 2N
    ha, hb = _tile((128, 512), BF16), _tile((128, 512), BF16)
    assert cost.instr_cycles(_ins(Op.TENSOR_TENSOR, [o], [ha, hb], op=Alu.add), T2, Engine.VECTOR) == 512  # bf16
    p = _tile((128, 512), F32, Space.PSUM)
    assert cost.instr_cycles(_ins(Op.TENSOR_TENSOR, [o], [a, p], op=Alu.add), T2, Engine.VECTOR) == 512  # PSUM
    tiny = _tile((128, 8))
    assert cost.instr_cycles(_ins(Op.TENSOR_TENSOR, [tiny], [tiny, tiny], op=Alu.add), T2, Engine.VECTOR) == 64


def test_reduce_reciprocal_gpsimd_transpose_costs():
    x, r = _tile((128, 512)), _tile((128, 1))
    assert cost.instr_cycles(_ins(Op.TENSOR_REDUCE, [r], [x], op=Alu.add, axes=(1,)), T2, Engine.VECTOR) == 512
    xb = _tile((128, 512), BF16)
    assert cost.instr_cycles(_ins(Op.TENSOR_REDUCE, [r], [xb], op=Alu.maximum, axes=(1,)), T2, Engine.VECTOR) == 256
    y = _tile((128, 100))
    assert cost.instr_cycles(_ins(Op.ACTIVATION, [y], [y], func=Alu.reciprocal), T2, Engine.VECTOR) == 800  # 8N
    assert cost.instr_cycles(_ins(Op.IOTA, [x], [], expr=0), T2, Engine.GPSIMD) == 150 + 512
    assert cost.instr_cycles(_ins(Op.AFFINE_SELECT, [y], [y, y], pred=True), T2, Engine.GPSIMD) == 250
    tr = _ins(Op.TRANSPOSE, [_tile((128, 128), F32, Space.PSUM)], [_tile((128, 128), BF16)])
    assert cost.instr_cycles(tr, T2, Engine.TENSOR) == 128  # max(P, min(64, F))
    tr2 = _ins(Op.TRANSPOSE, [_tile((16, 32), F32, Space.PSUM)], [_tile((32, 16), BF16)])
    assert cost.instr_cycles(tr2, T2, Engine.TENSOR) == 32


def test_dma_cost():
    # one engine per 8 partitions; each engine 27.2 GB/s, capped by the 368 GB/s aggregate when all 16 stream
    assert cost.dma_engines_of(0, 128, T2) == (0, 16) and cost.dma_engines_of(0, 8, T2) == (0, 1)
    assert cost.dma_engines_of(96, 32, T2) == (12, 4) and cost.dma_engines_of(4, 8, T2) == (0, 2)
    assert cost.dma_engine_rate(1, T2) == pytest.approx(27.2e9)
    assert cost.dma_engine_rate(16, T2) == pytest.approx(23e9)
    assert cost.dma_engine_rate(16, TARGETS["trn3"]) == pytest.approx(33e9)
    # the documented curve: small runs << peak, >= 4 KiB ~ peak
    eff = [cost.dma_efficiency(b, T2) for b in (4, 64, 256, 2048, 4096)]
    assert eff == sorted(eff) and eff[0] < 0.02 and eff[1] < 0.25 and eff[2] == pytest.approx(0.5)
    assert eff[3] > 0.85 and eff[4] > 0.9
    assert cost.dma_seconds(0, T2) == pytest.approx(1.3e-6 + 0.17e-6)
    # a [128, 2048] fp32 tile: 16 packets of 64 KiB at 23 GB/s x eff(8 KiB)
    want = 1.3e-6 + 0.17e-6 + 65536 / (23e9 * 8192 / (8192 + 256))
    assert cost.dma_seconds(128 * 2048 * 4, T2) == pytest.approx(want)


def _one_profile(fn, *args, **kw):
    return trn.kernel(fn).profile(*args, **kw)


def test_dma_engines_latency_and_sharing_in_schedule():
    def loads(x, out):
        ts = [tl.load(x[i * 128:(i + 1) * 128, :]) for i in range(3)]  # three 128-partition loads: all 16 engines
        for i, t in enumerate(ts):
            tl.store(out[i * 128:(i + 1) * 128, :], t)

    x = torch.randn(3 * 128, 512)
    p = _one_profile(loads, x, torch.empty_like(x), simulate_only=True)
    pkt = (cost.dma_seconds(128 * 512 * 4, T2) - T2.dma_fixed_cost_s) * 1e6
    setup, data = (x * 1e6 for x in cost.dma_packet_stages(8 * 512 * 4, 512 * 4, 16, T2))
    assert pkt == pytest.approx(setup + data) and data > setup
    dma = [r for r in p.instructions if r.engine == "dma"]
    assert all(r.queue == 0 and r.dma_engines == 16 for r in dma)
    starts = sorted(r.start_us for r in dma if "<- %x" in r.op)
    # the first moves 1.3 us after launch; the others share the engines: each one's setup overlaps the bytes of
    # the one before, so they follow one packet's bytes apart
    assert starts == pytest.approx([1.3, 1.3 + data, 1.3 + 2 * data])
    assert all(r.duration_us == pytest.approx(pkt) for r in dma)
    assert p.engines["dma"].busy_us == pytest.approx(16 * 6 * data)

    def small(x, out):  # loads into partitions 0-7 and 8-15 of one tile use engines 0 and 1 and move at once
        t = tl.ndarray((16, 512), tl.float32, buffer=tl.sbuf)
        isa.dma_copy(t[0:8, :], x[0:8, :])
        isa.dma_copy(t[8:16, :], x[8:16, :])
        tl.store(out[0:16, :], t)

    y = torch.randn(16, 512)
    p2 = _one_profile(small, y, torch.empty_like(y), simulate_only=True)
    loads2 = [r for r in p2.instructions if r.engine == "dma" and "<- %x" in r.op]
    assert [(r.queue, r.dma_engines) for r in loads2] == [(0, 1), (1, 1)]
    assert loads2[0].start_us == loads2[1].start_us == pytest.approx(1.3)
    store = [r for r in p2.instructions if r.engine == "dma" and "%out" in r.op]
    assert [(r.queue, r.dma_engines) for r in store] == [(0, 2)]


def test_dependent_back_to_back_stall():
    def chain(x, out):
        t = tl.load(x[0:128, 0:512])
        u = t * 2.0            # vector
        v = u + 1.0            # vector, depends on the instruction just before it
        tl.store(out[0:128, 0:512], v)

    x = torch.randn(128, 512)
    p = _one_profile(chain, x, torch.empty_like(x), simulate_only=True)
    vec = [r for r in p.instructions if r.engine == "vector"]
    assert len(vec) == 2
    gap_us = vec[1].start_us - (vec[0].start_us + vec[0].duration_us)
    assert gap_us == pytest.approx(100 / T2.vector.clock_hz * 1e6)
    assert vec[0].duration_us == pytest.approx(512 / T2.vector.clock_hz * 1e6)


def test_accumulating_matmuls_pipeline_without_stall():
    def mm(a, b, out):
        acc = tl.zeros((128, 512), tl.float32, buffer=tl.psum)
        at, bt = tl.load(a[0:128, :]), tl.load(b[0:128, :])  # inputs ready together: only the chain is timed
        for _ in tl.static_range(4):
            acc += tl.matmul(at, bt, transpose_x=True)
        tl.store(out[:, :], acc)

    a, b = torch.randn(512, 128).bfloat16(), torch.randn(512, 512).bfloat16()
    p = _one_profile(mm, a, b, torch.empty(128, 512))
    mms = [r for r in p.instructions if r.engine == "tensor"]
    for x, y in zip(mms, mms[1:]):
        assert y.start_us >= x.start_us + x.duration_us - 1e-9
    assert mms[-1].start_us + mms[-1].duration_us - mms[0].start_us < 4 * 512 / 2.4e3 + 1e-3  # back to back
