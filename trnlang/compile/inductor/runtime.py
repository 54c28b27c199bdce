"""The run-time side of Inductor's ``trn`` kernels: the generated wrapper calls :func:`load_kernel` once per
kernel when its module loads, and ``kernel.run(*args)`` for every launch.

A generated kernel sees every buffer as a flat 1-D tensor from the buffer's first element (Inductor's
index expressions are offsets in elements, with the strides folded in), and every symbolic size as a
*size carrier*: a zero-stride tensor of that length whose ``.shape[1]`` the kernel reads. Sizes are thus
runtime values of the compiled code, so a new batch size reuses the compiled kernel (an int argument
would be a compile-time constant of the JIT).

Example:
    >>> import torch
    >>> from trnlang.compile.inductor.runtime import flat
    >>> flat(torch.arange(6.).view(2, 3).t()).shape
    torch.Size([6])
"""

from __future__ import annotations

from typing import Any

import torch

from trnlang.compile import kernelgen

__all__ = ["TrnInductorKernel", "load_kernel", "flat", "carrier"]

_CARRIERS: dict[tuple[int, str], torch.Tensor] = {}
_BASE: dict[str, torch.Tensor] = {}


def flat(t: torch.Tensor) -> torch.Tensor:
    """``t``'s elements from its first one to its last reachable one, as a contiguous 1-D view."""
    span = 1
    for size, stride in zip(t.shape, t.stride()):
        if size == 0:
            span = 0
            break
        span += (size - 1) * stride
    if t.dim() == 1 and t.stride(0) == 1:
        return t
    return t.as_strided((span,), (1,), t.storage_offset())


def carrier(n: int, device: torch.device) -> torch.Tensor:
    """A tensor of shape ``(1, n)`` and stride 0 (one element of storage): a size passed as a runtime value.

    The size sits in dimension 1 while every buffer is 1-D: the JIT keys variants on which sizes at the same
    dimension position are equal, so a batch size that happens to equal a weight's length does not make
    a new variant.
    """
    key = (int(n), str(device))
    hit = _CARRIERS.get(key)
    if hit is None:
        base = _BASE.get(key[1])
        if base is None:
            base = _BASE[key[1]] = torch.zeros(1, 1, dtype=torch.int32, device=device)
        hit = _CARRIERS[key] = base.expand(1, max(0, int(n)))
        if len(_CARRIERS) > 4096:  # sizes of a long dynamic run: keep the table bounded
            _CARRIERS.clear()
            _CARRIERS[key] = hit
    return hit


class TrnInductorKernel:
    """One generated ``@trn.kernel`` with its launch grid; ``run`` takes the wrapper's buffers and sizes.

    Args:
        name: the kernel's name (also its function name in ``source``).
        kinds: per parameter, ``"buf"`` (a tensor) or ``"size"`` (an int passed as a size carrier).
        grid: programs in the launch grid (1 since the runtime splits the tile loop; wrappers cached by
            earlier versions pass the thread count their source was written for).
        source: the ``@trn.kernel`` source text.
    """

    def __init__(self, name: str, kinds: list[str], grid: int, source: str) -> None:
        self.name, self.kinds, self.grid, self.source = name, list(kinds), grid, source
        self.kern = kernelgen.load_kernel(name, source)
        self.launch = self.kern[(grid,)]

    def _args(self, args: tuple[Any, ...]) -> list[Any]:
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("trn"))
        out = []
        for a, kind in zip(args, self.kinds):
            if kind == "buf":
                if a.device != device:
                    raise RuntimeError(f"{self.name}: buffer on {a.device}, kernel on {device}")
                out.append(flat(a))
            else:
                out.append(carrier(int(a), device))
        return out

    def run(self, *args: Any) -> None:
        """Launch on the wrapper's arguments (buffers and sizes in the kernel's parameter order)."""
        if len(args) != len(self.kinds):
            raise TypeError(f"{self.name} takes {len(self.kinds)} arguments, got {len(args)}")
        self.launch(*self._args(args))

    def profile(self, *args: Any) -> Any:
        """The simulated NeuronCore profile of one launch on these arguments (``trn.Profile``)."""
        return self.kern.profile(*self._args(args), grid=(self.grid,))


def load_kernel(name: str, kinds: list[str], grid: int, source: str) -> TrnInductorKernel:
    """Define the kernel in ``source`` (once per distinct source in the process) and return its launcher."""
    return TrnInductorKernel(name, kinds, grid, source)
