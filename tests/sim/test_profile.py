"""``kernel.profile`` and ``trn.Profile``: numbers, instructions, summary, Chrome trace, roofline."""

from __future__ import annotations

import json

import pytest
import torch

import trnlang as trn
import trnlang.language as tl
from tests.kernels import flash_attention, matmul_kn, softmax, vector_add


def test_profile_runs_the_kernel_and_reports_its_schedule():
    x, y = torch.randn(300, 96), torch.randn(300, 96)
    out = torch.zeros_like(x)
    p = vector_add.profile(x, y, out)
    torch.testing.assert_close(out, x + y)
    assert isinstance(p, trn.Profile) and p.kernel == "vector_add" and p.target.name == "trn2"
    assert p.engines["vector"].instructions == 3 and p.engines["dma"].instructions == 9
    assert p.cycles == round(p.time_us * 1e-6 * 2.4e9)
    assert p.dma_bytes == pytest.approx(3 * 300 * 96 * 4)  # masked-off rows of the last tile are not moved
    assert p.flops == 0 and p.mfu == 0
    assert p.mbu == pytest.approx(p.dma_bytes / (368e9 * p.time_us * 1e-6))
    last = max(r.start_us + r.duration_us for r in p.instructions)
    assert last == pytest.approx(p.time_us)


def test_simulate_only_does_not_execute():
    x = torch.randn(256, 64)
    out = torch.full_like(x, 7.0)
    p = softmax.profile(x, out, simulate_only=True)
    assert p.result is None and bool((out == 7.0).all()) and p.time_us > 0


def test_returned_outputs_are_kept():
    from tests.kernels import new_output

    x = torch.randn(130, 16)
    p = new_output.profile(x)
    torch.testing.assert_close(p.result, torch.nn.functional.gelu(x) * 2.0, atol=1e-5, rtol=1e-5)


def test_instructions_carry_engine_times_lines_and_text():
    a, b = torch.randn(256, 128), torch.randn(256, 64)
    p = matmul_kn.profile(a, b, torch.empty(128, 64))
    mm = [r for r in p.instructions if r.engine == "tensor"]
    assert len(mm) == 2 and all("nc_matmul" in r.op for r in mm)
    assert all(r.line is not None and r.line.filename.endswith("kernels.py") for r in p.instructions)
    assert {r.line.text.strip() for r in mm} == {"acc += tl.matmul(at, bt, transpose_x=True)"}
    assert all(r.queue is not None for r in p.instructions if r.engine == "dma")
    assert p.mfu == pytest.approx(2 * 2 * 128 * 128 * 512 / 20e12 / (p.time_us * 1e-6))  # fp32 peak
    assert 0 < p.mfu < 1


def test_summary_table():
    x = torch.randn(1000, 128)
    p = softmax.profile(x, torch.empty_like(x))
    text = p.summary()
    for word in ("time", "MFU", "MBU", "SBUF", "PSUM", "tensor", "vector", "scalar", "gpsimd", "dma (16 e)",
                 "busiest source lines", "multi-buffered", "tl.exp"):
        assert word in text, word
    assert str(p) == text
    rows = p.by_line()
    assert rows[0][3] >= rows[-1][3] and sum(r[2] for r in rows) == p.schedule.n


def test_chrome_trace_schema(tmp_path):
    q = torch.randn(200, 64)
    k, v = torch.randn(237, 64), torch.randn(237, 64)
    p = flash_attention.profile(q, k, v, torch.empty(200, 64), 0.125)
    path = tmp_path / "trace.json"
    p.save_trace(path)
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    for ev in events:
        for key in ("name", "ph", "ts", "dur", "pid", "tid"):
            assert key in ev, (key, ev)
    names = {ev["tid"]: ev["args"]["name"] for ev in events if ev["ph"] == "M" and ev["name"] == "thread_name"}
    assert sorted(n for n in names.values() if not n.startswith("DMA")) == ["GpSimd", "Scalar", "Tensor", "Vector"]
    assert sum(n.startswith("DMA engine") for n in names.values()) == 16
    assert len(set(names.values())) == len(names)  # one track each
    xs = [ev for ev in events if ev["ph"] == "X"]
    s = p.schedule
    assert len(xs) == int((~s.is_dma).sum() + s.span[s.is_dma].sum())  # a transfer: one event per DMA engine
    dma = [ev for ev in xs if ev["cat"] == "dma"]
    assert dma and all(ev["args"]["bytes"] > 0 and 1 <= ev["args"]["dma_engines"] <= 16 for ev in dma)
    assert {ev["tid"] for ev in xs} <= set(names)
    for ev in xs:
        assert ev["dur"] > 0 and ev["ts"] >= 0
        assert ev["args"]["line"] and ev["args"]["instr"]
    by_engine = {names[ev["tid"]] for ev in xs}
    assert {"Tensor", "Vector", "Scalar", "GpSimd"} <= by_engine
    assert max(ev["ts"] + ev["dur"] for ev in xs) == pytest.approx(p.time_us)
    p.save_trace(tmp_path / "short.json", max_events=5)
    short = json.loads((tmp_path / "short.json").read_text())["traceEvents"]
    first5 = s.is_dma[:5]
    assert sum(ev["ph"] == "X" for ev in short) == int((~first5).sum() + s.span[:5][first5].sum())


def test_roofline_and_plot(tmp_path):
    a, b = torch.randn(512, 256).bfloat16(), torch.randn(512, 512).bfloat16()
    p = matmul_kn.profile(a, b, torch.empty(256, 512))
    r = p.roofline()
    assert r.flops == p.flops and r.bytes == p.dma_bytes
    assert r.intensity == pytest.approx(p.flops / p.dma_bytes)
    assert r.peak_flops_per_s == pytest.approx(79e12) and r.peak_bytes_per_s == 368e9
    assert r.ridge == pytest.approx(79e12 / 368e9)
    assert r.achieved_flops_per_s <= r.attainable_flops_per_s * (1 + 1e-9)
    assert r.bound in ("compute", "memory")
    pytest.importorskip("matplotlib")
    out = tmp_path / "roof.png"
    p.plot_roofline(out)
    assert out.stat().st_size > 1000


def test_profile_errors_point_at_the_user_line():
    @trn.kernel
    def bad(x, out):
        t = tl.load(x[0:256, 0:4])  # partition dim 256 > 128
        tl.store(out[0:256, 0:4], t)

    with pytest.raises(trn.ShapeError) as ei:
        bad.profile(torch.randn(256, 4), torch.empty(256, 4))
    assert ei.value.loc.lineno == bad.fn.__code__.co_firstlineno + 2


def test_profile_of_other_targets():
    x = torch.randn(256, 512)

    @trn.kernel(target="trn1")
    def add1(x, out):
        for i in tl.affine_range(2):
            tl.store(out[i * 128:(i + 1) * 128, :], tl.load(x[i * 128:(i + 1) * 128, :]) + 1.0)

    p1 = add1.profile(x, torch.empty_like(x))
    assert p1.target.name == "trn1" and p1.cycles == round(p1.time_us * 1e-6 * 2.8e9)
