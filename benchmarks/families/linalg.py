"""Linear algebra on ``trn`` vs torch CPU: mm (fp32/bf16), bmm, Cholesky, inverse, QR, solve.

Factorisations: single matrices (Cholesky and inverse 256 x 256, host-blocked over 128-wide panels; QR is
limited to 128 rows, so 128 x 128) and a batch of 64 matrices of 64 x 64.
"""

from __future__ import annotations

from typing import Any, Callable

import torch


def _spd(b: int, n: int) -> torch.Tensor:
    x = torch.randn(b, n, n)
    return x @ x.mT / n + torch.eye(n)


def cases(quick: bool) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(name, cpu thunk, trn thunk) per case."""
    n = 256 if quick else 1024
    a, b = torch.randn(n, n), torch.randn(n, n)
    at, bt = a.to("trn"), b.to("trn")
    ah, bh = a.bfloat16(), b.bfloat16()
    aht, bht = ah.to("trn"), bh.to("trn")
    bb = torch.randn(16, 128, 128)
    bbt = bb.to("trn")
    s256 = _spd(1, 256)[0]
    s64 = _spd(64, 64)
    g128 = torch.randn(128, 128) + 4 * torch.eye(128)
    g256 = torch.randn(256, 256) + 4 * torch.eye(256)
    g64 = torch.randn(64, 64, 64) + 4 * torch.eye(64)
    rhs = torch.randn(64, 64, 8)
    t = {k: v.to("trn") for k, v in dict(s256=s256, s64=s64, g128=g128, g256=g256, g64=g64, rhs=rhs).items()}
    out = [
        (f"mm fp32 {n}", lambda: a @ b, lambda: at @ bt),
        (f"mm bf16 {n}", lambda: ah @ bh, lambda: aht @ bht),
        ("bmm fp32 16x128x128", lambda: bb @ bb, lambda: bbt @ bbt),
        ("cholesky 256x256", lambda: torch.linalg.cholesky(s256), lambda: torch.linalg.cholesky(t["s256"])),
        ("cholesky 64 x 64x64", lambda: torch.linalg.cholesky(s64), lambda: torch.linalg.cholesky(t["s64"])),
        ("inv 128x128", lambda: torch.linalg.inv(g128), lambda: torch.linalg.inv(t["g128"])),
        ("inv 256x256 (blocked LU)", lambda: torch.linalg.inv(g256), lambda: torch.linalg.inv(t["g256"])),
        ("inv 64 x 64x64", lambda: torch.linalg.inv(g64), lambda: torch.linalg.inv(t["g64"])),
        ("qr 128x128", lambda: torch.linalg.qr(g128), lambda: torch.linalg.qr(t["g128"])),
        ("qr 64 x 64x64", lambda: torch.linalg.qr(g64), lambda: torch.linalg.qr(t["g64"])),
        ("solve 64 x 64x64 (8 rhs)", lambda: torch.linalg.solve(g64, rhs),
         lambda: torch.linalg.solve(t["g64"], t["rhs"])),
    ]
    return out
