"""The gemm libraries as separately compiled objects: kernels declare their entry points, the runtime links them.

The fp32 gemm (``codegen.mathlib.gemm``) and the bf16 gemm (``codegen.mathlib.gemm_bf16``) are large (about 150 KiB
of IR, several seconds of LLVM each). Emitting a copy into every kernel that multiplies made them most of the
compile time of matmul kernels; instead each library is compiled once per (ISA path, CPU features), kept in the
disk cache like a kernel (``trnlang.runtime.linklib``), and a kernel module only *declares* the entry points it
calls, under names that carry the library's :func:`identity`:

- :data:`LIBS`: the libraries (``"fp32"``, ``"bf16"``) and their entry points;
- :func:`identity` ``(lib)``: a hash of everything that decides the library's machine code (its generator sources,
  blocking configuration, bf16 kind, ISA path, host CPU key, LLVM version). It is part of every kernel's cache key
  (:func:`key`), so a changed gemm invalidates the kernels that link it, and part of the symbol names, so a kernel
  object can only ever bind to the library it was compiled against;
- :func:`declare` ``(module, lib, entry)``: the declaration a kernel calls; :func:`used` lists the libraries a
  lowered module declares;
- :func:`library_module` ``(lib)``: the standalone module to compile (entry points external, helpers internal).

Example:
    >>> from llvmlite import ir
    >>> m = ir.Module("k")
    >>> fn = declare(m, "fp32", "gemm_tn")
    >>> fn.is_declaration, fn.name == symbol("fp32", "gemm_tn"), used(m)
    (True, True, ['fp32'])
"""

from __future__ import annotations

import functools
import hashlib
import os

from llvmlite import ir

from codegen import llvm

__all__ = ["LIBS", "available", "identity", "key", "symbol", "declare", "used", "library_module"]

#: library -> its entry points (all ``void (ptr out, i64 ldo, ptr s, i64 lds, ptr v, i64 ldv, i64 M, i64 N, i64 K,
#: i64 accumulate)``)
LIBS: dict[str, tuple[str, ...]] = {
    "fp32": ("gemm_tn", "gemm_nn", "gemm_tn_vt", "gemm_nn_vt"),
    "bf16": ("gemm_bf16_tn", "gemm_bf16_nn"),
}
_I64, _PTR = ir.IntType(64), ir.PointerType()
_ENTRY_TYPE = ir.FunctionType(ir.VoidType(), [_PTR, _I64, _PTR, _I64, _PTR, _I64, _I64, _I64, _I64, _I64])
#: the sources that generate the libraries' IR or decide their machine code (hashed into :func:`identity`)
_SOURCES = ("mathlib/gemm.py", "mathlib/gemm_bf16.py", "irutil.py", "isa.py", "llvm.py", "gemmlib.py")


def _bf16_kind() -> str | None:
    from codegen import isa

    k = isa.selected().bf16
    return None if k == "widen" else k


def available() -> tuple[str, ...]:
    """The libraries of this process's ISA path (``bf16`` only where the path has a bf16 dot-product unit)."""
    return ("fp32", "bf16") if _bf16_kind() is not None else ("fp32",)


def _config(lib: str) -> str:
    """The generator configuration of ``lib`` on this process's ISA path, as text."""
    if lib == "fp32":
        from codegen.mathlib.gemm import config_for

        return repr(config_for())
    if lib == "bf16":
        from codegen.mathlib.gemm_bf16 import BF16_CONFIGS

        kind = _bf16_kind()
        if kind is None:
            raise ValueError("the bf16 gemm library needs an ISA path with a bf16 unit (codegen.isa)")
        return f"{kind}|{BF16_CONFIGS[kind]!r}"
    raise ValueError(f"unknown gemm library {lib!r} (known: {', '.join(LIBS)})")


@functools.cache
def identity(lib: str) -> str:
    """A 16-hex-digit hash naming the machine code of library ``lib`` in this process (see the module docstring).

    Computed from sources and configuration, not from the IR (building the IR takes ~0.1 s; a process whose
    kernels all come from the disk cache never builds it).
    """
    h = hashlib.sha256()
    for part in ("trn-gemmlib-v1", lib, _config(lib), llvm.host_cpu_key()):
        h.update(part.encode() + b"\0")
    root = os.path.dirname(os.path.abspath(__file__))
    for rel in _SOURCES:
        with open(os.path.join(root, rel), "rb") as f:
            h.update(rel.encode() + b"\0" + f.read())
    return h.hexdigest()[:16]


def key() -> str:
    """The identities of every library a kernel of this process may link (part of each kernel's cache key)."""
    return ",".join(f"{lib}:{identity(lib)}" for lib in available())


def _prefix(lib: str) -> str:
    return f"trn.{lib}.{identity(lib)}."


def symbol(lib: str, entry: str) -> str:
    """The linker name of ``entry`` of library ``lib`` (carries the library's identity)."""
    if entry not in LIBS.get(lib, ()):
        raise ValueError(f"{entry!r} is not an entry point of the {lib!r} gemm library")
    return _prefix(lib) + entry


def declare(module: ir.Module, lib: str, entry: str) -> ir.Function:
    """Declare (once) ``entry`` of library ``lib`` in ``module``; the runtime links the library before loading."""
    name = symbol(lib, entry)
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, _ENTRY_TYPE, name)
        fn.attributes.add("nounwind")
    assert isinstance(fn, ir.Function)
    return fn


def used(module: ir.Module) -> list[str]:
    """The libraries whose entry points ``module`` declares (sorted)."""
    names = set(module.globals)
    return sorted(lib for lib in available() if any(_prefix(lib) + e in names for e in LIBS[lib]))


def library_module(lib: str) -> ir.Module:
    """The standalone module of library ``lib``: its entry points under :func:`symbol` names (external), the
    packing routines and micro-kernels internal."""
    module = ir.Module(name=f"trn_gemmlib_{lib}")
    if lib == "fp32":
        from codegen.mathlib.gemm import config_for, define_gemm

        fns = define_gemm(module, config_for(), prefix=_prefix(lib))
    else:
        from codegen.mathlib.gemm_bf16 import define_gemm_bf16

        _config(lib)  # raises on a path without bf16
        fns = define_gemm_bf16(module, str(_bf16_kind()), prefix=_prefix(lib))
    for name, f in fns.items():  # only the entry points are exported (sgemm is for the standalone Gemm)
        if name not in LIBS[lib]:
            f.linkage = "internal"
    return module
