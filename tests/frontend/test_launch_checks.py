"""Launch-time checks: read-only outputs are refused before anything runs; ``kernel.interpret`` switches executors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import trnlang as trn
import trnlang.language as tl
from trnlang.frontend.errors import LaunchError
from trnlang.interpret import interpreter
from trnlang.runtime import jit

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _add_one(interpret: bool) -> trn.KernelFn:
    @trn.kernel(interpret=interpret)
    def add_one(x, out):
        tl.store(out[0:2, 0:3], tl.load(x[0:2, 0:3]) + 1.0)

    return add_one


def _read_only_zeros() -> np.ndarray:
    a = np.zeros((2, 3), np.float32)
    a.flags.writeable = False
    return a


def _bytes_backed_zeros() -> np.ndarray:
    return np.frombuffer(bytes(24), np.float32).reshape(2, 3)


@pytest.mark.parametrize("interpret", [False, True], ids=["jit", "interpreter"])
@pytest.mark.parametrize("make_out", [_read_only_zeros, _bytes_backed_zeros], ids=["writeable_false", "frombuffer"])
def test_read_only_output_is_a_launch_error_naming_it(interpret, make_out):
    k = _add_one(interpret)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = make_out()
    with pytest.raises(LaunchError, match=r"argument 'out' is read-only"):
        k(x, out)
    np.testing.assert_array_equal(out, np.zeros((2, 3), np.float32))  # nothing written
    # warm: after a successful launch of the same specialization, the fast path checks too
    good = np.empty((2, 3), np.float32)
    k(x, good)
    np.testing.assert_array_equal(good, x + 1)
    with pytest.raises(LaunchError, match=r"argument 'out' is read-only"):
        k(x, out)
    with pytest.raises(LaunchError, match=r"argument 'out' is read-only"):
        k.bind(x, out)()
    np.testing.assert_array_equal(out, np.zeros((2, 3), np.float32))


@pytest.mark.parametrize("interpret", [False, True], ids=["jit", "interpreter"])
def test_read_only_input_is_accepted(interpret):
    k = _add_one(interpret)
    x = np.frombuffer(np.arange(6, dtype=np.float32).tobytes(), np.float32).reshape(2, 3)
    assert not x.flags.writeable
    out = np.empty((2, 3), np.float32)
    k(x, out)
    np.testing.assert_array_equal(out, np.arange(6, dtype=np.float32).reshape(2, 3) + 1)
    # torch has no read-only flag: a tensor over a read-only numpy input is an input like any other
    out_t = torch.empty(2, 3)
    k(torch.from_numpy(np.array(x)), out_t)
    np.testing.assert_array_equal(out_t.numpy(), out)


@pytest.mark.parametrize("interpret", ["0", "1"], ids=["jit", "interpreter"])
def test_read_only_memmap_output_is_a_launch_error_not_a_signal(tmp_path, interpret):
    path = tmp_path / "out.bin"
    np.zeros((2, 3), np.float32).tofile(path)
    code = textwrap.dedent(f"""
        import numpy as np, trnlang as trn, trnlang.language as tl
        from trnlang.frontend.errors import LaunchError

        @trn.kernel(interpret={interpret == "1"})
        def add_one(x, out):
            tl.store(out[0:2, 0:3], tl.load(x[0:2, 0:3]) + 1.0)

        out = np.memmap({str(path)!r}, np.float32, mode="r", shape=(2, 3))
        try:
            add_one(np.ones((2, 3), np.float32), out)
        except LaunchError as e:
            print("LAUNCH ERROR:", e)
        print("OUT", float(np.asarray(out).sum()))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=_ROOT, timeout=300)
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert "LAUNCH ERROR: argument 'out' is read-only" in r.stdout, r.stdout + r.stderr
    assert "OUT 0.0" in r.stdout
    assert np.fromfile(path, np.float32).sum() == 0.0


def test_interpret_switch_after_first_launch_takes_effect(monkeypatch):
    calls = {"jit": 0, "interp": 0}
    jit_run, interp_run = jit.JitExecutor.run, interpreter.run_kernel

    def counting_jit(self, arrays, grid=None):
        calls["jit"] += 1
        return jit_run(self, arrays, grid)

    def counting_interp(k, arrays, grid=None):
        calls["interp"] += 1
        return interp_run(k, arrays, grid)

    monkeypatch.setattr(jit.JitExecutor, "run", counting_jit)
    monkeypatch.setattr(interpreter, "run_kernel", counting_interp)
    k = _add_one(False)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = np.empty((2, 3), np.float32)
    k(x, out)
    k(x, out)  # warm (fast key)
    assert calls == {"jit": 2, "interp": 0}
    k.interpret = True
    k(x, out)
    np.testing.assert_array_equal(out, x + 1)
    assert calls == {"jit": 2, "interp": 1}
    k.interpret = False
    k(x, out)
    assert calls == {"jit": 3, "interp": 1}


def test_interpret_switch_on_torch_launch_plan(monkeypatch):
    calls = {"interp": 0}
    interp_run = interpreter.run_kernel

    def counting_interp(k, arrays, grid=None):
        calls["interp"] += 1
        return interp_run(k, arrays, grid)

    monkeypatch.setattr(interpreter, "run_kernel", counting_interp)
    k = _add_one(False)
    x = torch.arange(6.0).reshape(2, 3)
    out = torch.empty(2, 3)
    for _ in range(3):  # the second launch makes the plan, the third runs it
        k(x, out)
    assert calls["interp"] == 0
    k.interpret = True
    out.zero_()
    k(x, out)
    k.bind(x, out)()
    assert calls["interp"] == 2
    torch.testing.assert_close(out, x + 1)
