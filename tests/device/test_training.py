"""An MLP with LayerNorm trained with AdamW on ``trn`` matches the same training on the CPU."""

import pytest
import torch
import torch.nn as nn


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 32), nn.ReLU(),
                         nn.Linear(32, 4))


def _train(device: str, opt_name: str, foreach: bool, steps: int = 6) -> tuple[list[float], list[torch.Tensor]]:
    model = _model().to(device)
    params = model.parameters()
    if opt_name == "adamw":
        opt = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, foreach=foreach)
    elif opt_name == "adam":
        opt = torch.optim.Adam(params, lr=1e-2, foreach=foreach)
    else:
        opt = torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=foreach)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        x = torch.randn(24, 16, generator=g).to(device)
        y = torch.randn(24, 4, generator=g).to(device)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("opt_name,foreach", [("adamw", False), ("adamw", True), ("adam", True), ("sgd", False),
                                              ("sgd", True)])
def test_mlp_matches_cpu(opt_name, foreach):
    cpu_losses, cpu_w = _train("cpu", opt_name, foreach)
    trn_losses, trn_w = _train("trn", opt_name, foreach)
    assert cpu_losses[-1] < cpu_losses[0]  # it trains
    torch.testing.assert_close(trn_losses, cpu_losses, rtol=1e-4, atol=1e-5)
    for a, b in zip(trn_w, cpu_w):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_training_runs_the_matmuls_natively():
    from trnlang.device import fallback_stats

    before = fallback_stats()
    _train("trn", "adamw", False, steps=2)
    after = fallback_stats()
    used = {k for k, v in after.items() if v > before.get(k, 0)}
    natives = {"aten::addmm", "aten::mm", "aten::add.Tensor", "aten::add.out", "aten::mul.Tensor", "aten::mul.out",
               "aten::sum.dim_IntList", "aten::div.Tensor", "aten::div.out", "aten::sub.Tensor", "aten::sub.out"}
    assert not used & natives, used & natives
