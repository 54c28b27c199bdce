"""The core features NKI kernels need beyond the first namespace (issue 20): ``nl.shared_constant``,
``tensor_scalar_reduce`` as one instruction, the Scalar engine's reduce registers (``reduce_cmd``), PSUM
tensors with block dimensions larger than PSUM, and decorator directives. Each kernel runs compiled and in
the numpy reference interpreter and is compared with numpy; the IR is inspected where the claim is about it."""

from __future__ import annotations

import numpy as np
import pytest

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl
import trnlang.nki as nki
import trnlang.nki.isa as nisa
import trnlang.nki.language as nl
from trnlang.ir.equality import kernels_equal
from trnlang.ir.nodes import instrs
from trnlang.ir.ops import Op
from trnlang.ir.parser import parse_kernel
from trnlang.ir.printer import print_kernel

rng = np.random.default_rng(7)


def _both(kernel, *args, rtol=1e-5, atol=1e-5):
    out = kernel(*args)
    ref = nki.simulate_kernel(kernel, *args)
    np.testing.assert_allclose(out, ref, rtol=rtol, atol=atol)
    return out


def _ops(kernel, *args):
    return [i.op for i in instrs(kernel.trace(*args).body)]


# ---------------------------------------------------------------------------------- shared_constant
@nki.jit
def add_table(x):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    ident = nl.shared_constant(np.identity(128, dtype=np.int8), dtype=nl.bfloat16)
    table = nl.shared_constant(np.arange(128 * 3, dtype=np.float32).reshape(128, 3) / 7)
    p = nisa.nc_matmul(nl.load(ident), nl.load(x))          # identity.T @ x: x through the Tensor engine
    nl.store(out, value=nl.add(nisa.tensor_copy(p), nl.load(table)[:, 1:2]))
    return out


def test_shared_constant_is_baked_into_the_kernel():
    x = rng.random((128, 48), np.float32)
    table = np.arange(128 * 3, dtype=np.float32).reshape(128, 3) / 7
    np.testing.assert_allclose(_both(add_table, x), x + table[:, 1:2], rtol=1e-6)
    k = add_table.trace(x)
    consts = [t for t in k.scratch if t.data is not None]
    assert [t.shape for t in consts] == [(128, 128), (128, 3)]
    assert consts[0].data.dtype == trn.bfloat16.np if hasattr(trn, "bfloat16") else True


