"""trnlang.nki: NKI-style kernels written here against the public NKI API, checked against numpy and
against the numpy reference interpreter (``nki.simulate_kernel``), in both isa styles."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

import trnlang as trn
import trnlang.nki as nki
import trnlang.nki.isa as nisa
import trnlang.nki.language as nl

rng = np.random.default_rng(1)


def _both(kernel, *args):
    """The JIT result and the interpreter's, which must agree."""
    out = kernel(*args)
    ref = nki.simulate_kernel(kernel, *args)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    return out


@nki.jit
def grid_add(a, b):
    c = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix = nl.program_id(0) * 128 + nl.arange(128)[:, None]
    iy = nl.program_id(1) * 256 + nl.arange(256)[None, :]
    nl.store(c[ix, iy], value=nl.add(nl.load(a[ix, iy]), nl.load(b[ix, iy])))
    return c


def test_grid_launch_and_simulator():
    a, b = rng.random((256, 512), np.float32), rng.random((256, 512), np.float32)
    np.testing.assert_array_equal(grid_add[2, 2](a, b), a + b)


@nki.jit
def row_softmax(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    m = nl.max(t, axis=1)                       # [P, 1]: the partition dimension stays
    e = nl.exp(nl.subtract(t, m))
    nl.store(out, value=nl.divide(e, nl.sum(e, axis=1)))
    return out


def test_reductions_keep_the_partition_dimension_when_free_size_is_128():
    x = rng.random((128, 128), np.float32)      # the square case numpy broadcasting gets wrong
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(_both(row_softmax, x), e / e.sum(axis=1, keepdims=True), rtol=1e-5)


@nki.jit
def column_scale(x, s):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    col = nl.load(s[0:128, 1])                  # integer index: [128, 1]
    y = nisa.activation(op=nl.exp, data=nl.load(x), scale=col, bias=None)
    nl.store(out, value=y)
    return out


def test_activation_scale_tile_and_integer_index_keeps_2d():
    x, s = rng.random((128, 64), np.float32), rng.random((128, 3), np.float32)
    np.testing.assert_allclose(_both(column_scale, x, s), np.exp(x * s[:, 1:2]), rtol=1e-5)


@nki.jit
def blocked_accumulate(x):
    n = x.shape[0] // 128
    out = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((2, nl.par_dim(128), x.shape[1]), dtype=nl.float32)   # two blocks
    for i in nl.affine_range(n):
        t = nl.load(x[i * 128:(i + 1) * 128, :])
        acc[0, 0:128, :] += t
        acc[1] += nl.multiply(t, t)
    assert acc.shape == (2, 128, x.shape[1])
    nl.store(out, value=nl.add(acc[0], acc[1]))
    return out


def test_par_dim_blocks():
    x = rng.random((384, 32), np.float32)
    want = sum(x[i * 128:(i + 1) * 128] + x[i * 128:(i + 1) * 128] ** 2 for i in range(3))
    np.testing.assert_allclose(_both(blocked_accumulate, x), want, rtol=1e-5)


@nki.jit
def masked_half(x, n):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(x.shape[1])[None, :]
    t = nl.load(x)
    t[...] = nl.multiply(t, 2.0, mask=(i_f < n))   # lanes off the mask keep their value
    nl.store(out[i_p, i_f], value=t)
    return out


def test_mask_on_compute_ops():
    x = rng.random((128, 16), np.float32)
    want = x.copy()
    want[:, :5] *= 2
    np.testing.assert_allclose(_both(masked_half, x, 5), want)


@nki.jit
def matmul_dst_style(lhsT, rhs):
    k, m = lhsT.shape
    _, n = rhs.shape
    result = nl.ndarray((m, n), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    res_psum = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.psum)   # uninitialised: the group starts
    for kk in nl.affine_range(k // 128):
        a = nl.ndarray((128, m), dtype=lhsT.dtype, buffer=nl.sbuf)
        b = nl.ndarray((128, n), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT[kk * 128:(kk + 1) * 128, :])
        nisa.dma_copy(dst=b, src=rhs[kk * 128:(kk + 1) * 128, :])
        nisa.nc_matmul(dst=res_psum, stationary=a, moving=b)
    res = nl.ndarray((m, n), dtype=result.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=res_psum)
    nisa.dma_copy(dst=result, src=res)
    return result


@nki.jit
def matmul_functional_style(lhsT, rhs):
    k, m = lhsT.shape
    _, n = rhs.shape
    result = nl.ndarray((m, n), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    acc = nl.zeros((m, n), dtype=nl.float32, buffer=nl.psum)
    for kk in nl.affine_range(k // 128):
        acc += nisa.nc_matmul(nl.load(lhsT[kk * 128:(kk + 1) * 128, :]), nl.load(rhs[kk * 128:(kk + 1) * 128, :]))
    nl.store(result, value=nisa.tensor_copy(acc))
    return result


@pytest.mark.parametrize("kernel", [matmul_dst_style, matmul_functional_style])
def test_matmul_both_isa_styles(kernel):
    a, b = rng.random((256, 64), np.float32), rng.random((256, 128), np.float32)
    np.testing.assert_allclose(_both(kernel, a, b), a.T @ b, rtol=1e-4)


@nki.jit
def one_matmul(lhsT, rhs):
    result = nl.ndarray((lhsT.shape[1], rhs.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray(result.shape, dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(ps, nl.load(lhsT), nl.load(rhs))
    nl.store(result, value=ps)
    return result


def test_psum_accumulation_groups():
    a, b = rng.random((128, 64), np.float32), rng.random((128, 128), np.float32)
    ir = one_matmul.ir(a, b)  # the first matmul into a fresh PSUM tile overwrites it: no memset
    assert "memset" not in ir and "nc_matmul" in ir and "accumulate = false" in ir
    np.testing.assert_allclose(_both(one_matmul, a, b), a.T @ b, rtol=1e-4)
    ir = matmul_dst_style.ir(a, b).splitlines()  # in a loop: zeroed once before it, then accumulating
    first_loop = next(i for i, line in enumerate(ir) if "affine_range" in line)
    assert [i for i, line in enumerate(ir) if "memset" in line] == [first_loop - 1]


@nki.jit
def list_of_tiles(x):
    out = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    tiles = []
    for i in nl.affine_range(x.shape[0] // 128):   # NKI unrolls loops whose variable indexes a list
        tiles.append(nl.load(x[i * 128:(i + 1) * 128, :]))
    acc = nl.zeros((128, x.shape[1]), dtype=nl.float32)
    for i in nl.affine_range(len(tiles)):
        acc[...] = nl.add(acc, tiles[i])
    nl.store(out, value=acc)
    return out


def test_list_indexed_by_loop_variable():
    x = rng.random((384, 8), np.float32)
    np.testing.assert_allclose(_both(list_of_tiles, x), x.reshape(3, 128, 8).sum(0), rtol=1e-5)


@nki.jit
def reduce_registers(x):
    out = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    res = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
    t = nl.load(x)
    nisa.tensor_scalar_reduce(data=t, op0=nl.multiply, operand0=2.0, reduce_op=nl.max, reduce_res=res[:, 0])
    res[:, 1] = nisa.tensor_reduce(op=nl.max, data=t, axis=1, negate=True)
    nisa.activation(op=nl.exp, data=t, bias=res[:, 1], reduce_op=nl.add, reduce_res=res[:, 2],
                    reduce_cmd=nisa.reduce_cmd.reset_reduce)
    res[:, 3] = nisa.reciprocal(res[:, 2])
    nl.store(out, value=res)
    return out


def test_tensor_scalar_reduce_negate_and_activation_reduce_res():
    x = rng.random((128, 32), np.float32)
    got = _both(reduce_registers, x)
    s = np.exp(x - x.max(1, keepdims=True)).sum(1)
    np.testing.assert_allclose(got, np.stack([2 * x.max(1), -x.max(1), s, 1 / s], 1), rtol=1e-5)


@nki.jit
def stats(x):
    out = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(512)[None, :]
    i_s = nl.arange(6)[None, :]
    t = nl.load(x)
    st = nl.ndarray((128, 12), dtype=nl.float32)
    for j in nl.affine_range(2):
        st[i_p, j * 6 + i_s] = nisa.bn_stats(t[i_p, j * 512 + i_f])   # index values as unit-stride slices
    nl.store(out, value=nisa.bn_aggr(st))
    return out


def test_bn_stats_six_columns_and_index_value_tile_keys():
    x = rng.random((128, 1024), np.float32)
    np.testing.assert_allclose(_both(stats, x), np.stack([x.mean(1), x.var(1)], 1), rtol=1e-4, atol=1e-6)


@nki.jit
def vec_reshape(g):
    out = nl.ndarray((1, g.shape[0]), dtype=g.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(g.reshape((1, g.shape[0]))))
    return out


def test_hbm_reshape_view():
    g = rng.random(40, np.float32)
    np.testing.assert_array_equal(vec_reshape(g), g[None, :])


def test_keyword_meta_parameters():
    @nki.jit
    def scaled(x, factor=2.0):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out, value=nl.multiply(nl.load(x), factor))
        return out

    x = np.ones((4, 4), np.float32)
    assert scaled(x, factor=3.0)[0, 0] == 3.0 and scaled(x)[0, 0] == 2.0


def test_benchmark_and_profile_write_a_trace(tmp_path):
    x = rng.random((128, 128), np.float32)
    path = tmp_path / "t.json"
    bench = nki.benchmark(row_softmax, warmup=2, iters=5, save_trace_name=str(path))
    out = bench(x)
    assert out.shape == x.shape
    lat = bench.benchmark_result.nc_latency.get_latency_percentile(99)
    assert lat > 0 and lat == bench.profile.time_us
    assert any(e.get("ph") == "X" for e in json.loads(path.read_text())["traceEvents"])
    prof = nki.profile(working_directory=str(tmp_path), save_trace_name="p.json")(row_softmax)
    prof(x)
    assert (tmp_path / "p.json").exists()
    assert nki.baremetal(row_softmax) is row_softmax


def test_install_aliases_resolve_and_uninstall():
    if "neuronxcc" in sys.modules and sys.modules["neuronxcc"].__dict__.get("nki") is not nki:
        pytest.skip("a real neuronxcc is imported")
    added = nki.install()
    try:
        import neuronxcc.nki as nki2
        import neuronxcc.nki.isa as nisa2
        import neuronxcc.nki.language as nl2

        assert nki2 is nki and nl2 is nl and nisa2 is nisa
        from neuronxcc.nki.typing import tensor

        assert tensor[128, 512] is tensor
    finally:
        if added:
            nki.uninstall()


@nki.jit
def strided_and_permuted(x):
    p, n = x.shape
    out = nl.ndarray((p, n), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    i_p, i_a, i_b = nl.mgrid[0:p, 0:2, 0:n // 2]
    o = nl.ndarray((p, n), dtype=x.dtype)
    o[i_p, i_a * (n // 2) + i_b] = nl.copy(t[i_p, 2 * i_b + i_a])   # even columns first, then odd ones
    nl.store(out, value=o)
    return out


def test_strided_and_permuted_tile_views():
    x = rng.random((16, 10), np.float32)
    np.testing.assert_array_equal(_both(strided_and_permuted, x), np.concatenate([x[:, 0::2], x[:, 1::2]], 1))
    ir = strided_and_permuted.ir(x)
    assert " ap[" in ir and ir.count("tensor_copy") == 1   # one instruction reads and writes the patterns
    from trnlang.ir.equality import kernels_equal
    from trnlang.ir.parser import parse_kernel
    from trnlang.ir.printer import print_kernel

    k = strided_and_permuted.trace(x)
    assert kernels_equal(parse_kernel(print_kernel(k)), k)   # the IR text round-trips the access pattern


def test_view_that_steps_over_partitions():
    @nki.jit
    def every_other(x):
        out = nl.ndarray((4, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        i_p, i_f = nl.mgrid[0:4, 0:4]
        nl.store(out, value=nl.copy(t[2 * i_p, i_f]))
        return out

    x = rng.random((8, 4), np.float32)
    np.testing.assert_array_equal(_both(every_other, x), x[0::2])
    assert "ap[8, 1]x[4, 4]" in every_other.ir(x)    # one strided access, no copy per partition


def test_view_that_permutes_partitions_is_a_clear_error_at_the_users_line():
    @nki.jit
    def swapped(x):
        out = nl.ndarray((4, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        i_p, i_f = nl.mgrid[0:4, 0:4]
        nl.store(out, value=nl.copy(t[i_f, i_p]))
        return out

    with pytest.raises(trn.ShapeError, match="partition dimension") as ei:
        swapped(np.ones((4, 4), np.float32))
    assert "test_nki_api.py" in str(ei.value) and "t[i_f, i_p]" in str(ei.value)


def test_tiles_with_blocks_must_be_indexed_before_compute():
    @nki.jit
    def unindexed(x):
        out = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.shared_hbm)
        b = nl.zeros((2, nl.par_dim(128), 4), dtype=nl.float32)
        nl.store(out, value=nl.exp(b))
        return out

    with pytest.raises(trn.ShapeError, match="block dimension"):
        unindexed(np.ones((128, 4), np.float32))


def test_docs_example_runs(tmp_path, monkeypatch):
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "nki.md").read_text()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "nki_doc_example.py"
    path.write_text(code)
    try:
        exec(compile(code, str(path), "exec"), {"__name__": "nki_doc_example"})
    finally:
        nki.uninstall()
    assert (tmp_path / "add_trace.json").exists()


def test_missing_builtins_name_the_closest_ones():
    import trnlang.language as tl

    with pytest.raises(AttributeError, match=r"trnlang.nki.language has no builtin 'expp'; did you mean exp\?"):
        nl.expp  # noqa: B018
    with pytest.raises(AttributeError, match="trnlang.nki.isa has no builtin 'dma_transposee'"):
        nisa.dma_transposee  # noqa: B018
    with pytest.raises(AttributeError, match=r"trnlang.language has no builtin 'sofmax'.*language_reference"):
        tl.sofmax  # noqa: B018


def test_reading_uninitialised_psum_is_an_error_in_tl_and_a_group_start_in_nki():
    import trnlang.language as tl

    @trn.kernel
    def acc_uninit(a, b, out):
        acc = tl.ndarray((64, 128), tl.float32, buffer=tl.psum)
        acc += tl.matmul(tl.load(a), tl.load(b), transpose_x=True)
        tl.store(out, acc)

    a, b = rng.random((128, 64), np.float32), rng.random((128, 128), np.float32)
    with pytest.raises(trn.TraceError, match="PSUM tile nothing has written") as ei:
        acc_uninit(a, b, np.empty((64, 128), np.float32))
    assert "acc += tl.matmul" in str(ei.value)

    @nki.jit
    def acc_group(a, b):
        out = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.shared_hbm)
        acc = nl.ndarray((64, 128), dtype=nl.float32, buffer=nl.psum)
        for k in nl.affine_range(2):
            acc += nisa.nc_matmul(nl.load(a[k * 64:(k + 1) * 64, :]), nl.load(b[k * 64:(k + 1) * 64, :]))
        nl.store(out, value=acc)
        return out

    np.testing.assert_allclose(_both(acc_group, a, b), a.T @ b, rtol=1e-4)
