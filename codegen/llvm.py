"""The one door to LLVM: build -> optimize -> emit_object -> load_object -> address.

This is the only module of the project that imports ``llvmlite.binding``.  The
lifecycle of JIT code is split so that the expensive part (optimising and
generating machine code, tens of milliseconds) produces plain ``bytes`` that a
cache can keep, while loading those bytes again is cheap (well under a
millisecond for a small module)::

    mod = build(ir_module)          # llvmlite.ir.Module or IR text -> ModuleRef
    optimize(mod)                   # O3 new-pass-manager pipeline for the host CPU
    obj = emit_object(mod)          # bytes: cache these (key: host_cpu_key())
    lib = load_object(obj)          # LoadedModule: the code lives as long as it is referenced
    fn = lib.cfunc("f", None, [ctypes.c_void_p, ctypes.c_int64])

``compile_ir`` does the first three steps at once.  Object code is specific to
the CPU it was generated for (``host_cpu_key()`` names that CPU: a cache must
key on it) and to the code model used here (large, as required by MCJIT's
loader), not to the process: it can be stored on disk and loaded by another
process on the same kind of machine.

Thread safety: initialisation runs once under a lock; every llvmlite binding
call is serialised by llvmlite's own global lock, so these functions may be
called from any thread.  Calls into loaded machine code go through ctypes,
which releases the GIL.
"""

from __future__ import annotations

import ctypes
import functools
import threading
import weakref
from typing import Any, Sequence

import llvmlite
import llvmlite.binding as _llvm
from llvmlite import ir
from llvmlite.ir import values as _ir_values

# llvmlite fills its string-escape table on first use without a lock, so two threads whose first compiles run at
# once (a split launch of a kernel not yet compiled) could read it half filled (KeyError in _escape_string). Fill
# it here, at import, before any thread can race on it.
_ir_values._escape_string("")

__all__ = [
    "llvmlite_version",
    "llvm_version",
    "init",
    "host_triple",
    "host_cpu_name",
    "host_cpu_features",
    "raw_host_cpu_features",
    "host_cpu_key",
    "host_has_feature",
    "data_layout",
    "build",
    "optimize",
    "emit_object",
    "emit_assembly",
    "compile_ir",
    "load_object",
    "add_symbol",
    "LoadedModule",
    "live_modules",
]

llvmlite_version: str = llvmlite.__version__
"""Version of the installed llvmlite package (part of any code-cache key)."""

llvm_version: str = ".".join(str(p) for p in _llvm.llvm_version_info)
"""Version of the LLVM that llvmlite bundles."""

_init_lock = threading.Lock()
_initialized = False
_tm_lock = threading.Lock()
_tm: Any = None
_live_lock = threading.Lock()
_live: weakref.WeakSet[LoadedModule] = weakref.WeakSet()


def init() -> None:
    """Initialise LLVM's native target and asm printer (idempotent, thread-safe).

    ``llvmlite.binding.initialize()`` is deprecated and raises in llvmlite 0.50;
    only the native target is needed.
    """
    global _initialized
    if _initialized:
        return
    with _init_lock:
        if _initialized:
            return
        _llvm.initialize_native_target()
        _llvm.initialize_native_asmprinter()
        _llvm.check_jit_execution()
        _initialized = True


@functools.cache
def host_triple() -> str:
    """LLVM target triple of this process (e.g. ``x86_64-unknown-linux-gnu``)."""
    init()
    return _llvm.get_process_triple()


@functools.cache
def host_cpu_name() -> str:
    """LLVM's name for the host CPU (e.g. ``znver3``, ``znver4``, ``skylake-avx512``)."""
    init()
    return _llvm.get_host_cpu_name()


@functools.cache
def raw_host_cpu_features() -> str:
    """The host's CPU feature string as LLVM reports it (``+avx2,+fma,-avx512f,...``), sorted."""
    init()
    return _llvm.get_host_cpu_features().flatten(sort=True)