def test_shared_constant_rejects_non_arrays():
    @nki.jit
    def bad(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        c = nl.shared_constant(3.0)
        nl.store(out, value=nl.load(c))
        return out

    with pytest.raises(trn.TraceError, match="shared_constant takes a numpy array") as ei:
        bad(np.ones((2, 2), np.float32))
    assert "nl.shared_constant(3.0)" in str(ei.value)


# ---------------------------------------------------------------------------------- tensor_scalar_reduce
@nki.jit
def scale_and_max_functional(x):
    out = nl.ndarray((128, 65), dtype=nl.float32, buffer=nl.shared_hbm)
    res = nl.ndarray((128, 65), dtype=nl.float32, buffer=nl.sbuf)
    y = nisa.tensor_scalar_reduce(data=nl.load(x), op0=nl.multiply, operand0=-3.0, reduce_op=nl.max,
                                  reduce_res=res[:, 64])
    res[:, 0:64] = y
    nl.store(out, value=res)
    return out


@nki.jit
def scale_and_max_dst(x):
    out = nl.ndarray((128, 65), dtype=nl.float32, buffer=nl.shared_hbm)
    res = nl.ndarray((128, 65), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(dst=res[:, 0:64], data=nl.load(x), op0=nl.multiply, operand0=-3.0, reduce_op=nl.max,
                              reduce_res=res[:, 64])
    nl.store(out, value=res)
    return out


@pytest.mark.parametrize("kernel", [scale_and_max_functional, scale_and_max_dst], ids=["functional", "dst"])
def test_tensor_scalar_reduce_is_one_instruction(kernel):
    x = rng.random((128, 64), np.float32) - 0.5
    want = np.concatenate([-3 * x, (-3 * x).max(1, keepdims=True)], 1)
    np.testing.assert_allclose(_both(kernel, x), want, rtol=1e-6)
    ops = _ops(kernel, x)
    assert ops.count(Op.TENSOR_SCALAR) == 1 and Op.TENSOR_REDUCE not in ops
    if kernel is scale_and_max_dst:
        assert Op.TENSOR_COPY not in ops       # dst=: the instruction writes the view itself
    k = kernel.trace(x)
    assert kernels_equal(parse_kernel(print_kernel(k)), k)
    (ts,) = [i for i in instrs(k.body) if i.op is Op.TENSOR_SCALAR]
    assert len(ts.outs) == 2 and ts.attrs["reduce_op"].value == "maximum"


def test_core_isa_tensor_scalar_reduce_with_int_data():
    @trn.kernel
    def k(x, y, s):
        t, r = isa.tensor_scalar_reduce(tl.load(x[0:16, 0:8]), tl.add, 3, tl.add)
        tl.store(y[0:16, 0:8], t)
        tl.store(s[0:16, 0:1], r)

    x = rng.integers(-50, 50, (16, 8)).astype(np.int32)
    y, s = np.zeros_like(x), np.zeros((16, 1), np.float32)
    k(x, y, s)
    np.testing.assert_array_equal(y, x + 3)
    np.testing.assert_array_equal(s[:, 0], (x + 3).sum(1))


# ---------------------------------------------------------------------------------- reduce registers
def _registers_kernel(dst_style: bool):
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 5), dtype=nl.float32, buffer=nl.shared_hbm)
        res = nl.ndarray((128, 5), dtype=nl.float32, buffer=nl.sbuf)
        y = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        t = nl.load(x)
        if dst_style:
            nisa.activation(dst=y, op=nl.exp, data=t[:, 0:64], reduce_op=nl.add,
                            reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_res=res[:, 0:1])
        else:
            y[...] = nisa.activation(op=nl.exp, data=t[:, 0:64], reduce_op=nl.add,
                                     reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_res=res[:, 0:1])
        for i in nl.sequential_range(3):  # accumulate onto the registers, across instructions and iterations
            nisa.activation(op=nl.exp, data=t[:, nl.ds(64 + 64 * i, 64)], reduce_op=nl.add,
                            reduce_cmd=nisa.reduce_cmd.reduce)
        nisa.activation(op=nl.copy, data=t[:, 0:1], reduce_cmd=nisa.reduce_cmd.idle, reduce_res=res[:, 1:2])
        nisa.activation(op=nl.exp, data=t[:, 0:64], scale=2.0, reduce_op=nl.add,
                        reduce_cmd=nisa.reduce_cmd.reduce, reduce_res=res[:, 2:3])
        nisa.activation(op=nl.exp, data=t[:, 0:8], reduce_cmd=nisa.reduce_cmd.reset, reduce_res=res[:, 3:4])
        nisa.activation(op=nl.exp, data=t[:, 0:8], reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reduce,
                        reduce_res=res[:, 4:5])
        nl.store(out, value=res)
        return out

    return k


@pytest.mark.parametrize("dst_style", [False, True], ids=["functional", "dst"])
def test_reduce_registers_accumulate_across_instructions(dst_style):
    k = _registers_kernel(dst_style)
    x = rng.random((128, 256), np.float32)
    e = np.exp(x)
    total = e.sum(1)
    want = np.stack([e[:, :64].sum(1), total, total + np.exp(2 * x[:, :64]).sum(1), np.zeros(128),
                     e[:, :8].sum(1)], 1)
    np.testing.assert_allclose(_both(k, x), want, rtol=2e-5)
    ops = _ops(k, x)
    assert ops.count(Op.ACTIVATION) == 6 and Op.TENSOR_REDUCE not in ops and Op.TENSOR_TENSOR not in ops
    kern = k.trace(x)
    assert kernels_equal(parse_kernel(print_kernel(kern)), kern)
    cmds = [i.attrs.get("reduce_cmd") for i in instrs(kern.body) if i.op is Op.ACTIVATION]
    assert cmds == ["reset_reduce", "reduce", "idle", "reduce", "reset", "reduce"]


def test_reduce_registers_read_before_set_is_an_error_at_the_users_line():
    @nki.jit
    def unset(x):
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        r = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(op=nl.exp, data=nl.load(x), reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reduce, reduce_res=r)
        nl.store(out, value=r)
        return out

    with pytest.raises(trn.TraceError, match="no earlier instruction set them") as ei:
        unset(np.ones((128, 4), np.float32))
    assert "reduce_cmd=nisa.reduce_cmd.reduce" in str(ei.value)


