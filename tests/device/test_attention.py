"""The attention family (stdlib_kernels/nn/attention.py): flash SDPA forward and backward, trn vs CPU."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from stdlib_kernels.nn import attention as A
from tests.device.conftest import assert_same

_SETTINGS = settings(max_examples=3, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
_TOL = {torch.float32: (2e-5, 2e-5), torch.bfloat16: (3e-2, 3e-2)}


def _compare(fn, tensors, dtype, fallback_ok=False):
    rtol, atol = _TOL[dtype]
    cpu = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in tensors]
    dev = [t.detach().to("trn").requires_grad_(t.is_floating_point()) for t in tensors]
    trnlang.reset_fallback_stats()
    ref = fn(*cpu)
    out = fn(*dev)
    assert_same(out, ref, rtol=rtol, atol=atol)
    g = torch.randn(ref.shape, generator=torch.Generator().manual_seed(5)).to(dtype)
    ref.backward(g)
    out.backward(g.to("trn"))
    for c, d in zip(cpu, dev):
        if c.grad is not None:
            assert_same(d.grad, c.grad, rtol=rtol, atol=atol * max(1.0, float(c.grad.abs().max())))
    if not fallback_ok:
        assert trnlang.fallback_stats() == {}


def _qkv(b, h, sq, sk, d, dtype, hk=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, sq, d, generator=g).to(dtype)
    k = torch.randn(b, hk or h, sk, d, generator=g).to(dtype)
    v = torch.randn(b, hk or h, sk, d, generator=g).to(dtype)
    return q, k, v


@_SETTINGS
@given(sq=st.sampled_from([1, 7, 130]), sk=st.sampled_from([1, 130]), d=st.sampled_from([8, 64]),
       causal=st.booleans())
def test_sdpa(sq, sk, d, causal):
    if causal and sq > sk:
        sq = sk
    q, k, v = _qkv(2, 2, sq, sk, d, torch.float32, seed=sq + sk)
    _compare(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal), [q, k, v], torch.float32)


def test_sdpa_bf16_causal_ragged():
    q, k, v = _qkv(1, 2, 130, 130, 16, torch.bfloat16)
    _compare(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), [q, k, v], torch.bfloat16)


@pytest.mark.parametrize("dtype", [torch.float32])
def test_sdpa_masks_scale_gqa(dtype):
    q, k, v = _qkv(2, 4, 70, 140, 16, dtype, hk=2)
    g = torch.Generator().manual_seed(9)
    bm = torch.rand(70, 140, generator=g) > 0.4
    bm[3] = False  # a fully masked row gives 0, as on the CPU
    fm = torch.randn(2, 1, 70, 140, generator=g).to(dtype)
    _compare(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=bm.to(q.device), enable_gqa=True),
             [q, k, v], dtype)
    _compare(lambda q, k, v, m: F.scaled_dot_product_attention(q, k[:, :1].expand(2, 4, 140, 16).contiguous(),
                                                               v[:, :1].expand(2, 4, 140, 16).contiguous(),
                                                               attn_mask=m, scale=0.2), [q, k, v, fm], dtype)


def test_sdpa_noncontiguous_3d_and_module():
    x = torch.randn(9, 3, 16, generator=torch.Generator().manual_seed(1))
    _compare(lambda x: F.scaled_dot_product_attention(x.transpose(0, 1), x.transpose(0, 1), x.transpose(0, 1)),
             [x], torch.float32)
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(32, 4, batch_first=True)
    mhat = torch.nn.MultiheadAttention(32, 4, batch_first=True).to("trn")
    mhat.load_state_dict(mha.state_dict())
    xs = torch.randn(2, 10, 32)
    ref = mha(xs, xs, xs, need_weights=False)[0]
    out = mhat(xs.to("trn"), xs.to("trn"), xs.to("trn"), need_weights=False)[0]
    assert_same(out, ref, rtol=1e-4, atol=1e-5)


def test_sdpa_dropout_takes_the_math_path():
    q, k, v = _qkv(1, 1, 4, 4, 8, torch.float32)
    torch.manual_seed(0)
    out = F.scaled_dot_product_attention(q.to("trn"), k.to("trn"), v.to("trn"), dropout_p=1.0)
    assert out.shape == (1, 1, 4, 4 * 0 + 8) and float(out.abs().sum().cpu()) == 0.0


def test_sdpa_bad_input_raises_torch_error():
    q = torch.randn(1, 1, 4, 8).to("trn")
    with pytest.raises(RuntimeError):
        F.scaled_dot_product_attention(q, torch.randn(1, 1, 4, 6).to("trn"), torch.randn(1, 1, 4, 8).to("trn"))


def test_profile_flash_fwd_is_sane():
    q, k, v = (t.to("trn") for t in _qkv(1, 1, 256, 256, 64, torch.float32))
    out = torch.empty(1, 1, 256, 64, device="trn")
    lse = torch.empty(1, 1, 256, 1, device="trn")
    prof = A.flash_fwd.profile(q, k, v, q, out, lse, 0.125, A.Flash(A.MaskKind.NONE, causal=True, kcap=2))
    assert prof.time_us > 0 and prof.cycles > 0
    assert all(0 <= e.utilization <= 1 for e in prof.engines.values()), prof.engines
    assert prof.engines["tensor"].instructions > 0 and 0 < prof.mfu <= 1
    ref = F.scaled_dot_product_attention(q.cpu(), k.cpu(), v.cpu(), is_causal=True, scale=0.125)
    assert_same(out, ref, rtol=1e-4, atol=1e-5)
    assert math.isfinite(float(lse.cpu().sum()))


def test_sdpa_streaming_keys_path(monkeypatch):
    """Key sequences too long to stage in SBUF stream K/V blocks from HBM (forced here by a small limit)."""
    monkeypatch.setattr(A, "HOIST_MAX", 0)
    q, k, v = _qkv(1, 1, 20, 150, 8, torch.float32, seed=11)  # a shape no other test traces
    _compare(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), [q, k, v], torch.float32)


def test_decode_lengths_share_one_flash_variant():
    """A decode loop (one query, a key cache growing by one) reuses the forward kernel's compiled code:
    key lengths are runtime sizes; only the staging capacity bucket and raggedness are keyed on."""
    torch.manual_seed(3)
    before = None
    for n in range(201, 214):  # one 256-key staging bucket; none a multiple of 128
        q, k, v = (torch.randn(2, 4, s, 32) for s in (1, n, n))
        out = F.scaled_dot_product_attention(q.to("trn"), k.to("trn"), v.to("trn"))
        assert_same(out, F.scaled_dot_product_attention(q, k, v), rtol=2e-5, atol=2e-5)
        if before is None:  # the first length may trace (twice: learning the head size is a constant)
            before = A.flash_fwd.compile_stats()["traces"]
    stats = A.flash_fwd.compile_stats()
    assert stats["dynamic"] and not stats["fallback"], stats
    assert ("k", 2) not in stats["static_dims"], stats
    assert stats["traces"] == before, stats  # no new length traces again


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_backward_with_a_transposed_output_gradient(dtype):
    """As in a transformer block: the output is moved to ``[B, S, H * D]`` before use, so the gradient reaching the
    backward is the transpose of a contiguous ``[B, S, H, D]`` tensor (``flash_bwd_dsum`` reads it in place);
    ragged query blocks (130 rows)."""
    q, k, v = _qkv(2, 3, 130, 70, 16, dtype, seed=11)

    def block(q, k, v):
        o = F.scaled_dot_product_attention(q, k, v)
        return o.transpose(1, 2).reshape(2, 130, 3 * 16) * 1.5

    _compare(block, [q, k, v], dtype)


def test_repeated_split_calls_follow_their_operands():
    """The split forward keeps its bound launches per layout and addresses: calls on new tensors, and on earlier
    ones again, each compute their own operands' attention."""
    F = torch.nn.functional
    qs = [torch.randn(4, 8, 128, 64, generator=torch.Generator().manual_seed(s)) for s in range(3)]
    dev = [q.to("trn") for q in qs]
    for k in [0, 1, 2, 0, 1, 2, 2, 0]:
        got = F.scaled_dot_product_attention(dev[k], dev[(k + 1) % 3], dev[(k + 2) % 3], is_causal=True)
        want = F.scaled_dot_product_attention(qs[k], qs[(k + 1) % 3], qs[(k + 2) % 3], is_causal=True)
        torch.testing.assert_close(got.cpu(), want, rtol=2e-5, atol=2e-5)


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sq=st.sampled_from([1, 5, 64, 128]), sk=st.sampled_from([1, 7, 128]), d=st.sampled_from([8, 64]),
       causal=st.booleans(), mask=st.sampled_from(["none", "bool", "float"]), gqa=st.booleans(),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]))
def test_one_block_backward_matches_cpu(sq, sk, d, causal, mask, gqa, dtype):
    """Queries and keys of one block each (Sq, Sk <= 128, GPT-2 / Llama at 128 tokens) take the one-pass backward
    (``flash_bwd_one``): gradients of q, k, v (and of an additive mask) equal the CPU's, causal, masked, GQA,
    bf16, transposed output gradients included."""
    causal = causal and sq <= sk and mask == "none"
    q, k, v = _qkv(2, 4, sq, sk, d, dtype, hk=2 if gqa else None, seed=sq * 131 + sk)
    g = torch.Generator().manual_seed(3)
    extra = []
    if mask == "bool":
        extra = [torch.rand(sq, sk, generator=g) > 0.3]
        extra[0][:, 0] = True  # no fully masked row (torch's CPU kernel and ours agree there, but not bf16-exactly)
    elif mask == "float":
        extra = [torch.randn(1, 4, sq, sk, generator=g).to(dtype)]

    def fn(q, k, v, *m):
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=m[0] if m else None, is_causal=causal, enable_gqa=gqa)
        return o.transpose(1, 2).reshape(2, sq, 4 * d) * 1.5

    _compare(fn, [q, k, v, *extra], dtype)
