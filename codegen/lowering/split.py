"""Which loop of a kernel the runtime may split across host threads (issue 18: ``affine_range`` parallelism).

An ``affine_range`` promises independent iterations, so a launch of grid ``(1,)`` whose work is one outermost
``affine_range`` loop can run that loop's iterations on several cores: the compiled entry then reads its
``[lo, hi)`` words as *part* ``lo .. hi`` of ``parts`` (the ``g1`` word) and runs only those iterations
(``kernel.py``, ``KernelLowering.lower_loop_plain``); ``lo=0, hi=1, g1=1``, the words of every ordinary
launch, mean the whole loop, so a split-capable variant runs unsplit wherever it is called as before. The
runtime (``trnlang.runtime.launch``, ``jit.py``) times the first runs of a launch and splits it only when it
is long enough to pay for the handoff.

The loop chosen is the one ``affine_range`` statement at the top level of a kernel of grid ``(1,)``, when:

- it is the last statement: nothing after it reads what it wrote;
- the statements before it (run again by every part, each in its own scratch arena) write no HBM tensor,
  and read none the loop writes;
- its step is a positive constant, and its matmul tiles are not collapsed into one gemm call;
- no instruction in it writes an on-chip buffer allocated before it (an accumulator carried across
  iterations: NKI's associative reductions, which a split would cut into per-thread partial results);
- every HBM store in it is a plain (not gathered, not accumulating) store whose index moves with the loop
  variable, and every access to a tensor it stores to does too;
- the kernel prints nothing (``device_print`` keeps its order), has no HBM scratch tensor, is not a debug
  build, and no written argument may alias another.

Everything else is compiled as before (``split_loop`` returns None).

Example:
    >>> import torch
    >>> from tests.kernels import softmax
    >>> from codegen.lowering.plan import Plan
    >>> k = softmax.trace(torch.randn(300, 64), torch.empty(300, 64))
    >>> split_loop(Plan(k, (1,))) is k.body[-1]
    True
"""

from __future__ import annotations

from typing import Any

import sympy

from trnlang.ir.nodes import Access, Buf, Instr, Loop, Region, instrs
from trnlang.ir.ops import Op

__all__ = ["split_loop"]


def _moves(acc: Access, var: sympy.Symbol) -> bool:
    return any(var in sympy.sympify(e).free_symbols for e in acc.index)


def _candidate(plan: Any) -> Loop | None:
    """The kernel's last statement when it is a splittable ``affine_range`` of a grid-(1,) plain variant."""
    k = plan.kernel
    total = 1
    for g in tuple(plan.grid) or (1,):
        total *= int(g)
    if total != 1 or plan.may_alias or plan.debug or k.scratch or not k.body:
        return None
    lp = k.body[-1]
    if not isinstance(lp, Loop) or lp.kind != "affine" or id(lp) in plan.gemms:
        return None
    step = sympy.sympify(lp.step)
    if not (step.is_Integer and int(step) > 0):
        return None
    if any(isinstance(s, Loop) and s.kind == "affine" for s in k.body[:-1]):
        return None  # an earlier loop: not "the" outermost loop of the kernel's work
    return lp


def _prefix(pre: list[Instr]) -> tuple[set[int], set[int]] | None:
    """(buffers the prefix allocates, tensors it reads), or None when it stores to HBM."""
    bufs: set[int] = set()
    reads: set[int] = set()
    for ins in pre:
        for o in ins.outs:
            if isinstance(o, Access):
                return None
            if isinstance(o, Buf):
                bufs.add(id(o))
        reads.update(id(a.tensor) for a in ins.ins if isinstance(a, Access))
    return bufs, reads


def _stored(body: list[Instr], var: sympy.Symbol, outer_bufs: set[int]) -> set[int] | None:
    """The tensors the loop stores to, or None when a store or an on-chip write forbids the split."""
    stored: set[int] = set()
    for ins in body:
        for o in ins.outs:
            if isinstance(o, Access):
                if o.gathers or ins.attrs.get("accumulate") is not None or not _moves(o, var):
                    return None
                stored.add(id(o.tensor))
            elif isinstance(o, Region) and id(o.buf) in outer_bufs:
                return None  # carried across iterations
    return stored


def split_loop(plan: Any) -> Loop | None:
    """The top-level ``affine_range`` loop of ``plan.kernel`` the runtime may split across threads, or None.

    ``plan``: the lowering plan of the variant (``codegen.lowering.plan.Plan``: kernel, grid, aliasing, debug,
    collapsed gemms). The conditions are in the module docstring.
    """
    lp = _candidate(plan)
    if lp is None:
        return None
    pre, body = instrs(plan.kernel.body[:-1]), instrs(lp.body)
    if any(i.op is Op.PRINT for i in pre + body):
        return None
    got = _prefix(pre)
    if got is None:
        return None
    outer_bufs, pre_reads = got
    stored = _stored(body, lp.var, outer_bufs)
    if stored is None or stored & pre_reads:
        return None
    for ins in body:  # every access to a stored tensor moves with the loop
        for a in (*ins.ins, *ins.outs):
            if isinstance(a, Access) and id(a.tensor) in stored and not _moves(a, lp.var):
                return None
    return lp
