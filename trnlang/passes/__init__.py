"""The pass pipeline: two explicit lists, one pass per file.

``PIPELINE`` runs once per traced kernel (``run_pipeline``); its passes rewrite the IR, recording
their decisions as instruction attributes (the printed IR, and so the compile cache key, shows them).
``LOWERING`` runs once per compiled variant of a kernel (``plan_lowering``, called by ``codegen``):
its decisions depend on the variant (launch grid, aliasing arguments, debug build, the host's bf16
gemm), so they fill a :class:`~trnlang.passes.lowering.LowerPlan` on top of the IR instead, which
codegen only reads.

``TRN_DUMP=<stage>[,<stage>...]`` (read through ``trnlang.config``) prints the IR after that stage
to stderr: ``trace`` (as traced), any pass name below, or ``all``. After a ``LOWERING`` pass the IR
carries the plan's decisions so far as comments (``// #5 fused into #7``; see docs/passes.md).

Example:
    >>> [name for name, _ in LOWERING]
    ['check_placement', 'rematerialize', 'fuse_elementwise', 'plan_matmul_operands', 'collapse_gemm', 'layout_arena']
    >>> [name for name, _ in PIPELINE]
    ['plan_memory']
"""

from __future__ import annotations

import sys
from typing import Any, Callable

import trnlang.config as _config
from trnlang.ir.nodes import Kernel
from trnlang.passes.check_placement import check_placement
from trnlang.passes.collapse_gemm import collapse_gemm
from trnlang.passes.fuse_elementwise import fuse_elementwise
from trnlang.passes.layout_arena import layout_arena
from trnlang.passes.lowering import LowerPlan, plan_notes, verify_plan
from trnlang.passes.plan_matmul_operands import plan_matmul_operands
from trnlang.passes.plan_memory import plan_memory
from trnlang.passes.rematerialize import rematerialize

__all__ = ["LOWERING", "PIPELINE", "LowerPlan", "dump", "plan_lowering", "run_lowering", "run_pipeline"]

# (name, pass) run on every traced kernel. Each pass takes valid IR and returns valid IR (mutating in place).
PIPELINE: list[tuple[str, Callable[[Kernel], Any]]] = [
    # SBUF/PSUM addresses (ALLOC attrs addr, bufs): liveness-based reuse, PSUM banks, multi-buffered loop bodies.
    ("plan_memory", plan_memory),
]

# (name, pass) run per compiled variant, in order; each fills its part of the LowerPlan and returns it.
LOWERING: list[tuple[str, Callable[[LowerPlan], LowerPlan]]] = [
    # run-time bounds checks: HBM accesses and on-chip regions not provably in bounds for this grid.
    ("check_placement", check_placement),
    # cheap loads (and their casts) re-read in each of a few consumers instead of staged in the arena.
    ("rematerialize", rematerialize),
    # elementwise producers inlined into their single consumer.
    ("fuse_elementwise", fuse_elementwise),
    # nc_matmul operands the gemm reads where they come from (HBM, the transpose's source), not staged tiles.
    ("plan_matmul_operands", plan_matmul_operands),
    # matmul tile loops (a K loop, a nest of output tiles) lowered as one gemm call over the whole product.
    ("collapse_gemm", collapse_gemm),
    # scratch-arena offsets of the materialised buffers: shared where live ranges do not overlap.
    ("layout_arena", layout_arena),
]


def dump(stage: str, k: Kernel, notes: Callable[[Any], str] | None = None, header: str = "") -> None:
    """Print ``k`` to stderr if ``TRN_DUMP`` names ``stage`` (or ``all``); ``notes`` annotates instructions."""
    want = _config.current.dump
    if not want or (stage not in want and "all" not in want):
        return
    from trnlang.ir.printer import print_kernel

    print(f"// ----- IR after {stage}{header} -----", file=sys.stderr)
    print(print_kernel(k, notes=notes), file=sys.stderr)


def run_pipeline(k: Kernel, verify_each: bool = False) -> list[Any]:
    """Verify the traced kernel, run every pass, verify again; returns the runtime bounds checks needed."""
    from trnlang.ir.symbounds import proof_scope
    from trnlang.ir.verifier import verify

    dump("trace", k)
    with proof_scope():  # the runs of the verifier share their runtime-size proofs
        checks = verify(k, k.target)
        for name, p in PIPELINE:
            p(k)
            dump(name, k)
            if verify_each:
                checks = verify(k, k.target)
        if PIPELINE and not verify_each:
            checks = verify(k, k.target)
    return checks


def plan_lowering(k: Kernel, grid: tuple[int, ...], may_alias: bool = False, debug: bool = False,
                  bf16_gemm: bool = False, verify_each: bool = False, layouts: Any = None) -> LowerPlan:
    """Run the ``LOWERING`` passes for one variant of ``k`` and return their plan.

    Args:
        k: the kernel (after ``run_pipeline``; not modified).
        grid: the launch grid of the variant.
        may_alias: a written argument may overlap another (fusion must not reorder their accesses).
        debug: a debug build (poisoned buffers: nothing is deferred, no arena bytes are shared).
        bf16_gemm: the host's gemm takes bf16 operands (bf16 tiles are read in place like fp32).
        verify_each: check the plan (``verify_plan``) after every pass.
        layouts: the compiled layout of each kernel tensor (``LowerPlan.layouts``; None: all contiguous).

    Example:
        >>> import torch
        >>> from tests.kernels import vector_add
        >>> x = torch.randn(128, 32)
        >>> plan = plan_lowering(vector_add.trace(x, x, torch.empty(128, 32)), (1,), verify_each=True)
        >>> len(plan.fused) > 0
        True
    """
    return run_lowering(LowerPlan(k, tuple(grid), may_alias, debug, bf16_gemm,
                                  None if layouts is None else tuple(layouts)), verify_each)


def run_lowering(plan: LowerPlan, verify_each: bool = False) -> LowerPlan:
    """Run every ``LOWERING`` pass on ``plan`` (fresh: no decisions yet), dumping and verifying as asked."""
    want = _config.current.dump
    header = f" (grid {plan.grid}, may_alias {plan.may_alias}, debug {plan.debug})"
    for name, p in LOWERING:
        plan = p(plan)
        plan.passes.append(name)
        if want:
            dump(name, plan.kernel, plan_notes(plan), header)
        if verify_each:
            verify_plan(plan)
    return plan