@functools.cache
def host_cpu_features() -> str:
    """The feature string code is generated for: the host's, narrowed to the ISA path in force.

    ``codegen.isa.selected()`` picks the path (``TRN_ISA`` may force a narrower one); the features of
    wider paths are switched off, so every module compiles as it would for a host of that path.
    """
    from codegen import isa

    return isa.narrow_features(raw_host_cpu_features(), isa.selected().name)


def host_has_feature(name: str) -> bool:
    """Whether the host CPU has feature ``name`` (LLVM spelling, e.g. ``avx512f``, ``fma``)."""
    return f"+{name}" in host_cpu_features().split(",")


@functools.cache
def host_cpu_key() -> str:
    """A string naming everything that makes object code from this module host specific.

    Contains the triple, CPU name, the feature string code is generated for, the ISA path
    (``codegen.isa``: ``TRN_ISA`` changes it) and the llvmlite/LLVM versions; a code cache should hash
    it into its keys.
    """
    from codegen import isa

    return (f"{host_triple()}|{host_cpu_name()}|{host_cpu_features()}|isa-{isa.selected().name}"
            f"|llvmlite-{llvmlite_version}|llvm-{llvm_version}")


def _new_target_machine() -> Any:
    """A fresh TargetMachine for the host (an MCJIT engine takes ownership of the one it gets)."""
    init()
    target = _llvm.Target.from_triple(host_triple())
    return target.create_target_machine(
        cpu=host_cpu_name(), features=host_cpu_features(), opt=3, reloc="default", codemodel="jitdefault", jit=False
    )


def _target_machine() -> Any:
    """The shared TargetMachine used for optimisation and code generation."""
    global _tm
    if _tm is None:
        with _tm_lock:
            if _tm is None:
                _tm = _new_target_machine()
    return _tm


@functools.cache
def data_layout() -> str:
    """The host data layout string (set on modules by :func:`build`)."""
    return str(_target_machine().target_data)


def build(module: ir.Module | str) -> Any:
    """Parse an ``llvmlite.ir.Module`` (or LLVM IR text) into a verified LLVM module.

    The triple and data layout are set to the host's.  Raises ``RuntimeError``
    with LLVM's message when the IR does not parse or does not verify.
    """
    init()
    text = str(module)
    # a context per module: types and constants uniqued in LLVM's global context are never freed (about
    # 10 KiB per kernel); the module keeps its context alive
    mod = _llvm.parse_assembly(text, context=_llvm.create_context())
    mod.triple = host_triple()
    mod.data_layout = data_layout()
    mod.verify()
    return mod


def optimize(mod: Any, speed_level: int = 3) -> Any:
    """Run LLVM's default per-module pipeline (O``speed_level``) for the host CPU, in place.

    Loop and SLP vectorisation are on; returns ``mod`` for chaining.
    """
    tm = _target_machine()
    pto = _llvm.create_pipeline_tuning_options(speed_level=speed_level)
    pto.loop_vectorization = speed_level >= 2
    pto.slp_vectorization = speed_level >= 2
    pb = _llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def emit_object(mod: Any) -> bytes:
    """Generate host machine code for ``mod`` as relocatable object bytes (ELF on Linux)."""
    return bytes(_target_machine().emit_object(mod))


def emit_assembly(mod: Any) -> str:
    """Host assembly text of ``mod`` (for inspection and tests)."""
    return str(_target_machine().emit_assembly(mod))


def compile_ir(module: ir.Module | str, speed_level: int = 3) -> bytes:
    """``emit_object(optimize(build(module)))``: IR in, cacheable object bytes out."""
    return emit_object(optimize(build(module), speed_level))


