"""The lowering plan of one compiled variant, made by the ``LOWERING`` passes of ``trnlang.passes``.

Run-time check placement, rematerialisation, elementwise fusion, ``nc_matmul`` operand planning,
matmul tile loops collapsed to one gemm and the scratch-arena layout are passes
(``trnlang/passes/check_placement.py``, ``rematerialize.py``, ``fuse_elementwise.py``,
``plan_matmul_operands.py``, ``collapse_gemm.py``, ``layout_arena.py``) that fill a
:class:`~trnlang.passes.lowering.LowerPlan`; the lowering only emits what the plan says.
:func:`Plan` runs them for a variant with what only codegen knows (whether the host's gemm takes
bf16 operands). ``TRN_DUMP=<pass>`` shows each pass's decisions (docs/passes.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from trnlang.ir.liveness import all_regions, regions_written, same_region
from trnlang.ir.nodes import Kernel
from trnlang.passes.layout_arena import ALIGN
from trnlang.passes.lowering import InstrInfo, LowerPlan

__all__ = ["ALIGN", "InstrInfo", "LowerPlan", "Plan", "all_regions", "regions_written", "same_region"]


class Plan(LowerPlan):
    """The lowering plan of ``kernel`` for one variant (launch ``grid``, aliasing arguments, debug build, the
    tensors' compiled ``layouts``: see ``LowerPlan``), with every ``LOWERING`` pass run.

    Example:
        >>> import torch
        >>> from tests.kernels import softmax
        >>> Plan(softmax.trace(torch.randn(128, 64), torch.empty(128, 64)), (1,)).passes[-1]
        'layout_arena'
    """

    def __init__(self, kernel: Kernel, grid: Sequence[int], may_alias: bool = False, debug: bool = False,
                 layouts: Sequence[Any] | None = None) -> None:
        from codegen.lowering.gemm_bf16 import bf16_kind
        from trnlang.passes import run_lowering

        super().__init__(kernel, tuple(int(g) for g in grid), may_alias, debug, bf16_kind() is not None,
                         None if layouts is None else tuple(layouts))
        run_lowering(self)
