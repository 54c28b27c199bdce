"""Pass ``check_placement``: which HBM accesses and on-chip regions get a run-time bounds check.

An HBM access needs a check when ``trnlang.ir.bounds.access_check`` cannot prove it inside its
tensor for the variant's launch grid (status ``runtime``: the undecided dimensions; or ``oob``:
every dimension, since the interpreter raises only when the instruction executes, so does the
compiled kernel). An on-chip region needs one in each dimension whose start is not provably inside
its buffer (skipped where the enclosing loops provably never run). The decisions go to
``plan.access_checks`` / ``plan.region_checks``; a producer that needs a check is never inlined
(``fuse_elementwise``) nor deferred (``plan_matmul_operands``).

Example:
    >>> import torch
    >>> from tests.kernels import vector_add
    >>> from trnlang.passes.lowering import LowerPlan
    >>> x = torch.randn(200, 64)
    >>> plan = check_placement(LowerPlan(vector_add.trace(x, x, torch.empty(200, 64)), (1,)))
    >>> sorted(plan.access_checks.values())
    []
"""

from __future__ import annotations

from typing import Any

from trnlang.ir.bounds import access_check, expr_range, loop_ranges
from trnlang.ir.liveness import all_regions
from trnlang.ir.nodes import Access, Region
from trnlang.ir.ops import Op
from trnlang.passes.lowering import LowerPlan

__all__ = ["check_placement"]


def _region_dims_to_check(r: Region, rng: Any) -> list[int]:
    dims = []
    for d, (start, size, keep) in enumerate(zip(r.starts, r.sizes, r.keep)):
        n = size if keep else 1
        got = expr_range(start, rng)
        if got is None or got[0] < 0 or got[1] + n > r.buf.shape[d]:
            if getattr(rng, "empty", False):
                continue
            dims.append(d)
    return dims


def check_placement(plan: LowerPlan) -> LowerPlan:
    """Fill ``plan.access_checks`` and ``plan.region_checks`` (see the module docstring); returns ``plan``."""
    ranges: dict[tuple[int, ...], Any] = {}
    for info in plan.infos:
        ins = info.instr
        if ins.op is Op.ALLOC:
            continue
        key = tuple(id(lp) for lp in info.loops)
        rng = ranges.get(key)
        if rng is None:
            rng = ranges[key] = loop_ranges(list(info.loops), plan.grid)
        for x in (*ins.outs, *ins.ins):
            if isinstance(x, Access):
                v = access_check(x, rng)
                if v.status == "runtime":
                    plan.access_checks[id(x)] = tuple(v.runtime_dims)
                elif v.status == "oob":
                    plan.access_checks[id(x)] = tuple(range(len(x.index)))
        for r in all_regions(ins):
            dims = _region_dims_to_check(r, rng)
            if dims:
                plan.region_checks[id(r)] = dims
    return plan
