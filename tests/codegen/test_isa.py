"""ISA paths (``codegen/isa.py``): selection, ``TRN_ISA``, the cache key, and the matmul tests on every path.

The path is chosen once per process, so each forced path runs in a child interpreter: it checks what
the JIT generates there (no zmm registers on the avx2 path, no ymm/zmm on the generic one) and runs
the gemm and matmul-operand tests under it, and on a narrower vector width the differential tests (compiled vs
interpreter) that reach its ISA-dependent code (see ``_PARTS``).
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
    wide = ",-prefer-256-bit"  # the 512-bit paths vectorise loops 512 bits wide
    assert isa.narrow_features(feats, "amx") == feats + wide
    assert isa.narrow_features(feats + ",+avx512bf16", "avx512bf16") == \
        feats.replace("+amx-tile", "-amx-tile") + ",+avx512bf16" + wide
    avx512 = isa.narrow_features(feats + ",+avx512bf16", "avx512").split(",")
    assert "+avx512f" in avx512 and "-avx512bf16" in avx512 and "-amx-tile" in avx512
    avx2 = isa.narrow_features(feats, "avx2").split(",")
    assert "-prefer-256-bit" not in avx2
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
#: The gemm tests whose code depends on the bf16 features (the bf16 gemm, bf16 tiles folded into it): all a path of
#: this host's width and fp32 blocking (avx512 next to avx512bf16 or amx) compiles differently from the host's run.
_BF16_GEMM_TESTS = ["tests/codegen/test_gemm_bf16.py", "tests/codegen/test_gemm_collapse.py::test_bf16_operands"]
_DIFF = "tests/codegen/test_differential.py"
#: What a path's child runs, in parts that are separate tests (so ``pytest -n 2`` runs the halves of one path's
#: differential subset on both workers). Paths of the selected path's width generate the same code for everything
#: but bf16 products, so they run only ``gemm``; a narrower width runs the differential subset too.
_PARTS = {
    "gemm": _GEMM_TESTS,  # a path of the host's width and blocking: _BF16_GEMM_TESTS (see _gemm_tests)
    # every named case on hypothesis shapes, bit exact on the libm path, and every vecmath function's accuracy
    "cases": [_DIFF, "-k", "test_cases or test_transcendental"],
    # the random kernels (see _random_deselect) and the layout/error/grid tests; how a grid is scheduled on threads is
    # the launch path's business, not code generation's: the default path's run covers
    # test_grid_sequential_and_on_the_thread_pool
    "random": [_DIFF, "-k", "not (test_cases or test_transcendental or test_random_kernels_hypothesis"
               " or test_grid_sequential_and_on_the_thread_pool)"],
}
_VECMATH_SEEDS = range(1000, 1060)
_LIBM_SEEDS = {"bit_exact": range(120), "release_mode": range(2000, 2060)}


def _gemm_tests(path: str) -> list[str]:
    """What ``path``'s gemm part runs: every gemm test, or on a path of the host's vector width and fp32 gemm blocking
    only the bf16 ones. The fp32 gemm and kernels then lower to the same LLVM IR as in the host's run, and the ISA
    features the paths differ in (avx512bf16, amx) add no fp32 instructions: their fp32 object code is the host's,
    which the suite around this test already runs (checked on an avx512bf16 host: the fp32 tests of test_gemm,
    test_matmul_operands and test_gemm_collapse compile 14 distinct modules under TRN_ISA=avx512 and =avx512bf16,
    the same LLVM IR up to alias-scope names and byte-identical objects)."""
    from codegen.mathlib.gemm import config_for

    own = isa.selected().name
    if path != own and _WIDTH.get(path) == isa.selected().width and config_for(path) == config_for(own):
        return _BF16_GEMM_TESTS
    return [*_GEMM_TESTS, *_gemm_deselect(path)]


def _gemm_deselect(path: str) -> list[str]:
    """``--deselect`` arguments for the other paths' micro-kernels with tiny cache blocks (test_gemm.py's
    ``tiny_gemm``): the suite's own run checks every path's micro-kernel compiled for the host; in ``path``'s child only
    ``path``'s own micro-kernel is code that path runs (compiled for its features), the others would be wider or
    narrower kernels compiled for a CPU that never runs them."""
    from codegen.mathlib.gemm import CONFIGS

    return [a for c in sorted(CONFIGS) if c != path for t in ("test_gemm_tn_small_blocks", "test_sgemm_small_blocks")
            for a in ("--deselect", f"tests/codegen/test_gemm.py::{t}[{c}]")]


def random_kernel_features(seed: int) -> set[tuple]:
    """What random kernel ``seed`` exercises, coarsely: op kinds, ALU functions (any attribute), loop kinds, HBM access
    kinds (gathered, masked) and each instruction's (input dtype, output dtype) pairs, HBM operands apart."""
    from tests.codegen.random_kernels import generate
    from trnlang.ir.nodes import Access, Imm, Instr, Loop, Region

    def dt(x):
        if isinstance(x, Region):
            return x.buf.dtype.short
        if isinstance(x, Access):
            return "hbm-" + x.tensor.dtype.short
        return "imm" if isinstance(x, Imm) else None

    out: set[tuple] = set()
    stack = list(generate(seed).kernel.body)
    while stack:
        st = stack.pop()
        if isinstance(st, Loop):
            out.add(("loop", st.kind))
            stack.extend(st.body)
            continue
        if not isinstance(st, Instr):
            continue
        out.add(("op", st.op.name))
        out.update(("alu", str(v)) for k in ("op", "func", "op0", "op1", "reduce_op") if (v := st.attrs.get(k)))
        out.update(("access", st.op.name, bool(a.gathers), a.mask is not None) for a in (*st.ins, *st.outs)
                   if isinstance(a, Access))
        ins, outs = [d for d in map(dt, st.ins) if d], [d for d in map(dt, st.outs) if d]
        out.update(("dtypes", i, o) for i in ins for o in outs)
    return out


