"""complex64 linear algebra through the real embedding ``A = X + iY  ->  M = [[X, -Y], [Y, X]]`` (float32,
``2n x 2m``), on which the real factorisations run natively.

The embedding is an algebra homomorphism: ``M(A B) = M(A) M(B)``, so ``inv(M(A)) = M(inv(A))`` (the inverse is
read back from the left block column). The spectrum of ``M`` is that of ``A`` twice over for Hermitian ``A``
(``eigvalsh``), and ``M``'s singular values are ``A``'s, each twice (``svdvals``): the doubled values are
averaged pairwise. Eigen- and singular *vectors* of a doubled value mix inside its 2-D space, so they are not
read off ``M`` (those calls decline).

Example:
    >>> a = torch.tensor([[2 + 1j, 0], [0, 1j]], dtype=torch.complex64, device="trn")
    >>> torch.linalg.inv(a).cpu()
    tensor([[0.4000-0.2000j, 0.0000+0.0000j],
            [0.0000+0.0000j, 0.0000-1.0000j]])
"""

from __future__ import annotations

from typing import Any

import torch

from stdlib_kernels import _util as U

__all__ = ["is_complex64", "embed", "inv_ex", "eigvalsh", "svdvals"]


def is_complex64(*ts: Any) -> bool:
    """Every operand is a complex64 ``trn`` tensor without conj/neg bits."""
    return all(U.is_trn(t) and t.dtype == torch.complex64 and not (t.is_conj() or t.is_neg()) for t in ts)


def embed(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``[[X, -Y], [Y, X]]`` of the real and imaginary parts ``[..., n, m]`` (a new float32 tensor)."""
    top = torch.cat((x, -y), -1)
    return torch.cat((top, torch.cat((y, x), -1)), -2)


def _parts(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    v = torch.view_as_real(a)
    return v[..., 0], v[..., 1]


def _pairs_mean(vals: torch.Tensor) -> torch.Tensor:
    """``[..., 2k]`` sorted values, each doubled, as ``[..., k]`` (the mean of each adjacent pair)."""
    return vals.reshape(*vals.shape[:-1], vals.shape[-1] // 2, 2).mean(-1)


def inv_ex(a: torch.Tensor, check_errors: bool) -> Any:
    """``linalg_inv_ex`` of a complex64 square matrix (batch): ``(inverse, info)``."""
    n = a.shape[-1]
    m_inv, info = torch.linalg.inv_ex(embed(*_parts(a)), check_errors=check_errors)
    inv = torch.view_as_complex(torch.stack((m_inv[..., :n, :n], m_inv[..., n:, :n]), -1).contiguous())
    return inv, info


def _hermitian_parts(a: torch.Tensor, lower: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(X, Y)`` of the Hermitian matrix that the ``UPLO`` triangle of ``a`` defines (the other triangle and the
    imaginary part of the diagonal are not read, as torch)."""
    x, y = _parts(a)
    tri = torch.tril if lower else torch.triu
    xs = tri(x, -1 if lower else 1)
    ys = tri(y, -1 if lower else 1)
    diag = torch.diag_embed(torch.diagonal(x, dim1=-2, dim2=-1))
    return xs + xs.mT + diag, ys - ys.mT


def eigvalsh(a: torch.Tensor, lower: bool) -> torch.Tensor:
    """Eigenvalues (ascending, float32) of the Hermitian complex64 matrix given by one triangle of ``a``."""
    vals = torch.linalg.eigvalsh(embed(*_hermitian_parts(a, lower)))
    return _pairs_mean(vals)


def svdvals(a: torch.Tensor) -> torch.Tensor:
    """Singular values (descending, float32) of a complex64 matrix (batch)."""
    return _pairs_mean(torch.linalg.svdvals(embed(*_parts(a))))
