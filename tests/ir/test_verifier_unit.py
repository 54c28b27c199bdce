"""Unit tests of the IR verifier and the bounds analysis, on hand-built kernels (no tracer).

Every rule has a failing kernel (error class, key text of the message, and the
file:line of the offending instruction, which points into this file) and the
bounds analysis is checked against brute-force enumeration with hypothesis.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Sequence
from typing import Any

import pytest
import sympy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trnlang.frontend.errors import BoundsError, DTypeError, SbufOverflowError, ShapeError, TrnError, VerifyError
from trnlang.ir.bounds import Ranges, access_check, affine_form, expr_range, loop_ranges, mask_bounds
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
    pid_sym,
    sym,
)
from trnlang.ir.ops import Alu, Op
from trnlang.ir.types import DType, Engine, Space
from trnlang.ir.verifier import RuntimeCheck, problems, verify

F32, BF16, I32, FP8 = DType.float32, DType.bfloat16, DType.int32, DType.float8_e4m3
SBUF, PSUM = Space.SBUF, Space.PSUM
A0, A1 = axis_sym(0), axis_sym(1)
G0 = gather_sym(0)
I0, I1 = sym("i0"), sym("i1")
P0 = pid_sym(0)


# --------------------------------------------------------------------------------------------
# builders
# --------------------------------------------------------------------------------------------


def here() -> SourceLoc:
    """The caller's line: what the tracer records for an instruction."""
    f = inspect.currentframe().f_back  # type: ignore[union-attr]
    return SourceLoc(f.f_code.co_filename, f.f_lineno, f.f_code.co_name)


def buf(name: str, shape: Sequence[int], dt: DType = F32, space: Space = SBUF) -> Buf:
    return Buf(name, tuple(shape), dt, space)


def alloc(b: Buf, loc: SourceLoc | None = None) -> Instr:
    return Instr(Op.ALLOC, (b,), (), {}, None, loc)


def whole(b: Buf) -> Region:
    return Region.whole(b)


def reg(b: Buf, starts: Sequence[Any], sizes: Sequence[int]) -> Region:
    return Region(b, tuple(sympy.sympify(s) for s in starts), tuple(sizes), tuple(True for _ in sizes))


def ins(kind: Op, outs: Sequence[Any], inputs: Sequence[Any] = (), loc: SourceLoc | None = None,
        engine: Engine | None = None, **attrs: Any) -> Instr:
    return Instr(kind, tuple(outs), tuple(inputs), dict(attrs), engine, loc)


def tt(out: Region, a: Any, b: Any, op: Alu = Alu.add, loc: SourceLoc | None = None, **kw: Any) -> Instr:
    return ins(Op.TENSOR_TENSOR, (out,), (a, b), loc, op=op, **kw)


def hbm(name: str, shape: Sequence[int], dt: DType = F32) -> HbmTensor:
    return HbmTensor(name, tuple(shape), dt)


def load(r: Region, t: HbmTensor, index: Sequence[Any] | None = None, mask: Any = None,
         gathers: Sequence[Region] = (), loc: SourceLoc | None = None) -> Instr:
    idx = tuple(index) if index is not None else tuple(axis_sym(k) for k in range(len(r.shape)))
    return ins(Op.DMA_COPY, (r,), (Access(t, r.shape, idx, tuple(gathers), mask),), loc, other=0)


def store(t: HbmTensor, r: Region, index: Sequence[Any] | None = None, mask: Any = None,
          loc: SourceLoc | None = None) -> Instr:
    idx = tuple(index) if index is not None else tuple(axis_sym(k) for k in range(len(r.shape)))
    return ins(Op.DMA_COPY, (Access(t, r.shape, idx, (), mask),), (r,), loc)


def kern(body: list[Any], params: Sequence[HbmTensor] = (), grid: tuple[int, ...] = (1,),
         target: str = "trn2") -> Kernel:
    return Kernel("k", list(params), grid, body, target=target)


def raises(cls: type[TrnError], k: Kernel, *texts: str, loc: SourceLoc, target: str | None = None) -> TrnError:
    """verify(k) raises ``cls`` at ``loc`` (this file) with all ``texts`` in the message."""
    with pytest.raises(cls) as ei:
        verify(k, target)
    msg = str(ei.value)
    for t in texts:
        assert t in msg, f"{t!r} not in:\n{msg}"
    assert f'File "{__file__}", line {loc.lineno}' in msg, msg
    assert loc.text.strip() in msg  # the user's line is shown
    return ei.value


# --------------------------------------------------------------------------------------------
# positive cases
# --------------------------------------------------------------------------------------------


