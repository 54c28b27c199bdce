"""Broadcasting elementwise ops on ``trn`` vs CPU: binary (add, mul), ternary (where, clamp), a comparison.

4096 x 1024 fp32 against a broadcast row (``[1024]``) or column (``[4096, 1]``) operand.
"""

from __future__ import annotations

from typing import Any, Callable

import torch


def cases(quick: bool) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(name, cpu thunk, trn thunk) per case."""
    r, c = (256, 256) if quick else (4096, 1024)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(r, c, generator=g)
    row = torch.randn(c, generator=g)
    col = torch.randn(r, 1, generator=g)
    lo, hi = -torch.rand(c, generator=g), torch.rand(c, generator=g)
    m = x > 0
    xt, rowt, colt, lot, hit, mt = (t.to("trn") for t in (x, row, col, lo, hi, m))
    s = f"{r}x{c}"
    return [
        (f"add fp32 {s} + row", lambda: x + row, lambda: xt + rowt),
        (f"mul fp32 {s} * col", lambda: x * col, lambda: xt * colt),
        (f"where fp32 {s} (mask, x, row)", lambda: torch.where(m, x, row), lambda: torch.where(mt, xt, rowt)),
        (f"clamp fp32 {s} (-1, 1)", lambda: torch.clamp(x, -1.0, 1.0), lambda: torch.clamp(xt, -1.0, 1.0)),
        (f"clamp fp32 {s} (row lo, row hi)", lambda: torch.clamp(x, lo, hi), lambda: torch.clamp(xt, lot, hit)),
        (f"gt fp32 {s} > row", lambda: x > row, lambda: xt > rowt),
    ]
