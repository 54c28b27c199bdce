"""``renorm``'s gradient on ``trn`` in fp32 (``aten::renorm`` / ``aten::renorm_`` at ``AutogradPrivateUse1``).

``renorm``'s forward already runs natively (torch's decomposition: ``linalg_vector_norm``, ``where``, ``mul``).
Its autograd formula (``renorm_backward`` in torch's ``FunctionsManual.cpp``) accumulates in
``toAccumulateType(dtype, device)``, which for a float32 tensor on a PrivateUse1 device is float64, a dtype
``trn`` has no arithmetic for: every piece of the gradient of an fp32 ``renorm`` fell back to the CPU.

Here an ``AutogradPrivateUse1`` kernel wraps the op in an autograd function whose backward is the same formula
with float32 as the accumulation type (what torch uses for bf16/fp16 inputs, and for every float dtype on CUDA):

    norm = ||x||_p over all dims but ``dim`` (fp32), s = sum(x * g) over the same dims (fp32)
    nb   = norm_backward(s, x, p, norm)          (d norm / dx, scaled by s)
    gx   = where(norm > maxnorm, maxnorm / (norm + 1e-7) * (g - nb / (norm + 1e-7)), g)

Every step is a ``trn`` op with a native lowering, so the gradient runs on the device, and the backward is
itself differentiable (double backward works). ``renorm_`` is routed to ``copy_(renorm(x))``, so its
gradient uses the same formula. Without gradients both ops go straight to their (native) forward.

Example:
    >>> import torch
    >>> x = torch.randn(4, 5, device="trn", requires_grad=True)      # doctest: +SKIP
    >>> torch.renorm(x, 2, 0, 0.5).sum().backward()                  # doctest: +SKIP
    >>> x.grad.shape                                                 # doctest: +SKIP
    torch.Size([4, 5])
"""

from __future__ import annotations

import math
from typing import Any

import torch

from trnlang.device.registry import describe

#: Float dtypes whose renorm gradient accumulates in fp32 (as torch does for bf16/fp16); float64 keeps float64.
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def norm_backward(s: torch.Tensor, x: torch.Tensor, p: float, norm: torch.Tensor, rd: list[int]) -> torch.Tensor:
    """``s * d||x||_p / dx``; ``s`` and ``norm`` keep the reduced dims ``rd`` (torch's ``norm_backward``, p > 0)."""
    if p == 1.0:
        return x.sgn() * s
    if p == 2.0:
        return s * (x / norm).masked_fill(norm == 0, 0)
    if math.isinf(p):
        ax = x.abs()
        mask = ax.eq(norm).logical_or(ax.isnan())
        return x.sgn() * ((s / mask.sum(rd, True)) * mask)
    if p < 1.0:
        scaled = x.sgn() * x.abs().pow(p - 1).masked_fill(x == 0, 0)
        return scaled * s * norm.pow(1 - p)
    scaled = x.sgn() * x.abs().pow(p - 1) if p < 2.0 else x * x.abs().pow(p - 2)
    return scaled * (s / norm.pow(p - 1)).masked_fill(norm == 0, 0)


def renorm_backward(grad: torch.Tensor, x: torch.Tensor, p: float, dim: int, maxnorm: float) -> torch.Tensor:
    """Gradient of ``renorm(x, p, dim, maxnorm)`` for ``grad``: torch's formula with fp32 accumulation."""
    dim = dim % x.dim()
    rd = [d for d in range(x.dim()) if d != dim]
    acc = torch.float32 if x.dtype in DTYPES else x.dtype
    norm = torch.linalg.vector_norm(x, p, rd, keepdim=True, dtype=acc)
    s = (x * grad).sum(rd, keepdim=True, dtype=acc)
    nb = norm_backward(s, x, p, norm, rd)
    invnorm = (norm + 1e-7).reciprocal()
    grad_norm = maxnorm * invnorm * (grad - invnorm * nb)
    return torch.where(norm > maxnorm, grad_norm.to(grad.dtype), grad)


def _scalar(v: Any) -> float:
    return float(v.item()) if isinstance(v, torch.Tensor) else float(v)


class _Renorm(torch.autograd.Function):
    """``renorm`` with the fp32 gradient above (the forward is the op itself, below autograd)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, p: Any, dim: int, maxnorm: Any) -> torch.Tensor:  # type: ignore[override]
        with torch._C._AutoDispatchBelowAutograd():
            out = torch.ops.aten.renorm.default(x, p, dim, maxnorm)  # torch's errors for bad arguments
        ctx.save_for_backward(x)
        ctx.args = (_scalar(p), int(dim), _scalar(maxnorm))
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:  # type: ignore[override]
        (x,) = ctx.saved_tensors
        return renorm_backward(grad, x, *ctx.args), None, None, None


def _ours(x: Any) -> bool:
    """A trn real floating tensor (float64 keeps its own accumulation type, and so runs on the CPU fallback)."""
    return isinstance(x, torch.Tensor) and x.device.type == "trn" and x.is_floating_point()


def _needs_grad(x: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and x.requires_grad


def renorm_autograd(self: torch.Tensor, p: Any, dim: int, maxnorm: Any) -> torch.Tensor:
    """``aten::renorm`` at ``AutogradPrivateUse1``: :class:`_Renorm` when a gradient is needed."""
    if _needs_grad(self) and _ours(self):
        return _Renorm.apply(self, p, dim, maxnorm)
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.aten.renorm.default(self, p, dim, maxnorm)


def renorm_inplace_autograd(self: torch.Tensor, p: Any, dim: int, maxnorm: Any) -> torch.Tensor:
    """``aten::renorm_`` at ``AutogradPrivateUse1``: ``self.copy_(renorm(self))`` when a gradient is needed
    (the out-of-place result is computed from a clone, so the saved input is not the tensor being written; a
    leaf gets ``copy_``'s own error)."""
    if _needs_grad(self) and _ours(self):
        return self.copy_(_Renorm.apply(self.clone(), p, dim, maxnorm))
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.aten.renorm_.default(self, p, dim, maxnorm)


_LIB = torch.library.Library("aten", "IMPL")
_LIB.impl("renorm", renorm_autograd, "AutogradPrivateUse1")
_LIB.impl("renorm_", renorm_inplace_autograd, "AutogradPrivateUse1")
describe("aten::renorm", renorm_autograd)
describe("aten::renorm_", renorm_inplace_autograd)
