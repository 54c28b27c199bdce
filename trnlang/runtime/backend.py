"""Executors: the numpy reference interpreter now; the LLVM JIT plugs in here."""

from __future__ import annotations

from typing import Any, Callable

from trnlang.ir.nodes import Kernel


def make_executor(kernel: Kernel, interpret: bool = False, debug: bool = False) -> Callable[[list[Any], Any], None]:
    """A callable ``run(arrays, grid)`` executing the kernel on numpy views of its tensors."""
    from trnlang.interpret.interpreter import run_kernel

    def run(arrays: list[Any], grid: Any) -> None:
        run_kernel(kernel, arrays, grid)

    return run
