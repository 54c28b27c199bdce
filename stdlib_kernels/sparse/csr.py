"""Sparse CSR matrices on ``trn``: kernels at the ``SparseCsrPrivateUse1`` key over dense ``trn`` tensors.

A CSR matrix is torch's ``SparseCsrTensorImpl`` with ``crow_indices`` (M + 1), ``col_indices`` (nnz) and
``values`` (nnz). The accessors are borrowed from torch's device-generic ``SparseCsrCPU`` kernels; the numeric
ops expand ``crow_indices`` to a row per nonzero (``searchsorted`` on trn) and reuse the COO kernels
(:mod:`stdlib_kernels.sparse.coo`).

Example:
    >>> import torch
    >>> d = torch.tensor([[0.0, 2.0, 0.0], [1.0, 0.0, 3.0]], device="trn")
    >>> c = d.to_sparse_csr()
    >>> c.crow_indices().cpu().tolist(), (c @ torch.ones(3, 1, device="trn")).cpu().view(-1).tolist()
    ([0, 1, 3], [2.0, 4.0])
"""

from __future__ import annotations

from typing import Any

import torch
from torch._C import DispatchKey, DispatchKeySet

from stdlib_kernels.sparse import coo
from trnlang.device import decline, lowering

__all__ = ["BORROWED", "KERNELS", "csr_to_coo"]

_CSR_CPU = DispatchKeySet(DispatchKey.SparseCsrCPU)
_KEY = "SparseCsrPrivateUse1"

#: ATen ops whose ``SparseCsrCPU`` kernel is device-generic metadata work, borrowed for CSR ``trn`` tensors.
BORROWED = ("crow_indices", "col_indices", "values", "_nnz", "sparse_dim", "dense_dim")

#: op name -> the function registered at ``SparseCsrPrivateUse1``
KERNELS: dict[str, Any] = {}

_LIB = torch.library.Library("aten", "IMPL")


def _register(name: str, fn: Any) -> Any:
    _LIB.impl(name, fn, _KEY)
    KERNELS[name] = fn
    return fn


def _borrowed(name: str) -> Any:
    op = getattr(torch.ops.aten, name).default

    def kernel(*args: Any, **kwargs: Any) -> Any:
        return op.redispatch(_CSR_CPU, *args, **kwargs)

    return kernel


for _name in BORROWED:
    _register(_name, _borrowed(_name))


def _check_csr(self: torch.Tensor) -> None:
    if self.layout != torch.sparse_csr or self.dim() != 2 or self.values().dim() != 1:
        raise NotImplementedError(f"trn: only 2-D CSR matrices with scalar values are lowered, got {self.layout} "
                                  f"of shape {tuple(self.shape)}")


def csr_to_coo(self: torch.Tensor) -> torch.Tensor:
    """The same matrix as a coalesced COO tensor (a row index per nonzero from ``crow_indices``).

    Example:
        >>> c = torch.tensor([[0.0, 2.0], [1.0, 3.0]], device="trn").to_sparse_csr()
        >>> csr_to_coo(c).indices().cpu().tolist()
        [[0, 1, 1], [1, 0, 1]]
    """
    _check_csr(self)
    crow, col, vals = self.crow_indices(), self.col_indices(), self.values()
    pos = torch.arange(vals.shape[0], dtype=crow.dtype, device=vals.device)
    rows = torch.searchsorted(crow[1:].contiguous(), pos, right=True)
    idx = torch.stack([rows.to(torch.int64), col.to(torch.int64)])
    return coo._make(idx, vals, self.shape, coalesced=True)


def _to_dense(self: torch.Tensor, dtype: torch.dtype | None = None, masked_grad: bool | None = None) -> torch.Tensor:
    return coo.to_dense(csr_to_coo(self), dtype)


def _mm(self: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    if mat2.layout != torch.strided:
        raise NotImplementedError("trn: mm of a CSR matrix supports CSR @ dense only")
    return coo.mm(csr_to_coo(self), mat2)


def _addmm(self: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, *, beta: float = 1,
           alpha: float = 1) -> torch.Tensor:
    if self.layout != torch.strided or mat1.layout != torch.sparse_csr or mat2.layout != torch.strided:
        raise NotImplementedError("trn: addmm with CSR supports dense + CSR @ dense only")
    return coo.addmm(self, csr_to_coo(mat1), mat2, beta=beta, alpha=alpha)


def _sum(self: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    return self.values().sum(dtype=dtype)


def _to_sparse_dim(self: torch.Tensor, sparse_dim: int) -> torch.Tensor:
    if sparse_dim != 2:
        raise NotImplementedError("trn: CSR to COO with sparse_dim other than 2")
    return csr_to_coo(self)


def _to_sparse(self: torch.Tensor, *, layout: torch.layout | None = None, blocksize: list[int] | None = None,
               dense_dim: int | None = None) -> torch.Tensor:
    if layout not in (None, torch.sparse_coo) or blocksize is not None or dense_dim:
        raise NotImplementedError(f"trn: CSR to {layout} is not lowered (to COO only)")
    return csr_to_coo(self)


for _name, _fn in (("_to_dense", _to_dense), ("mm", _mm), ("addmm", _addmm), ("sum", _sum),
                   ("_to_sparse.sparse_dim", _to_sparse_dim), ("_to_sparse", _to_sparse)):
    _register(_name, _fn)


@lowering("aten::_to_sparse_csr", kind="decomposition", variants=False)
def trn_to_sparse_csr(self: torch.Tensor, dense_dim: int | None = None) -> torch.Tensor:
    """A dense 2-D ``trn`` matrix -> CSR: COO of its nonzeros, then row starts by ``searchsorted``."""
    if self.dim() != 2 or dense_dim:
        return decline("to_sparse_csr of a batched tensor or with dense dims is not lowered (2-D only)")
    s = coo.dense_to_sparse(self, 2)
    idx = s._indices()
    # rows are sorted (coalesced): crow[r] = how many nonzeros lie in rows before r
    bounds = torch.arange(self.shape[0] + 1, dtype=torch.int64, device=self.device)
    crow = torch.searchsorted(idx[0].contiguous(), bounds)
    return torch.sparse_csr_tensor(crow, idx[1].contiguous(), s._values(), tuple(self.shape),
                                   check_invariants=False)
