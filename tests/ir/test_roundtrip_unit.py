"""Round trip of the IR text form: parse(print(k)) == k structurally, and print(parse(print(k))) == print(k)."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

from trnlang.ir.equality import kernel_diff, kernels_equal, values_equal
from trnlang.ir.nodes import (
    Access,
    Buf,
    HbmTensor,
    Imm,
    Instr,
    Kernel,
    Loop,
    Region,
    SourceLoc,
    axis_sym,
    gather_sym,
    instrs,
    pid_sym,
    sym,
)
from trnlang.ir.ops import OP_SPECS, Alu, Op
from trnlang.ir.parser import ParseError, parse_kernel
from trnlang.ir.printer import print_instr, print_kernel
from trnlang.ir.types import DType, Engine, Space

F32, I32 = DType.float32, DType.int32
SB, PS = Space.SBUF, Space.PSUM
i0, i1, pid0, pid1 = sym("i0"), sym("i1"), pid_sym(0), pid_sym(1)
a0, a1, g0 = axis_sym(0), axis_sym(1), gather_sym(0)
Z = sympy.Integer(0)


def loc(n: int) -> SourceLoc:
    return SourceLoc("kernels/k.py", n, "kern")


def roundtrip(k: Kernel) -> Kernel:
    """Assert both round-trip properties; return the parsed kernel."""
    text = print_kernel(k)
    k2 = parse_kernel(text)
    diff = kernel_diff(k, k2)
    assert diff is None, f"{diff}\n{text}"
    assert kernels_equal(k, k2)
    assert print_kernel(k2) == text
    return k2


def reg(buf: Buf, *dims: tuple) -> Region:
    """Region from (start, size) pairs (kept dims) and bare starts (dropped dims)."""
    starts, sizes, keep = [], [], []
    for d in dims:
        if isinstance(d, tuple):
            starts.append(sympy.sympify(d[0]))
            sizes.append(d[1])
            keep.append(True)
        else:
            starts.append(sympy.sympify(d))
            sizes.append(1)
            keep.append(False)
    return Region(buf, tuple(starts), tuple(sizes), tuple(keep))


W = Region.whole


class _Builder:
    """Collects statements; ``alloc`` returns a Buf and records its ALLOC."""

    def __init__(self) -> None:
        self.body: list = []
        self.line = 100

    def alloc(self, name: str, shape: tuple[int, ...], dtype: DType = F32, space: Space = SB) -> Buf:
        self.line += 1
        b = Buf(name, shape, dtype, space, loc(self.line))
        self.body.append(Instr(Op.ALLOC, (b,), (), {}, None, loc(self.line)))
        return b

    def add(self, kind: Op, outs: tuple, ins: tuple, engine: Engine | None = None, /, **attrs: object) -> Instr:
        self.line += 1
        ins_ = Instr(kind, outs, ins, dict(attrs), engine, loc(self.line))
        self.body.append(ins_)
        return ins_


def kitchen_sink() -> Kernel:
    """A kernel using every op, nested loops with dependent bounds, a 2-D grid, outputs and scratch."""
    x = HbmTensor("x", (1000, 64), F32, loc=loc(1))
    idx = HbmTensor("idx", (1000,), DType.int64, loc=loc(1))
    w = HbmTensor("w", (64, 4, 128), DType.bfloat16)
    out = HbmTensor("out", (1000, 64), F32, kind="out", space=Space.SHARED_HBM, loc=loc(2))
    red = HbmTensor("red", (1000, 1), F32, kind="out")
    scr = HbmTensor("scr", (3, 128, 64), F32, kind="scratch")
    rows = 128 * i0 + a0
    b = _Builder()
    t_idx = b.alloc("t_idx", (128, 1), I32)
    b.add(Op.DMA_COPY, (W(t_idx),), (Access(idx, (128, 1), (rows,), (), rows < 1000),), Engine.DMA, other=0)
    t_x = b.alloc("t_x", (128, 64))
    gmask = sympy.And(rows < 1000, a1 < 64 - pid1)
    b.add(Op.DMA_COPY, (W(t_x),), (Access(x, (128, 64), (g0, a1), (W(t_idx),), gmask),), Engine.DMA,
          other=float("nan"))
    t_bias, t_sum, t_y = b.alloc("t_bias", (128, 1)), b.alloc("t_sum", (128, 4)), b.alloc("t_y", (128, 64))
    b.add(Op.MEMSET, (W(t_bias),), (), Engine.GPSIMD, value=float("-inf"))
    b.add(Op.ACTIVATION, (W(t_y), reg(t_sum, (0, 128), (i0 % 4, 1))), (W(t_x), W(t_bias)), Engine.SCALAR,
          func=Alu.exp, scale=0.5, reduce_op=Alu.add)
    b.add(Op.ACTIVATION, (W(t_y),), (W(t_y), Imm(0.25)), Engine.VECTOR, func=Alu.gelu_tanh, scale=1.0,
          reduce_op=None)
    b.add(Op.TENSOR_TENSOR, (W(t_y),), (W(t_y), W(t_x)), Engine.VECTOR, op=Alu.multiply)
    b.add(Op.TENSOR_SCALAR, (W(t_y),), (W(t_y), Imm(1.0), reg(t_sum, (0, 128), (0, 1))), Engine.VECTOR,
          op0=Alu.subtract, op1=Alu.maximum, reverse=(True, False))
    t_max = b.alloc("t_max", (128, 1))
    b.add(Op.TENSOR_REDUCE, (W(t_max),), (W(t_y),), Engine.VECTOR, op=Alu.maximum, axes=(1,), keepdims=True)
    t_r = b.alloc("t_r", (128, 8, 8), DType.bfloat16)
    b.add(Op.TENSOR_COPY, (W(t_r),), (W(t_y),), Engine.SCALAR, reshape=True)
    t_m = b.alloc("t_m", (128, 64), DType.bool_)
    b.add(Op.MEMSET, (W(t_m),), (), Engine.VECTOR, value=True)
    b.add(Op.SELECT, (W(t_y),), (W(t_m), W(t_x), Imm(float("-inf"))), Engine.VECTOR)
    b.add(Op.SELECT, (W(t_m),), (W(t_m), Imm(False), Imm(True)), Engine.GPSIMD)
    t_io = b.alloc("t_io", (128, 64), I32)
    b.add(Op.IOTA, (W(t_io),), (), Engine.GPSIMD, expr=sympy.Ge(rows, a1 + pid0))
    b.add(Op.IOTA, (W(t_io),), (), Engine.GPSIMD, expr=64 * a0 + a1 - 3 * pid1)
    b.add(Op.TENSOR_SCALAR, (W(t_io),), (W(t_io), Imm(3)), Engine.GPSIMD, op0=Alu.bitwise_and, op1=None,
          reverse=(False, False))
    pred = sympy.And(a1 <= rows, sympy.Not(sympy.Eq(sympy.Mod(a1, 2), 1)))
    b.add(Op.AFFINE_SELECT, (W(t_y),), (W(t_x), Imm(float("inf"))), Engine.GPSIMD, pred=pred)
    outer_body = b.body
    # inner loop with bounds depending on i0; regions indexed by loop variables, dims kept and dropped
    inner = _Builder()
    inner.line = 200
    t_w = inner.alloc("t_w", (64, 4, 128), DType.bfloat16)
    inner.add(Op.DMA_COPY, (W(t_w),), (Access(w, (64, 4, 128), (a0, i1 - 2 * i0, sympy.Symbol("_a2", integer=True)),),),
              Engine.DMA)
    t_mv = inner.alloc("t_mv", (64, 32))
    inner.add(Op.TRANSPOSE, (W(t_mv),), (reg(t_x, (0, 32), (2 * i1 - 4 * i0, 64)),), Engine.TENSOR)
    acc = inner.alloc("acc", (128, 32), F32, PS)
    inner.add(Op.MATMUL, (W(acc),), (reg(t_w, (0, 64), i1 - 2 * i0, (0, 128)), W(t_mv)), Engine.TENSOR,
              accumulate=True)
    inner.add(Op.SCAN, (reg(t_y, (0, 128), (32 * (i1 % 2), 32)),), (W(acc), reg(t_x, (0, 128), (0, 32)), Imm(0.0)),
              Engine.VECTOR, op0=Alu.multiply, op1=Alu.add)
    inner_loop = Loop("sequential", i1, 2 * i0, sympy.Min(2 * i0 + 4, 9), 2, inner.body, loc(199))
    outer_body.append(inner_loop)
    b.body = outer_body
    t_st, t_ag = b.alloc("t_st", (128, 6)), b.alloc("t_ag", (128, 2))
    b.add(Op.BN_STATS, (reg(t_st, (0, 128), (0, 3)),), (reg(t_x, (0, 128), (0, 32)),), Engine.VECTOR)
    b.add(Op.BN_STATS, (reg(t_st, (0, 128), (3, 3)),), (reg(t_x, (0, 128), (32, 32)),), Engine.VECTOR)
    b.add(Op.BN_AGGR, (W(t_ag),), (W(t_st),), Engine.VECTOR)
    b.add(Op.DMA_COPY, (Access(out, (128, 64), (rows, a1), (), rows < 1000),), (W(t_y),), Engine.DMA)
    b.add(Op.DMA_COPY, (Access(red, (128, 1), (rows, 0 * a1), (), rows < 1000),), (W(t_max),), Engine.DMA)
    b.add(Op.DMA_COPY, (Access(scr, (128, 64), (pid1, a0, a1)),), (W(t_x),), Engine.DMA)
    b.add(Op.PRINT, (), (reg(t_ag, (0, 128), 1),), Engine.HOST, label='he said "hi" // not a comment\n\t\\')
    loop = Loop("affine", i0, Z, sympy.Integer(8), sympy.Integer(1), b.body, loc(99))
    return Kernel("kitchen_sink", [x, idx, w], (2, 3), [loop], [out, red], [scr], "trn2", loc(0))


# ----------------------------------------------------------------------------- round trips


def test_kitchen_sink_roundtrip() -> None:
    roundtrip(kitchen_sink())


def test_kitchen_sink_covers_every_op() -> None:
    assert {ins.op for ins in instrs(kitchen_sink().body)} == set(OP_SPECS)


def test_parsed_kernel_uses_integer_syms_and_shares_buffers() -> None:
    k2 = roundtrip(kitchen_sink())
    loop = k2.body[0]
    assert loop.var == sym("i0") and loop.var.is_integer
    inner = next(s for s in loop.body if isinstance(s, Loop))
    assert inner.kind == "sequential" and inner.start == 2 * i0 and inner.stop == sympy.Min(2 * i0 + 4, 9)
    allocs = {ins.outs[0].name: ins.outs[0] for ins in instrs(k2.body) if ins.op is Op.ALLOC}
    for ins in instrs(k2.body):
        for o in (*ins.outs, *ins.ins):
            if isinstance(o, Region):
                assert o.buf is allocs[o.buf.name]
                assert all(s.is_integer for e in o.starts for s in e.free_symbols)
            if isinstance(o, Access):
                assert o.tensor in k2.tensors
                assert all(g.buf is allocs[g.buf.name] for g in o.gathers)


def test_printed_text_is_readable() -> None:
    text = print_kernel(kitchen_sink())
    assert "kernel @kitchen_sink grid [2, 3] target trn2 {" in text
    assert "param %idx: hbm i64[1000]" in text
    assert "output %out: shared_hbm f32[1000, 64]" in text
    assert "scratch %scr: hbm f32[3, 128, 64]" in text
    assert "affine_range %i0 = 0 to 8 step 1 {" in text
    assert "sequential_range %i1 = 2*i0 to Min(9, 2*i0 + 4) step 2 {" in text
    assert "%t_w[0:64, -2*i0 + i1, 0:128]" in text
    assert "%t_x[0:32, -4*i0 + 2*i1:-4*i0 + 2*i1 + 64]" in text
    assert "loc(" not in text
    assert "gather(%t_idx[0:128, 0:1]) mask(" in text
    assert "{op = maximum, axes = (1,), keepdims = true}" in text
    assert "<- %t_y[0:128, 0:64], 1.0, %t_sum[0:128, 0:1] {op0 = subtract, op1 = maximum, reverse = (true, false)}" \
        in text
    assert "// kernels/k.py:101 kern" in text
    assert "device_print[host] <- %t_ag[0:128, 1] {label = " in text


def test_print_instr() -> None:
    t = Buf("t", (128, 4), F32, SB)
    ins = Instr(Op.MEMSET, (reg(t, (0, 128), i0),), (), {"value": 0.0}, Engine.VECTOR)
    assert print_instr(ins) == "memset[vector] %t[0:128, i0] {value = 0.0}"


def _one_instr_kernel(*stmts: Instr | Loop, params: list | None = None, **kw: object) -> Kernel:
    return Kernel(kw.pop("name", "k"), params or [], kw.pop("grid", (1,)), list(stmts), **kw)


def test_empty_kernel_and_grids() -> None:
    roundtrip(Kernel("empty", [], (), []))
    roundtrip(Kernel("g3", [], (4, 5, 6), [], target="trn1"))


def test_duplicate_names_keep_identity() -> None:
    x1, x2 = HbmTensor("x", (4, 4), F32), HbmTensor("x", (4, 4), F32)
    b1, b2, b3 = Buf("x", (4, 4), F32, SB), Buf("t", (4, 4), F32, SB), Buf("t", (4, 4), I32, SB)
    body = [Instr(Op.ALLOC, (b,), ()) for b in (b1, b2, b3)]
    body += [Instr(Op.DMA_COPY, (W(b),), (Access(t, (4, 4), (a0, a1)),), {}, Engine.DMA)
             for b, t in ((b1, x1), (b2, x2), (b3, x1))]
    body.append(Instr(Op.TENSOR_COPY, (W(b3),), (W(b2),), {"reshape": False}, Engine.VECTOR))
    k = Kernel("dups", [x1, x2], (1,), body)
    text = print_kernel(k)
    assert "%x#1" in text and "%t#1" in text
    k2 = roundtrip(k)
    assert k2.body[3].ins[0].tensor is k2.params[0] and k2.body[4].ins[0].tensor is k2.params[1]
    assert k2.body[6].outs[0].buf is k2.body[2].outs[0]


def test_odd_names_locations_and_kinds() -> None:
    odd = SourceLoc('C:\\dir with space/"q".py', 7, "my func")
    x = HbmTensor("in put", (sym("N"), sympy.Max(sym("M"), 1)), F32, kind="inout", loc=odd)
    b = Buf("b'uf\u00e9#1", (128, 2), F32, SB, SourceLoc("a//b.py", 3, "<lambda>"))
    c = Buf("c", (128, 2), F32, PS, None)
    body = [Instr(Op.ALLOC, (b,), (), {}, None, SourceLoc("", 0)),
            Instr(Op.ALLOC, (c,), (), {"note": "x"}, Engine.GPSIMD, odd),
            Instr(Op.DMA_COPY, (W(b),), (Access(x, (128, 2), (a0 + sym("N") - 128, a1)),), {}, None, odd)]
    k = Kernel("k:with:colons", [x], (2,), body, target="trn 2", loc=SourceLoc("k.py", 1, ""))
    roundtrip(k)


def test_dropped_dims_with_size() -> None:
    t = Buf("t", (128, 8, 16), F32, SB)
    r = Region(t, (Z, 2 * i0, Z), (128, 2, 16), (True, False, True))
    k = _one_instr_kernel(Instr(Op.ALLOC, (t,), ()), Instr(Op.MEMSET, (r,), (), {"value": 1.0}, Engine.VECTOR))
    assert ":drop" in print_kernel(k)
    roundtrip(k)


def test_srepr_fallback_for_unparseable_exprs() -> None:
    weird = sympy.Symbol("q") + sympy.Function("f")(i0)  # non-integer symbol, undefined function
    t = Buf("t", (128, 4), I32, SB)
    k = _one_instr_kernel(Instr(Op.ALLOC, (t,), ()), Instr(Op.IOTA, (W(t),), (), {"expr": weird}, Engine.GPSIMD))
    assert "srepr(" in print_kernel(k)
    roundtrip(k)


_ATTR_VALUES = [
    None, True, False, 0, -5, 2**70, 1.5, -0.0, 0.1, 1e-300, 5e-324, 1e300, float("nan"), float("inf"),
    float("-inf"), "", 'a"b\\c\nd//e', "\u00fcn\u00efc\u00f6de \U0001f600", (), (1,), (1, (2.0, "x")),
    [1, [True, None]], Alu.gelu, Alu.abs, Engine.GPSIMD, DType.int64, Space.PSUM, Op.MATMUL,
    sympy.Integer(3), 2 * i0 + 1, sympy.Rational(1, 3), sympy.floor(i0 / 3) + sympy.Mod(i1, 4),
    sympy.Min(i0, pid0), sympy.Piecewise((1, a0 < 2), (0, True)), sympy.Or(sympy.Eq(a0, a1), sympy.Ne(a0, 2)),
    sympy.Xor(a0 < 1, a1 < 2), sympy.Not(a0 > i0), sympy.true, sympy.false, np.float32(0.1), np.int64(4),
    np.bool_(True),
]


@pytest.mark.parametrize("value", _ATTR_VALUES, ids=[repr(v)[:30] for v in _ATTR_VALUES])
def test_attr_value_roundtrip(value: object) -> None:
    t = Buf("t", (1, 1), F32, SB)
    k = _one_instr_kernel(Instr(Op.ALLOC, (t,), ()),
                          Instr(Op.MEMSET, (W(t),), (), {"value": value, "odd key": value}, Engine.VECTOR))
    roundtrip(k)


def _imm_kernel(v: object, label: str = "", filename: str = "f.py", func: str = "") -> Kernel:
    t = Buf("t", (2, 2), F32, SB)
    where = SourceLoc(filename, 1, func)
    return _one_instr_kernel(
        Instr(Op.ALLOC, (t,), ()),
        Instr(Op.SELECT, (W(t),), (W(t), Imm(v), W(t)), {}, Engine.VECTOR, where),
        Instr(Op.PRINT, (), (W(t),), {"label": label}, Engine.HOST, where))


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.booleans()))
def test_imm_roundtrip_hypothesis(v: object) -> None:
    k2 = roundtrip(_imm_kernel(v))
    got = k2.body[1].ins[1].value
    assert type(got) is type(v)
    assert values_equal(got, v)


@settings(max_examples=100, deadline=None)
@given(st.text(), st.text(min_size=1), st.text())
def test_strings_roundtrip_hypothesis(label: str, filename: str, func: str) -> None:
    roundtrip(_imm_kernel(1.0, label, filename, func))


_terms = st.tuples(st.integers(-300, 300), st.sampled_from([i0, i1, pid0, a0, a1, sympy.Integer(1)]))


@settings(max_examples=80, deadline=None)
@given(st.lists(_terms, min_size=1, max_size=5), st.integers(1, 7), st.sampled_from(["lin", "floor", "mod", "cmp"]))
def test_expr_roundtrip_hypothesis(terms: list, div: int, kind: str) -> None:
    e = sum((c * s for c, s in terms), sympy.Integer(0))
    start = {"lin": e, "floor": sympy.floor(e / div), "mod": sympy.Mod(e, div) + e, "cmp": e}[kind]
    t = Buf("t", (128, 64), F32, SB)
    x = HbmTensor("x", (1000, 64), F32)
    acc = Access(x, (128, 64), (start, a1), (), sympy.Lt(e, div) if kind == "cmp" else None)
    k = _one_instr_kernel(
        Loop("affine", i0, e - e + start, start + 8, div, [
            Instr(Op.ALLOC, (t,), ()),
            Instr(Op.DMA_COPY, (reg(t, (0, 128), (start, 4)),), (acc,), {}, Engine.DMA),
        ]), params=[x])
    roundtrip(k)


# ----------------------------------------------------------------------------- errors and equality


@pytest.mark.parametrize("text,line,msg", [
    ("kernel @k grid [1] target trn2 {\n  memset[vector] %t[0:1] {value = 0.0}\n}\n", 2, "undeclared"),
    ("kernel @k grid [1] target trn2 {\n\n  frobnicate %t\n}\n", 3, "unknown statement"),
    ("kernel @k grid [1] target trn2 {\n  %t = alloc sbuf f33[1]\n}\n", 2, "unknown dtype"),
    ("kernel @k grid [1] target trn2 {\n  %t = alloc sbuf f32[1]\n", 2, "missing '}'"),
    ("kernel @k grid [1] target trn2 {\n}\n}\n", 3, "after the end"),
    ("kernel @k grid [1] target trn2 {\n  %t = alloc sbuf f32[4]   // just a note\n}\n", 2, "source location"),
    ("kernel @k grid [1] target trn2 {\n  %t = alloc sbuf f32[4]\n  memset %t[0:4, 0:1] {value = 1}\n}\n", 3,
     "dimensions"),
    ("kernel @k grid [1] target trn2 {\n  %t = alloc sbuf f32[4]\n  memset %t[i0:i0*2] {value = 1}\n}\n", 3,
     "not an integer"),
])
def test_parse_errors(text: str, line: int, msg: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_kernel(text)
    assert info.value.lineno == line
    assert msg in str(info.value) and f"line {line}:" in str(info.value)


def test_kernels_equal_detects_differences() -> None:
    k = kitchen_sink()
    body = k.body[0].body

    def differs(mutate: object) -> None:
        k2 = parse_kernel(print_kernel(k))
        mutate(k2, k2.body[0].body)
        assert not kernels_equal(k, k2)
        assert kernel_diff(k, k2)

    differs(lambda k2, b: setattr(b[1], "attrs", {"other": 0.0}))  # other: 0 -> 0.0
    differs(lambda k2, b: setattr(b[3], "attrs", {"other": float("inf")}))  # other: nan -> inf
    differs(lambda k2, b: setattr(b[-1], "attrs", {"label": "x"}))
    differs(lambda k2, b: setattr(b[-1], "loc", loc(1)))
    differs(lambda k2, b: setattr(b[-1].ins[0], "starts", (Z, sympy.Integer(0))))
    differs(lambda k2, b: setattr(k2.params[0], "shape", (1000, 65)))
    differs(lambda k2, b: setattr(k2, "grid", (3, 2)))
    differs(lambda k2, b: setattr(b[-1].ins[0], "buf", copy.copy(b[-1].ins[0].buf)))  # same fields, other object
    assert values_equal(float("nan"), float("nan")) and not values_equal(0.0, -0.0)
    assert not values_equal(1, 1.0) and not values_equal(1, True) and not values_equal((1,), [1])
    assert math.isnan(body[3].attrs["other"])
    assert kernels_equal(k, k)
