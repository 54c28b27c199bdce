"""Loop-carried dependences inside ``affine_range`` loops (a verifier diagnostic).

An ``affine_range`` promises independent iterations: the scheduler and the simulator may overlap them, so
a value that flows from one iteration to the next through an on-chip buffer gives a schedule (and a
simulated time) that does not match the program, although the host runs the iterations in order. The
check is conservative: it reports an instruction that reads, at a place that does not move with the loop
variable, a buffer allocated outside the loop which an instruction later in the same loop body writes at
an overlapping place (so each iteration reads what the previous one wrote). In-place accumulation (an
instruction reading and writing the same region, ``acc += x``; matmul accumulation into PSUM) is NKI's
allowed associative reduction and is not reported.

Example:
    >>> import numpy as np, warnings, trnlang as trn, trnlang.language as tl
    >>> @trn.kernel
    ... def running(x, out):
    ...     acc = tl.zeros((4, 8), tl.float32)
    ...     for i in tl.affine_range(3):
    ...         t = acc + tl.load(x[i, 0:4, 0:8])   # reads what the previous iteration wrote
    ...         acc[...] = t
    ...     tl.store(out[0:4, 0:8], acc)
    >>> with warnings.catch_warnings(record=True) as w:
    ...     warnings.simplefilter("always")
    ...     running(np.ones((3, 4, 8), np.float32), np.zeros((4, 8), np.float32))
    >>> "sequential_range" in str(w[0].message)
    True
"""

from __future__ import annotations

import warnings
from typing import Any

import sympy

from trnlang.ir.nodes import Buf, Instr, Kernel, Loop, Region, SourceLoc, walk
from trnlang.ir.ops import Op

__all__ = ["CarriedDependenceWarning", "carried_dependences", "warn_carried_dependences"]


class CarriedDependenceWarning(UserWarning):
    """An ``affine_range`` loop whose iterations depend on each other through an on-chip buffer."""


def _moves(r: Region, var: sympy.Symbol) -> bool:
    return any(var in sympy.sympify(s).free_symbols for s in r.starts)


def _may_overlap(a: Region, b: Region) -> bool:
    for sa, za, sb, zb in zip(a.starts, a.sizes, b.starts, b.sizes):
        d = sympy.expand(sympy.sympify(sa) - sympy.sympify(sb))
        if d.is_number and (int(d) >= zb or -int(d) >= za):
            return False
    return True


def _in_place(ins: Instr, r: Region) -> bool:
    """Reads ``r`` and writes it in the same instruction (``acc += x``), or accumulates a matmul."""
    if ins.op is Op.MATMUL:
        return True
    return any(isinstance(o, Region) and o.buf is r.buf and o.starts == r.starts and o.sizes == r.sizes
               for o in ins.outs)


def _loop_problems(lp: Loop) -> list[tuple[SourceLoc | None, str]]:
    body = [s for s, _ in walk(lp.body) if isinstance(s, Instr)]
    inner: set[int] = {id(s.outs[0]) for s in body if s.op is Op.ALLOC}
    out: list[tuple[SourceLoc | None, str]] = []
    for pos, ins in enumerate(body):
        for r in ins.ins:
            if not isinstance(r, Region) or id(r.buf) in inner or _moves(r, lp.var) or _in_place(ins, r):
                continue
            for later in body[pos:]:
                w = next((o for o in later.outs if isinstance(o, Region) and o.buf is r.buf
                          and not _moves(o, lp.var) and _may_overlap(o, r) and later is not ins), None)
                if w is not None:
                    where = f" (written at line {later.loc.lineno})" if later.loc is not None else ""
                    out.append((ins.loc, f"loop-carried dependence in affine_range: this instruction reads buffer "
                                         f"{_name(r.buf)} that a later instruction of the same loop body "
                                         f"writes{where}, so each iteration depends on the previous one; use "
                                         "sequential_range for this loop (affine_range iterations must be "
                                         "independent: the schedule and the simulated time assume so)"))
                    break
            else:
                continue
            break
    return out


def _name(b: Buf) -> str:
    return f"'{b.name}' (allocated at line {b.loc.lineno})" if b.loc is not None else f"'{b.name}'"


def carried_dependences(k: Kernel) -> list[tuple[SourceLoc | None, str]]:
    """(source line, message) of every instruction that carries a value across ``affine_range`` iterations."""
    found: list[tuple[SourceLoc | None, str]] = []
    for s, _ in walk(k.body):
        if isinstance(s, Loop) and s.kind == "affine":
            found.extend(_loop_problems(s))
    return found


_SEEN: dict[Any, Any] = {}


def warn_carried_dependences(k: Kernel) -> None:
    """Warn (``CarriedDependenceWarning``, at the user's line, once per line) for each carried dependence."""
    for loc, msg in carried_dependences(k):
        if loc is None:  # a kernel built or parsed without source lines: nothing to point at
            continue
        text = f"{msg}\n    {loc.text.strip()}"
        warnings.warn_explicit(text, CarriedDependenceWarning, loc.filename, loc.lineno, registry=_SEEN)
