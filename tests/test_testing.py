"""``trnlang.testing``: do_bench, do_sim, Benchmark / perf_report sweeps (table, CSV, plots)."""

from __future__ import annotations

import csv
import sys

import pytest
import torch

import trnlang.testing as tt
from tests.kernels import vector_add


def test_do_bench_warms_up_then_times_each_call():
    calls = []
    ms = tt.do_bench(lambda: calls.append(1), warmup=0, rep=0, min_runs=7)
    assert len(calls) == 1 + 7  # one untimed first call (compilation), then min_runs timed calls
    assert isinstance(ms, float) and ms >= 0
    everything = tt.do_bench(lambda: None, warmup=0, rep=0, min_runs=5, return_mode="all")
    assert isinstance(everything, list) and len(everything) == 5 and everything == sorted(everything)


def test_do_bench_quantiles_and_modes():
    qs = tt.do_bench(lambda: sum(range(2000)), warmup=1, rep=5, quantiles=[0.0, 0.5, 1.0])
    assert isinstance(qs, list) and qs[0] <= qs[1] <= qs[2]
    lo = tt.do_bench(lambda: sum(range(2000)), warmup=0, rep=2, return_mode="min")
    assert isinstance(lo, float) and lo > 0
    with pytest.raises(ValueError, match="return_mode"):
        tt.do_bench(lambda: None, return_mode="p99")
    with pytest.raises(ValueError, match="quantiles"):
        tt.do_bench(lambda: None, quantiles=[1.5])


def test_do_bench_respects_max_runs():
    calls = []
    tt.do_bench(lambda: calls.append(1), warmup=0, rep=10_000, max_runs=20)
    assert len(calls) == 1 + 20


def test_do_sim_is_the_profile_time():
    x = torch.randn(512, 128)
    out = torch.full_like(x, 3.0)
    ms = tt.do_sim(vector_add, x, x, out)
    assert ms == pytest.approx(vector_add.profile(x, x, out, simulate_only=True).time_us * 1e-3)
    assert bool((out == 3.0).all())  # nothing ran


def _report(seen):
    bench = tt.Benchmark(x_names=["n"], x_vals=[1, 2, 4], line_arg="provider", line_vals=["a", "b"],
                         line_names=["A", "B"], plot_name="fake", args={"scale": 10.0}, xlabel="n")

    @tt.perf_report(bench)
    def run(n, provider, scale):
        seen.append((n, provider, scale))
        if provider == "a":
            return n * scale, n / scale  # host ms, simulated ms
        return 2.0 * n  # host only

    return run


def test_perf_report_sweeps_lines_and_clocks(capsys):
    seen = []
    run = _report(seen)
    rows = run.run(print_data=True)
    assert seen == [(n, p, 10.0) for n in (1, 2, 4) for p in ("a", "b")]
    assert rows[2] == {"n": 4, "A (host ms)": 40.0, "A (sim ms)": 0.4, "B (host ms)": 8.0}
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "fake:"
    assert "A (host ms)" in out and "A (sim ms)" in out and "40.000" in out
    assert run(4, "b", 1.0) == 8.0  # the decorated function stays callable


def test_perf_report_saves_csv_and_says_when_it_cannot_plot(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    _report([]).run(save_path=str(tmp_path))
    with open(tmp_path / "fake.csv") as f:
        table = list(csv.DictReader(f))
    assert [r["n"] for r in table] == ["1", "2", "4"] and float(table[1]["A (sim ms)"]) == pytest.approx(0.2)
    assert "not plotted (matplotlib is not installed" in capsys.readouterr().out


def test_perf_report_plots_host_and_target(tmp_path):
    pytest.importorskip("matplotlib", reason="plots need matplotlib (pip install 'trnlang[plot]')")
    _report([]).run(save_path=str(tmp_path))
    assert (tmp_path / "fake.png").read_bytes()[:4] == b"\x89PNG"


def test_format_table_fills_missing_cells():
    text = tt.format_table([{"n": 1, "x": 1.0}, {"n": 2, "x": None, "y": 3}])
    assert text.splitlines() == ["n      x  y", "1  1.000  -", "2      -  3"]
    assert tt.format_table([]) == "(no data)"


def test_the_documented_example_runs(tmp_path, monkeypatch, capsys):
    import pathlib
    import re

    doc = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "benchmarking.md").read_text()
    code = re.search(r"```python\n(.*?)```", doc, re.S).group(1)
    code = code.replace("x_vals=[256, 1024, 4096]", "x_vals=[128, 256]").replace("warmup=5, rep=20", "warmup=0, rep=1")
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "bench_example.py"  # a file, so the kernel's source lines can be found
    path.write_text(code)
    ns = {"__name__": "bench_example"}
    exec(compile(code, str(path), "exec"), ns)
    rows = ns["rows"]
    assert [r["n"] for r in rows] == [128, 256]
    assert rows[0]["trnlang (sim ms)"] > 0 and rows[0]["torch (host ms)"] > 0 and "torch (sim ms)" not in rows[0]
    assert (tmp_path / "build" / "bench" / "softmax-512-cols.csv").exists()
    assert "softmax-512-cols:" in capsys.readouterr().out
