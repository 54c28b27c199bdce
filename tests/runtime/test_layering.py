"""The layering rules of ARCHITECTURE.md, checked on the source (an ``ast`` scan of every import, lazy ones too).

- no module uses a private name (``_x``) of another package: neither ``from pkg.mod import _x`` nor
  ``mod._x`` on a module imported from another package (packages: ``trnlang.<sub>``, the ``trnlang``
  top-level modules, ``codegen``, ``stdlib_kernels`` (its core modules) and each stdlib family sub-package);
- ``llvmlite.binding`` is imported by ``codegen/llvm.py`` only (the one door to LLVM);
- the runtime never imports the device layer (``trnlang.device``), and codegen imports neither the
  runtime nor the device layer;
- nothing but the runtime launches compiled code: no module outside ``trnlang/runtime`` and ``codegen``
  makes ctypes prototypes of kernel entries (``CFUNCTYPE`` / ``PYFUNCTYPE``);
- ``TRN_*`` variables are read through the ``trnlang.config`` snapshot (docs/config.md): no other module
  reads one from ``os.environ`` / ``os.getenv`` (writing one, then ``trnlang.config.refresh()``, is fine).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("trnlang", "codegen", "stdlib_kernels")


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in SCANNED:
        for f in (ROOT / pkg).rglob("*.py"):
            out[".".join(f.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")] = f
    return out


MODULES = _modules()


def package_of(mod: str) -> str:
    """``trnlang.runtime.kernel`` -> ``trnlang.runtime``; ``trnlang.cli`` -> ``trnlang``; a stdlib family is a
    package of its own (``stdlib_kernels.nn.norm`` -> ``stdlib_kernels.nn``), its core modules are
    ``stdlib_kernels``; codegen's sub-packages likewise (``codegen.lowering.kernel`` -> ``codegen.lowering``,
    ``codegen.llvm`` -> ``codegen``)."""
    parts = mod.split(".")
    if parts[0] == "codegen" and len(parts) > 2 and (ROOT / "codegen" / parts[1]).is_dir():
        return f"codegen.{parts[1]}"
    if parts[0] == "stdlib_kernels" and len(parts) > 1 and (ROOT / "stdlib_kernels" / parts[1]).is_dir():
        return f"stdlib_kernels.{parts[1]}"
    if parts[0] == "trnlang" and len(parts) > 1 and f"trnlang.{parts[1]}" in MODULES and \
            (ROOT / "trnlang" / parts[1]).is_dir():
        return f"trnlang.{parts[1]}"
    return parts[0]


def _resolve(mod: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".")
    if not MODULES[mod].name == "__init__.py":
        base = base[:-1]
    base = base[:len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def imports(mod: str) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import statement of ``mod``."""
    tree = _tree(MODULES[mod])
    out: list[tuple[str, str | None, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            src = _resolve(mod, node)
            out += [(src, a.name, node.lineno) for a in node.names]
    return out


def private_uses(mod: str) -> list[str]:
    """Private names of other packages ``mod`` imports or reads off a module it imported."""
    tree = _tree(MODULES[mod])
    here = package_of(mod)
    bad: list[str] = []
    module_names: dict[str, str] = {}  # local name -> module of another package bound to it
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            src = _resolve(mod, node)
            if src.split(".")[0] not in SCANNED:
                continue
            for a in node.names:
                full = f"{src}.{a.name}"
                if full in MODULES:
                    if package_of(full) != here:
                        module_names[a.asname or a.name] = full
                elif _private(a.name) and package_of(src) != here and (mod, f"{src}.{a.name}") not in KNOWN:
                    bad.append(f"{mod}:{node.lineno} imports {a.name} from {src}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in MODULES and a.asname and package_of(a.name) != here:
                    module_names[a.asname] = a.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr):
            src = module_names.get(node.value.id)
            if src is not None and (mod, f"{src}.{node.attr}") not in KNOWN:
                bad.append(f"{mod}:{node.lineno} reads {src}.{node.attr}")
    return bad


#: (module, private name it uses) not fixed yet: the ISA namespaces emit through the language's semantic layer
#: (issue 14; the language package owns that seam). Entries may go stale; none may be added.
KNOWN = frozenset({
    ("trnlang.isa", "trnlang.language.semantic._emit"),
    ("trnlang.isa", "trnlang.language.semantic._pick_engine"),
    ("trnlang.nki.isa", "trnlang.language.semantic._emit"),
    ("trnlang.nki.isa", "trnlang.language.semantic._pick_engine"),
})


def test_the_scan_sees_the_packages() -> None:
    assert package_of("trnlang.runtime.kernel") == "trnlang.runtime"
    assert package_of("trnlang.device.fastlane") == "trnlang.device"
    assert package_of("trnlang.cli") == "trnlang" and package_of("trnlang.config") == "trnlang"
    assert package_of("stdlib_kernels._util") == "stdlib_kernels" and package_of("codegen.native") == "codegen"
    assert package_of("stdlib_kernels.nn.norm") == "stdlib_kernels.nn"  # a family is a package
    assert package_of("codegen.lowering.kernel") == "codegen.lowering" and package_of("codegen.llvm") == "codegen"
    assert ("trnlang.runtime.launch", "Launch", 0) in [(m, n, 0) for m, n, _ in imports("trnlang.device.fastlane")]


def test_no_private_names_across_packages() -> None:
    bad = [b for m in sorted(MODULES) for b in private_uses(m)]
    assert not bad, "private names used across packages (make them public API):\n" + "\n".join(bad)


def test_the_private_name_check_can_fail(tmp_path: Path) -> None:
    """The check itself: a module importing another package's private name is reported."""
    mod = "trnlang.device.fastlane"
    src = MODULES[mod]
    try:
        MODULES[mod] = tmp_path / "fastlane.py"
        MODULES[mod].write_text("from trnlang.runtime.kernel import _CONST_SET\nfrom trnlang.runtime import jit\n"
                                "jit._arena(8)\n")
        assert private_uses(mod) == [f"{mod}:1 imports _CONST_SET from trnlang.runtime.kernel",
                                     f"{mod}:3 reads trnlang.runtime.jit._arena"]
    finally:
        MODULES[mod] = src


def test_llvmlite_binding_only_in_codegen_llvm() -> None:
    users = sorted({m for m in MODULES for src, name, _ in imports(m)
                    if src.startswith("llvmlite.binding") or (src == "llvmlite" and name == "binding")})
    assert users == ["codegen.llvm"]


def test_runtime_never_imports_the_device_layer() -> None:
    bad = [f"{m}:{line} imports {src}" for m in MODULES if package_of(m) == "trnlang.runtime"
           for src, _, line in imports(m) if src == "trnlang.device" or src.startswith("trnlang.device.")]
    assert not bad


def test_codegen_imports_neither_runtime_nor_device() -> None:
    bad = [f"{m}:{line} imports {src}" for m in MODULES if package_of(m) == "codegen"
           for src, _, line in imports(m)
           if src.startswith(("trnlang.runtime", "trnlang.device", "stdlib_kernels"))]
    assert not bad


def test_only_runtime_and_codegen_make_native_call_prototypes() -> None:
    bad = []
    for m, f in MODULES.items():
        if package_of(m) in ("trnlang.runtime", "codegen"):
            continue
        text = f.read_text()
        if "CFUNCTYPE(" in text or "PYFUNCTYPE(" in text:
            bad.append(m)
    assert not bad


#: (module, variable) still read from the environment, and why. ``TRN_DIST_CHECK``: benchmarks/bench_distributed.py
#: switches it between calls in one process (a snapshot refresh per collective would be timed with it).
ENV_READS_KNOWN = frozenset({("trnlang.distributed.c10d", "TRN_DIST_CHECK")})


def _env_name(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def env_reads(mod: str) -> list[tuple[str, int]]:
    """``TRN_*`` variables ``mod`` reads from ``os.environ`` (``.get``, ``[...]`` loads) or ``os.getenv``."""
    out: list[tuple[str, int]] = []
    for node in ast.walk(_tree(MODULES[mod])):
        name = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            f = node.func
            on = ast.unparse(f.value)
            if (f.attr == "get" and on in ("os.environ", "environ")) or (f.attr == "getenv" and on == "os"):
                name = _env_name(node.args[0])
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and \
                ast.unparse(node.value) in ("os.environ", "environ"):
            name = _env_name(node.slice)
        if name is not None and name.startswith("TRN_"):
            out.append((name, node.lineno))
    return sorted(out, key=lambda x: x[1])


def test_trn_variables_are_read_through_the_config_snapshot() -> None:
    bad = [f"{m}:{line} reads {name} from the environment" for m in sorted(MODULES) if m != "trnlang.config"
           for name, line in env_reads(m) if (m, name) not in ENV_READS_KNOWN]
    assert not bad, "read TRN_* variables through trnlang.config (docs/config.md):\n" + "\n".join(bad)


def test_the_env_read_check_can_fail(tmp_path: Path) -> None:
    mod = "trnlang.device.guard"
    src = MODULES[mod]
    try:
        MODULES[mod] = tmp_path / "guard.py"
        MODULES[mod].write_text("import os\nx = os.environ.get('TRN_GUARD')\ny = os.environ['TRN_FALLBACK']\n"
                                "os.environ['TRN_FALLBACK'] = 'error'\nz = os.getenv('TRN_X', '')\n"
                                "h = os.environ.get('HOME')\n")
        assert env_reads(mod) == [("TRN_GUARD", 2), ("TRN_FALLBACK", 3), ("TRN_X", 5)]
    finally:
        MODULES[mod] = src
