"""Advanced indexing on ``trn`` vs CPU: gather, index_select, embedding forward/backward, index_put(accumulate).

Sizes are those of a small language model's embedding table and batch (vocab x hidden, tokens).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F


def cases(quick: bool) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(name, cpu thunk, trn thunk) per case."""
    vocab, hidden, tokens = (1000, 128, 512) if quick else (32000, 512, 4096)
    g = torch.Generator().manual_seed(0)
    w = torch.randn(vocab, hidden, generator=g)
    ids = torch.randint(0, vocab, (tokens,), generator=g)
    gout = torch.randn(tokens, hidden, generator=g)
    wt, idt, gt = w.to("trn"), ids.to("trn"), gout.to("trn")
    rows, cols, k = (256, 512, 64) if quick else (2048, 4096, 256)
    x = torch.randn(rows, cols, generator=g)
    gi = torch.randint(0, cols, (rows, k), generator=g)
    xt, git = x.to("trn"), gi.to("trn")
    acc = torch.zeros(vocab, hidden)
    acct = acc.to("trn")

    def emb_bwd(table: torch.Tensor, i: torch.Tensor, go: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.embedding_dense_backward(go, i, table.shape[0], -1, False)

    return [
        (f"gather fp32 [{rows},{cols}] k={k} dim=1", lambda: torch.gather(x, 1, gi), lambda: torch.gather(xt, 1, git)),
        (f"index_select fp32 [{vocab},{hidden}] x{tokens}", lambda: w.index_select(0, ids),
         lambda: wt.index_select(0, idt)),
        (f"embedding fwd fp32 [{vocab},{hidden}] x{tokens}", lambda: F.embedding(ids, w), lambda: F.embedding(idt, wt)),
        (f"embedding bwd fp32 [{vocab},{hidden}] x{tokens}", lambda: emb_bwd(w, ids, gout),
         lambda: emb_bwd(wt, idt, gt)),
        (f"index_put_ accumulate fp32 [{vocab},{hidden}] x{tokens}",
         lambda: acc.index_put_((ids,), gout, accumulate=True),
         lambda: acct.index_put_((idt,), gt, accumulate=True)),
    ]
