"""Every tl op of LANGUAGE.md section 5 and isa op of section 6, traced and run, against torch."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import trnlang as trn
import trnlang.isa as isa
import trnlang.language as tl

UNARY = {
    "exp": torch.exp, "log": torch.log, "log1p": torch.log1p, "expm1": torch.expm1, "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal, "abs": torch.abs, "negative": torch.neg,
    "sign": torch.sign, "floor": torch.floor, "ceil": torch.ceil, "square": torch.square, "tanh": torch.tanh,
    "sigmoid": torch.sigmoid, "relu": torch.relu, "gelu": torch.nn.functional.gelu,
    "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"), "silu": torch.nn.functional.silu,
    "softplus": torch.nn.functional.softplus, "erf": torch.erf, "sin": torch.sin, "cos": torch.cos,
}
POSITIVE = {"log", "sqrt", "rsqrt", "log1p"}

BINARY = {
    "add": torch.add, "subtract": torch.sub, "multiply": torch.mul, "divide": torch.div,
    "maximum": torch.maximum, "minimum": torch.minimum, "power": torch.pow, "fmod": torch.fmod,
}
COMPARE = {
    "equal": torch.eq, "not_equal": torch.ne, "less": torch.lt, "less_equal": torch.le, "greater": torch.gt,
    "greater_equal": torch.ge,
}


def _unary_kernel(name):
    fn = getattr(tl, name)

    @trn.kernel
    def k(x, out):
        n, d = x.shape
        rows = tl.arange(n)[:, None]
        cols = tl.arange(d)[None, :]
        tl.store(out[rows, cols], fn(tl.load(x[rows, cols])))

    return k


def _binary_kernel(name):
    fn = getattr(tl, name)

    @trn.kernel
    def k(x, y, out):
        n, d = x.shape
        a = tl.load(x[0:n, 0:d])
        b = tl.load(y[0:n, 0:1])         # broadcast a [n, 1] column
        tl.store(out[0:n, 0:d], fn(a, b))

    return k


@pytest.mark.parametrize("name", sorted(UNARY))
@settings(max_examples=4, deadline=None)
@given(n=st.integers(1, 128), d=st.integers(1, 70), seed=st.integers(0, 999))
def test_unary(name, n, d, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g) * 3
    if name in POSITIVE:
        x = x.abs() + 0.01
    out = torch.empty_like(x)
    _unary_kernel(name)(x, out)
    torch.testing.assert_close(out, UNARY[name](x), atol=2e-6, rtol=2e-5)


@pytest.mark.parametrize("name", sorted(BINARY) + sorted(COMPARE))
def test_binary(name):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(77, 33, generator=g)
    y = torch.randn(77, 1, generator=g)
    y[3, 0] = x[3, 0]
    if name == "power":
        x = x.abs() + 0.1
    ref = {**BINARY, **COMPARE}[name](x, y)
    out = torch.empty(77, 33, dtype=ref.dtype)
    _binary_kernel(name)(x, y, out)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", ["logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or",
                                  "bitwise_xor"])
def test_logical_and_bitwise(name):
    g = torch.Generator().manual_seed(2)
    if name.startswith("bitwise"):
        x = torch.randint(-1000, 1000, (40, 9), generator=g, dtype=torch.int32)
        y = torch.randint(-1000, 1000, (40, 1), generator=g, dtype=torch.int32)
    else:
        x = torch.rand(40, 9, generator=g) > 0.5
        y = torch.rand(40, 1, generator=g) > 0.5
    ref = getattr(torch, name)(x, y)
    out = torch.empty(40, 9, dtype=ref.dtype)
    _binary_kernel(name)(x, y, out)
    assert torch.equal(out, ref)


@pytest.mark.parametrize("name,ref", [
    ("sum", lambda x: x.sum(1)), ("max", lambda x: x.amax(1)), ("min", lambda x: x.amin(1)),
    ("mean", lambda x: x.mean(1)), ("prod", lambda x: x.prod(1)), ("argmax", lambda x: x.argmax(1).int()),
    ("argmin", lambda x: x.argmin(1).int()), ("var", lambda x: x.var(1, unbiased=False)),
])
def test_reductions(name, ref):
    fn = getattr(tl, name)

    @trn.kernel
    def k(x, out):
        n, d = x.shape
        tl.store(out[0:n, 0:1], fn(tl.load(x[0:n, 0:d]), axis=1, keepdims=True))

    x = torch.randn(100, 23, generator=torch.Generator().manual_seed(4)) * (0.5 if name == "prod" else 1)
    r = ref(x)
    out = torch.empty(100, 1, dtype=r.dtype)
    k(x, out)
    torch.testing.assert_close(out[:, 0], r, atol=1e-5, rtol=1e-5)


def test_reduce_3d_and_all_any():
    @trn.kernel
    def k(x, s, a, o):
        t = tl.load(x[0:8, 0:4, 0:5])
        tl.store(s[0:8, 0:1], tl.sum(t, axis=(1, 2), keepdims=True)[:, :, 0])
        pos = t > 0.0
        tl.store(a[0:8, 0:4], tl.all(pos, axis=2))
        tl.store(o[0:8, 0:4], tl.any(pos, axis=2))

    x = torch.randn(8, 4, 5)
    s = torch.empty(8, 1)
    a = torch.empty(8, 4, dtype=torch.bool)
    o = torch.empty(8, 4, dtype=torch.bool)
    k(x, s, a, o)
    torch.testing.assert_close(s[:, 0], x.sum((1, 2)), atol=1e-5, rtol=1e-5)
    assert torch.equal(a, (x > 0).all(2)) and torch.equal(o, (x > 0).any(2))


def test_where_copy_cast_broadcast_reshape_expand_transpose():
    @trn.kernel
    def k(x, w, o_where, o_cast, o_bc, o_rs, o_tr, o_ex):
        t = tl.load(x[0:64, 0:32])
        tl.store(o_where[0:64, 0:32], tl.where(t > 0.0, t, t * 0.1))
        tl.store(o_cast[0:64, 0:32], t.astype(tl.bfloat16))
        row = tl.load(w[0:1, 0:32])
        tl.store(o_bc[0:64, 0:32], tl.broadcast_to(row, (64, 32)))
        tl.store(o_rs[0:64, 0:4, 0:8], tl.reshape(t, (64, 4, 8)))
        tl.store(o_tr[0:32, 0:64], tl.transpose(t))
        tl.store(o_ex[0:64, 0:1, 0:32], tl.expand_dims(t, 1))

    x = torch.randn(64, 32)
    w = torch.randn(1, 32)
    outs = [torch.empty(64, 32), torch.empty(64, 32, dtype=torch.bfloat16), torch.empty(64, 32),
            torch.empty(64, 4, 8), torch.empty(32, 64), torch.empty(64, 1, 32)]
    k(x, w, *outs)
    torch.testing.assert_close(outs[0], torch.where(x > 0, x, x * 0.1))
    assert torch.equal(outs[1], x.bfloat16())
    torch.testing.assert_close(outs[2], w.expand(64, 32))
    torch.testing.assert_close(outs[3], x.reshape(64, 4, 8))
    torch.testing.assert_close(outs[4], x.T)
    torch.testing.assert_close(outs[5], x[:, None, :])


def test_creation_ops_and_index_tiles():
    @trn.kernel
    def k(o1, o2, o3, o4):
        z = tl.zeros((16, 8), tl.float32)
        tl.store(o1[0:16, 0:8], tl.ones((16, 8), tl.float32) + z)
        tl.store(o2[0:16, 0:8], tl.full((16, 8), 2.5, tl.float32) + tl.zeros_like(z))
        ix, iy = tl.mgrid[0:16, 0:8]
        tl.store(o3[0:16, 0:8], ix * 8 + iy)
        tl.store(o4[0:16, 0:8], tl.arange(16)[:, None] >= tl.arange(8)[None, :])

    o1, o2, o4 = torch.empty(16, 8), torch.empty(16, 8), torch.empty(16, 8, dtype=torch.bool)
    o3 = torch.empty(16, 8, dtype=torch.int32)
    k(o1, o2, o3, o4)
    assert torch.equal(o1, torch.ones(16, 8)) and torch.equal(o2, torch.full((16, 8), 2.5))
    assert torch.equal(o3, torch.arange(128, dtype=torch.int32).reshape(16, 8))
    assert torch.equal(o4, torch.arange(16)[:, None] >= torch.arange(8)[None, :])


def test_ds_num_programs_and_load_transpose2d():
    @trn.kernel
    def k(x, out):
        p = tl.program_id(0)
        t = tl.load_transpose2d(x[tl.ds(p * 16, 16), :])          # [8, 16]
        tl.store(out[:, tl.ds(p * 16, 16)], t * float(tl.num_programs(0)))

    x = torch.randn(48, 8)
    out = torch.empty(8, 48)
    k[3](x, out)
    torch.testing.assert_close(out, x.T * 3)


def test_device_print(capfd):
    @trn.kernel
    def k(x):
        tl.device_print("tile-x", tl.load(x[0:2, 0:3]))

    k(torch.arange(6.0).reshape(2, 3))
    out = capfd.readouterr().out
    assert "tile-x" in out and "5" in out


def test_isa_ops():
    @trn.kernel
    def k(x, y, o_act, o_red, o_ts, o_tt, o_tr, o_mm, o_iota, o_sel, o_bn, o_scan):
        a = tl.load(x[0:32, 0:16])
        b = tl.load(y[0:32, 0:16])
        act, red = isa.activation(tl.exp, a, scale=0.5, bias=tl.load(y[0:32, 0:1]), reduce_op=tl.add)
        tl.store(o_act[0:32, 0:16], act)
        tl.store(o_red[0:32, 0:1], red)
        tl.store(o_ts[0:32, 0:16], isa.tensor_scalar(a, tl.multiply, 2.0, tl.subtract, 1.0, reverse1=True))
        tl.store(o_tt[0:32, 0:16], isa.tensor_tensor(a, b, tl.maximum, engine=isa.gpsimd_engine))
        tl.store(o_tr[0:32, 0:1], isa.tensor_reduce(tl.maximum, a, axis=1, keepdims=True))
        tl.store(o_mm[0:16, 0:16], isa.nc_matmul(a, b))
        tl.store(o_iota[0:32, 0:16], isa.iota(tl.arange(32)[:, None] * 16 + tl.arange(16)[None, :]))
        tl.store(o_sel[0:32, 0:16], isa.affine_select(tl.arange(32)[:, None] >= tl.arange(16)[None, :], a, 0.0))
        tl.store(o_bn[0:32, 0:2], isa.bn_aggr(isa.bn_stats(a)))
        t = isa.memset(tl.ndarray((32, 16), tl.float32), 1.0)
        tl.store(o_scan[0:32, 0:16], isa.tensor_tensor_scan(t, a, 0.0, tl.multiply, tl.add))

    g = torch.Generator().manual_seed(5)
    x, y = torch.randn(32, 16, generator=g), torch.randn(32, 16, generator=g)
    o = [torch.empty(32, 16), torch.empty(32, 1), torch.empty(32, 16), torch.empty(32, 16), torch.empty(32, 1),
         torch.empty(16, 16), torch.empty(32, 16, dtype=torch.int32), torch.empty(32, 16), torch.empty(32, 2),
         torch.empty(32, 16)]
    k(x, y, *o)
    act = torch.exp(x * 0.5 + y[:, :1])
    torch.testing.assert_close(o[0], act)
    torch.testing.assert_close(o[1][:, 0], act.sum(1), atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(o[2], 1.0 - x * 2.0)
    torch.testing.assert_close(o[3], torch.maximum(x, y))
    torch.testing.assert_close(o[4][:, 0], x.amax(1))
    torch.testing.assert_close(o[5], x.T @ y, atol=1e-4, rtol=1e-5)
    assert torch.equal(o[6], torch.arange(512, dtype=torch.int32).reshape(32, 16))
    torch.testing.assert_close(o[7], torch.where(torch.arange(32)[:, None] >= torch.arange(16)[None, :], x, 0.0))
    torch.testing.assert_close(o[8], torch.stack([x.mean(1), x.var(1, unbiased=False)], 1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(o[9], x.cumsum(1), atol=1e-5, rtol=1e-5)


def test_dtypes_load_store_roundtrip():
    for dt in (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int16, torch.int8, torch.uint8,
               torch.bool, torch.float8_e4m3fn, torch.float8_e5m2):
        @trn.kernel
        def k(x, out):
            tl.store(out[0:10, 0:7], tl.load(x[0:10, 0:7]))

        x = (torch.randn(10, 7) * 10).to(dt)
        out = torch.empty_like(x)
        k(x, out)
        assert torch.equal(out.view(torch.uint8) if dt.itemsize == 1 else out, x.view(torch.uint8)
                           if dt.itemsize == 1 else x), dt


def test_flash_attention_causal_with_affine_select():
    @trn.kernel
    def k(q, kk, v, out, scale):
        s_q, d = q.shape
        qt = tl.load_transpose2d(q[0:s_q, 0:d])
        kt = tl.load_transpose2d(kk[0:s_q, 0:d])
        s = tl.copy(tl.matmul(qt, kt, transpose_x=True)) * scale
        s = tl.where(tl.arange(s_q)[:, None] >= tl.arange(s_q)[None, :], s, -math.inf)
        p = tl.exp(s - tl.max(s, axis=1, keepdims=True))
        p = p / tl.sum(p, axis=1, keepdims=True)
        tl.store(out[0:s_q, 0:d], tl.matmul(tl.transpose(p), tl.load(v[0:s_q, 0:d]), transpose_x=True))

    g = torch.Generator().manual_seed(6)
    q, kk, v = (torch.randn(64, 32, generator=g) for _ in range(3))
    out = torch.empty(64, 32)
    k(q, kk, v, out, 1 / math.sqrt(32))
    ref = torch.nn.functional.scaled_dot_product_attention(q[None], kk[None], v[None], is_causal=True)[0]
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-4)
