"""Which instruction-set path the JIT generates code for: chosen once per process from the host's CPU features.

Paths, widest first (a host runs its own and every narrower one):

==========  ========================================================================================
amx         the avx512 path, and bf16 products on AMX-BF16 tiles (``tdpbf16ps``; ``codegen.mathlib.gemm_bf16``)
            once Linux grants the process the tile state (:func:`request_amx`; refused: the next path)
avx512bf16  the avx512 path, and bf16 products as AVX512-BF16 dot products (``vdpbf16ps``)
avx512      512-bit vectors (``<16 x float>``, 32 zmm registers); the gemm's micro-kernel is re-blocked
            for them; bf16 is widened to fp32
avx2        256-bit vectors with FMA (``<8 x float>``, 16 ymm registers); bf16 is widened to fp32
generic     no ISA-specific code: LLVM's generic vectors (``<4 x float>``, ``llvm.fmuladd``), which any
            LLVM target lowers (SSE2 on x86-64, NEON on aarch64)
==========  ========================================================================================

``TRN_ISA=amx|avx512bf16|avx512|avx2|generic`` (read once, when the JIT first asks) forces a narrower path, so one
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

import ctypes
import functools
import os
import platform
import warnings
from dataclasses import dataclass

__all__ = ["IsaPath", "PATHS", "ENV", "path_for", "forced_name", "narrow_features", "selected", "available",
           "raw_features", "request_amx", "amx_refusal"]

ENV = "TRN_ISA"
#: Path names, widest first.
PATHS = ("amx", "avx512bf16", "avx512", "avx2", "generic")

# features a path switches off (prefix match on LLVM's names); each path also switches off the wider paths' sets
_OFF_FOR_AVX512BF16 = ("amx",)
_OFF_FOR_AVX512 = ("amx", "avx512bf16", "avxneconvert")
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
        bf16: how bf16 products run: ``"amx"`` (AMX-BF16 tiles), ``"avx512bf16"`` (``vdpbf16ps``), or
            ``"widen"`` (converted to fp32, then the fp32 gemm).
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
    if name in ("amx", "avx512bf16"):
        return IsaPath(name, 16, True, name)
    if name == "avx512":
        return IsaPath(name, 16, True, "widen")
    if name == "avx2":
        return IsaPath(name, 8, True, "widen")
    return IsaPath("generic", 4, False, "widen")


def path_for(features: set[str], machine: str) -> IsaPath:
    """The widest path a CPU with LLVM features ``features`` (names without ``+``) and ``machine`` can run."""
    if machine.lower() in ("x86_64", "amd64", "x86-64"):
        if {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= features:
            if {"amx-tile", "amx-bf16"} <= features:
                return _make("amx", features)
            if "avx512bf16" in features:
                return _make("avx512bf16", features)
            return _make("avx512", features)
        if {"avx2", "fma"} <= features:
            return _make("avx2", features)
    return _make("generic", features)


def forced_name() -> str | None:
    """``TRN_ISA`` lower-cased (None when unset or empty); raises ``ValueError`` for an unknown name."""
    from trnlang import config

    v = config.current.isa
    if not v:
        return None
    if v not in PATHS:
        raise ValueError(f"{ENV}={v!r}: expected one of {', '.join(PATHS)}")
    return v


def narrow_features(features: str, name: str) -> str:
    """LLVM feature string ``features`` with what path ``name`` must not use switched off (order kept)."""
    off: tuple[str, ...] = {"amx": (), "avx512bf16": _OFF_FOR_AVX512BF16, "avx512": _OFF_FOR_AVX512,
                            "avx2": _OFF_FOR_AVX2}.get(name, _OFF_FOR_AVX2 + _OFF_FOR_GENERIC)
    out = []
    for f in features.split(","):
        if f[:1] == "+" and f[1:].startswith(off):
            f = "-" + f[1:]
        out.append(f)
    if name in ("amx", "avx512bf16", "avx512"):
        # LLVM tunes server Intel CPUs to vectorise loops 256 bits wide (the old AVX-512 clock penalty); the
        # JIT's elementwise loops run 20-30 % faster 512 bits wide on this project's AVX-512 hosts (exp,
        # erf, tanh, sigmoid kernels over 1M fp32, thread CPU time; memory-bound copies unchanged)
        out.append("-prefer-256-bit")
    return ",".join(out)


@functools.cache
def raw_features() -> frozenset[str]:
    """The host's enabled LLVM CPU features, before any narrowing."""
    from codegen import llvm

    return frozenset(f[1:] for f in llvm.raw_host_cpu_features().split(",") if f.startswith("+"))


_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18
_SYS_ARCH_PRCTL = 158  # x86-64
_amx_state: list[str | None] = []  # [refusal reason or None] once asked


def request_amx() -> bool:
    """Ask Linux for this process's AMX tile-data permission (once; every thread then may use the tiles).

    Without it the first tile instruction raises SIGILL. Returns whether it was granted; the reason for a
    refusal is :func:`amx_refusal`.
    """
    if not _amx_state:
        reason: str | None = None
        if platform.system() != "Linux" or platform.machine().lower() not in ("x86_64", "amd64"):
            reason = f"AMX tile permission is requested through Linux x86-64's arch_prctl ({platform.system()})"
        else:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                rc = libc.syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_REQ_XCOMP_PERM),
                                  ctypes.c_long(_XFEATURE_XTILEDATA))
                if rc != 0:
                    reason = f"arch_prctl(ARCH_REQ_XCOMP_PERM, XTILEDATA) refused: {os.strerror(ctypes.get_errno())}"
            except (OSError, AttributeError) as e:
                reason = f"arch_prctl unavailable: {e}"
        _amx_state.append(reason)
    return _amx_state[0] is None


def amx_refusal() -> str | None:
    """Why the AMX permission was refused (None: granted, or not asked yet)."""
    return _amx_state[0] if _amx_state else None


def _granted(p: IsaPath, feats: set[str]) -> IsaPath:
    """``p``, or the next path with the refusal recorded (a warning) when ``p`` is AMX and Linux refuses it."""
    if p.name == "amx" and not request_amx():
        warnings.warn(f"AMX path not taken: {amx_refusal()}; using avx512bf16", RuntimeWarning, stacklevel=3)
        return _make("avx512bf16", feats)
    return p


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
        return _granted(best, feats)
    if PATHS.index(want) < PATHS.index(best.name):
        warnings.warn(f"{ENV}={want}: this host cannot run it; using {best.name}", RuntimeWarning, stacklevel=2)
        return _granted(best, feats)
    return _make(want, feats if want in ("avx512bf16", "avx512") else set())
