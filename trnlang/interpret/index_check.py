"""Index-range checks of the interpreter (see ``trnlang.ir.index_range``).

``check_index_range(c, ins)`` runs before an index producer executes (so a failing
instruction writes nothing): a load from an int64 tensor must give values that fit
int32, integer add / subtract / multiply must not overflow int32. Both raise
``BoundsError`` with the instruction's source line, the message of
``trnlang.ir.index_range`` (the JIT raises the same) plus the value and tile element.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from trnlang.interpret import alu
from trnlang.ir.index_range import (
    INT32_MAX,
    INT32_MIN,
    checked_ops,
    narrowing_load,
    narrowing_message,
    overflow_message,
)
from trnlang.ir.nodes import Access, Instr
from trnlang.ir.ops import Alu, Op

if TYPE_CHECKING:
    from trnlang.interpret.interpreter import _Ctx

_EXACT = {Alu.add: np.add, Alu.subtract: np.subtract, Alu.multiply: np.multiply}


def check_index_range(c: _Ctx, ins: Instr) -> None:
    """Raise ``BoundsError`` if index producer ``ins`` would narrow or wrap a value (it has not run yet)."""
    src = ins.ins[0] if ins.ins else None
    if narrowing_load(ins) and isinstance(src, Access):
        vals, mask = c.load(src)
        _fits(c, ins, vals.astype(np.int64), mask, narrowing_message(ins))
        return
    checked = checked_ops(ins)
    if not checked:
        return
    shape = ins.outs[0].shape
    if ins.op is Op.TENSOR_TENSOR:
        a, b = (c.operand(x, shape) for x in ins.ins)
        _step(c, ins, ins.attrs["op"], a, b, checked)
        return
    t = c.operand(ins.ins[0], shape)
    reverse = tuple(ins.attrs.get("reverse") or (False, False))
    for k, key in enumerate(("op0", "op1")):
        op = ins.attrs.get(key)
        if op is None or len(ins.ins) <= k + 1:
            return  # the handler reports a missing operand
        s = c.operand(ins.ins[k + 1], shape)
        a, b = (s, t) if reverse[k] else (t, s)
        _step(c, ins, op, a, b, checked)
        t = alu.binary(op, a, b)


def _step(c: _Ctx, ins: Instr, op: Alu, a: np.ndarray, b: np.ndarray, checked: frozenset[Alu]) -> None:
    if op not in checked or alu.is_float(a.dtype) or alu.is_float(b.dtype):
        return
    exact = _EXACT[op](a.astype(np.int64), b.astype(np.int64))
    _fits(c, ins, exact, None, overflow_message(ins))


def _fits(c: _Ctx, ins: Instr, v: np.ndarray, mask: np.ndarray | None, msg: str) -> None:
    bad = (v < INT32_MIN) | (v > INT32_MAX)
    if mask is not None:
        bad &= mask
    if bad.any():
        pos = tuple(int(p) for p in np.argwhere(bad)[0])
        raise c.bounds_error(f"{msg} (value {int(v[pos])} at tile element {list(pos)} of "
                             f"{list(v.shape)}; {int(bad.sum())} element(s))")
