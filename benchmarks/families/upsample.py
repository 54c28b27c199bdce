"""Bilinear upsampling x2 (forward, and forward+backward) on ``trn`` vs CPU."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F


def cases(quick: bool) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(name, cpu thunk, trn thunk) per case."""
    n, c, hw = (2, 8, 16) if quick else (8, 64, 56)
    x = torch.randn(n, c, hw, hw)
    xt = x.to("trn")
    xg, xtg = x.clone().requires_grad_(), xt.detach().clone().requires_grad_()
    g = torch.randn(n, c, 2 * hw, 2 * hw)
    gt = g.to("trn")

    def up(t: torch.Tensor) -> torch.Tensor:
        return F.interpolate(t, scale_factor=2, mode="bilinear", align_corners=False)

    tag = f"N={n} C={c} {hw}x{hw}"
    return [
        (f"bilinear x2 fwd fp32 {tag}", lambda: up(x), lambda: up(xt)),
        (f"bilinear x2 fwd+bwd fp32 {tag}", lambda: torch.autograd.grad(up(xg), xg, g),
         lambda: torch.autograd.grad(up(xtg), xtg, gt)),
    ]
