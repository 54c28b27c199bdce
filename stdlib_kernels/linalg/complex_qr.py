"""complex64 Householder QR on the ``trn`` device, as LAPACK's ``zgeqrf``/``zungqr``/``zunmqr`` define it:
``geqrf``, ``linalg.qr``, ``householder_product`` and ``ormqr`` of complex64 matrices (the float32 kernels are in
:mod:`stdlib_kernels.linalg.qr`).

One native step per column (a host loop of batched complex ops, as the complex LU): the reflector
``H = I - tau v v^H`` of ``zlarfg`` (``beta = -sign(Re alpha) |(alpha, x)|``, ``tau = (beta - alpha) / beta``,
``v = (1, x / (alpha - beta))``; ``tau = 0`` when ``x = 0`` and ``alpha`` is real), applied to the trailing
columns as ``H^H``. ``Q = H_1 ... H_k``. Sides up to :data:`MAX_SIDE` (longer loops go to the CPU).

Example:
    >>> a = torch.tensor([[1j, 2.0], [0.0, 1.0]], dtype=torch.complex64, device="trn")
    >>> q, r = torch.linalg.qr(a)
    >>> torch.allclose((q @ r).cpu(), a.cpu())
    True
"""

from __future__ import annotations

import torch

from stdlib_kernels import _util as U

__all__ = ["MAX_SIDE", "ok", "geqrf", "apply_q", "qr"]

#: Largest number of columns (steps of the host loop) a complex QR takes natively.
MAX_SIDE = 64


def ok(*ts: torch.Tensor) -> bool:
    """complex64 ``trn`` matrices (no conj/neg bit) whose columns the host loop takes."""
    return all(U.is_trn(t) and t.dtype == torch.complex64 and not (t.is_conj() or t.is_neg()) and t.dim() >= 2
               and t.shape[-1] <= MAX_SIDE and t.shape[-2] <= 4 * MAX_SIDE for t in ts)


def _abs2(z: torch.Tensor) -> torch.Tensor:
    v = torch.view_as_real(z)
    return v[..., 0] * v[..., 0] + v[..., 1] * v[..., 1]


def geqrf(a3: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``zgeqrf`` of complex64 ``[B, m, n]``: ``(packed, tau [B, min(m, n)])``, R on and above the diagonal and
    each reflector's ``v`` (its leading 1 implied) below it."""
    a = a3.clone()
    b, m, n = a.shape
    k = min(m, n)
    tau = torch.zeros((b, k), dtype=torch.complex64, device="trn")
    for j in range(k):
        alpha = a[:, j, j].clone()
        xr = torch.view_as_real(alpha)
        ar, ai = xr[..., 0], xr[..., 1]
        xn2 = _abs2(a[:, j + 1:, j]).sum(-1)
        nz = (xn2 > 0) | (ai != 0)
        beta = torch.where(ar >= 0, -1.0, 1.0) * torch.sqrt(ar * ar + ai * ai + xn2)
        safe = torch.where(nz, beta, 1.0)
        t = torch.complex(torch.where(nz, (beta - ar) / safe, 0.0), torch.where(nz, -ai / safe, 0.0))
        tau[:, j] = t
        denom = torch.where(nz, alpha - beta.to(torch.complex64), torch.ones_like(alpha))
        a[:, j + 1:, j] = a[:, j + 1:, j] / denom[:, None]
        a[:, j, j] = torch.where(nz, beta.to(torch.complex64), alpha)
        if j + 1 < n:
            v = torch.cat((torch.ones((b, 1), dtype=torch.complex64, device="trn"), a[:, j + 1:, j]), -1)
            c = a[:, j:, j + 1:]
            w = torch.matmul(v.conj().unsqueeze(-2), c)  # v^H C: [B, 1, n - j - 1]
            a[:, j:, j + 1:] = c - (t.conj()[:, None, None] * v[:, :, None]) * w
    return a, tau


def apply_q(v3: torch.Tensor, tau2: torch.Tensor, c3: torch.Tensor, adjoint: bool) -> torch.Tensor:
    """``Q C`` (or ``Q^H C`` when ``adjoint``) for ``Q = H_1 ... H_k`` given by ``geqrf``'s reflectors below the
    diagonal of ``v3 [B, m, >= k]`` and ``tau2 [B, k]``; ``c3`` is ``[B, m, N]`` (a new tensor is returned)."""
    c = c3.clone()
    b, m = c.shape[0], c.shape[1]
    k = tau2.shape[-1]
    one = torch.ones((b, 1), dtype=torch.complex64, device="trn")
    for jj in range(k):
        j = jj if adjoint else k - 1 - jj
        t = tau2[:, j].conj() if adjoint else tau2[:, j]
        v = torch.cat((one, v3[:, j + 1:m, j]), -1)
        w = torch.matmul(v.conj().unsqueeze(-2), c[:, j:, :])
        c[:, j:, :] = c[:, j:, :] - (t[:, None, None] * v[:, :, None]) * w
    return c


def eye(b: int, m: int, k: int) -> torch.Tensor:
    """``[B, m, k]`` complex64 identity columns on ``trn``."""
    return torch.eye(m, k, dtype=torch.complex64, device="trn").expand(b, m, k).contiguous()


def qr(a3: torch.Tensor, mode: str) -> tuple[torch.Tensor | None, torch.Tensor]:
    """``(Q or None for mode 'r', R)`` of complex64 ``[B, m, n]`` in ``torch.linalg.qr``'s modes."""
    b, m, n = a3.shape
    k = min(m, n)
    packed, tau = geqrf(a3)
    kr = m if mode == "complete" else k
    r = torch.triu(packed[:, :kr, :])
    if mode == "r":
        return None, r
    q = apply_q(packed, tau, eye(b, m, m if mode == "complete" else k), False)
    return q, r
