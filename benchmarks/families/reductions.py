"""Reductions, scans, log-softmax and topk on ``trn`` vs CPU (4096x1024 fp32; the issue-6 reduction family)."""

from __future__ import annotations

from typing import Any, Callable

import torch


def cases(quick: bool) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(name, cpu thunk, trn thunk) per case."""
    r, c = (256, 256) if quick else (4096, 1024)
    x = torch.randn(r, c)
    xt = x.to("trn")
    return [
        (f"sum rows (dim=1) {r}x{c}", lambda: x.sum(1), lambda: xt.sum(1)),
        (f"sum cols (dim=0) {r}x{c}", lambda: x.sum(0), lambda: xt.sum(0)),
        (f"sum all {r}x{c}", lambda: x.sum(), lambda: xt.sum()),
        (f"amax dim=1 {r}x{c}", lambda: x.amax(1), lambda: xt.amax(1)),
        (f"max.dim (values+indices) {r}x{c}", lambda: x.max(1), lambda: xt.max(1)),
        (f"var dim=1 {r}x{c}", lambda: x.var(1), lambda: xt.var(1)),
        (f"logsumexp dim=1 {r}x{c}", lambda: torch.logsumexp(x, 1), lambda: torch.logsumexp(xt, 1)),
        (f"log_softmax dim=1 {r}x{c}", lambda: torch.log_softmax(x, 1), lambda: torch.log_softmax(xt, 1)),
        (f"cumsum dim=1 {r}x{c}", lambda: x.cumsum(1), lambda: xt.cumsum(1)),
        (f"topk k=8 dim=1 {r}x{c}", lambda: x.topk(8, 1), lambda: xt.topk(8, 1)),
    ]
