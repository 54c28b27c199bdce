"""``trnlang.nki.install()``: the NKI package names resolve to ``trnlang.nki`` when not installed.

Opt-in and non-shadowing: a name is aliased only when no installed distribution provides it
(``importlib.util.find_spec`` finds nothing), so a real ``neuronxcc`` or ``nki`` always wins.
"""

from __future__ import annotations

import importlib.util
import sys
import types

_SUBMODULES = ("language", "isa", "typing", "compiler")
_installed: list[str] = []


def _missing(name: str) -> bool:
    if name in sys.modules:
        return False
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


def install() -> list[str]:
    """Make ``import neuronxcc.nki[.language|.isa|.typing|.compiler]`` and ``import nki[...]`` give
    ``trnlang.nki`` where those packages are absent; returns the names it added.

    Example:
        >>> import trnlang.nki
        >>> added = trnlang.nki.install()
        >>> import neuronxcc.nki.language as nl
        >>> nl is trnlang.nki.language
        True
    """
    import trnlang.nki as pkg

    added: list[str] = []
    if _missing("neuronxcc"):
        parent = types.ModuleType("neuronxcc", "trnlang.nki aliases (trnlang.nki.install())")
        parent.__path__ = []
        parent.nki = pkg  # type: ignore[attr-defined]
        sys.modules["neuronxcc"] = parent
        added.append("neuronxcc")
    for root in ("neuronxcc.nki", "nki"):
        if root == "nki" and not _missing("nki"):
            continue
        if root == "neuronxcc.nki" and "neuronxcc" not in added:
            continue
        for name, mod in [(root, pkg)] + [(f"{root}.{s}", getattr(pkg, s)) for s in _SUBMODULES]:
            if name not in sys.modules:
                sys.modules[name] = mod
                added.append(name)
    _installed.extend(added)
    return added


install_aliases = install


def uninstall() -> None:
    """Remove the aliases ``install()`` added."""
    while _installed:
        sys.modules.pop(_installed.pop(), None)
