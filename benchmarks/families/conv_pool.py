"""conv2d 3x3 (forward, and forward+backward) and max_pool2d on ``trn`` vs CPU."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F


def cases(quick: bool) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(name, cpu thunk, trn thunk) per case."""
    n, c, hw = (2, 16, 16) if quick else (8, 64, 56)
    x = torch.randn(n, c, hw, hw)
    w = torch.randn(c, c, 3, 3) * 0.05
    b = torch.randn(c)
    xt, wt, bt = x.to("trn"), w.to("trn"), b.to("trn")
    xg, wg = x.clone().requires_grad_(), w.clone().requires_grad_()
    xtg, wtg = xt.detach().clone().requires_grad_(), wt.detach().clone().requires_grad_()
    g = torch.randn(n, c, hw, hw)
    gt = g.to("trn")

    def fwd_bwd(xx: torch.Tensor, ww: torch.Tensor, gg: torch.Tensor) -> Any:
        return torch.autograd.grad(F.conv2d(xx, ww, padding=1), (xx, ww), gg)

    tag = f"N={n} C={c} {hw}x{hw}"
    return [
        (f"conv2d 3x3 fwd fp32 {tag}", lambda: F.conv2d(x, w, b, padding=1), lambda: F.conv2d(xt, wt, bt, padding=1)),
        (f"conv2d 3x3 fwd+bwd fp32 {tag}", lambda: fwd_bwd(xg, wg, g), lambda: fwd_bwd(xtg, wtg, gt)),
        (f"max_pool2d 2x2 fp32 {tag}", lambda: F.max_pool2d(x, 2), lambda: F.max_pool2d(xt, 2)),
    ]
