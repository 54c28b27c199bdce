"""Executors: the LLVM JIT (default) or the numpy reference interpreter (``interpret=True`` / ``TRN_INTERPRET=1``)."""

from __future__ import annotations

from typing import Any, Callable

from trnlang import config as _config
from trnlang.ir.nodes import Kernel


def make_executor(kernel: Kernel, interpret: bool = False, debug: bool = False) -> Callable[[list[Any], Any], None]:
    """A callable ``run(arrays, grid)`` executing the kernel on numpy views of its tensors.

    Compiled (``trnlang.runtime.jit``) unless ``interpret`` or ``TRN_INTERPRET`` is set
    (``trnlang.config.current.interpret``); ``debug`` poisons fresh on-chip buffers in compiled code too.
    """
    if interpret or _config.current.interpret:
        from trnlang.interpret.interpreter import run_kernel

        def run(arrays: list[Any], grid: Any) -> None:
            run_kernel(kernel, arrays, grid)

        return run
    from trnlang.runtime.jit import JitExecutor

    return JitExecutor(kernel, debug=debug)