class LoadedModule:
    """Machine code loaded into this process.

    Holds the MCJIT engine that owns the code. The engine (and the code) is
    freed when the last reference to this object goes: ctypes functions from
    :meth:`cfunc` reference it, so they never dangle; whoever keeps a raw
    :meth:`address` must keep this object too.
    """

    def __init__(self, engine: Any, obj: bytes) -> None:
        self._engine = engine
        self._size = len(obj)
        self._cache: dict[str, int] = {}

    @property
    def object_size(self) -> int:
        """Size in bytes of the object code this module was loaded from."""
        return self._size

    def address(self, name: str) -> int:
        """Address of the function (or global) ``name``; raises ``KeyError`` when absent."""
        addr = self._cache.get(name)
        if addr is None:  # two threads may both look it up: same answer (llvmlite serialises the calls)
            addr = self._engine.get_function_address(name)
            if not addr:
                addr = self._engine.get_global_value_address(name)
            if not addr:
                raise KeyError(f"symbol {name!r} is not defined in this module")
            self._cache[name] = addr
        return addr

    def cfunc(self, name: str, restype: Any, argtypes: Sequence[Any]) -> Any:
        """A ctypes function for ``name`` with the given result and argument types.

        Calls release the GIL (plain ``CFUNCTYPE``).  Always pass exact
        argtypes (``c_void_p`` for pointers, ``c_int64`` for integers...).
        """
        proto = ctypes.CFUNCTYPE(restype, *argtypes)
        fn: Any = proto(self.address(name))  # ctypes function objects take attributes
        fn._trnlang_module = self  # keep the code alive as long as the function object
        return fn


def load_object(obj: bytes) -> LoadedModule:
    """Load object bytes from :func:`emit_object` (this or an earlier process) and link them.

    External symbols (e.g. ``memcpy`` emitted by LLVM for copy loops) are
    resolved against the running process.
    """
    init()
    empty = _llvm.parse_assembly("")
    empty.triple = host_triple()
    empty.data_layout = data_layout()
    engine = _llvm.create_mcjit_compiler(empty, _new_target_machine())
    engine.add_object_file(_llvm.ObjectFileRef.from_data(bytes(obj)))
    engine.finalize_object()
    loaded = LoadedModule(engine, obj)
    with _live_lock:
        _live.add(loaded)
    return loaded


def add_symbol(name: str, address: int) -> None:
    """Make the external symbol ``name`` resolve to ``address`` in every object loaded from now on (process-wide).

    How a kernel object links a separately loaded library (``codegen.gemmlib``): the library's module, whose
    code lives at ``address``, must stay referenced for as long as anything loaded after this call may run.
    Registering a name again replaces the address (for objects loaded afterwards).
    """
    init()
    _llvm.add_symbol(name, address)


def live_modules() -> int:
    """Loaded modules not yet freed (each is freed with its last reference)."""
    with _live_lock:
        return len(_live)


def _lifecycle_timings() -> dict[str, float]:
    """Milliseconds of each lifecycle step for a small module (an 8-wide exp map kernel)."""
    import time

    from codegen.mathlib.mapkernel import add_map_function
    from codegen.mathlib.vecmath import emit_exp

    module = ir.Module(name="timing")
    add_map_function(module, "vm_exp", emit_exp, 1)
    t0 = time.perf_counter()
    mod = build(module)
    t1 = time.perf_counter()
    optimize(mod)
    t2 = time.perf_counter()
    obj = emit_object(mod)
    t3 = time.perf_counter()
    lib = load_object(obj)
    lib.address("vm_exp")
    t4 = time.perf_counter()
    return {"build": 1e3 * (t1 - t0), "optimize": 1e3 * (t2 - t1), "emit_object": 1e3 * (t3 - t2),
            "load_object": 1e3 * (t4 - t3), "object_bytes": float(len(obj))}


if __name__ == "__main__":
    print(f"llvmlite {llvmlite_version} (LLVM {llvm_version}), host {host_cpu_name()}")
    print(f"host_cpu_key: {host_cpu_key()[:100]}...")
    _lifecycle_timings()  # warm up LLVM's one-time costs
    for _ in range(3):
        print("  ".join(f"{k} {v:.2f}" for k, v in _lifecycle_timings().items()), "(ms)")
