"""benchmarks/bench_device.py runs and prints its ratio table (no timing asserts: numbers are for humans)."""

import importlib.util
import os


def test_bench_device_runs(capsys):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    spec = importlib.util.spec_from_file_location("bench_device", os.path.join(root, "benchmarks", "bench_device.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--repeat", "1", "--iters", "3"]) == 0
    out = capsys.readouterr().out
    assert "x + y (16 x f32), native" in out and "trn/CPU" in out and "ran natively: True" in out
