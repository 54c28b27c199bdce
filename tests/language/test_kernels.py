"""The foundation kernels against torch (hypothesis shapes: ragged last tiles, size 1, grids)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang as trn
import trnlang.language as tl
from tests.kernels import CASES, run_case

CASE_IDS = [c.name for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("n,d", [(1, 1), (128, 64), (300, 33)])
def test_case_fixed_shapes(case, n, d):
    got, ref = run_case(case, n, d)
    torch.testing.assert_close(got, ref, atol=case.atol, rtol=case.rtol)


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@settings(max_examples=6, deadline=None)
@given(n=st.integers(1, 290), d=st.integers(1, 140), seed=st.integers(0, 2**16))
def test_case_random_shapes(case, n, d, seed):
    got, ref = run_case(case, n, d, seed)
    torch.testing.assert_close(got, ref, atol=case.atol, rtol=case.rtol)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_add_bit_exact(dtype):
    from tests.kernels import vector_add

    g = torch.Generator().manual_seed(3)
    x = torch.randn(200, 48, generator=g).to(dtype)
    y = torch.randn(200, 48, generator=g).to(dtype)
    out = torch.empty_like(x)
    vector_add(x, y, out)
    assert torch.equal(out, x + y)


def test_numpy_inputs_and_returned_output():
    from tests.kernels import new_output

    x = np.random.default_rng(0).standard_normal((130, 7)).astype(np.float32)
    out = new_output(x)
    assert isinstance(out, np.ndarray)
    ref = torch.nn.functional.gelu(torch.from_numpy(x)).numpy() * 2
    np.testing.assert_allclose(out, ref, atol=1e-5, rtol=1e-5)


def test_non_contiguous_inputs():
    from tests.kernels import vector_add

    x = torch.randn(64, 40).T  # (40, 64), non-contiguous
    y = torch.randn(40, 64)
    out = torch.empty(64, 40).T
    vector_add(x, y, out)
    torch.testing.assert_close(out, x + y)


def test_specialization_cache():
    from tests.kernels import softmax as shared

    softmax = trn.kernel(shared.fn)  # a fresh kernel: no variants from other tests
    x = torch.randn(10, 8)
    out = torch.empty_like(x)
    softmax(x, out)
    n = len(softmax._cache)
    softmax(torch.randn(10, 8), out)
    assert len(softmax._cache) == n
    x = torch.randn(11, 8)  # a new row count: a runtime size, the same variant
    o = torch.empty(11, 8)
    softmax(x, o)
    assert len(softmax._cache) == n
    torch.testing.assert_close(o, torch.softmax(x, -1))
    softmax(torch.randn(11, 9), torch.empty(11, 9))  # the column count is a tile shape: a new variant
    assert len(softmax._cache) == n + 1


def test_affine_range_is_not_unrolled():
    from tests.kernels import softmax
    from trnlang.ir.nodes import Loop

    k = softmax.trace(torch.randn(1000, 16), torch.empty(1000, 16))
    loops = [s for s in k.body if isinstance(s, Loop)]
    assert len(loops) == 1 and loops[0].stop == 8


def test_static_range_unrolls():
    @trn.kernel
    def k(x, out):
        for i in tl.static_range(3):
            tl.store(out[i:i + 1, :], tl.load(x[i:i + 1, :]) * float(i + 1))

    x = torch.randn(3, 5)
    out = torch.empty_like(x)
    k(x, out)
    torch.testing.assert_close(out, x * torch.tensor([[1.0], [2.0], [3.0]]))
    from trnlang.ir.nodes import Loop

    assert not any(isinstance(s, Loop) for s in k.trace(x, out).body)


def test_constants_specialize():
    @trn.kernel
    def k(x, out, alpha):
        tl.store(out[0:4, :], tl.load(x[0:4, :]) * alpha)

    x = torch.randn(4, 3)
    out = torch.empty_like(x)
    k(x, out, 2.0)
    torch.testing.assert_close(out, x * 2)
    k(x, out, 3.0)
    torch.testing.assert_close(out, x * 3)


def test_grid_2d():
    @trn.kernel
    def k(x, out):
        r = tl.program_id(0) * 16 + tl.arange(16)[:, None]
        c = tl.program_id(1) * 8 + tl.arange(8)[None, :]
        tl.store(out[r, c], tl.load(x[r, c]) + tl.program_id(1) * 100)

    x = torch.randn(32, 24)
    out = torch.empty_like(x)
    k[2, 3](x, out)
    ref = x + torch.arange(3).repeat_interleave(8)[None, :] * 100
    torch.testing.assert_close(out, ref)


def test_subtile_writes_and_psum_accumulate():
    @trn.kernel
    def k(a, b, out):
        buf = tl.ndarray((64, 4, 32), tl.float32, buffer=tl.sbuf)
        for j in tl.affine_range(4):
            buf[:, j, :] = tl.load(a[0:64, j * 32:(j + 1) * 32]) * 2.0
        acc = tl.zeros((32, 32), tl.float32, buffer=tl.psum)
        for j in tl.affine_range(4):
            acc += tl.matmul(buf[:, j, :], tl.load(b[0:64, 0:32]), transpose_x=True)
        tl.store(out[0:32, 0:32], acc)

    a = torch.randn(64, 128)
    b = torch.randn(64, 32)
    out = torch.empty(32, 32)
    k(a, b, out)
    ref = sum((2 * a[:, j * 32:(j + 1) * 32]).T @ b for j in range(4))
    torch.testing.assert_close(out, ref, atol=1e-3, rtol=1e-4)


def test_psum_accumulate_is_one_matmul_per_step():
    from tests.kernels import matmul_kn
    from trnlang.ir.nodes import instrs
    from trnlang.ir.ops import Op

    k = matmul_kn.trace(torch.randn(256, 128), torch.randn(256, 64), torch.empty(128, 64))
    mms = [i for i in instrs(k.body) if i.op is Op.MATMUL]
    assert len(mms) == 1 and mms[0].attrs["accumulate"] is True
    assert not any(i.op is Op.TENSOR_TENSOR for i in instrs(k.body))


def test_where_and_masks_with_other():
    @trn.kernel
    def k(x, out):
        r = tl.arange(128)[:, None]
        c = tl.arange(16)[None, :]
        t = tl.load(x[r, c], mask=c < 10, other=-1.0)
        tl.store(out[r, c], tl.where(r >= c, t, 0.0))

    x = torch.randn(128, 16)
    out = torch.empty_like(x)
    k(x, out)
    ref = torch.where(torch.arange(16)[None, :] < 10, x, -1.0)
    ref = torch.where(torch.arange(128)[:, None] >= torch.arange(16)[None, :], ref, 0.0)
    torch.testing.assert_close(out, ref)


def test_int_ops_and_reductions():
    @trn.kernel
    def k(x, s, am, mx):
        t = tl.load(x[0:50, 0:20])
        tl.store(s[0:50, 0:1], tl.sum(t, axis=1, keepdims=True))
        tl.store(am[0:50, 0:1], tl.argmax(t, axis=1, keepdims=True))
        tl.store(mx[0:50, 0:1], tl.max(t * 3 - 1, axis=1, keepdims=True))

    x = torch.randint(-100, 100, (50, 20), dtype=torch.int32)
    s = torch.empty(50, 1, dtype=torch.int32)
    am = torch.empty(50, 1, dtype=torch.int32)
    mx = torch.empty(50, 1, dtype=torch.int32)
    k(x, s, am, mx)
    assert torch.equal(s[:, 0], x.sum(1).int())
    assert torch.equal(am[:, 0], x.argmax(1).int())
    assert torch.equal(mx[:, 0], (x * 3 - 1).max(1).values)


def test_runtime_bounds_check_on_gather():
    from tests.kernels import embedding

    idx = torch.tensor([[1], [70]], dtype=torch.int32)  # 70 is outside a 50-row table
    table = torch.randn(50, 4)
    out = torch.zeros(2, 4)
    with pytest.raises(trn.BoundsError) as e:
        embedding(idx, table, out)
    assert "tests/kernels.py" in str(e.value)
