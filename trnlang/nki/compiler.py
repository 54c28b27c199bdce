"""``nki.compiler``: scheduling and allocation directives, accepted as no-ops.

trnlang's own pass pipeline schedules and allocates (``trnlang/passes``): a directive changes nothing,
so a kernel written with them runs unchanged. Allocator objects used as ``buffer=`` (``sbuf.mod_alloc``,
``psum.alloc`` ...) become the plain buffer.
"""

from __future__ import annotations

from typing import Any

from trnlang.ir.types import Space


def _directive(*args: Any, **__: Any) -> Any:
    """A no-op directive; used as a decorator (``@nki.compiler.skip_middle_end_transformations``) it
    returns the kernel unchanged."""
    if len(args) == 1 and callable(args[0]) and not __:
        return args[0]
    return None


no_reorder = _directive
skip_middle_end_transformations = _directive
force_auto_alloc = _directive
enable_stack_allocator = _directive
tile_scheduler = _directive


class _Allocators:
    """``ncc.sbuf.mod_alloc(...)`` / ``ncc.psum.alloc(...)``: the buffer itself."""

    def __init__(self, space: Space) -> None:
        self.space = space

    def alloc(self, *_: Any, **__: Any) -> Space:
        return self.space

    mod_alloc = alloc
    auto_alloc = alloc


sbuf = _Allocators(Space.SBUF)
psum = _Allocators(Space.PSUM)

__all__ = ["no_reorder", "skip_middle_end_transformations", "force_auto_alloc", "enable_stack_allocator",
           "tile_scheduler", "sbuf", "psum"]
