"""HuggingFace GPT-2, Llama and BERT from small random configs, compiled on trn, train like eager CPU.

No download: each model is built from a config, with dropout off. Two SGD steps; the loss and every
parameter gradient must match eager CPU in fp32 (issue 16).
"""

import pytest
import torch

from tests.compile.helpers import train_compare

transformers = pytest.importorskip("transformers")


class LossOf(torch.nn.Module):
    """``model(input_ids, labels).loss`` as the module's output, so the loss is in the compiled graph."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, labels=labels).loss


def gpt2() -> torch.nn.Module:
    cfg = transformers.GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return LossOf(transformers.GPT2LMHeadModel(cfg))


def llama() -> torch.nn.Module:
    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LossOf(transformers.LlamaForCausalLM(cfg))


def bert() -> torch.nn.Module:
    cfg = transformers.BertConfig(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=128, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    return LossOf(transformers.BertForMaskedLM(cfg))


def _batches() -> list:
    g = torch.Generator().manual_seed(0)
    return [((torch.randint(0, 256, (2, 16), generator=g), torch.randint(0, 256, (2, 16), generator=g)),
             torch.zeros(())) for _ in range(2)]


@pytest.mark.parametrize("build,backend", [(gpt2, "trn"), (gpt2, None), (llama, "trn"), (llama, None),
                                           (bert, "trn"), (bert, None)],
                         ids=["gpt2-trn", "gpt2-default", "llama-trn", "llama-default", "bert-trn", "bert-default"])
def test_hf_model_trains_like_cpu(build, backend) -> None:
    import trnlang.compile

    before = trnlang.compile.compile_stats()["fused_nodes"]
    losses = train_compare(build, _batches(), backend, lambda out, target: out, atol=2e-4, rtol=2e-4)
    assert all(v == v for v in losses)
    assert trnlang.compile.compile_stats()["fused_nodes"] > before
