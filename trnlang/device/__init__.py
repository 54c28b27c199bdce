"""The ``trn`` PyTorch device: PrivateUse1 renamed to ``trn``, set up in pure Python.

Registration happens once per process, in whichever way comes first:

- ``import torch`` calls :func:`_autoload` (the ``torch.backends`` entry point of this package),
  unless ``TORCH_DEVICE_BACKEND_AUTOLOAD=0``;
- importing this module registers right away when torch is already imported, and otherwise
  hooks the import of torch to register as soon as torch has finished importing;
- :func:`register` does it explicitly.

This module imports torch only when needed, so ``import trnlang`` stays light.

Public names (resolved lazily): :func:`register`, :func:`lowering`, :func:`register_decomposition`,
:data:`REGISTRY`, :func:`registry_table`, :func:`fallback_stats`, :func:`reset_fallback_stats`,
:class:`FallbackError`, :class:`FallbackWarning`.

Example:
    >>> import torch, trnlang.device
    >>> x = torch.ones(4, device="trn")                  # doctest: +SKIP
    >>> (x + x).cpu().tolist()                            # doctest: +SKIP
    [2.0, 2.0, 2.0, 2.0]
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import warnings
from typing import Any

__all__ = ["register", "is_registered", "lowering", "Accepts", "register_decomposition", "REGISTRY", "registry_table",
           "fallback_stats", "fallback_reasons", "reset_fallback_stats", "decline", "FallbackError",
           "FallbackWarning"]

_LAZY = {
    "lowering": ("trnlang.device.registry", "lowering"),
    "Accepts": ("trnlang.device.registry", "Accepts"),
    "register_decomposition": ("trnlang.device.registry", "register_decomposition"),
    "REGISTRY": ("trnlang.device.registry", "REGISTRY"),
    "registry_table": ("trnlang.device.registry", "registry_table"),
    "fallback_stats": ("trnlang.device.fallback", "fallback_stats"),
    "fallback_reasons": ("trnlang.device.fallback", "fallback_reasons"),
    "decline": ("trnlang.device.fallback", "decline"),
    "reset_fallback_stats": ("trnlang.device.fallback", "reset_fallback_stats"),
    "FallbackError": ("trnlang.device.fallback", "FallbackError"),
    "FallbackWarning": ("trnlang.device.fallback", "FallbackWarning"),
}


def register() -> None:
    """Set up the ``trn`` device in this process (idempotent).

    Example:
        >>> import trnlang.device; trnlang.device.register()  # doctest: +SKIP
    """
    from trnlang.device import backend

    backend.register()


def is_registered() -> bool:
    """True once the ``trn`` device is set up in this process."""
    mod = sys.modules.get("trnlang.device.backend")
    return bool(mod is not None and mod.is_registered())


def _autoload() -> None:
    """Entry point of ``torch.backends``: called while torch is importing; must stay cheap and safe."""
    try:
        register()
    except Exception as e:  # never break `import torch`
        warnings.warn(f"trnlang: the trn device could not be registered: {e}", RuntimeWarning, stacklevel=2)


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'trnlang.device' has no attribute {name!r}")
    register()
    mod = importlib.import_module(target[0])
    return getattr(mod, target[1])


class _TorchImportHook(importlib.abc.MetaPathFinder):
    """Registers the device right after ``import torch`` finishes (when autoload is disabled)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        orig = spec.loader.exec_module

        def exec_module(module: Any) -> None:
            orig(module)
            _autoload()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


class _Loaded(importlib.abc.Loader):
    """The loader of a module that is already in ``sys.modules``: the import binds it, executes nothing."""

    def __init__(self, module: Any) -> None:
        self.module = module

    def create_module(self, spec: Any) -> Any:
        return self.module

    def exec_module(self, module: Any) -> None:
        return None


class _TorchFirst(importlib.abc.MetaPathFinder):
    """Imports torch before the first submodule of this package (they all need it).

    Otherwise ``import trnlang.device.fallback`` before ``import torch`` would start torch's import from
    inside that half-executed module, and torch's autoload, which registers the device from it, would find
    it empty. With torch imported first, registration imports the submodule whole; the pending import then
    binds that module instead of executing it a second time.
    """

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if not fullname.startswith(__name__ + "."):
            return None
        if "torch" not in sys.modules:
            import torch  # noqa: F401  (registers the device: torch's autoload or _TorchImportHook)
        module = sys.modules.get(fullname)
        return importlib.util.spec_from_loader(fullname, _Loaded(module)) if module is not None else None


def _install() -> None:
    if "torch" in sys.modules:
        _autoload()
        return
    if not any(isinstance(f, _TorchImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchImportHook())
    if not any(isinstance(f, _TorchFirst) for f in sys.meta_path):
        sys.meta_path.insert(0, _TorchFirst())


_install()
