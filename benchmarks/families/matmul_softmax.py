"""mm / addmm / bmm and softmax on ``trn`` vs CPU (the issue's targets: softmax >= 2x, mm 1024 fp32 >= 0.8x)."""

from __future__ import annotations

from typing import Any, Callable

import torch


def cases(quick: bool) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(name, cpu thunk, trn thunk) per case."""
    n = 256 if quick else 1024
    a, b = torch.randn(n, n), torch.randn(n, n)
    at, bt = a.to("trn"), b.to("trn")
    r, c = (256, 256) if quick else (4096, 4096)
    x = torch.randn(r, c)
    xt = x.to("trn")
    bb = torch.randn(8, 128, 128)
    bbt = bb.to("trn")
    return [
        (f"mm fp32 {n}", lambda: a @ b, lambda: at @ bt),
        ("bmm fp32 8x128x128", lambda: bb @ bb, lambda: bbt @ bbt),
        (f"softmax fp32 {r}x{c}", lambda: torch.softmax(x, -1), lambda: torch.softmax(xt, -1)),
    ]
