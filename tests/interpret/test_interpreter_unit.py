"""Unit tests of the numpy reference interpreter: memory, DMA, bounds, poisoning, loops, grid, instructions.

Numeric semantics of the ALU functions and casts are in test_alu_semantics_unit.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy

from tests.interpret.kbuild import (
    A0,
    A1,
    A2,
    BF16,
    F32,
    G0,
    I0,
    I1,
    I32,
    P0,
    P1,
    P2,
    Imm,
    Loop,
    Op,
    Space,
    acc,
    alloc,
    elementwise,
    hbm,
    here,
    instr,
    kernel,
    load,
    region,
    run_kernel,
    sbuf,
    store,
    whole,
)
from trnlang.frontend.errors import BoundsError, DTypeError, LaunchError
from trnlang.interpret.symeval import evaluate_on_tile
from trnlang.ir.ops import Alu
from trnlang.ir.types import DType

RNG = np.random.default_rng(0)


def copy_kernel(shape, dt=F32, out_dt=None, tile_dt=None):
    x, o = hbm("x", shape, dt), hbm("out", shape, out_dt or dt, "out")
    t = sbuf("t", shape, tile_dt or dt)
    return kernel([x], [o], [alloc(t), load(whole(t), acc(x, shape)), store(acc(o, shape), whole(t))])


# ----------------------------------------------------------------------------- DMA


def test_roundtrip_through_noncontiguous_views():
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    big = np.zeros((8, 12), np.float32)
    src = np.zeros((4, 12), np.float32)
    src[:, ::2] = x
    run_kernel(copy_kernel((4, 6)), [src[:, ::2], big[::2, 1::2]])
    np.testing.assert_array_equal(big[::2, 1::2], x)
    assert not big[1::2].any() and not big[:, ::2].any()


def test_masked_load_other_and_masked_store():
    x, o = hbm("x", (4, 6)), hbm("out", (4, 8), kind="out")
    t = sbuf("t", (4, 8))
    body = [alloc(t), load(whole(t), acc(x, (4, 8), mask=A1 < 6), other=-1.0),  # cols 6,7 out of bounds but masked
            store(acc(o, (4, 8), mask=sympy.Eq((A0 + A1) % 2, 0)), whole(t))]
    xv = RNG.standard_normal((4, 6)).astype(np.float32)
    out = np.full((4, 8), 7.0, np.float32)
    run_kernel(kernel([x], [o], body), [xv, out])
    tile = np.concatenate([xv, np.full((4, 2), -1.0, np.float32)], axis=1)
    even = (np.arange(4)[:, None] + np.arange(8)) % 2 == 0
    np.testing.assert_array_equal(out, np.where(even, tile, 7.0))


def test_masked_load_without_other_keeps_tile_contents():
    x, o = hbm("x", (2, 4)), hbm("out", (2, 4), kind="out")
    t = sbuf("t", (2, 4))
    body = [alloc(t), instr(Op.MEMSET, (whole(t),), value=3.0), load(whole(t), acc(x, (2, 4), mask=A1 < 2)),
            store(acc(o, (2, 4)), whole(t))]
    xv = np.arange(8, dtype=np.float32).reshape(2, 4)
    out = np.zeros((2, 4), np.float32)
    run_kernel(kernel([x], [o], body), [xv, out])
    np.testing.assert_array_equal(out, [[0, 1, 3, 3], [4, 5, 3, 3]])


def test_load_casts_and_other_is_cast():
    x, o = hbm("x", (2, 3), DType.int64), hbm("out", (2, 4), BF16, "out")
    t = sbuf("t", (2, 4), BF16)
    body = [alloc(t), load(whole(t), acc(x, (2, 4), mask=A1 < 3), other=float("-inf")), store(acc(o, (2, 4)), whole(t))]
    xv = np.array([[1, 257, -3], [2**40 + 5, 0, 7]], np.int64)
    out = np.zeros((2, 4), BF16.np)
    run_kernel(kernel([x], [o], body), [xv, out])
    want = [[1, 256, -3, -np.inf], [5, 0, 7, -np.inf]]  # int64 -> int32 wraps, 257 -> bf16 rounds to 256
    np.testing.assert_array_equal(out.astype(np.float32), want)


def gather_kernel(n_rows, d, n_idx, masked):
    x, idx, o = hbm("x", (n_rows, d)), hbm("idx", (n_idx,), I32), hbm("out", (n_idx, d), kind="out")
    it, t = sbuf("it", (n_idx, 1), I32), sbuf("t", (n_idx, d))
    g = acc(x, (n_idx, d), index=(G0, A1), gathers=(whole(it),), mask=(G0 >= 0) if masked else None)
    body = [alloc(it), alloc(t), load(whole(it), acc(idx, (n_idx, 1), index=(A0,))),
            load(whole(t), g, other=0.0 if masked else None, loc=here()), store(acc(o, (n_idx, d)), whole(t))]
    return kernel([x, idx], [o], body)


def test_gather_rows():
    xv = RNG.standard_normal((10, 5)).astype(np.float32)
    iv = np.array([3, 0, 9, 3], np.int32)
    out = np.zeros((4, 5), np.float32)
    run_kernel(gather_kernel(10, 5, 4, False), [xv, iv, out])
    np.testing.assert_array_equal(out, xv[iv])


def test_gather_with_mask_skips_negative_indices():
    xv = RNG.standard_normal((10, 5)).astype(np.float32)
    iv = np.array([3, -1, 9, -7], np.int32)
    out = np.full((4, 5), 5.0, np.float32)
    run_kernel(gather_kernel(10, 5, 4, True), [xv, iv, out])
    np.testing.assert_array_equal(out, np.where((iv >= 0)[:, None], xv[np.maximum(iv, 0)], 0.0))


def test_gather_out_of_bounds_raises():
    iv = np.array([3, 10, 0, 1], np.int32)
    with pytest.raises(BoundsError, match=r"index \[10, 0\].*tensor x of shape \(10, 5\)"):
        run_kernel(gather_kernel(10, 5, 4, False), [np.zeros((10, 5), np.float32), iv, np.zeros((4, 5), np.float32)])


def test_store_write_through_duplicate_indices_last_wins():
    x, o = hbm("x", (1, 4)), hbm("out", (2,), kind="out")
    t = sbuf("t", (1, 4))
    body = [alloc(t), load(whole(t), acc(x, (1, 4))), store(acc(o, (1, 4), index=(A1 // 2,)), whole(t))]
    out = np.zeros(2, np.float32)
    run_kernel(kernel([x], [o], body), [np.array([[1, 2, 3, 4]], np.float32), out])
    np.testing.assert_array_equal(out, [2, 4])


# ----------------------------------------------------------------------------- bounds


@pytest.mark.parametrize("offset", [1, -1])
def test_oob_store_raises_and_leaves_memory_untouched(offset):
    x, o = hbm("x", (4, 3)), hbm("out", (4, 3), kind="out")
    t = sbuf("t", (4, 3))
    good = store(acc(o, (2, 3)), region(t, (0, 0), (2, 3)))  # rows 0,1 first
    loc = here()
    bad = store(acc(o, (4, 3), offs=(offset, 0)), whole(t), loc=loc)
    k = kernel([x], [o], [alloc(t), load(whole(t), acc(x, (4, 3))), good, bad])
    xv = RNG.standard_normal((4, 3)).astype(np.float32)
    backing = np.full((6, 3), -9.0, np.float32)
    out = backing[1:5]  # a view with memory on both sides of it
    with pytest.raises(BoundsError) as ei:
        run_kernel(k, [xv, out])
    assert ei.value.loc == loc
    assert f"line {loc.lineno}" in str(ei.value) and "tensor out" in str(ei.value)
    np.testing.assert_array_equal(out[:2], xv[:2])  # the earlier store happened
    np.testing.assert_array_equal(out[2:], -9.0)  # the bad one wrote nothing
    np.testing.assert_array_equal(backing[[0, 5]], -9.0)


def test_oob_load_raises_negative_index():
    x, o = hbm("x", (4, 3)), hbm("out", (4, 3), kind="out")
    t = sbuf("t", (4, 3))
    k = kernel([x], [o], [alloc(t), load(whole(t), acc(x, (4, 3), index=(A0, A1 - 1)), loc=here())])
    with pytest.raises(BoundsError, match=r"index \[0, -1\]"):
        run_kernel(k, [np.zeros((4, 3), np.float32), np.zeros((4, 3), np.float32)])


def test_oob_masked_out_is_fine_and_dynamic_oob_names_loop_var():
    x, o = hbm("x", (5, 2)), hbm("out", (5, 2), kind="out")
    t = sbuf("t", (2, 2))
    loc = here()
    body = [alloc(t), Loop("affine", I0, sympy.Integer(0), sympy.Integer(3), sympy.Integer(1), [
        load(whole(t), acc(x, (2, 2), offs=(2 * I0, 0), mask=2 * I0 + A0 < 5), other=0.0),
        store(acc(o, (2, 2), offs=(2 * I0, 0)), whole(t), loc=loc)])]
    xv = RNG.standard_normal((5, 2)).astype(np.float32)
    out = np.zeros((5, 2), np.float32)
    with pytest.raises(BoundsError, match="i0=2") as ei:
        run_kernel(kernel([x], [o], body), [xv, out])
    assert ei.value.loc == loc
    np.testing.assert_array_equal(out[:4], xv[:4])
    assert out[4].tolist() == [0, 0]


def test_region_outside_buffer_raises():
    t = sbuf("t", (2, 4))
    o = hbm("out", (2, 2), kind="out")
    body = [alloc(t), Loop("affine", I0, sympy.Integer(0), sympy.Integer(3), sympy.Integer(1),
                           [instr(Op.MEMSET, (region(t, (0, 2 * I0), (2, 2)),), value=1.0, loc=here())])]
    with pytest.raises(BoundsError, match="outside buffer t"):
        run_kernel(kernel([], [o], body), [np.zeros((2, 2), np.float32)])


def test_region_with_dropped_dim_and_dynamic_start():
    x, o = hbm("x", (3, 4)), hbm("out", (4, 3), kind="out")
    t, tt = sbuf("t", (3, 4)), sbuf("tt", (4, 3))
    col = Loop("affine", I0, sympy.Integer(0), sympy.Integer(3), sympy.Integer(1), [
        instr(Op.TENSOR_COPY, (region(tt, (0, I0), (4, 1), (True, False)),),
              (region(t, (I0, 0), (1, 4), (False, True)),))])
    body = [alloc(t), alloc(tt), load(whole(t), acc(x, (3, 4))), col, store(acc(o, (4, 3)), whole(tt))]
    xv = RNG.standard_normal((3, 4)).astype(np.float32)
    out = np.zeros((4, 3), np.float32)
    run_kernel(kernel([x], [o], body), [xv, out])
    np.testing.assert_array_equal(out, xv.T)


# ----------------------------------------------------------------------------- poisoning


@pytest.mark.parametrize("dt, poison", [(F32, np.nan), (BF16, np.nan), (I32, -2**31), (DType.int8, -128),
                                        (DType.uint8, 0), (DType.bool_, True), (DType.float8_e4m3, np.nan)])
def test_fresh_alloc_is_poisoned(dt, poison):
    o = hbm("out", (2, 3), dt, "out")
    t = sbuf("t", (2, 3), dt)
    out = np.zeros((2, 3), dt.np)
    run_kernel(kernel([], [o], [alloc(t), store(acc(o, (2, 3)), whole(t))]), [out])
    np.testing.assert_array_equal(out.astype(np.float64), np.full((2, 3), poison, np.float64))


def test_alloc_in_loop_repoisons_each_iteration():
    o = hbm("out", (3, 3), kind="out")
    t = sbuf("t", (1, 3))
    body = [Loop("sequential", I0, sympy.Integer(0), sympy.Integer(3), sympy.Integer(1), [
        alloc(t),
        instr(Op.IOTA, (region(t, (0, I0), (1, 1)),), expr=I0 + 1),
        store(acc(o, (1, 3), offs=(I0, 0)), whole(t))])]
    out = np.zeros((3, 3), np.float32)
    run_kernel(kernel([], [o], body), [out])
    np.testing.assert_array_equal(out, np.where(np.eye(3, dtype=bool), np.diag([1.0, 2, 3]), np.nan))


def test_each_program_instance_has_fresh_buffers():
    o = hbm("out", (2, 2), kind="out")
    t = sbuf("t", (1, 2))
    body = [alloc(t), instr(Op.AFFINE_SELECT, (whole(t),), (Imm(5.0), whole(t)), pred=sympy.Eq(P0, 0)),
            store(acc(o, (1, 2), offs=(P0, 0)), whole(t))]
    out = np.zeros((2, 2), np.float32)
    run_kernel(kernel([], [o], body, grid=(2,)), [out])
    np.testing.assert_array_equal(out, [[5, 5], [np.nan, np.nan]])


# ----------------------------------------------------------------------------- loops and grid


def test_loops_with_dependent_bounds():
    o = hbm("out", (4, 4), I32, "out")
    t = sbuf("t", (1, 1), I32)
    inner = Loop("affine", I1, sympy.Integer(0), I0 + 1, sympy.Integer(1), [
        instr(Op.IOTA, (whole(t),), expr=10 * I0 + I1), store(acc(o, (1, 1), offs=(I0, I1)), whole(t))])
    body = [alloc(t), Loop("sequential", I0, sympy.Integer(0), sympy.Integer(4), sympy.Integer(1), [inner])]
    out = np.full((4, 4), -1, np.int32)
    run_kernel(kernel([], [o], body), [out])
    r, c = np.indices((4, 4))
    np.testing.assert_array_equal(out, np.where(c <= r, 10 * r + c, -1))


def test_loop_bounds_from_pid_and_step():
    o = hbm("out", (8,), I32, "out")
    t = sbuf("t", (1, 1), I32)
    body = [alloc(t), Loop("affine", I0, P0, sympy.Integer(8), sympy.Integer(3), [
        instr(Op.IOTA, (whole(t),), expr=100 * P0 + I0), store(acc(o, (1, 1), index=(I0 + A0 + A1,)), whole(t))])]
    out = np.full(8, -1, np.int32)
    run_kernel(kernel([], [o], body, grid=(2,)), [out])
    np.testing.assert_array_equal(out, [0, 101, -1, 3, 104, -1, 6, 107])


def test_grid_pids_missing_axes_and_override():
    o = hbm("out", (2, 3, 2), I32, "out")
    t = sbuf("t", (1, 1, 2), I32)
    body = [alloc(t), instr(Op.IOTA, (whole(t),), expr=10 * P0 + P1 + 100 * A2 + 1000 * P2),
            store(acc(o, (1, 1, 2), offs=(P0, P1, 0)), whole(t))]
    k = kernel([], [o], body, grid=(2, 3))
    out = np.full((2, 3, 2), -1, np.int32)
    run_kernel(k, [out])
    p0, p1, a = np.indices((2, 3, 2))
    np.testing.assert_array_equal(out, 10 * p0 + p1 + 100 * a)
    out[...] = -1
    run_kernel(k, [out], grid=(1, 2))
    np.testing.assert_array_equal(out[0, :2], (p1 + 100 * a)[0, :2])
    assert (out[1] == -1).all() and (out[0, 2] == -1).all()


# ----------------------------------------------------------------------------- instructions


def test_iota_bool_expr_and_affine_select_causal_mask():
    x = RNG.standard_normal((4, 4)).astype(np.float32)
    iota = elementwise(lambda ins, out: [instr(Op.IOTA, (out,), expr=A0 >= A1)], [x], (4, 4))
    np.testing.assert_array_equal(iota, np.tril(np.ones((4, 4))))
    sel = elementwise(lambda ins, out: [instr(Op.AFFINE_SELECT, (out,), (ins[0], Imm(float("-inf"))),
                                              pred=A1 <= A0)], [x], (4, 4))
    np.testing.assert_array_equal(sel, np.where(np.tril(np.ones((4, 4))) > 0, x, -np.inf))


def test_select_broadcasts_partition_and_mixes_types():
    cond = np.array([[1], [0], [2]], np.int32)
    a = RNG.standard_normal((3, 4)).astype(np.float32)
    got = elementwise(lambda ins, out: [instr(Op.SELECT, (out,), (ins[0], ins[1], Imm(7)))], [cond, a], (3, 4))
    np.testing.assert_array_equal(got, np.where(cond != 0, a, 7.0))


def test_memset_casts():
    got = elementwise(lambda ins, out: [instr(Op.MEMSET, (out,), value=-2.7)], [], (2, 2), I32)
    np.testing.assert_array_equal(got, -2)
    got = elementwise(lambda ins, out: [instr(Op.MEMSET, (out,), value=0.1)], [], (2, 2), BF16)
    assert got.view(np.uint16)[0, 0] == np.float32(0.1).astype(BF16.np).view(np.uint16)


def test_tensor_copy_reshape_and_broadcast():
    x = RNG.standard_normal((2, 6)).astype(np.float32)
    got = elementwise(lambda ins, out: [instr(Op.TENSOR_COPY, (out,), (ins[0],), reshape=True)], [x], (2, 3, 2))
    np.testing.assert_array_equal(got, x.reshape(2, 3, 2))
    col = x[:, :1].copy()
    got = elementwise(lambda ins, out: [instr(Op.TENSOR_COPY, (out,), (ins[0],), reshape=False)], [col], (2, 4), BF16)
    np.testing.assert_array_equal(got, np.broadcast_to(col, (2, 4)).astype(BF16.np))


def test_transpose():
    x = RNG.standard_normal((3, 5)).astype(np.float32)
    got = elementwise(lambda ins, out: [instr(Op.TRANSPOSE, (out,), (ins[0],))], [x], (5, 3))
    np.testing.assert_array_equal(got, x.T)


def test_matmul_accumulate():
    s1, m1 = RNG.standard_normal((8, 4)).astype(np.float32), RNG.standard_normal((8, 5)).astype(np.float32)
    s2, m2 = RNG.standard_normal((8, 4)).astype(np.float32), RNG.standard_normal((8, 5)).astype(np.float32)

    def build(ins, out):
        ps = sbuf("ps", (4, 5), F32, Space.PSUM)
        return [alloc(ps), instr(Op.MATMUL, (whole(ps),), (ins[0], ins[1]), accumulate=False),
                instr(Op.MATMUL, (whole(ps),), (ins[2], ins[3]), accumulate=True),
                instr(Op.TENSOR_COPY, (out,), (whole(ps),))]

    got = elementwise(build, [s1, m1, s2, m2], (4, 5))
    d = np.float64
    want = (s1.astype(d).T @ m1.astype(d)).astype(np.float32) + (s2.astype(d).T @ m2.astype(d)).astype(np.float32)
    np.testing.assert_array_equal(got, want)
    fresh = elementwise(lambda ins, out: [instr(Op.MATMUL, (out,), (ins[0], ins[1]), accumulate=True)],
                        [s1, m1], (4, 5))
    assert np.isnan(fresh).all()


def test_matmul_bf16_inputs_exact_widening():
    s = RNG.standard_normal((16, 3)).astype(BF16.np)
    m = RNG.standard_normal((16, 2)).astype(BF16.np)
    got = elementwise(lambda ins, out: [instr(Op.MATMUL, (out,), (ins[0], ins[1]), accumulate=False)], [s, m], (3, 2))
    np.testing.assert_array_equal(got, (s.astype(np.float64).T @ m.astype(np.float64)).astype(np.float32))


def scan_cumsum(ins, out, initial=Imm(0.0)):
    return [instr(Op.SCAN, (out,), (Imm(1.0), ins[0], initial), op0=Alu.multiply, op1=Alu.add)]


def test_scan_cumsum_fp32_sequential():
    x = RNG.standard_normal((3, 50)).astype(np.float32)
    got = elementwise(scan_cumsum, [x], (3, 50))
    want = np.empty_like(x)
    a = np.zeros(3, np.float32)
    for j in range(50):
        a = a + x[:, j]
        want[:, j] = a
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, np.cumsum(x.astype(np.float64), axis=1), rtol=1e-5, atol=1e-5)


def test_scan_with_region_initial_3d():
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    ini = np.array([[10.0], [20.0]], np.float32)
    got = elementwise(lambda ins, out: scan_cumsum(ins, out, ins[1]), [x, ini], (2, 3, 4))
    np.testing.assert_allclose(got, np.cumsum(x, axis=2) + ini[:, :, None], rtol=1e-6)


def test_bn_stats_and_aggr():
    x = (RNG.standard_normal((4, 12)) * 3 + 1).astype(np.float32)

    def build(ins, out):
        st = sbuf("st", (4, 9))
        body = [alloc(st)]
        for g in range(3):
            group = region(ins[0].buf, (0, 4 * g), (4, 4))
            body.append(instr(Op.BN_STATS, (region(st, (0, 3 * g), (4, 3)),), (group,)))
        return [*body, instr(Op.BN_AGGR, (out,), (whole(st),))]

    got = elementwise(build, [x], (4, 2))
    np.testing.assert_allclose(got[:, 0], x.astype(np.float64).mean(1), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[:, 1], x.astype(np.float64).var(1), rtol=1e-6)
    stats = elementwise(lambda ins, out: [instr(Op.BN_STATS, (out,), (ins[0],))], [x], (4, 3))
    xd = x.astype(np.float64)
    want = np.stack([np.full(4, 12.0), xd.mean(1), ((xd - xd.mean(1, keepdims=True)) ** 2).sum(1)], 1)
    np.testing.assert_allclose(stats, want.astype(np.float32), rtol=1e-6)


def test_device_print(capsys):
    x, t = hbm("x", (2, 2)), sbuf("t", (2, 2))
    body = [alloc(t), load(whole(t), acc(x, (2, 2))),
            Loop("affine", I0, sympy.Integer(0), sympy.Integer(2), sympy.Integer(1),
                 [instr(Op.PRINT, (), (whole(t),), label="tile t")])]
    run_kernel(kernel([x], [], body, grid=(1, 2)), [np.array([[1.5, 2], [3, 4]], np.float32)])
    lines = capsys.readouterr().out
    assert lines.count("tile t: f32[2, 2]") == 4
    assert "pid=(0, 1, 0) i0=1" in lines and "1.5" in lines


def test_bitwise_on_float_is_dtype_error():
    x = np.zeros((2, 2), np.float32)
    with pytest.raises(DTypeError, match="bitwise_and"):
        elementwise(lambda ins, out: [instr(Op.TENSOR_TENSOR, (out,), (ins[0], ins[0]), op=Alu.bitwise_and)], [x],
                    (2, 2))


def test_launch_errors():
    k = copy_kernel((2, 2))
    with pytest.raises(LaunchError, match="takes 2 arrays"):
        run_kernel(k, [np.zeros((2, 2), np.float32)])
    with pytest.raises(LaunchError, match="dtype"):
        run_kernel(k, [np.zeros((2, 2), np.float64), np.zeros((2, 2), np.float32)])
    with pytest.raises(LaunchError, match="shape"):
        run_kernel(k, [np.zeros((2, 3), np.float32), np.zeros((2, 2), np.float32)])


# ----------------------------------------------------------------------------- expression evaluation


def test_symeval_exact_integer_semantics():
    big = 3 * 10**15
    env = {I0: big, I1: -7}
    e = sympy.floor((I0 + A0) / 3) + sympy.ceiling(I1 / 2) * 1000 + sympy.Mod(I1 + A0, 5) * 10**6
    got = evaluate_on_tile(e, (4,), env)
    want = [(big + a) // 3 + (-(7 // 2)) * 1000 + ((-7 + a) % 5) * 10**6 for a in range(4)]
    assert got.tolist() == want
    e2 = sympy.Piecewise((sympy.Min(A0, A1), sympy.And(A0 > 0, sympy.Ne(A1, 2))), (sympy.Max(A0, 7), True))
    got2 = evaluate_on_tile(e2, (3, 4), {})
    r, c = np.indices((3, 4))
    np.testing.assert_array_equal(got2, np.where((r > 0) & (c != 2), np.minimum(r, c), np.maximum(r, 7)))
    assert evaluate_on_tile(sympy.true, (2, 2), {}).all()
    fallback = sympy.log(A0 + 1)  # not translated: sympy.lambdify fallback
    np.testing.assert_allclose(evaluate_on_tile(fallback, (3,), {}), np.log([1.0, 2.0, 3.0]))