def test_valid_kernel_verifies_clean():
    x, w, out = hbm("x", (200, 64)), hbm("w", (64, 256)), hbm("out", (200, 256))
    xt, wt, ps, o = buf("xt", (64, 128)), buf("wt", (64, 256)), buf("ps", (128, 256), space=PSUM), buf("o", (128, 256))
    red, stats, mv = buf("red", (128, 1)), buf("st", (128, 3)), buf("mv", (128, 2))
    rows = 128 * I0 + A1
    body = [
        alloc(wt), load(whole(wt), w),
        Loop("affine", I0, 0, 2, 1, [
            alloc(xt), load(whole(xt), x, (rows, A0), mask=rows < 200),
            alloc(ps), ins(Op.MATMUL, (whole(ps),), (whole(xt), whole(wt)), accumulate=False),
            alloc(o), alloc(red),
            ins(Op.ACTIVATION, (whole(o), whole(red)), (whole(ps),), func=Alu.exp, scale=1.0, reduce_op=Alu.add),
            ins(Op.TENSOR_SCALAR, (whole(o),), (whole(o), whole(red)), op0=Alu.divide, op1=None,
                reverse=(False, False)),
            alloc(stats), ins(Op.BN_STATS, (whole(stats),), (whole(o),)),
            alloc(mv), ins(Op.BN_AGGR, (whole(mv),), (whole(stats),)),
            ins(Op.TENSOR_REDUCE, (whole(red),), (whole(o),), op=Alu.maximum, axes=(1,), keepdims=True),
            ins(Op.IOTA, (whole(red),), (), expr=A0 + 128 * I0),
            ins(Op.AFFINE_SELECT, (whole(o),), (whole(o), Imm(0.0)), pred=A1 <= A0 + 128 * I0),
            store(out, whole(o), (128 * I0 + A0, A1), mask=128 * I0 + A0 < 200),
        ]),
    ]
    assert verify(kern(body, [x, w, out])) == []
    assert problems(kern(body, [x, w, out])) == []


def test_partition_start_rule_accepts_legal_starts():
    b, c = buf("b", (128, 8)), buf("c", (128, 8))
    body = [alloc(b), alloc(c),
            tt(reg(c, (64, 0), (48, 8)), reg(b, (0, 0), (48, 8)), reg(b, (64, 0), (48, 8))),
            Loop("affine", I0, 0, 4, 1, [tt(reg(c, (32 * I0, 0), (32, 8)), reg(b, (0, 0), (32, 8)),
                                            reg(b, (96, 0), (32, 8)))])]
    assert verify(kern(body)) == []


def test_dma_is_exempt_from_partition_start_rule():
    x, b = hbm("x", (1, 8)), buf("b", (128, 8))
    assert verify(kern([alloc(b), load(reg(b, (5, 0), (1, 8)), x)], [x])) == []


# --------------------------------------------------------------------------------------------
# one failing kernel per rule
# --------------------------------------------------------------------------------------------


def test_partition_dimension_over_128():
    b = buf("big", (256, 4))
    a = alloc(b, here())
    raises(ShapeError, kern([a]), "partition dimension 256 exceeds 128 (tl.tile_size.pmax)", loc=a.loc)


@pytest.mark.parametrize("p,start,allowed", [(32, 16, "0 or 32 or 64 or 96"), (48, 32, "0 or 64"), (65, 32, "0")])
def test_partition_start_rule(p, start, allowed):
    b, c = buf("b", (128, 8)), buf("c", (128, 8))
    bad = tt(reg(c, (start, 0), (p, 8)), reg(b, (0, 0), (p, 8)), reg(b, (0, 0), (p, 8)), loc=here())
    raises(VerifyError, kern([alloc(b), alloc(c), bad]), f"spans {p} partitions and starts at partition {start}",
           f"must start at partition {allowed}", loc=bad.loc)


def test_partition_start_rule_symbolic():
    b = buf("b", (128, 8))
    bad = tt(reg(b, (16 * I0, 0), (16, 8)), reg(b, (0, 0), (16, 8)), reg(b, (0, 0), (16, 8)), loc=here())
    raises(VerifyError, kern([alloc(b), Loop("affine", I0, 0, 4, 1, [bad])]), "starts at partition 16*i0",
           "ranges over [0, 48]", loc=bad.loc)


def test_region_outside_buffer():
    b = buf("b", (128, 128))
    bad = tt(reg(b, (0, 64 * I0), (128, 64)), reg(b, (0, 0), (128, 64)), reg(b, (0, 0), (128, 64)), loc=here())
    raises(ShapeError, kern([alloc(b), Loop("affine", I0, 0, 3, 1, [bad])]), "outside its buffer b [128, 128] in dim 1",
           "ranges over [0, 128]", "[0, 191]", loc=bad.loc)


