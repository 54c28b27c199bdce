"""Elementwise unary ops (``exp``, ``log``, ``sqrt``, ``tanh``, ``silu``, ...), all from one table.

One kernel serves them all: the op is a compile-time string selecting the ``tl`` function. Inputs
are contiguous float32 or bfloat16 tensors, seen as ``[rows, last]`` (long 1-D tensors as
``[128, n // 128]`` plus a tail); arithmetic runs in fp32 and the store rounds to the output dtype.
Anything else (other dtypes, non-contiguous views, 0-dim tensors, unsupported arguments) is
declined with ``NotImplemented`` and runs through the CPU fallback.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from trnlang.device import REGISTRY, lowering

#: ATen op name -> the ``tl`` function computing it (``gelu`` picks ``gelu_tanh`` for approximate="tanh").
UNARY_OPS: dict[str, Callable[..., Any]] = {
    "exp": tl.exp, "log": tl.log, "log1p": tl.log1p, "expm1": tl.expm1, "sqrt": tl.sqrt, "rsqrt": tl.rsqrt,
    "reciprocal": tl.reciprocal, "abs": tl.abs, "neg": tl.negative, "sign": tl.sign, "floor": tl.floor,
    "ceil": tl.ceil, "tanh": tl.tanh, "sigmoid": tl.sigmoid, "relu": tl.relu, "gelu": tl.gelu,
    "gelu_tanh": tl.gelu_tanh, "silu": tl.silu, "softplus": tl.softplus, "erf": tl.erf, "sin": tl.sin,
    "cos": tl.cos, "square": tl.square,
}
#: Dtypes the unary lowerings handle (computed in fp32, rounded on store).
DTYPES = (torch.float32, torch.bfloat16)
_BIG_1D = 4096


@trn.kernel
def unary(x, out, op):
    """``out = op(x)`` for a 2-D ``[n, d]`` tensor (rows tiled by 128, the free dim by chunks)."""
    n, d = x.shape
    p = min(128, n)
    f = min(d, U.FREE_CHUNK)
    ragged = n % p != 0 or d % f != 0
    fn = UNARY_OPS[op]
    for i in tl.affine_range(tl.cdiv(n, p)):
        rows = i * p + tl.arange(p)[:, None]
        for j in tl.affine_range(tl.cdiv(d, f)):
            cols = j * f + tl.arange(f)[None, :]
            m = ((rows < n) & (cols < d)) if ragged else None
            t = tl.load(x[rows, cols], mask=m).astype(tl.float32)
            tl.store(out[rows, cols], fn(t), mask=m)


def _views(t: torch.Tensor) -> list[torch.Tensor]:
    """2-D views of a contiguous tensor covering all its elements."""
    n = t.numel()
    if t.dim() == 1 and n >= _BIG_1D:
        cols = n // 128
        vs = [U.view(t, (128, cols), (cols, 1), t.storage_offset())]
        if n - 128 * cols:
            vs.append(U.view(t, (1, n - 128 * cols), (0, 1), t.storage_offset() + 128 * cols))
        return vs
    last = t.shape[-1]
    return [U.view(t, (n // last, last), (last, 1), t.storage_offset())]


def run_unary(op: str, self: Any, out: torch.Tensor | None) -> Any:
    """Launch ``op`` over ``self`` into ``out`` (allocated if None); NotImplemented to decline."""
    if (not U.is_trn(self) or self.dtype not in DTYPES or self.dim() == 0 or not self.is_contiguous()):
        return NotImplemented
    if out is None:
        out = torch.empty_like(self, memory_format=torch.contiguous_format)
    else:
        if U.is_trn(out) and out.numel() == 0 and out.shape != self.shape:
            out.resize_(self.shape)
        if (not U.is_trn(out) or out.shape != self.shape or out.dtype != self.dtype or not out.is_contiguous()):
            return NotImplemented
        if U.overlaps(out, self) and not U.same_view(out, self):
            return NotImplemented
    if self.numel() == 0:
        return out
    for xv, ov in zip(_views(self), _views(out)):
        unary(xv, ov, op)
    return out


def _make(op: str) -> Callable[..., Any]:
    def lower(self: Any, *, out: torch.Tensor | None = None) -> Any:
        return run_unary(op, self, out)

    lower.__name__ = op
    lower.__doc__ = f"``aten::{op}`` on ``trn`` (and, routed, its in-place and ``out=`` variants)."
    return lower


_SIMPLE = ("exp", "log", "log1p", "sqrt", "rsqrt", "reciprocal", "abs", "neg", "sign", "floor", "ceil",
           "tanh", "sigmoid", "relu", "silu", "erf", "cos", "sin", "expm1", "square")

for _op in _SIMPLE:
    if f"aten::{_op}" not in REGISTRY:  # skip ops another family already lowers (neg: pointwise)
        lowering(f"aten::{_op}", dtypes=DTYPES)(_make(_op))


# aten::gelu is deliberately left to the CPU fallback here: tutorials/06_contributing_a_lowering.py writes and
# registers it as its worked example (the "gelu"/"gelu_tanh" table entries serve that kernel's math).


@lowering("aten::softplus", dtypes=DTYPES)
def softplus(self: Any, beta: Any = 1, threshold: Any = 20, *, out: torch.Tensor | None = None) -> Any:
    """``aten::softplus`` for ``beta=1, threshold=20`` only (others are declined)."""
    if beta != 1 or threshold != 20:
        return NotImplemented
    return run_unary("softplus", self, out)
