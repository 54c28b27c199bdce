"""Executors: the LLVM JIT (default) or the numpy reference interpreter (``interpret=True`` / ``TRN_INTERPRET=1``)."""

from __future__ import annotations

import os
from typing import Any, Callable

from trnlang.ir.nodes import Kernel


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def make_executor(kernel: Kernel, interpret: bool = False, debug: bool = False) -> Callable[[list[Any], Any], None]:
    """A callable ``run(arrays, grid)`` executing the kernel on numpy views of its tensors.

    Compiled (``trnlang.runtime.jit``) unless ``interpret`` or the environment variable
    ``TRN_INTERPRET`` is set; ``debug`` poisons fresh on-chip buffers in compiled code too.
    """
    if interpret or _env_flag("TRN_INTERPRET"):
        from trnlang.interpret.interpreter import run_kernel

        def run(arrays: list[Any], grid: Any) -> None:
            run_kernel(kernel, arrays, grid)

        return run
    from trnlang.runtime.jit import JitExecutor

    return JitExecutor(kernel, debug=debug)