def test_reset_reduce_without_later_reads_writes_no_registers():
    @nki.jit
    def plain(x):
        out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
        r = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(op=nl.exp, data=nl.load(x), reduce_op=nl.add, reduce_cmd=nisa.reduce_cmd.reset_reduce,
                        reduce_res=r)
        nl.store(out, value=r)
        return out

    x = rng.random((128, 16), np.float32)
    np.testing.assert_allclose(_both(plain, x)[:, 0], np.exp(x).sum(1), rtol=1e-5)
    (act,) = [i for i in instrs(plain.trace(x).body) if i.op is Op.ACTIVATION]
    assert len(act.outs) == 2   # the result and reduce_res: the registers are written only when read later


# ---------------------------------------------------------------------------------- PSUM blocks, directives
@nki.compiler.skip_middle_end_transformations
@nki.jit
def psum_blocks(a, b):
    out = nl.ndarray((128, 4 * 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((4, 2, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)  # 8 banks of blocks
    big = nl.ndarray((2, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
    ta, tb = nl.load(a), nl.load(b)
    for i in nl.sequential_range(4, directives=nki.compiler.no_reorder()):
        for j in nl.affine_range(2):
            acc[i, j] = nisa.nc_matmul(ta, tb[:, nl.ds(j * 512, 512)])
        big[i % 2] = nisa.nc_matmul(ta, tb[:, 0:512])
        s = nl.add(acc[i, 0], acc[i, 1])
        nl.store(out[:, nl.ds(i * 512, 512)], value=nl.add(s, big[i % 2]))
    return out


def test_psum_tensors_with_blocks_are_placed_one_block_at_a_time():
    a, b = rng.random((128, 128), np.float32), rng.random((128, 1024), np.float32)
    p0, p1 = a.T @ b[:, :512], a.T @ b[:, 512:]
    want = np.tile(2 * p0 + p1, (1, 4))
    np.testing.assert_allclose(_both(psum_blocks, a, b, rtol=1e-4, atol=1e-3), want, rtol=1e-4, atol=1e-3)
    assert psum_blocks.profile(a, b).time_us > 0


# ---------------------------------------------------------------------------------- affine_range diagnostics
def _carried_kernel(kind: str):
    @nki.jit
    def k(x):
        out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.zeros((128, 64), dtype=nl.float32, buffer=nl.sbuf)
        loop = nl.affine_range if kind == "affine" else nl.sequential_range
        for i in loop(4):
            if kind == "inplace":
                acc += nl.load(x[i])                      # an associative accumulation: allowed
            else:
                t = nl.multiply(acc, 0.5)                 # reads what the previous iteration wrote
                acc[...] = nl.add(t, nl.load(x[i]))
        nl.store(out, value=acc)
        return out

    return k


def test_loop_carried_dependence_in_affine_range_warns_at_the_users_line():
    import warnings

    from trnlang.ir.carried import CarriedDependenceWarning

    x = rng.random((4, 128, 64), np.float32)
    want = np.zeros((128, 64), np.float32)
    for i in range(4):
        want = want * 0.5 + x[i]
    for kind in ("affine", "sequential", "inplace"):
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            out = _both(_carried_kernel(kind), x)
        ref = want if kind != "inplace" else x.sum(0)
        np.testing.assert_allclose(out, ref, rtol=1e-5)
        mine = [w for w in got if issubclass(w.category, CarriedDependenceWarning)]
        if kind == "affine":
            assert mine, "no diagnostic for a loop-carried dependence in affine_range"
            assert mine[0].filename == __file__ and "sequential_range" in str(mine[0].message)
            assert "nl.multiply(acc, 0.5)" in str(mine[0].message)
        else:
            assert not mine, [str(w.message) for w in mine]


# ---------------------------------------------------------------------------------- explicit .ap()
@nki.jit
def ap_permute(x):
    out = nl.ndarray((4, 3, 4), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    y = nl.ndarray((4, 3, 4), dtype=x.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=y, src=t.ap(pattern=[[12, 4], [1, 3], [3, 4]], offset=0))
    nl.store(out, value=y)
    return out


@nki.jit
def ap_strided(x):
    out = nl.ndarray((2, 6), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(out, value=nl.copy(t.ap(pattern=[[24, 2], [2, 6]], offset=1)))  # every other partition and column
    return out


def test_explicit_access_patterns():
    x = rng.random((4, 12), np.float32)
    np.testing.assert_array_equal(_both(ap_permute, x), x.reshape(4, 4, 3).transpose(0, 2, 1))
    assert "ap[12, 1, 3]x[4, 3, 4]" in ap_permute.ir(x)
    flat = x.reshape(-1)
    np.testing.assert_array_equal(_both(ap_strided, x), flat[1 + 24 * np.arange(2)[:, None] + 2 * np.arange(6)])

    @nki.jit
    def half_partition(x):
        out = nl.ndarray((2, 6), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.copy(nl.load(x).ap(pattern=[[18, 2], [2, 6]])))
        return out

    with pytest.raises(trn.ShapeError, match="not a whole number of partitions") as ei:
        half_partition(x)
    assert "ap(pattern=[[18, 2], [2, 6]])" in str(ei.value)


# ---------------------------------------------------------------------------------- documented limits
@nki.jit
def ragged_stats(x):
    out = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p, i_f = nl.arange(128)[:, None], nl.arange(512)[None, :]
    i_s = nl.arange(6)[None, :]
    t = nl.load(x)
    st = nl.ndarray((128, 12), dtype=nl.float32)
    for j in nl.affine_range(2):          # the last chunk is ragged: the mask limits the lanes bn_stats reads
        st[i_p, j * 6 + i_s] = nisa.bn_stats(t[i_p, j * 512 + i_f], mask=(j * 512 + i_f < x.shape[1]))
    nl.store(out, value=nisa.bn_aggr(st))
    return out


@pytest.mark.parametrize("width", [700, 1024, 520])
def test_bn_stats_read_mask_with_a_ragged_last_chunk(width):
    x = rng.random((128, width), np.float32)
    got = _both(ragged_stats, x, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got, np.stack([x.mean(1), x.var(1)], 1), rtol=1e-4, atol=1e-6)


def test_bn_stats_read_mask_that_is_not_a_prefix_is_a_clear_error_at_the_users_line():
    @nki.jit
    def odd(x):
        out = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
        i_f = nl.arange(512)[None, :]
        nl.store(out, value=nisa.bn_aggr(nisa.bn_stats(nl.load(x), mask=(i_f >= 3))))
        return out

    with pytest.raises(trn.ShapeError, match="prefix of the row") as ei:
        odd(np.ones((128, 512), np.float32))
    assert "mask=(i_f >= 3)" in str(ei.value)


# ---------------------------------------------------------------------------------- views of views
@nki.jit
def view_of_view(x):
    out = nl.ndarray((4, 3, 2), dtype=x.dtype, buffer=nl.shared_hbm)
    cols = nl.ndarray((4, 2), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    i_p, i_f = nl.mgrid[0:8, 0:6]
    v = t[i_p, 2 * i_f]                             # even columns: a strided view
    j_p, j_a, j_b = nl.mgrid[0:4, 0:3, 0:2]
    nl.store(out, value=nl.copy(v[2 * j_p, 2 * j_b + j_a]))  # a view of it: every other partition, permuted
    for k in nl.affine_range(2):
        nl.store(cols[:, k:k + 1], value=nl.copy(v[0:4, k + 1]))  # slices and a loop variable: [4, 1]
    return out, cols


def test_views_of_strided_views_compose_into_one_access_pattern():
    x = rng.random((8, 12), np.float32)
    v = x[:, 0::2]
    want = np.empty((4, 3, 2), np.float32)
    for p in range(4):
        for a in range(3):
            for b in range(2):
                want[p, a, b] = v[2 * p, 2 * b + a]
    for got in (view_of_view(x), nki.simulate_kernel(view_of_view, x)):
        np.testing.assert_array_equal(got[0], want)
        np.testing.assert_array_equal(got[1], v[0:4, 1:3])
    text = view_of_view.ir(x)
    assert "ap[24, 2, 4]x[4, 3, 2]" in text and "ap[12, 2]x[4, 1]" in text
    assert _ops(view_of_view, x).count(Op.TENSOR_COPY) == 2   # the two nl.copy calls: no copy per view
