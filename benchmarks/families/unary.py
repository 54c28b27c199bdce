"""Unary elementwise ops and activations (forward and backward) on ``trn`` vs CPU, 4096x1024 fp32."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F


def cases(quick: bool) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(name, cpu thunk, trn thunk) per case."""
    r, c = (256, 256) if quick else (4096, 1024)
    x = torch.randn(r, c)
    g = torch.randn(r, c)
    xt, gt = x.to("trn"), g.to("trn")
    out = []
    for name, fn in (("gelu", F.gelu), ("gelu tanh", lambda t: F.gelu(t, approximate="tanh")), ("silu", F.silu),
                     ("tanh", torch.tanh), ("sigmoid", torch.sigmoid)):
        out.append((f"{name} fp32 {r}x{c}", (lambda f: lambda: f(x))(fn), (lambda f: lambda: f(xt))(fn)))
    out += [
        (f"gelu_backward fp32 {r}x{c}", lambda: torch.ops.aten.gelu_backward(g, x),
         lambda: torch.ops.aten.gelu_backward(gt, xt)),
        (f"silu_backward fp32 {r}x{c}", lambda: torch.ops.aten.silu_backward(g, x),
         lambda: torch.ops.aten.silu_backward(gt, xt)),
        (f"asinh fp32 {r}x{c} (libm path)", lambda: torch.asinh(x), lambda: torch.asinh(xt)),
        (f"tanh fp32 {r}x{c} transposed", lambda: torch.tanh(x.t()), lambda: torch.tanh(xt.t())),
    ]
    return out