def test_matmul_writes_psum_only():
    s, m, o = buf("s", (64, 128)), buf("m", (64, 256)), buf("o", (128, 256))
    bad = ins(Op.MATMUL, (whole(o),), (whole(s), whole(m)), here(), accumulate=False)
    raises(VerifyError, kern([alloc(s), alloc(m), alloc(o), bad]), "matmul writes PSUM only", loc=bad.loc)


@pytest.mark.parametrize("st_shape,mv_shape,out_shape,text", [
    ((64, 128), (32, 256), (128, 256), "contraction sizes differ"),
    ((64, 128), (64, 1024), (128, 1024), "moving free size N=1024 exceeds 512"),
    ((64, 128), (64, 256), (128, 128), "gives [128, 256]"),
])
def test_matmul_shapes(st_shape, mv_shape, out_shape, text):
    s, m, o = buf("s", st_shape), buf("m", mv_shape, BF16), buf("o", out_shape, space=PSUM)
    bad = ins(Op.MATMUL, (whole(o),), (whole(s), whole(m)), here(), accumulate=False)
    raises(ShapeError, kern([alloc(s), alloc(m), alloc(o), bad]), text, loc=bad.loc)


def test_matmul_stationary_free_size():
    s, m, o = buf("s", (64, 256)), buf("m", (64, 128)), buf("o", (128, 128), space=PSUM)
    bad = ins(Op.MATMUL, (reg(o, (0, 0), (128, 128)),), (whole(s), whole(m)), here(), accumulate=False)
    raises(ShapeError, kern([alloc(s), alloc(m), alloc(o), bad]), "stationary free size M=256 exceeds 128",
           loc=bad.loc)


@pytest.mark.parametrize("dt,odt,target,text", [
    (I32, F32, "trn2", "matmul inputs must be floating point"),
    (F32, BF16, "trn2", "matmul accumulates in fp32"),
    (FP8, F32, "trn1", "has no fp8 matmul"),
])
def test_matmul_dtypes(dt, odt, target, text):
    s, m, o = buf("s", (64, 128), dt), buf("m", (64, 256), dt), buf("o", (128, 256), odt, PSUM)
    bad = ins(Op.MATMUL, (whole(o),), (whole(s), whole(m)), here(), accumulate=False)
    raises(DTypeError, kern([alloc(s), alloc(m), alloc(o), bad]), text, loc=bad.loc, target=target)


def test_matmul_fp8_ok_on_trn2_and_reads_sbuf_only():
    s, m, o = buf("s", (64, 128), FP8), buf("m", (64, 256), FP8), buf("o", (128, 256), space=PSUM)
    good = ins(Op.MATMUL, (whole(o),), (whole(s), whole(m)), accumulate=False)
    assert verify(kern([alloc(s), alloc(m), alloc(o), good])) == []
    p = buf("p", (64, 256), space=PSUM)
    bad = ins(Op.MATMUL, (whole(o),), (whole(s), whole(p)), here(), accumulate=False)
    raises(VerifyError, kern([alloc(s), alloc(p), alloc(o), bad]), "matmul reads its operands from SBUF",
           loc=bad.loc)


def test_transpose_limits():
    x, o = buf("x", (128, 256)), buf("o", (128, 128), space=PSUM)
    bad = ins(Op.TRANSPOSE, (whole(o),), (reg(x, (0, 0), (128, 256)),), here())
    raises(ShapeError, kern([alloc(x), alloc(o), bad]), "transpose input [128, 256] exceeds 128x128", loc=bad.loc)
    y, z = buf("y", (64, 64)), buf("z", (64, 64))
    bad = ins(Op.TRANSPOSE, (whole(z),), (whole(y),), here(), engine=Engine.VECTOR)
    raises(ShapeError, kern([alloc(y), alloc(z), bad]), "exceeds 32x32 on the Vector engine", loc=bad.loc)
    bad = ins(Op.TRANSPOSE, (whole(z),), (whole(y),), here(), engine=Engine.TENSOR)
    raises(VerifyError, kern([alloc(y), alloc(z), bad]), "the Tensor engine writes PSUM only", loc=bad.loc)


def test_free_size_limit_sbuf():
    a = buf("a", (128, 70000), BF16)
    bad = ins(Op.ACTIVATION, (whole(a),), (whole(a),), here(), func=Alu.exp, scale=1.0, reduce_op=None)
    raises(ShapeError, kern([alloc(a), bad]), "free size 70000 elements per partition",
           "exceeds the limit of 65536 from SBUF", loc=bad.loc)


def test_free_size_limit_psum():
    a, p = buf("a", (128, 5000), BF16), buf("p", (128, 5000), BF16, PSUM)
    bad = ins(Op.TENSOR_COPY, (whole(a),), (whole(p),), here(), reshape=False)
    raises(ShapeError, kern([alloc(a), alloc(p), bad]), "exceeds the limit of 4096 with an operand in PSUM",
           loc=bad.loc)


