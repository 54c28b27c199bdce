"""Normalisation, attention and losses on ``trn`` vs CPU (issue 6 family 7b; target: layer_norm >= 1.5x)."""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F


def cases(quick: bool) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(name, cpu thunk, trn thunk) per case."""
    r, n = (512, 256) if quick else (4096, 1024)
    x = torch.randn(r, n)
    w, b = torch.randn(n), torch.randn(n)
    xt, wt, bt = x.to("trn"), w.to("trn"), b.to("trn")
    gy = torch.randn(r, n)
    gyt = gy.to("trn")
    lv = [t.clone().requires_grad_() for t in (x, w, b)]
    lvt = [t.clone().requires_grad_() for t in (xt, wt, bt)]
    im = torch.randn(8, 64, 32, 32) if not quick else torch.randn(2, 16, 8, 8)
    imt = im.to("trn")
    c = im.shape[1]
    rm, rv = torch.zeros(c), torch.ones(c)
    rmt, rvt = rm.to("trn"), rv.to("trn")
    bsz, h, s, d = (1, 2, 128, 64) if quick else (4, 8, 512, 64)
    q, k, v = (torch.randn(bsz, h, s, d) for _ in range(3))
    qt, kt, vt = q.to("trn"), k.to("trn"), v.to("trn")
    nb, nc = (256, 100) if quick else (4096, 1000)
    logits = torch.randn(nb, nc)
    tgt = torch.randint(0, nc, (nb,))
    lt, tt = logits.to("trn"), tgt.to("trn")
    return [
        (f"layer_norm fwd fp32 {r}x{n}", lambda: F.layer_norm(x, (n,), w, b), lambda: F.layer_norm(xt, (n,), wt, bt)),
        (f"layer_norm fwd+bwd fp32 {r}x{n}", lambda: _ln_train(lv, gy), lambda: _ln_train(lvt, gyt)),
        (f"group_norm fwd fp32 {tuple(im.shape)} g=8", lambda: F.group_norm(im, 8), lambda: F.group_norm(imt, 8)),
        (f"batch_norm train fwd fp32 {tuple(im.shape)}", lambda: F.batch_norm(im, rm, rv, training=True),
         lambda: F.batch_norm(imt, rmt, rvt, training=True)),
        (f"sdpa fwd fp32 B={bsz} H={h} S={s} D={d}", lambda: F.scaled_dot_product_attention(q, k, v),
         lambda: F.scaled_dot_product_attention(qt, kt, vt)),
        (f"cross_entropy fwd fp32 {nb}x{nc}", lambda: F.cross_entropy(logits, tgt), lambda: F.cross_entropy(lt, tt)),
    ]


def _ln_train(leaves: list[torch.Tensor], gy: torch.Tensor) -> Any:
    """Layer norm forward and the gradients of input, weight and bias."""
    x, w, b = leaves
    return torch.autograd.grad(F.layer_norm(x, (x.shape[-1],), w, b), leaves, gy)
