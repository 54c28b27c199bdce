"""codegen.llvm: the build -> optimize -> emit_object -> load_object lifecycle."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from llvmlite import ir

from codegen import llvm
from codegen.irutil import F32, I64, PTR, VOID

ROOT = Path(__file__).resolve().parents[2]


def _axpy_module(name: str = "axpy", factor: float = 2.0) -> ir.Module:
    """``void name(float *x, float *y, int64 n)``: y += factor * x."""
    m = ir.Module("t")
    fn = ir.Function(m, ir.FunctionType(VOID, [PTR, PTR, I64]), name)
    x, y, n = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    entry = b.block
    loop = fn.append_basic_block("loop")
    done = fn.append_basic_block("done")
    b.cbranch(b.icmp_signed(">", n, I64(0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(I64)
    i.add_incoming(I64(0), entry)
    px, py = b.gep(x, [i], source_etype=F32), b.gep(y, [i], source_etype=F32)
    b.store(b.fadd(b.fmul(b.load(px, typ=F32), F32(factor)), b.load(py, typ=F32)), py)
    nxt = b.add(i, I64(1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    return m


def _call_axpy(lib: llvm.LoadedModule, name: str = "axpy") -> np.ndarray:
    f = lib.cfunc(name, None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64])
    x = np.arange(37, dtype=np.float32)
    y = np.ones(37, np.float32)
    f(x.ctypes.data, y.ctypes.data, x.size)
    return y


def test_lifecycle_roundtrip() -> None:
    mod = llvm.build(_axpy_module())
    llvm.optimize(mod)
    obj = llvm.emit_object(mod)
    assert isinstance(obj, bytes) and obj[:4] == b"\x7fELF"
    lib = llvm.load_object(obj)
    np.testing.assert_array_equal(_call_axpy(lib), 1 + 2 * np.arange(37, dtype=np.float32))
    assert lib.object_size == len(obj)
    assert lib.address("axpy") == lib.address("axpy") != 0


def test_build_accepts_ir_text_and_reports_errors() -> None:
    lib = llvm.load_object(llvm.compile_ir(str(_axpy_module())))
    assert _call_axpy(lib)[3] == 7.0
    with pytest.raises(RuntimeError):
        llvm.build("define void @f() { ret i32 0 }")


def test_missing_symbol() -> None:
    lib = llvm.load_object(llvm.compile_ir(_axpy_module()))
    with pytest.raises(KeyError):
        lib.address("nope")


def test_same_symbol_in_two_objects_stays_separate() -> None:
    lib2 = llvm.load_object(llvm.compile_ir(_axpy_module(factor=2.0)))
    lib3 = llvm.load_object(llvm.compile_ir(_axpy_module(factor=3.0)))
    assert _call_axpy(lib2)[1] == 3.0
    assert _call_axpy(lib3)[1] == 4.0
    assert _call_axpy(lib2)[1] == 3.0


def test_host_key() -> None:
    key = llvm.host_cpu_key()
    assert llvm.host_cpu_name() in key and llvm.llvmlite_version in key
    assert llvm.host_has_feature("sse2")
    assert key == llvm.host_cpu_key()


def test_optimized_code_is_vectorized() -> None:
    asm = llvm.emit_assembly(llvm.optimize(llvm.build(_axpy_module())))
    assert "ymm" in asm or "zmm" in asm


def test_concurrent_compile_and_load() -> None:
    results: dict[int, float] = {}
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            lib = llvm.load_object(llvm.compile_ir(_axpy_module(name=f"f{k}", factor=float(k))))
            results[k] = float(_call_axpy(lib, f"f{k}")[1])
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == {k: 1.0 + k for k in range(6)}


def test_object_loads_in_another_process(tmp_path: Path) -> None:
    """Object bytes are a valid cache entry across processes on the same host."""
    path = tmp_path / "axpy.o"
    path.write_bytes(llvm.compile_ir(_axpy_module(factor=5.0)))
    code = (
        "import ctypes, numpy as np, sys\n"
        "from codegen import llvm\n"
        f"lib = llvm.load_object(open({str(path)!r}, 'rb').read())\n"
        "f = lib.cfunc('axpy', None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64])\n"
        "x = np.arange(4, dtype=np.float32); y = np.zeros(4, np.float32)\n"
        "f(x.ctypes.data, y.ctypes.data, 4); print(y.tolist())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0.0, 5.0, 10.0, 15.0]"


def test_lifecycle_timings_reload_is_faster_than_compile() -> None:
    llvm._lifecycle_timings()  # warm-up
    t = min((llvm._lifecycle_timings() for _ in range(3)), key=lambda d: d["load_object"])
    assert t["load_object"] < t["optimize"] + t["emit_object"]