def test_gpsimd_cannot_access_psum():
    a, p = buf("a", (128, 8)), buf("p", (128, 8), space=PSUM)
    bad = tt(whole(a), whole(p), whole(a), loc=here(), engine=Engine.GPSIMD)
    raises(VerifyError, kern([alloc(a), alloc(p), bad]), "the GpSimd engine cannot access PSUM", loc=bad.loc)


@pytest.mark.parametrize("axes", [(0,), (-2,), (0, 1)])
def test_reduce_along_partition_axis(axes):
    a, r = buf("a", (128, 8)), buf("r", (1, 8))
    bad = ins(Op.TENSOR_REDUCE, (whole(r),), (whole(a),), here(), op=Alu.add, axes=axes, keepdims=True)
    raises(ShapeError, kern([alloc(a), alloc(r), bad]),
           "reductions run along free axes only; axis 0 is the partition axis", loc=bad.loc)


def test_reduce_output_shape_and_argmax_dtype():
    a, r = buf("a", (128, 8, 4)), buf("r", (128, 8))
    bad = ins(Op.TENSOR_REDUCE, (whole(r),), (whole(a),), here(), op=Alu.add, axes=(1,), keepdims=False)
    raises(ShapeError, kern([alloc(a), alloc(r), bad]), "gives [128, 4]", loc=bad.loc)
    r2 = buf("r2", (128, 8))
    bad = ins(Op.TENSOR_REDUCE, (whole(r2),), (whole(a),), here(), op=Alu.argmax, axes=(2,), keepdims=False)
    raises(DTypeError, kern([alloc(a), alloc(r2), bad]), "argmax writes integer indices", loc=bad.loc)


def test_dma_from_psum():
    x, p = hbm("x", (128, 8)), buf("p", (128, 8), space=PSUM)
    bad = store(x, whole(p), loc=here())
    raises(VerifyError, kern([alloc(p), bad], [x]), "DMA moves data between HBM and SBUF only", "is in PSUM",
           loc=bad.loc)


def test_dma_between_tiles():
    a, b = buf("a", (128, 8)), buf("b", (128, 8))
    bad = ins(Op.DMA_COPY, (whole(a),), (whole(b),), here())
    raises(VerifyError, kern([alloc(a), alloc(b), bad]), "DMA moves data between HBM and SBUF only", loc=bad.loc)


def test_dma_shape_mismatch():
    x, a = hbm("x", (128, 8)), buf("a", (128, 8))
    bad = ins(Op.DMA_COPY, (whole(a),), (Access(x, (128, 4), (A0, A1)),), here())
    raises(ShapeError, kern([alloc(a), bad], [x]), "dma_copy shapes differ", loc=bad.loc)


def test_int_only_alu_on_floats():
    a = buf("a", (128, 8))
    bad = tt(whole(a), whole(a), whole(a), Alu.bitwise_and, loc=here())
    raises(DTypeError, kern([alloc(a), bad]), "bitwise_and needs integer operands, got float32", loc=bad.loc)


def test_gather_must_be_int():
    t, a, g = hbm("t", (50, 8)), buf("a", (128, 8)), buf("g", (128, 1))
    bad = load(whole(a), t, (G0, A1), gathers=(whole(g),), loc=here())
    raises(DTypeError, kern([alloc(g), alloc(a), bad], [t]), "gather indices must be an integer tile, got float32",
           loc=bad.loc)


def test_fp8_is_storage_only():
    a, f = buf("a", (128, 8)), buf("f", (128, 8), FP8)
    cast = ins(Op.TENSOR_COPY, (whole(f),), (whole(a),), reshape=False)
    act_copy = ins(Op.ACTIVATION, (whole(f),), (whole(a),), func=Alu.copy, scale=2.0, reduce_op=None)
    reads = tt(whole(a), whole(f), whole(f))  # reading fp8 is fine
    assert verify(kern([alloc(a), alloc(f), cast, act_copy, reads])) == []
    bad = tt(whole(f), whole(a), whole(a), loc=here())
    raises(DTypeError, kern([alloc(a), alloc(f), bad]), "float8_e4m3 is a storage type", loc=bad.loc)


def test_int64_tile():
    a = alloc(buf("a", (128, 8), DType.int64), here())
    raises(DTypeError, kern([a]), "int64 exists only in HBM", loc=a.loc)


def test_engine_not_allowed():
    a = buf("a", (128, 8))
    bad = tt(whole(a), whole(a), whole(a), loc=here(), engine=Engine.TENSOR)
    raises(VerifyError, kern([alloc(a), bad]), "tensor_tensor cannot run on the tensor engine",
           "allowed: vector, gpsimd", loc=bad.loc)


