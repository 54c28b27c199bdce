"""ISA paths (``codegen/isa.py``): selection, ``TRN_ISA``, the cache key, and the matmul tests on every path.

The path is chosen once per process, so each forced path runs in a child interpreter: it checks what
the JIT generates there (no zmm registers on the avx2 path, no ymm/zmm on the generic one) and runs
the gemm, matmul-operand and differential tests (compiled vs interpreter) under it.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from codegen import isa

ROOT = Path(__file__).resolve().parents[2]


def test_path_for_picks_the_widest_path():
    avx512 = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}
    assert isa.path_for(avx512, "x86_64").name == "avx512"
    assert isa.path_for(avx512, "x86_64").width == 16
    assert isa.path_for(avx512, "x86_64").bf16 == "widen"
    assert isa.path_for(avx512 | {"avx512bf16"}, "x86_64").bf16 == "avx512bf16"
    amx = isa.path_for(avx512 | {"avx512bf16", "amx-tile", "amx-bf16"}, "x86_64")
    assert (amx.name, amx.bf16, amx.width) == ("amx", "amx", 16)
    assert isa.path_for({"avx2", "fma"}, "x86_64").name == "avx2"
    assert isa.path_for({"avx", "sse2"}, "x86_64").name == "generic"
    assert isa.path_for(avx512, "aarch64").name == "generic"  # NEON: LLVM's generic vectors
    assert not isa.path_for(set(), "aarch64").fma


def test_narrow_features_switches_off_wider_isas_only():
    feats = "+avx,+avx2,+avx512f,+avx512bw,+amx-tile,+avxvnni,+f16c,+fma,+sse2,+sse4.2,-xop"
    assert isa.narrow_features(feats, "amx") == feats
    assert isa.narrow_features(feats + ",+avx512bf16", "avx512bf16") == \
        feats.replace("+amx-tile", "-amx-tile") + ",+avx512bf16"
    avx512 = isa.narrow_features(feats + ",+avx512bf16", "avx512").split(",")
    assert "+avx512f" in avx512 and "-avx512bf16" in avx512 and "-amx-tile" in avx512
    avx2 = isa.narrow_features(feats, "avx2").split(",")
    assert "+avx2" in avx2 and "+fma" in avx2 and "+f16c" in avx2
    assert "-avx512f" in avx2 and "-avx512bw" in avx2 and "-amx-tile" in avx2 and "-avxvnni" in avx2
    gen = isa.narrow_features(feats, "generic").split(",")
    assert not [f for f in gen if f.startswith("+") and f[1:] not in ("sse2", "sse4.2")]


def test_unknown_isa_name_is_an_error(monkeypatch):
    monkeypatch.setenv("TRN_ISA", "sse9")
    with pytest.raises(ValueError, match="TRN_ISA='sse9'"):
        isa.forced_name()
    monkeypatch.setenv("TRN_ISA", " AVX2 ")
    assert isa.forced_name() == "avx2"


def test_host_runs_its_path_and_every_narrower_one():
    got = isa.available()
    assert got[-1] == "generic" and got == isa.PATHS[isa.PATHS.index(got[0]):]
    if os.environ.get("TRN_ISA") is None:
        assert isa.selected().name == got[0]


_CHILD = r"""
import sys
from codegen.mathlib import gemm
from codegen import isa, llvm
want = sys.argv[1]
p = isa.selected()
assert p.name == want, (p, want)
assert f"|isa-{want}|" in llvm.host_cpu_key()
asm = llvm.emit_assembly(llvm.optimize(llvm.build(gemm.gemm_module())))
x86 = llvm.host_triple().startswith("x86_64")
if p.bf16 != "widen":
    from codegen.mathlib.gemm_bf16 import gemm_bf16_module
    basm = llvm.emit_assembly(llvm.optimize(llvm.build(gemm_bf16_module(p.bf16))))
    assert ("tdpbf16ps" in basm) == (want == "amx") and ("vdpbf16ps" in basm) == (want == "avx512bf16")
if x86 and want not in ("amx", "avx512bf16", "avx512"):
    assert "zmm" not in asm, "a narrower path must not use 512-bit registers"
if x86 and want == "generic":
    assert "ymm" not in asm and "vfmadd" not in asm, "the generic path must not use AVX"
if x86 and want in ("amx", "avx512bf16", "avx512"):
    assert "zmm" in asm
print("isa-ok", want, gemm.config_for())
"""

_GEMM_TESTS = ["tests/codegen/test_gemm.py", "tests/codegen/test_matmul_operands.py", "tests/codegen/test_gemm_bf16.py",
               "tests/codegen/test_gemm_collapse.py"]
_DIFF = "tests/codegen/test_differential.py"
#: What a path's child runs, in parts that are separate tests (so ``pytest -n 2`` runs the halves of one path's
#: differential suite on both workers). Paths of the selected path's width generate the same code for everything
#: but bf16 products, so they run only ``gemm``; a narrower width runs the differential suite too.
_PARTS = {
    "gemm": _GEMM_TESTS,
    "cases": [_DIFF, "-k", "test_cases or hypothesis"],  # the named cases and the hypothesis-drawn kernels
    # the seeded random kernels and the rest; how a grid is scheduled on threads is the launch path's business, not
    # code generation's: the default path's run covers it
    "random": [_DIFF, "-k", "not (test_cases or hypothesis)", "--deselect",
               f"{_DIFF}::test_grid_sequential_and_on_the_thread_pool"],
}
#: fp32 lanes of each path's vectors (codegen/isa.py)
_WIDTH = {name: isa._make(name, set()).width for name in isa.PATHS}


def _env(path: str) -> dict[str, str]:
    env = dict(os.environ, TRN_ISA=path, PYTHONPATH=str(ROOT))
    env.pop("TRN_INTERPRET", None)
    return env


@pytest.mark.parametrize("part", list(_PARTS))
@pytest.mark.parametrize("path", isa.PATHS)
def test_matmul_tests_pass_on_every_path(path, part):
    if path not in isa.available():
        pytest.skip(f"this host ({platform.machine()}) cannot run the {path} path")
    if path == isa.selected().name and part != "gemm":
        pytest.skip("this process's own path: the suite around this test runs those tests on it")
    if part != "gemm" and _WIDTH.get(path) == isa.selected().width:
        pytest.skip(f"{path} has this host's vector width: only its matmul code differs (part 'gemm')")
    # the child uses the suite's kernel cache (TRN_CACHE_DIR, else ~/.cache/trnlang): a cache key holds the ISA path,
    # the CPU features, the llvmlite/LLVM versions and a hash of codegen's sources, so paths never share an entry and
    # a changed code generator compiles afresh, while a second run of the suite loads this path's kernels instead of
    # compiling them again (the avx2 child: 202 s of CPU with an empty cache, 171 s with the first run's)
    env = _env(path)
    if part == "gemm":
        r = subprocess.run([sys.executable, "-c", _CHILD, path], env=env, cwd=ROOT, capture_output=True, text=True,
                           timeout=600)
        assert r.returncode == 0 and "isa-ok" in r.stdout, r.stdout + r.stderr[-3000:]
        if path == isa.selected().name:
            return  # this process's own path: the suite around this test runs those tests on it
    cmd = [sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-x", "-p", "no:cacheprovider", *_PARTS[part]]
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and " failed" not in r.stdout
