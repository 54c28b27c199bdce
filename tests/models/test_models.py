"""Whole models on the ``trn`` device with ``TRN_FALLBACK=error``: forward and backward match the CPU.

Issue 6's acceptance check: a small CNN, LSTM and GRU models, and small HuggingFace transformers (Llama,
GPT-2, BERT) built from random configs (nothing downloaded). Every ATen op they reach must have a native
lowering (a fallback raises), and the loss and every parameter's gradient must match the CPU model's.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import trnlang

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture(autouse=True)
def _strict(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")
    trnlang.reset_fallback_stats()
    yield
    assert trnlang.fallback_stats() == {}


def _check(model: nn.Module, inputs: list[torch.Tensor], loss_fn, rtol: float = 1e-4) -> None:
    torch.manual_seed(0)
    cpu = model
    dev = copy.deepcopy(model).to("trn")
    loss_c = loss_fn(cpu(*inputs))
    loss_c.backward()
    loss_t = loss_fn(dev(*[x.to("trn") for x in inputs]))
    loss_t.backward()
    torch.testing.assert_close(loss_t.cpu(), loss_c, rtol=rtol, atol=1e-6)
    # gradients that are zero in exact arithmetic (a conv bias before batch norm) are rounding noise on both
    # sides: compare with an absolute tolerance relative to the model's largest gradient
    scale = max(p.grad.abs().max().item() for p in cpu.parameters() if p.grad is not None)
    n = 0
    for (name, pt), pc in zip(dev.named_parameters(), cpu.parameters()):
        if pc.grad is None:
            assert pt.grad is None, name
            continue
        assert pt.grad is not None, f"{name}: no gradient on trn"
        torch.testing.assert_close(pt.grad.cpu(), pc.grad, rtol=rtol, atol=rtol * scale,
                                   msg=lambda m, name=name: f"{name}: {m}")
        n += 1
    assert n > 0


def test_cnn():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                      nn.Linear(16, 10))
    y = torch.randint(0, 10, (4,))
    _check(m, [torch.randn(4, 3, 16, 16)], lambda o: nn.functional.cross_entropy(o, y.to(o.device)))


class _Seq(nn.Module):
    def __init__(self, cell: type) -> None:
        super().__init__()
        self.rnn = cell(8, 16, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(32, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        o, _ = self.rnn(x)
        return self.head(o[:, -1])


@pytest.mark.parametrize("cell", [nn.LSTM, nn.GRU], ids=["lstm", "gru"])
def test_rnn(cell):
    torch.manual_seed(0)
    _check(_Seq(cell), [torch.randn(4, 5, 8)], lambda o: o.square().mean())


class _LM(nn.Module):
    def __init__(self, m: nn.Module) -> None:
        super().__init__()
        self.m = m

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.m(input_ids=ids).logits


def _hf(name: str) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if name == "llama":
        cfg = transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        m = transformers.LlamaForCausalLM(cfg)
    elif name == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=128, n_embd=32, n_layer=2, n_head=4, n_positions=64, attn_pdrop=0.0,
                                      resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=0, eos_token_id=0)
        m = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                      attention_probs_dropout_prob=0.0)
        m = transformers.BertForMaskedLM(cfg)
    return _LM(m.eval())


@pytest.mark.parametrize("name", ["llama", "gpt2", "bert"])
def test_huggingface(name):
    model = _hf(name)
    ids = torch.randint(0, 128, (2, 12), generator=torch.Generator().manual_seed(1))
    _check(model, [ids], lambda o: o.float().square().mean())