def test_broadcast_mismatch():
    a, b = buf("a", (128, 8)), buf("b", (128, 4))
    bad = tt(whole(a), whole(a), whole(b), loc=here())
    raises(ShapeError, kern([alloc(a), alloc(b), bad]), "b[:, :] of shape [128, 4] does not broadcast",
           "output shape [128, 8]", loc=bad.loc)


def test_bn_shapes():
    x, s = buf("x", (128, 64)), buf("s", (128, 2))
    bad = ins(Op.BN_STATS, (whole(s),), (whole(x),), here())
    raises(ShapeError, kern([alloc(x), alloc(s), bad]), "bn_stats of [128, 64] writes [128, 3]", loc=bad.loc)
    g, m = buf("g", (128, 4)), buf("m", (128, 2))
    bad = ins(Op.BN_AGGR, (whole(m),), (whole(g),), here())
    raises(ShapeError, kern([alloc(g), alloc(m), bad]), "bn_aggr takes bn_stats groups [P, 3k]", loc=bad.loc)


def test_activation_reduce_output():
    a, r = buf("a", (128, 8)), buf("r", (128, 2))
    bad = ins(Op.ACTIVATION, (whole(a), whole(r)), (whole(a),), here(), func=Alu.exp, scale=1.0, reduce_op=Alu.add)
    raises(ShapeError, kern([alloc(a), alloc(r), bad]), "must have shape [128, 1]", loc=bad.loc)
    bad = ins(Op.ACTIVATION, (whole(a),), (whole(a),), here(), func=Alu.add, scale=1.0, reduce_op=None)
    raises(VerifyError, kern([alloc(a), bad]), "attribute func=", "must be unary function", loc=bad.loc)


def test_loop_step_must_be_positive():
    lp = Loop("affine", I0, 0, 4, 0, [], here())
    raises(VerifyError, kern([lp]), "loop step must be positive, got 0", loc=lp.loc)
    lp = Loop("parallel", I0, 0, 4, 1, [], here())
    raises(VerifyError, kern([lp]), "loop kind must be 'affine' or 'sequential'", loc=lp.loc)


def test_use_before_alloc():
    a = buf("a", (128, 8))
    bad = tt(whole(a), whole(a), whole(a), loc=here())
    raises(VerifyError, kern([bad, alloc(a)]), "is used before it is allocated", loc=bad.loc)


def test_alloc_in_loop_not_visible_after_it():
    a = buf("a", (128, 8))
    bad = tt(whole(a), whole(a), whole(a), loc=here())
    raises(VerifyError, kern([Loop("affine", I0, 0, 2, 1, [alloc(a)]), bad]),
           "is used outside the loop that allocates it", loc=bad.loc)


def test_unknown_symbol_in_index():
    x, a = hbm("x", (128, 8)), buf("a", (128, 8))
    bad = load(whole(a), x, (A0 + I1, A1), loc=here())
    raises(VerifyError, kern([alloc(a), Loop("affine", I0, 0, 2, 1, [bad])], [x]), "uses i1", loc=bad.loc)


def test_unknown_symbol_in_loop_bound_and_region_start():
    # the messages are built only on failure: they must still name the expression
    lp = Loop("affine", I0, 0, 4 * I1, 1, [], here())
    raises(VerifyError, kern([lp]), "the loop stop 4*i1 uses i1", loc=lp.loc)
    a = buf("a", (128, 8))
    bad = tt(reg(a, (0, I1), (128, 1)), reg(a, (0, 0), (128, 1)), reg(a, (0, 0), (128, 1)), loc=here())
    raises(VerifyError, kern([alloc(a), bad]), "the region a[:, i1:i1 + 1] uses i1", loc=bad.loc)


# --------------------------------------------------------------------------------------------
# HBM bounds
# --------------------------------------------------------------------------------------------


def test_unmasked_access_out_of_bounds():
    x, a = hbm("x", (200, 64)), buf("a", (128, 64))
    bad = load(whole(a), x, (128 * I0 + A0, A1), loc=here())
    e = raises(BoundsError, kern([alloc(a), Loop("affine", I0, 0, 2, 1, [bad])], [x]),
               "out-of-bounds access to 'x' (shape [200, 64])", "dim 0 of 'x' (size 200)",
               "takes values in [0, 255]", "outside [0, 199]", loc=bad.loc)
    assert e.loc == bad.loc


def test_masked_access_is_safe_and_gather_needs_runtime_check():
    x, t, a, g = hbm("x", (200, 64)), hbm("t", (50, 64)), buf("a", (128, 64)), buf("g", (128, 1), I32)
    rows = 128 * I0 + A0
    ld = load(whole(a), x, (rows, A1), mask=rows < 200)
    gl = load(whole(a), t, (G0, A1), gathers=(whole(g),), mask=rows < 200)
    k = kern([alloc(a), alloc(g), Loop("affine", I0, 0, 2, 1, [ld, gl])], [x, t])
    checks = verify(k)
    assert checks == [RuntimeCheck(gl, gl.ins[0])]
    assert checks[0].instr is gl and checks[0].access is gl.ins[0]


