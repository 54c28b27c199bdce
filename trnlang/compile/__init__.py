"""torch.compile on ``trn``: FX graphs become fused trnlang kernels.

Two entry points, both set up when trnlang loads (:func:`install`), without importing Dynamo or Inductor
until torch does:

- ``torch.compile(m, backend="trn")``: registered in Dynamo's backend registry (it shows in
  ``torch._dynamo.list_backends()``);
- ``torch.compile(m)`` (the default, Inductor): a graph whose tensors are on ``trn`` is compiled by the
  same backend; graphs on other devices go to Inductor unchanged.

The backend (:mod:`trnlang.compile.backend`) runs AOTAutograd with decompositions, groups pointwise ops
and last-dimension reductions (:mod:`trnlang.compile.fuse`), generates one ``@trn.kernel`` per group
(:mod:`trnlang.compile.kernelgen`) and leaves matmul, attention, embedding and the other ops to the
device's lowerings. ``TRN_DUMP=compile`` prints every generated kernel's source to stderr;
``TORCH_LOGS=output_code`` logs the rewritten graphs with their kernels.

Example:
    >>> import torch, trnlang
    >>> import torch._dynamo
    >>> "trn" in torch._dynamo.list_backends()
    True
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Any

__all__ = ["install", "compile_stats", "generated_kernels", "launchers", "trn_backend"]

_REGISTRY = "torch._dynamo.backends.registry"
_COMPILE_FX = "torch._inductor.compile_fx"
_done: set[str] = set()


def trn_backend(gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
    """The ``"trn"`` torch.compile backend (see :func:`trnlang.compile.backend.trn_backend`)."""
    from trnlang.compile.backend import trn_backend as impl

    return impl(gm, example_inputs, **kwargs)


def compile_stats() -> dict[str, Any]:
    """Counters of this process: graphs compiled, kernels generated, and the kernels' JIT compilations.

    ``kernel_variants`` is the number of compiled specializations over all generated kernels; with
    shape-polymorphic kernels it stays flat when only the batch size changes.

    Example:
        >>> import trnlang.compile
        >>> sorted(trnlang.compile.compile_stats())[:3]
        ['compile_seconds', 'fused_nodes', 'generated_kernels']
    """
    from trnlang.compile import kernelgen
    from trnlang.compile.backend import STATS

    ks = kernelgen.kernels()
    return {**STATS, "generated_kernels": len(ks),
            "kernel_variants": sum(k.compile_stats().get("variants", 0) for k in ks)}


def generated_kernels() -> list[tuple[str, str, Any]]:
    """(name, trnlang source, ``@trn.kernel``) of every kernel the backend generated in this process.

    Example:
        >>> import trnlang.compile
        >>> isinstance(trnlang.compile.generated_kernels(), list)
        True
    """
    from trnlang.compile import kernelgen

    return kernelgen.generated()


def launchers() -> list[Any]:
    """The launchers of generated kernels in compiled graphs, oldest first; ``.profile(*cpu_inputs)``
    simulates one on the NeuronCore model, ``.source`` is its trnlang source.

    Example:
        >>> import trnlang.compile
        >>> isinstance(trnlang.compile.launchers(), list)
        True
    """
    from trnlang.compile import kernelgen

    return kernelgen.launchers()


def _on_trn(gm: Any, example_inputs: Any) -> bool:
    for x in list(example_inputs or ()):
        dev = getattr(x, "device", None)
        if dev is not None and getattr(dev, "type", None) == "trn":
            return True
    for node in getattr(getattr(gm, "graph", None), "nodes", ()):
        val = node.meta.get("example_value", node.meta.get("val"))
        dev = getattr(val, "device", None)
        if dev is not None and getattr(dev, "type", None) == "trn":
            return True
    return False


def _patch_registry(mod: Any) -> None:
    if "registry" in _done:
        return
    _done.add("registry")
    if "trn" not in mod._COMPILER_FNS:
        mod.register_backend(trn_backend, name="trn")


def _patch_compile_fx(mod: Any) -> None:
    if "compile_fx" in _done:
        return
    _done.add("compile_fx")
    inductor = mod.compile_fx

    def compile_fx(model_: Any, example_inputs_: Any, *args: Any, **kwargs: Any) -> Any:
        """Inductor's entry; graphs on ``trn`` go to the trnlang backend (Inductor has no trn code generator)."""
        if _on_trn(model_, example_inputs_):
            return trn_backend(model_, example_inputs_)
        return inductor(model_, example_inputs_, *args, **kwargs)

    compile_fx.__wrapped__ = inductor  # type: ignore[attr-defined]
    mod.compile_fx = compile_fx


def _patch_trace_rules(mod: Any) -> None:
    """Dynamo does not trace into the kernel launcher: a user's ``@trn.kernel`` call inside a compiled
    function is a graph break and runs as in eager mode, on the trn tensors of the graph before it."""
    if "trace_rules" in _done:
        return
    _done.add("trace_rules")
    mod.add("trnlang.runtime")


_TRACE_RULES = "torch._dynamo.trace_rules"
_PATCHES = {_REGISTRY: _patch_registry, _COMPILE_FX: _patch_compile_fx, _TRACE_RULES: _patch_trace_rules}
_ATTR = {_REGISTRY: "register_backend", _COMPILE_FX: "compile_fx", _TRACE_RULES: "add"}


class _ImportHook(importlib.abc.MetaPathFinder):
    """Applies a patch right after its torch module has executed (Dynamo/Inductor load lazily)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        patch = _PATCHES.get(fullname)
        if patch is None or fullname in sys.modules:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        orig = loader.exec_module

        def exec_module(module: Any) -> None:
            orig(module)
            patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def install() -> None:
    """Register ``backend="trn"`` and the default-backend route for trn graphs (idempotent, lazy)."""
    for name, patch in _PATCHES.items():
        mod = sys.modules.get(name)
        if mod is not None and hasattr(mod, _ATTR[name]):
            patch(mod)
    if not any(isinstance(f, _ImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _ImportHook())


install()


# --- opt-in: TRN_COMPILE=inductor routes the default backend's trn graphs through Inductor itself -------
_patch_compile_fx_custom = _patch_compile_fx


def _patch_compile_fx_routes(mod: Any) -> None:
    """The custom route's wrapper, wrapped once more: with ``TRN_COMPILE=inductor`` a trn graph goes to
    Inductor with ``trn`` registered as a device backend (:mod:`trnlang.compile.inductor`)."""
    _patch_compile_fx_custom(mod)
    custom = mod.compile_fx
    if getattr(custom, "_trn_routes", False):
        return
    inductor = getattr(custom, "__wrapped__", custom)

    def compile_fx(model_: Any, example_inputs_: Any, *args: Any, **kwargs: Any) -> Any:
        """Inductor's entry; trn graphs go to trnlang (custom FX backend, or Inductor with TRN_COMPILE=inductor)."""
        from trnlang.compile import inductor as route

        if route.enabled() and _on_trn(model_, example_inputs_):
            return route.compile_graph(model_, example_inputs_, inductor)
        return custom(model_, example_inputs_, *args, **kwargs)

    compile_fx.__wrapped__ = inductor  # type: ignore[attr-defined]
    compile_fx._trn_routes = True  # type: ignore[attr-defined]
    mod.compile_fx = compile_fx


_PATCHES[_COMPILE_FX] = _patch_compile_fx_routes
if _COMPILE_FX in sys.modules and hasattr(sys.modules[_COMPILE_FX], "compile_fx"):
    _patch_compile_fx_routes(sys.modules[_COMPILE_FX])
