"""The pass pipeline: one explicit list, one pass per file.

``TRN_DUMP=<stage>`` prints the IR after that stage (``trace`` = as traced,
``all`` = every stage) to stderr.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

from trnlang.ir.nodes import Kernel
from trnlang.passes.plan_memory import plan_memory

# (name, pass). Each pass takes valid IR and returns valid IR (mutating in place).
PIPELINE: list[tuple[str, Callable[[Kernel], Any]]] = [
    # SBUF/PSUM addresses (ALLOC attrs addr, bufs): liveness-based reuse, PSUM banks, multi-buffered loop bodies.
    ("plan_memory", plan_memory),
]


def _dump(stage: str, k: Kernel) -> None:
    want = os.environ.get("TRN_DUMP", "")
    if not want:
        return
    stages = {s.strip() for s in want.split(",")}
    if stage in stages or "all" in stages:
        from trnlang.ir.printer import print_kernel

        print(f"// ----- IR after {stage} -----", file=sys.stderr)
        print(print_kernel(k), file=sys.stderr)


def run_pipeline(k: Kernel, verify_each: bool = False) -> list[Any]:
    """Verify the traced kernel, run every pass, verify again; returns the runtime bounds checks needed."""
    from trnlang.ir.verifier import verify

    _dump("trace", k)
    checks = verify(k, k.target)
    for name, p in PIPELINE:
        p(k)
        _dump(name, k)
        if verify_each:
            checks = verify(k, k.target)
    if PIPELINE and not verify_each:
        checks = verify(k, k.target)
    return checks