def test_uint8_gather_into_big_table_is_safe():
    t, a, g = hbm("t", (256, 8)), buf("a", (128, 8)), buf("g", (128, 1), DType.uint8)
    k = kern([alloc(a), alloc(g), load(whole(a), t, (G0, A1), gathers=(whole(g),))], [t])
    assert verify(k) == []


def test_nonlinear_mask_needs_runtime_check():
    x, a = hbm("x", (200, 64)), buf("a", (128, 64))
    rows = 128 * I0 + A0
    ld = load(whole(a), x, (rows, A1), mask=sympy.Or(rows < 200, A1 < 3))
    assert verify(kern([alloc(a), Loop("affine", I0, 0, 2, 1, [ld])], [x])) == [RuntimeCheck(ld, ld.ins[0])]


# --------------------------------------------------------------------------------------------
# capacity
# --------------------------------------------------------------------------------------------


def test_sbuf_overflow_lists_live_allocations():
    a, b = buf("a", (128, 25000)), buf("b", (128, 35000))  # 100000 + 140000 B > 224 KiB
    al, bl = alloc(a, here()), alloc(b, here())
    body = [al, bl, tt(whole(a), whole(a), whole(a)), tt(whole(b), whole(b), whole(b))]
    e = raises(SbufOverflowError, kern(body), "SBUF overflow", "need 240000 bytes per partition",
               "trn2 has 229376 (224 KiB) per partition", loc=bl.loc)
    msg = str(e)
    assert msg.index("b [128, 35000] float32: 140000 B") < msg.index("a [128, 25000] float32: 100000 B")
    assert f"allocated at {al.loc}" in msg and f"allocated at {bl.loc}" in msg


def test_sbuf_dead_buffers_free_their_space():
    a, b = buf("a", (128, 25000)), buf("b", (128, 35000))
    body = [alloc(a), tt(whole(a), whole(a), whole(a)), alloc(b), tt(whole(b), whole(b), whole(b))]
    assert verify(kern(body)) == []


def test_sbuf_buffer_used_in_loop_lives_for_the_whole_loop():
    a, b = buf("a", (128, 25000)), buf("b", (128, 35000))
    bl = alloc(b, here())
    body = [alloc(a), Loop("sequential", I0, 0, 4, 1, [tt(whole(a), whole(a), whole(a)), bl,
                                                       tt(whole(b), whole(b), whole(b))])]
    raises(SbufOverflowError, kern(body), "SBUF overflow", loc=bl.loc)


def test_sbuf_capacity_depends_on_target():
    a = buf("a", (128, 50000))  # 200000 B: fits trn2 (224 KiB), not trn1 (192 KiB)
    al = alloc(a, here())
    k = kern([al, tt(whole(a), whole(a), whole(a))])
    assert verify(k, "trn2") == []
    raises(SbufOverflowError, k, "trn1 has 196608 (192 KiB) per partition", loc=al.loc, target="trn1")


def test_psum_banks():
    bufs = [buf(f"p{i}", (128, 512), space=PSUM) for i in range(8)]  # 2 KiB = 1 bank each
    use = [tt(whole(b), whole(b), whole(b)) for b in bufs]
    assert verify(kern([*map(alloc, bufs), *use])) == []
    extra = buf("px", (128, 600), space=PSUM)  # 2400 B = 2 banks
    xl = alloc(extra, here())
    e = raises(SbufOverflowError, kern([*map(alloc, bufs), xl, *use, tt(whole(extra), whole(extra), whole(extra))]),
               "PSUM overflow: the live PSUM buffers need 10 banks of 2 KiB per partition but trn2 has 8", loc=xl.loc)
    assert "px [128, 600] float32: 2400 B per partition = 2 banks" in str(e)


def test_multiple_problems_are_reported_as_notes():
    a, b = buf("a", (128, 8)), buf("b", (128, 4))
    first = tt(whole(a), whole(a), whole(b), loc=here())
    second = tt(whole(a), whole(a), whole(a), Alu.bitwise_or, loc=here())
    e = raises(ShapeError, kern([alloc(a), alloc(b), first, second]), "does not broadcast", loc=first.loc)
    assert any("bitwise_or needs integer operands" in n and str(second.loc) in n for n in e.notes)
    assert [type(p) for p in problems(kern([alloc(a), alloc(b), first, second]))] == [ShapeError, DTypeError]


# --------------------------------------------------------------------------------------------
# bounds analysis
# --------------------------------------------------------------------------------------------


