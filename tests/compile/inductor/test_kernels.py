"""Inductor's pointwise and reduction loop bodies become trnlang kernels (issue 16, Inductor route)."""

from __future__ import annotations

import torch
import torch.nn as nn

import trnlang.compile
from trnlang.compile import inductor


def _new_kernels(before: int) -> list[tuple[str, str]]:
    return [(n, s) for n, s, _ in trnlang.compile.generated_kernels()[before:]]


def _compile_and_compare(f, *args: torch.Tensor, atol: float = 1e-5) -> list[tuple[str, str]]:
    before = len(trnlang.compile.generated_kernels())
    graphs = inductor.STATS["graphs"]
    got = torch.compile(f)(*[a.to("trn") for a in args])
    torch.testing.assert_close(got.cpu(), f(*args), atol=atol, rtol=1e-5)
    assert inductor.STATS["graphs"] == graphs + 1  # the graph went through Inductor, not the custom backend
    return _new_kernels(before)


def test_pointwise_chain_is_one_kernel_with_affine_bias_load() -> None:
    torch.manual_seed(0)

    def f(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * 2 + b) - torch.sigmoid(x) / 3

    ks = _compile_and_compare(f, torch.randn(37, 96), torch.randn(96))
    assert len(ks) == 1, [n for n, _ in ks]
    name, src = ks[0]
    assert name.startswith("trn_poi_") and "@trn.kernel" in src
    # the row-broadcast bias is indexed by the column alone: one [1, 96] load, no gather
    assert "[cols])" in src and "tl.relu(" in src and "tl.sigmoid(" in src


def test_softmax_reduces_on_the_free_axis() -> None:
    torch.manual_seed(0)

    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 0.5, -1)

    ks = _compile_and_compare(f, torch.randn(130, 200))
    assert len(ks) == 1
    name, src = ks[0]
    assert name.startswith("trn_red_")
    assert "tl.max(" in src and "tl.sum(" in src and "axis=1, keepdims=True" in src
    assert "mask=xmask" in src  # the ragged last tile of 130 rows


def test_layer_norm_forward_one_kernel() -> None:
    torch.manual_seed(0)
    ln = nn.LayerNorm(64)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()

    def f(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return nn.functional.layer_norm(x, (64,), w, b)

    ks = _compile_and_compare(f, torch.randn(3, 50, 64), ln.weight.detach(), ln.bias.detach(), atol=1e-4)
    assert len(ks) == 1 and "tl.rsqrt(" in ks[0][1]


def test_transposed_input_is_indexed_with_its_strides() -> None:
    torch.manual_seed(0)

    def f(x: torch.Tensor) -> torch.Tensor:
        return x.t() * 3 + 1

    _compile_and_compare(f, torch.randn(40, 24))


def test_embedding_is_an_extern_call_of_the_device() -> None:
    torch.manual_seed(0)
    emb = torch.randn(50, 16)

    def f(w: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.embedding(i, w) * 2

    w, i = emb, torch.randint(0, 50, (7, 5))
    got = torch.compile(f)(w.to("trn"), i.to("trn"))
    torch.testing.assert_close(got.cpu(), f(w, i))
    assert "aten.embedding.default" in inductor.STATS["extern_fallbacks"]
