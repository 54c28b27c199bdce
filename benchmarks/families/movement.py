"""Movement, creation and random ops on ``trn`` vs CPU: cat, flip, roll, tril, reflection pad, arange,
uniform, dropout."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F


def cases(quick: bool) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(name, cpu thunk, trn thunk) per case."""
    n = 256 if quick else 2048
    a, b = torch.randn(n, n), torch.randn(n, n // 2)
    at, bt = a.to("trn"), b.to("trn")
    img = torch.randn(8, 16, n // 8, n // 8)
    imgt = img.to("trn")
    return [
        (f"cat fp32 {n}x{n}+{n}x{n // 2}", lambda: torch.cat([a, b], 1), lambda: torch.cat([at, bt], 1)),
        (f"flip fp32 {n}x{n}", lambda: a.flip(0, 1), lambda: at.flip(0, 1)),
        (f"roll fp32 {n}x{n}", lambda: a.roll((3, -5), (0, 1)), lambda: at.roll((3, -5), (0, 1))),
        (f"tril fp32 {n}x{n}", lambda: a.tril(), lambda: at.tril()),
        (f"reflection_pad2d {tuple(img.shape)}", lambda: F.pad(img, (2, 2, 2, 2), mode="reflect"),
         lambda: F.pad(imgt, (2, 2, 2, 2), mode="reflect")),
        (f"arange int64 {n * n}", lambda: torch.arange(n * n), lambda: torch.arange(n * n, device="trn")),
        (f"rand fp32 {n}x{n}", lambda: torch.rand(n, n), lambda: torch.rand(n, n, device="trn")),
        (f"dropout fp32 {n}x{n}", lambda: F.dropout(a, 0.1), lambda: F.dropout(at, 0.1)),
    ]
