"""Which instruction-set path the JIT generates code for: chosen once per process from the host's CPU features.

Paths, widest first (a host runs its own and every narrower one):

========  ==========================================================================================
avx512    512-bit vectors (``<16 x float>``, 32 zmm registers); the gemm's micro-kernel is re-blocked
          for them; bf16 is widened to fp32 (AVX512-BF16 / AMX dot products: not yet)
avx2      256-bit vectors with FMA (``<8 x float>``, 16 ymm registers); bf16 is widened to fp32
generic   no ISA-specific code: LLVM's generic vectors (``<4 x float>``, ``llvm.fmuladd``), which any
          LLVM target lowers (SSE2 on x86-64, NEON on aarch64)
========  ==========================================================================================

``TRN_ISA=avx2|generic|avx512`` (read once, when the JIT first asks) forces a narrower path, so one
machine can test the paths of older ones. A forced path narrows the whole JIT, not only the gemm:
:func:`narrow_features` switches the wider features off in the feature string every module is
compiled with (``codegen.llvm.host_cpu_features``), so the code is what an older CPU would get.
The path's name is part of ``codegen.llvm.host_cpu_key`` and so of every compile-cache key.

Example:
    >>> from codegen import isa
    >>> isa.path_for({"avx2", "fma"}, "x86_64").name
    'avx2'
    >>> isa.narrow_features("+avx2,+avx512f,+fma,+sse2", "avx2")
    '+avx2,-avx512f,+fma,+sse2'
"""

from __future__ import annotations

import functools
import os
import platform
import warnings
from dataclasses import dataclass

__all__ = ["IsaPath", "PATHS", "ENV", "path_for", "forced_name", "narrow_features", "selected", "available",
           "raw_features"]

ENV = "TRN_ISA"
#: Path names, widest first.
PATHS = ("avx512", "avx2", "generic")

# features a path switches off (prefix match on LLVM's names); each path also switches off the wider paths' sets
_OFF_FOR_AVX2 = ("avx512", "amx", "avx10", "evex512", "avxvnni", "avxifma", "avxneconvert")
_OFF_FOR_GENERIC = ("avx", "fma", "f16c", "xop", "vaes", "vpclmulqdq", "gfni")


@dataclass(frozen=True)
class IsaPath:
    """One code-generation path.

    Attributes:
        name: one of :data:`PATHS`.
        width: fp32 lanes of the gemm's vectors (16, 8, 4).
        fma: the target has a fused multiply-add instruction (``llvm.fma``; else ``llvm.fmuladd``, which
            LLVM fuses only where that is cheap).
        bf16: how bf16 products run: ``"widen"`` (converted to fp32, then the fp32 gemm); the field is
            where AVX512-BF16 (``vdpbf16ps``) or AMX-BF16 paths will be named.
    """

    name: str
    width: int
    fma: bool
    bf16: str

    def describe(self) -> str:
        """A short human description (for benchmark headers)."""
        bits = {16: "512-bit", 8: "256-bit", 4: "128-bit generic"}.get(self.width, f"{self.width}-lane")
        return f"{bits} vectors, {'FMA' if self.fma else 'no FMA'}, bf16 {self.bf16}"


def _make(name: str, features: set[str]) -> IsaPath:
    if name == "avx512":
        return IsaPath(name, 16, True, "widen")
    if name == "avx2":
        return IsaPath(name, 8, True, "widen")
    return IsaPath("generic", 4, False, "widen")


def path_for(features: set[str], machine: str) -> IsaPath:
    """The widest path a CPU with LLVM features ``features`` (names without ``+``) and ``machine`` can run."""
    if machine.lower() in ("x86_64", "amd64", "x86-64"):
        if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= features:
            return _make("avx512", features)
        if {"avx2", "fma"} <= features:
            return _make("avx2", features)
    return _make("generic", features)


def forced_name() -> str | None:
    """``TRN_ISA`` lower-cased (None when unset or empty); raises ``ValueError`` for an unknown name."""
    v = os.environ.get(ENV, "").strip().lower()
    if not v:
        return None
    if v not in PATHS:
        raise ValueError(f"{ENV}={v!r}: expected one of {', '.join(PATHS)}")
    return v


def narrow_features(features: str, name: str) -> str:
    """LLVM feature string ``features`` with what path ``name`` must not use switched off (order kept)."""
    off = () if name == "avx512" else _OFF_FOR_AVX2 if name == "avx2" else _OFF_FOR_AVX2 + _OFF_FOR_GENERIC
    out = []
    for f in features.split(","):
        if f[:1] == "+" and f[1:].startswith(off):
            f = "-" + f[1:]
        out.append(f)
    return ",".join(out)


@functools.cache
def raw_features() -> frozenset[str]:
    """The host's enabled LLVM CPU features, before any narrowing."""
    from codegen import llvm

    return frozenset(f[1:] for f in llvm.raw_host_cpu_features().split(",") if f.startswith("+"))


@functools.cache
def available() -> tuple[str, ...]:
    """Path names this host can run, widest first."""
    best = path_for(set(raw_features()), platform.machine()).name
    return PATHS[PATHS.index(best):]


@functools.cache
def selected() -> IsaPath:
    """The process's path: ``TRN_ISA`` when it names a path this host can run, else the widest one."""
    feats = set(raw_features())
    best = path_for(feats, platform.machine())
    want = forced_name()
    if want is None or want == best.name:
        return best
    if PATHS.index(want) < PATHS.index(best.name):
        warnings.warn(f"{ENV}={want}: this host cannot run it; using {best.name}", RuntimeWarning, stacklevel=2)
        return best
    return _make(want, feats if want == "avx512" else set())