def test_expr_range_examples():
    r = {I0: (0, 3), A0: (0, 127)}
    assert expr_range(128 * I0 + A0, r) == (0, 511)
    assert expr_range(7, r) == (7, 7)
    assert expr_range(sympy.floor((128 * I0 + A0) / 100), r) == (0, 5)
    assert expr_range(sympy.Mod(A0 + 3, 64), r) == (0, 63)
    assert expr_range(sympy.Mod(I0 + 3, 64), r) == (3, 6)
    assert expr_range(I0 * A0, r) == (0, 381)
    assert expr_range(sympy.Min(I0, 2) + sympy.Max(A0, 100), r) == (100, 129)
    assert expr_range(I0 + G0, r) is None
    assert expr_range(I0 + G0, {**r, G0: (0, 9)}) == (0, 12)
    lo, hi = expr_range(I0 + A0, {I0: (1, 0), A0: (0, 3)})
    assert lo > hi  # an empty loop: an empty range


def test_min_with_one_bounded_argument_bounds_a_runtime_size_loop():
    n = sym("k_size2")  # a runtime size: no range
    assert expr_range(sympy.ceiling(n / 128), {}) is None
    lo, hi = expr_range(sympy.Min(sympy.ceiling(n / 128), 4), {})
    assert hi == 4 and lo < -(2**62)  # bounded above by the constant, below only by the index width
    lo, hi = expr_range(sympy.Max(sympy.ceiling(n / 128), 4), {})
    assert lo == 4 and hi > 2**62
    # a loop over min(cdiv(n, 128), 4) blocks: its variable stays inside a 4-block buffer
    r = loop_ranges([Loop("affine", I0, 0, sympy.Min(sympy.ceiling(n / 128), 4), 1)], (1,))
    assert r[I0][1] == 3


def test_loop_ranges_steps_pids_and_dependent_bounds():
    r = loop_ranges([Loop("affine", I0, 0, 10, 3), Loop("affine", I1, I0 + 1, 12, 1)], (4,))
    assert r[P0] == (0, 3) and r[pid_sym(2)] == (0, 0)
    assert r[I0] == (0, 9) and r[I1] == (1, 11)
    assert r.nonempty
    assert expr_range(I1 - I0, r) == (1, 11)  # exact by elimination (the box alone says [-8, 11])
    tri = loop_ranges([Loop("affine", I0, 0, 4, 1), Loop("affine", I1, 0, I0, 1)], (1,))
    assert not tri.nonempty  # i1's loop is empty when i0 == 0
    assert loop_ranges([Loop("affine", I0, 5, 5, 1)], (1,)).empty


def test_mask_bounds_scaled_and_reversed():
    r = {I0: (0, 2), A0: (0, 127)}
    assert mask_bounds(128 * I0 + A0, 300 > 128 * I0 + A0, r) == (None, 299)
    assert mask_bounds(2 * (128 * I0 + A0), sympy.And(128 * I0 + A0 < 300, A0 >= 4), r) == (8, 598)
    assert mask_bounds(128 * I0 + A0, 128 * I0 + A0 >= 10, r) == (10, None)


def test_affine_form_rejects_products():
    assert affine_form(I0 * A0) is None
    assert affine_form(sympy.floor(I0 / 2)) is None
    assert affine_form(3) == (3, {})


SYMS = [I0, I1, A0]


@st.composite
def affine_and_box(draw: Any) -> tuple[sympy.Expr, dict[sympy.Symbol, tuple[int, int]]]:
    n = draw(st.integers(1, 3))
    syms = SYMS[:n]
    coeffs = draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n))
    const = draw(st.integers(-10, 10))
    box = {}
    for s in syms:
        lo = draw(st.integers(-5, 5))
        box[s] = (lo, lo + draw(st.integers(0, 6)))
    return const + sum(c * s for c, s in zip(coeffs, syms)), box


def _brute(expr: Any, box: dict[sympy.Symbol, tuple[int, int]]) -> tuple[int, int]:
    """Exact min/max by enumeration (sympy arithmetic: floats would misround floor())."""
    syms = list(box)
    vals = [int(sympy.sympify(expr).xreplace({s: sympy.Integer(v) for s, v in zip(syms, p)}))
            for p in itertools.product(*(range(lo, hi + 1) for lo, hi in box.values()))]
    return min(vals), max(vals)


@settings(max_examples=200, deadline=None)
@given(affine_and_box())
def test_expr_range_exact_for_affine(case):
    expr, box = case
    assert expr_range(expr, box) == _brute(expr, box)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(affine_and_box(), affine_and_box(), st.integers(1, 7), st.sampled_from(["floor", "mod", "mul", "minmax"]))