def _random_deselect() -> list[str]:
    """``--deselect`` arguments that leave a narrower path's child every vecmath random kernel (the ISA-sensitive
    transcendental code) plus the fewest libm / release-mode kernels (greedy cover) that reach every feature
    (:func:`random_kernel_features`) any of the host's deterministic random kernels reaches: ~55 of 180, chosen afresh
    from the generator, so a change to it keeps the cover. Those kernels lower to the same LLVM IR on every path (only
    the gemm is built per path, codegen/isa.py); the rest are more samples of the same features, which the host's own
    run of test_differential compiles (each ~0.6 s of cold LLVM compile per path)."""
    from tests.codegen.random_kernels import generate

    feats = {("bit_exact", s): random_kernel_features(s) for s in _LIBM_SEEDS["bit_exact"]}
    feats.update({("release_mode", s): random_kernel_features(s) for s in _LIBM_SEEDS["release_mode"]
                  if generate(s).fully_defined})  # the others skip in release mode
    have = set().union(*map(random_kernel_features, _VECMATH_SEEDS))
    missing = set().union(*feats.values()) - have
    keep = set()
    while missing:
        best = max(feats, key=lambda k: (len(feats[k] & missing), -k[1]))
        keep.add(best)
        missing -= feats[best]
    return [a for name, seeds in _LIBM_SEEDS.items() for s in seeds if (name, s) not in keep
            for a in ("--deselect", f"{_DIFF}::test_random_kernels_{name}[{s}]")]


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
    what = _gemm_tests(path) if part == "gemm" else [*_PARTS[part], *(_random_deselect() if part == "random" else ())]
    cmd = [sys.executable, "-m", "pytest", "-o", "addopts=", "-q", "-x", "-p", "no:cacheprovider", *what]
    r = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and " failed" not in r.stdout


def test_narrower_paths_random_subset_names_real_tests_and_keeps_every_feature():
    """The random part's ``--deselect`` ids name test_differential's parametrizations (a renamed test or changed seed
    range would silently deselect nothing), and what is left reaches every feature the deterministic kernels reach."""
    from tests.codegen import test_differential as diff

    def seeds(fn):
        return list(next(m for m in fn.pytestmark if m.name == "parametrize").args[1])

    assert seeds(diff.test_random_kernels_vecmath) == list(_VECMATH_SEEDS)
    for name, want in _LIBM_SEEDS.items():
        assert seeds(getattr(diff, f"test_random_kernels_{name}")) == list(want)
    gone = {a.rsplit("::", 1)[1] for a in _random_deselect()[1::2]}
    kept = [s for name, ss in _LIBM_SEEDS.items() for s in ss if f"test_random_kernels_{name}[{s}]" not in gone]
    assert 0 < len(kept) < sum(map(len, _LIBM_SEEDS.values())) // 2
    every = set().union(*map(random_kernel_features, [*_VECMATH_SEEDS, *_LIBM_SEEDS["bit_exact"]]))
    assert every <= set().union(*map(random_kernel_features, [*_VECMATH_SEEDS, *kept]))
