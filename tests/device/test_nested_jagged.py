"""Nested tensors on trn (stdlib_kernels/sparse/nested.py) vs the CPU, with TRN_FALLBACK=error.

Jagged tensors: construction, elementwise, linear, softmax, padding, SDPA over variable lengths, backward.
Strided nested tensors: the ``TransformerEncoderLayer`` / ``TransformerEncoder`` fast path (eval).
"""

import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang
from stdlib_kernels.sparse import nested as N

_SETTINGS = settings(max_examples=4, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
_LENGTHS = st.lists(st.integers(0, 6), min_size=1, max_size=4)


@pytest.fixture(autouse=True)
def _native_only(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")
    trnlang.reset_fallback_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # nested tensors are a prototype API
        yield


def _pair(lengths, *rest, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    comps = [torch.randn(n, *rest, generator=g) for n in lengths]
    cpu = torch.nested.nested_tensor(comps, layout=torch.jagged, requires_grad=grad)
    dev = torch.nested.nested_tensor([c.to("trn") for c in comps], layout=torch.jagged, device="trn",
                                     requires_grad=grad)
    return cpu, dev


def _same(actual, expected, tol=2e-5):
    assert actual.device.type == "trn"
    if expected.is_nested:
        assert actual.is_nested
        torch.testing.assert_close(actual.offsets().cpu(), expected.offsets())
        actual, expected = actual.values(), expected.values()
    torch.testing.assert_close(actual.detach().cpu(), expected.detach(), rtol=tol, atol=tol)


@given(lengths=_LENGTHS)
@_SETTINGS
def test_elementwise_linear_softmax(lengths):
    cpu, dev = _pair(lengths, 8)
    lin = torch.nn.Linear(8, 5)
    lin_d = torch.nn.Linear(8, 5).to("trn")
    lin_d.load_state_dict(lin.state_dict())
    for fn_c, fn_d in ((lambda x: x.sin() * 2 + x, None), (lin, lin_d), (lambda x: x.softmax(-1), None),
                       (F.relu, None)):
        _same((fn_d or fn_c)(dev), fn_c(cpu))


@given(lengths=_LENGTHS, pad=st.sampled_from([0.0, -1.5]))
@_SETTINGS
def test_to_padded_and_back(lengths, pad):
    cpu, dev = _pair(lengths, 3)
    if max(lengths) == 0:
        return  # torch cannot pad an all-empty jagged tensor (max_seqlen 0) on the CPU either
    _same(dev.to_padded_tensor(pad), cpu.to_padded_tensor(pad))
    padded = torch.randn(len(lengths), max(lengths), 3)
    ref = torch.nested.nested_tensor_from_jagged(
        torch.ops.aten._padded_dense_to_jagged_forward(padded, [cpu.offsets()]), cpu.offsets())
    out = torch.ops.aten._padded_dense_to_jagged_forward(padded.to("trn"), [dev.offsets()])
    torch.testing.assert_close(out.cpu(), ref.values())


def test_jagged_rows_drop_rows_past_max_len():
    src, dst = N.jagged_rows(torch.tensor([0, 3, 3, 4]), 2)
    assert src.tolist() == [0, 1, 3] and dst.tolist() == [0, 1, 4]


@given(lengths=st.lists(st.integers(1, 6), min_size=1, max_size=4))
@_SETTINGS
def test_sdpa_variable_lengths_forward_backward(lengths):
    heads, dim = 2, 4
    (qc, qd), (kc, kd), (vc, vd) = (_pair(lengths, heads, dim, seed=s, grad=True) for s in (1, 2, 3))
    ref = F.scaled_dot_product_attention(qc.transpose(1, 2), kc.transpose(1, 2), vc.transpose(1, 2))
    out = F.scaled_dot_product_attention(qd.transpose(1, 2), kd.transpose(1, 2), vd.transpose(1, 2))
    _same(out.transpose(1, 2), ref.transpose(1, 2))
    g = torch.randn(ref.values().shape, generator=torch.Generator().manual_seed(7))
    (ref.values() * g).sum().backward()
    (out.values() * g.to("trn")).sum().backward()
    for a, e in ((qd, qc), (kd, kc), (vd, vc)):
        _same(a.grad, e.grad, tol=1e-4)
    assert trnlang.fallback_stats() == {}


def test_linear_backward():
    cpu, dev = _pair([3, 1, 5], 8, grad=True)
    lin = torch.nn.Linear(8, 4)
    lin_d = torch.nn.Linear(8, 4).to("trn")
    lin_d.load_state_dict(lin.state_dict())
    lin(cpu).sin().values().sum().backward()
    lin_d(dev).sin().values().sum().backward()
    _same(dev.grad, cpu.grad)
    _same(lin_d.weight.grad, lin.weight.grad, tol=1e-4)


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_encoder_fast_path(norm_first):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, norm_first=norm_first).eval()
    enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=not norm_first).eval()
    src = torch.randn(3, 5, 8)
    mask = torch.tensor([[False] * 3 + [True] * 2, [False] + [True] * 4, [False] * 5])
    comps = [torch.randn(n, 8) for n in (3, 1, 5)]
    with torch.no_grad():
        ref_mask = layer(src, src_key_padding_mask=mask)
        ref_nested = layer(torch.nested.nested_tensor(comps))
        ref_enc = enc(src, src_key_padding_mask=mask)
        layer.to("trn")
        enc.to("trn")
        out_mask = layer(src.to("trn"), src_key_padding_mask=mask.to("trn"))
        out_nested = layer(torch.nested.nested_tensor([c.to("trn") for c in comps]))
        out_enc = enc(src.to("trn"), src_key_padding_mask=mask.to("trn"))
    _same(out_mask, ref_mask, tol=1e-4)
    _same(out_enc, ref_enc, tol=1e-4)
    for a, e in zip(out_nested.unbind(), ref_nested.unbind(), strict=True):
        _same(a, e, tol=1e-4)
    assert trnlang.fallback_stats() == {}


@pytest.mark.parametrize("mask_type", [0, 1, 2])
def test_masked_softmax_like_cpu(mask_type):
    x = torch.randn(2, 2, 3, 3)
    rows = torch.tensor([[True, True, True], [False, True, False], [False] * 3])
    m = {0: rows, 1: rows[:2], 2: rows.expand(2, 2, 3, 3)}[mask_type]
    ref = torch.ops.aten._masked_softmax(x, m, -1, mask_type)  # a row masked entirely is NaN on the CPU
    out = torch.ops.aten._masked_softmax(x.to("trn"), m.to("trn"), -1, mask_type)
    torch.testing.assert_close(out.cpu(), ref, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_sdpa_and_encoder_layer(dtype):
    comps = [torch.randn(n, 2, 8).to(dtype) for n in (3, 1, 5)]
    outs = []
    for dev in ("cpu", "trn"):
        q = torch.nested.nested_tensor([c.to(dev) for c in comps], layout=torch.jagged, device=dev,
                                       requires_grad=True)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), q.transpose(1, 2), q.transpose(1, 2))
        o.values().float().sum().backward()
        outs.append((o.values(), q.grad.values()))
    for a, e in zip(outs[1], outs[0], strict=True):
        assert a.dtype == dtype
        _same(a.float(), e.float(), tol=2e-2)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval().to(dtype)
    src = torch.randn(3, 5, 8).to(dtype)
    mask = torch.tensor([[False] * 3 + [True] * 2, [False] + [True] * 4, [False] * 5])
    with torch.no_grad():
        ref = layer(src, src_key_padding_mask=mask)
        out = layer.to("trn")(src.to("trn"), src_key_padding_mask=mask.to("trn"))
    assert out.dtype == dtype
    _same(out.float(), ref.float(), tol=3e-2)
    assert trnlang.fallback_stats() == {}
