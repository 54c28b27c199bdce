"""FFTs on ``trn`` vs CPU (4096x1024 fp32 / complex64 rows): the Tensor-engine DFT of stdlib_kernels/fft/dft.py."""

from __future__ import annotations

from typing import Any, Callable

import torch


def cases(quick: bool) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]:
    """(name, cpu thunk, trn thunk) per case."""
    r, c = (256, 256) if quick else (4096, 1024)
    x = torch.randn(r, c)
    z = torch.randn(r, c, dtype=torch.complex64)
    h = torch.fft.rfft(x)
    xt, zt, ht = x.to("trn"), z.to("trn"), h.to("trn")
    return [
        (f"fft.fft complex dim=1 {r}x{c}", lambda: torch.fft.fft(z), lambda: torch.fft.fft(zt)),
        (f"fft.rfft dim=1 {r}x{c}", lambda: torch.fft.rfft(x), lambda: torch.fft.rfft(xt)),
        (f"fft.irfft dim=1 {r}x{c}", lambda: torch.fft.irfft(h, c), lambda: torch.fft.irfft(ht, c)),
        (f"fft.fft2 complex {r}x{c}", lambda: torch.fft.fft2(z), lambda: torch.fft.fft2(zt)),
    ]
