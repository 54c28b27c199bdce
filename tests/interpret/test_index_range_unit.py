"""Index-range checks on hand-built IR (trnlang.ir.index_range): which instructions are index producers, and
the interpreter's checks of them (the JIT runs the same kernels: both must raise at the producer's line).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.interpret.kbuild import (
    A1,
    G0,
    I32,
    Imm,
    Op,
    acc,
    alloc,
    hbm,
    here,
    instr,
    kernel,
    load,
    sbuf,
    store,
    whole,
)
from trnlang.frontend.errors import BoundsError
from trnlang.interpret.interpreter import run_kernel as interp_run
from trnlang.ir.index_range import index_producers
from trnlang.ir.ops import Alu
from trnlang.ir.types import DType
from trnlang.runtime.jit import run_kernel as jit_run

RUN = {"interp": interp_run, "jit": jit_run}
I64 = DType.int64


def _chain(ops, idx_dt=I32, rows=8):
    """idx -> it; then each (op, operands...) writes a fresh index tile; out[i, :] = x[last[i], :].

    ``ops``: (Op, attrs, further operands) applied to the previous tile. Returns (kernel, instructions by name).
    """
    x, idx, o = hbm("x", (rows, 2)), hbm("idx", (3, 1), idx_dt), hbm("out", (3, 2), kind="out")
    it = sbuf("it", (3, 1), I32)
    named = {"load": load(whole(it), acc(idx, (3, 1)), other=0, loc=here())}
    body = [alloc(it), named["load"]]
    prev = it
    for k, (op, attrs, extra) in enumerate(ops):
        t = sbuf(f"u{k}", (3, 1), I32)
        ins = (whole(prev), *extra)
        named[f"op{k}"] = instr(op, (whole(t),), ins, loc=here(), **attrs)
        body += [alloc(t), named[f"op{k}"]]
        prev = t
    t = sbuf("t", (3, 2))
    body += [alloc(t), load(whole(t), acc(x, (3, 2), index=(G0, A1), gathers=(whole(prev),)), other=0.0),
             store(acc(o, (3, 2)), whole(t))]
    return kernel([x, idx], [o], body), named


def _run(mode, k, idx, rows=8):
    xv = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2)
    out = np.full((3, 2), -1.0, np.float32)
    RUN[mode](k, [xv, idx, out])
    return xv, out


def _ts(op0, s, op1=None, s1=None, reverse=(False, False)):
    attrs = {"op0": op0, "op1": op1, "reverse": reverse}
    return (Op.TENSOR_SCALAR, attrs, (Imm(s),) if op1 is None else (Imm(s), Imm(s1)))


def test_producers_follow_magnitude_keeping_ops_and_stop_at_hashes():
    k, named = _chain([_ts(Alu.multiply, 4), _ts(Alu.maximum, 0), _ts(Alu.add, 1)], idx_dt=I64)
    got = index_producers(k)
    assert {n for n, i in named.items() if id(i) in got} == {"load", "op0", "op2"}  # max is passed, not checked
    k, named = _chain([_ts(Alu.multiply, 4), _ts(Alu.bitwise_and, 7)], idx_dt=I64)
    assert index_producers(k) == frozenset()  # a masked hash: wraps on purpose
    k, named = _chain([_ts(Alu.multiply, 4)], idx_dt=I32)
    assert {n for n, i in named.items() if id(i) in index_producers(k)} == {"op0"}  # an int32 load cannot narrow


@pytest.mark.parametrize("mode", ["interp", "jit"])
def test_overflow_through_a_clamp_raises_at_the_multiply(mode):
    k, named = _chain([_ts(Alu.multiply, 4), _ts(Alu.minimum, 7)])
    with pytest.raises(BoundsError, match="integer multiply overflows int32") as e:
        _run(mode, k, np.array([[0], [1], [2**30 + 1]], np.int32))  # 4 * i would wrap to 4: min(4, 7) reads row 4
    assert e.value.loc == named["op0"].loc
    xv, out = _run(mode, k, np.array([[0], [1], [5]], np.int32))
    np.testing.assert_array_equal(out, xv[[0, 4, 7]])


@pytest.mark.parametrize("mode", ["interp", "jit"])
def test_reversed_scalar_subtract_and_two_op_tensor_scalar(mode):
    k, named = _chain([_ts(Alu.subtract, 7, reverse=(True, False))])  # 7 - i
    xv, out = _run(mode, k, np.array([[7], [0], [3]], np.int32))
    np.testing.assert_array_equal(out, xv[[0, 7, 4]])
    with pytest.raises(BoundsError, match="integer subtract overflows int32") as e:
        _run(mode, k, np.array([[7], [-2**31 + 3], [3]], np.int32))  # 7 + 2**31 - 3 would wrap to -2**31 + 4
    assert e.value.loc == named["op0"].loc
    k, named = _chain([_ts(Alu.add, 2**31 - 1, Alu.subtract, 2**31 - 2)])  # i + (2**31 - 1) - (2**31 - 2) = i + 1
    xv, out = _run(mode, k, np.array([[-1], [0], [-1]], np.int32))
    np.testing.assert_array_equal(out, xv[[0, 1, 0]])
    with pytest.raises(BoundsError, match="integer add/subtract overflows int32") as e:
        _run(mode, k, np.array([[0], [1], [2]], np.int32))  # wraps in op0 and back in op1: rows 1 2 3 otherwise
    assert e.value.loc == named["op0"].loc


@pytest.mark.parametrize("mode", ["interp", "jit"])
def test_tensor_tensor_and_select_values_are_followed(mode):
    rows = 8
    x, idx, o = hbm("x", (rows, 2)), hbm("idx", (3, 1), I64), hbm("out", (3, 2), kind="out")
    it, u, v, w = (sbuf(n, (3, 1), I32) for n in ("it", "u", "v", "w"))
    lo = here()
    ld = load(whole(it), acc(idx, (3, 1)), other=0, loc=lo)
    add = instr(Op.TENSOR_TENSOR, (whole(u),), (whole(it), whole(it)), op=Alu.add, loc=here())
    cond = instr(Op.TENSOR_SCALAR, (whole(v),), (whole(u), Imm(0)), op0=Alu.less, loc=here())
    sel = instr(Op.SELECT, (whole(w),), (whole(v), Imm(0), whole(u)), loc=here())
    t = sbuf("t", (3, 2))
    body = [alloc(b) for b in (it, u, v, w, t)] + [
        ld, add, cond, sel, load(whole(t), acc(x, (3, 2), index=(G0, A1), gathers=(whole(w),)), other=0.0),
        store(acc(o, (3, 2)), whole(t))]
    k = kernel([x, idx], [o], body)
    assert index_producers(k) == frozenset({id(ld), id(add)})  # the comparison only feeds the condition
    xv = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2)
    out = np.zeros((3, 2), np.float32)
    RUN[mode](k, [xv, np.array([[1], [-4], [3]]), out])  # 2 * i, negatives clamped to 0 by the select
    np.testing.assert_array_equal(out, xv[[2, 0, 6]])
    with pytest.raises(BoundsError, match="integer add overflows int32") as e:
        RUN[mode](k, [xv, np.array([[1], [2**30 + 2], [3]]), out])  # 2 * i wraps to -2**31 + 4: row 0
    assert e.value.loc == add.loc
    with pytest.raises(BoundsError, match="loaded from int64 tensor idx does not fit int32") as e:
        RUN[mode](k, [xv, np.array([[1], [-2**32 + 2], [3]]), out])  # low word 2: would read row 4
    assert e.value.loc == lo