def test_expr_range_sound_for_nonaffine(c1, c2, k, kind):
    (e1, b1), (e2, b2) = c1, c2
    box = {**b2, **b1}
    expr = {"floor": lambda: sympy.floor(e1 / k), "mod": lambda: sympy.Mod(e1, k), "mul": lambda: e1 * e2,
            "minmax": lambda: sympy.Min(e1, e2) + sympy.Max(e1, k)}[kind]()
    lo, hi = _brute(expr, box)
    got = expr_range(expr, box)
    assert got is not None and got[0] <= lo and hi <= got[1]


def _nest_points(loops: list[Loop]) -> list[dict[sympy.Symbol, int]]:
    pts: list[dict[sympy.Symbol, int]] = [{}]
    for lp in loops:
        nxt = []
        for p in pts:
            start, stop = int(sympy.sympify(lp.start).subs(p)), int(sympy.sympify(lp.stop).subs(p))
            nxt.extend({**p, lp.var: v} for v in range(start, stop, int(lp.step)))
        pts = nxt
    return pts


@st.composite
def triangular_nest(draw: Any) -> tuple[list[Loop], sympy.Expr]:
    s0 = draw(st.integers(-3, 3))
    outer = Loop("affine", I0, s0, s0 + draw(st.integers(1, 6)), draw(st.integers(1, 3)))
    a, b = draw(st.integers(-1, 1)), draw(st.integers(-3, 3))
    start = a * I0 + b
    stop = start + draw(st.integers(-1, 5)) + draw(st.integers(-1, 1)) * I0
    inner = Loop("affine", I1, start, stop, 1)
    expr = draw(st.integers(-4, 4)) * I0 + draw(st.integers(-4, 4)) * I1 + draw(st.integers(-5, 5))
    return [outer, inner], expr


@settings(max_examples=200, deadline=None)
@given(triangular_nest())
def test_loop_nest_ranges_sound_and_exact_when_nonempty(case):
    loops, expr = case
    pts = _nest_points(loops)
    r = loop_ranges(loops, (1,))
    got = expr_range(expr, r)
    if not pts:
        return
    vals = [int(expr.subs(p)) for p in pts]
    assert got is not None and got[0] <= min(vals) and max(vals) <= got[1]
    if r.nonempty:
        assert got == (min(vals), max(vals))


@st.composite
def access_case(draw: Any) -> tuple[Access, Ranges, list[Loop]]:
    n_iter, tile = draw(st.integers(1, 4)), draw(st.integers(1, 16))
    step = draw(st.integers(1, 3))
    loops = [Loop("affine", I0, 0, n_iter * step, step)]
    c_i, c_a, off = draw(st.integers(-8, 16)), draw(st.sampled_from([-1, 1, 2])), draw(st.integers(-4, 20))
    idx = c_i * I0 + c_a * A0 + off
    if draw(st.booleans()):  # an inner loop whose bounds depend on i0 (possibly empty for some i0)
        lo = draw(st.integers(-1, 1)) * I0 + draw(st.integers(-2, 2))
        loops.append(Loop("sequential", I1, lo, lo + draw(st.integers(-1, 4)) + draw(st.integers(0, 1)) * I0, 1))
        idx += draw(st.integers(-6, 6)) * I1
    size = draw(st.integers(1, 60))
    mask = None
    if draw(st.booleans()):
        mask = (idx < draw(st.integers(0, 70))) if draw(st.booleans()) else (c_i * I0 + A0 < draw(st.integers(0, 70)))
    acc = Access(HbmTensor("x", (size,), F32), (tile,), (idx,), (), mask)
    return acc, loop_ranges(loops, (1,)), loops


@settings(max_examples=150, deadline=None)
@given(access_case())
def test_access_check_matches_brute_force(case):
    acc, r, loops = case
    size = acc.tensor.shape[0]
    idx = sympy.lambdify([I0, I1, A0], acc.index[0])  # integer coefficients: exact in Python ints
    mask = sympy.lambdify([I0, I1, A0], acc.mask if acc.mask is not None else sympy.true)
    oob_points = []
    for p in _nest_points(loops):
        for a in range(acc.shape[0]):
            env = (p.get(I0, 0), p.get(I1, 0), a)
            if mask(*env) and not 0 <= idx(*env) < size:
                oob_points.append(env)
    verdict = access_check(acc, r)
    if verdict.status == "safe":
        assert not oob_points
    elif verdict.status == "oob":
        assert oob_points and acc.mask is None and verdict.dim == 0 and verdict.size == size
        assert "dim 0 of 'x'" in verdict.reason and f"(size {size})" in verdict.reason
    if acc.mask is None and r.nonempty:  # unmasked affine over non-empty loops: the verdict is exact
        assert verdict.status == ("oob" if oob_points else "safe")
