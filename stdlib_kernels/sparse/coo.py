"""Sparse COO tensors on ``trn``: kernels at the ``SparsePrivateUse1`` key over dense ``trn`` indices/values.

A COO tensor is torch's C++ ``SparseTensorImpl`` holding two dense tensors, ``indices`` (sparse_dim, nnz) int64
and ``values`` (nnz, *dense_dims). Its metadata ops (construction, the accessors, resizing) are device-generic
C++ in torch's ``SparseCPU`` kernels, which the ``trn`` kernels borrow by redispatch (:data:`BORROWED`); the
ops that read the numbers compose dense ``trn`` ops here: a linear key per nonzero (``indices`` times the
sparse dims' strides), ``index_add_`` for scatter-accumulate, ``index_select`` for gathers, a stable ``sort`` for
``coalesce``. Nothing of a trn tensor's data runs on the CPU; only sizes and ``nnz`` cross to the host.

Example:
    >>> import torch
    >>> i = torch.tensor([[0, 1, 1], [2, 0, 2]], device="trn")
    >>> s = torch.sparse_coo_tensor(i, torch.tensor([3.0, 4.0, 5.0], device="trn"), (2, 3))
    >>> (s @ torch.ones(3, 2, device="trn")).cpu()
    tensor([[3., 3.],
            [9., 9.]])
"""

from __future__ import annotations

from typing import Any

import torch
from torch._C import DispatchKey, DispatchKeySet

from trnlang.device import decline, lowering
from trnlang.device.registry import scalar_type_name

__all__ = ["BORROWED", "KERNELS", "linear_keys", "to_dense"]

_SPARSE_CPU = DispatchKeySet(DispatchKey.SparseCPU)
_KEY = "SparsePrivateUse1"

#: ATen ops whose ``SparseCPU`` kernel is device-generic metadata work, borrowed for sparse ``trn`` tensors.
BORROWED = ("_sparse_coo_tensor_with_dims_and_tensors", "_sparse_coo_tensor_with_dims", "_indices", "_values",
            "indices", "values", "_nnz", "sparse_dim", "dense_dim", "is_coalesced", "_coalesced_", "_dimI",
            "_dimV", "sparse_resize_", "sparse_resize_and_clear_", "copy_sparse_to_sparse_")

#: op name -> the function registered at ``SparsePrivateUse1`` (data: what the docs and tests list)
KERNELS: dict[str, Any] = {}

_LIB = torch.library.Library("aten", "IMPL")


def _overload(name: str) -> Any:
    base, _, ov = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), ov or "default")


def _borrow(name: str) -> None:
    op = _overload(name)

    def kernel(*args: Any, **kwargs: Any) -> Any:
        return op.redispatch(_SPARSE_CPU, *args, **kwargs)

    _LIB.impl(name, kernel, _KEY)
    KERNELS[name] = kernel


for _name in BORROWED:
    _borrow(_name)


def sparse_kernel(name: str) -> Any:
    """Register the decorated function as the ``trn`` kernel of ATen op ``name`` for sparse COO tensors."""
    def deco(fn: Any) -> Any:
        _LIB.impl(name, fn, _KEY)
        KERNELS[name] = fn
        return fn

    return deco


def _make(indices: torch.Tensor, values: torch.Tensor, size: list[int] | torch.Size,
          coalesced: bool = False) -> torch.Tensor:
    out = torch.ops.aten._sparse_coo_tensor_with_dims_and_tensors(
        indices.shape[0], values.dim() - 1, list(size), indices, values, dtype=values.dtype,
        layout=torch.sparse_coo, device=values.device, pin_memory=False, is_coalesced=coalesced)
    return out


def linear_keys(indices: torch.Tensor, sizes: list[int] | tuple[int, ...]) -> torch.Tensor:
    """Row-major linear position of each nonzero among the sparse dims (``indices``: (sparse_dim, nnz)).

    Example:
        >>> linear_keys(torch.tensor([[0, 1], [2, 0]]), (2, 3)).tolist()
        [2, 3]
    """
    key = torch.zeros(indices.shape[1], dtype=torch.int64, device=indices.device)
    for d, n in enumerate(sizes):
        key = key * int(n) + indices[d]
    return key


def to_dense(self: torch.Tensor, dtype: torch.dtype | None = None, masked_grad: bool | None = None) -> torch.Tensor:
    """The dense tensor: zeros, then each nonzero's value added at its position (duplicates summed)."""
    sd = self.sparse_dim()
    shape = tuple(self.shape)
    vals = self._values()
    out = torch.zeros((_numel(shape[:sd]), *shape[sd:]), dtype=vals.dtype, device=vals.device)
    if vals.shape[0]:
        out.index_add_(0, linear_keys(self._indices(), shape[:sd]), vals)
    out = out.view(shape)
    return out if dtype is None else out.to(dtype)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


sparse_kernel("_to_dense")(to_dense)


@sparse_kernel("_coalesce")
def coalesce(self: torch.Tensor) -> torch.Tensor:
    """Sorted unique indices, duplicate values summed (``sort`` + ``cumsum`` + ``index_add_`` on trn)."""
    sd = self.sparse_dim()
    shape = tuple(self.shape)
    idx, vals = self._indices(), self._values()
    if vals.shape[0] == 0:
        return _make(idx.clone(), vals.clone(), shape, coalesced=True)
    # a stable sort of the keys, a group number per run of equal keys (cumsum of "key changed"), values
    # summed per group; sort and cumsum rather than unique, whose trn lowering has a size limit
    ordered, perm = torch.sort(linear_keys(idx, shape[:sd]), stable=True)
    starts = torch.ones(ordered.shape, dtype=torch.bool, device=ordered.device)
    starts[1:] = ordered[1:] != ordered[:-1]
    group = torch.cumsum(starts.to(torch.int64), 0) - 1
    keys = ordered.index_select(0, torch.nonzero(starts).view(-1))
    summed = torch.zeros((keys.shape[0], *vals.shape[1:]), dtype=vals.dtype, device=vals.device)
    summed.index_add_(0, group, vals.index_select(0, perm))
    rows = []
    rest = keys
    for n in reversed(shape[:sd]):
        rows.append(torch.remainder(rest, int(n)))
        rest = torch.div(rest, int(n), rounding_mode="floor")
    return _make(torch.stack(rows[::-1]), summed, shape, coalesced=True)


def _spmm(s: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
    """(M, K) sparse @ (K, N) dense -> (M, N) dense: gather the rows of ``dense``, scale, scatter-add."""
    if s.sparse_dim() != 2 or s.dense_dim() != 0 or dense.dim() != 2:
        raise RuntimeError(f"trn: sparse @ dense needs a 2-D sparse matrix and a 2-D dense one, got sparse "
                           f"{tuple(s.shape)} (dense dims {s.dense_dim()}) and {tuple(dense.shape)}")
    if s.shape[1] != dense.shape[0]:
        raise RuntimeError(f"addmm: Argument #3 (dense): Expected dim 0 size {s.shape[1]}, got {dense.shape[0]}")
    idx, vals = s._indices(), s._values()
    out = torch.zeros((s.shape[0], dense.shape[1]), dtype=torch.result_type(vals, dense), device=dense.device)
    if vals.shape[0]:
        contrib = dense.index_select(0, idx[1]) * vals.unsqueeze(1)
        out.index_add_(0, idx[0], contrib.to(out.dtype))
    return out


@sparse_kernel("mm")
def mm(self: torch.Tensor, mat2: torch.Tensor) -> torch.Tensor:
    """sparse @ dense and dense @ sparse -> dense; sparse @ sparse -> sparse (:func:`sparse_sparse_matmul`)."""
    if not self.is_sparse:  # dense @ sparse -> dense, as (mat2^T @ self^T)^T
        if mat2.sparse_dim() != 2 or mat2.dense_dim() != 0:
            raise RuntimeError(f"trn: dense @ sparse needs a 2-D sparse matrix, got {tuple(mat2.shape)} (dense dims "
                               f"{mat2.dense_dim()})")
        if self.dim() != 2 or self.shape[1] != mat2.shape[0]:
            raise RuntimeError(f"mm: mat1 and mat2 shapes cannot be multiplied ({self.shape[0]}x{self.shape[-1]} and "
                               f"{mat2.shape[0]}x{mat2.shape[1]})")
        st = _make(mat2._indices().flip(0), mat2._values(), [int(mat2.shape[1]), int(mat2.shape[0])])
        return _spmm(st, self.t()).t().contiguous()
    return sparse_sparse_matmul(self, mat2) if mat2.is_sparse else _spmm(self, mat2)


@sparse_kernel("_sparse_sparse_matmul")
def sparse_sparse_matmul(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """sparse @ sparse -> sparse COO (``torch.sparse.mm``): ``self`` times ``other`` densified, then its nonzeros
    (coalesced; entries that cancel to exactly 0 are not stored, where the CPU may keep them)."""
    if other.sparse_dim() != 2 or other.dense_dim() != 0:
        raise RuntimeError(f"trn: sparse @ sparse needs 2-D sparse matrices, got {tuple(other.shape)} (dense dims "
                           f"{other.dense_dim()})")
    return _spmm(self, other.to_dense()).to_sparse()


@sparse_kernel("addmm")
def addmm(self: torch.Tensor, mat1: torch.Tensor, mat2: torch.Tensor, *, beta: float = 1,
          alpha: float = 1) -> torch.Tensor:
    """beta * self + alpha * (mat1 @ mat2), mat1 sparse COO, self and mat2 dense."""
    if self.is_sparse or not mat1.is_sparse or mat2.is_sparse:
        raise NotImplementedError("trn: addmm with sparse COO supports dense + sparse @ dense only")
    prod = _spmm(mat1, mat2)
    base = self.expand_as(prod)
    return (base if beta == 1 else base * beta) + (prod if alpha == 1 else prod * alpha) if beta != 0 \
        else (prod if alpha == 1 else prod * alpha)


@sparse_kernel("sum")
def sum_all(self: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The sum of all values (a dense 0-dim tensor)."""
    return self._values().sum(dtype=dtype)


@sparse_kernel("_sparse_sum.dim")
def sparse_sum_dim(self: torch.Tensor, dim: list[int]) -> torch.Tensor:
    """``torch.sparse.sum(s, dim)``: sparse dims dropped from the keys then coalesced; dense dims summed."""
    sd = self.sparse_dim()
    dims = sorted({d % self.dim() for d in dim})
    vals = self._values()
    dense_dims = [d - sd + 1 for d in dims if d >= sd]
    if dense_dims:
        vals = vals.sum(dense_dims)
    keep = [d for d in range(sd) if d not in dims]
    shape = [int(self.shape[d]) for d in range(self.dim()) if d not in dims]
    if not keep:
        return vals.sum(0)
    return coalesce(_make(self._indices()[keep], vals, shape))


@sparse_kernel("add.Tensor")
def add(self: torch.Tensor, other: torch.Tensor, *, alpha: float = 1) -> torch.Tensor:
    """dense + sparse -> dense; sparse + sparse -> sparse (coalesced when both are)."""
    if self.is_sparse and not (isinstance(other, torch.Tensor) and other.is_sparse):  # a number is a dense operand
        raise RuntimeError("add(sparse, dense) is not supported. Use add(dense, sparse) instead.")
    dt = torch.result_type(self, other)  # alpha scales in the result's dtype (uint8 * -1 would wrap)
    if self.is_sparse and other.is_sparse:
        vals = other._values() if alpha == 1 else other._values().to(dt) * alpha
        both = _make(torch.cat([self._indices(), other._indices()], 1), torch.cat([self._values(), vals]),
                     self.shape)
        return coalesce(both) if self.is_coalesced() and other.is_coalesced() else both
    if self.is_sparse:
        raise RuntimeError("add(sparse, dense) is not supported. Use add(dense, sparse) instead.")
    sd = other.sparse_dim()
    out = self.clone() if self.dtype == other.dtype else self.to(dt)
    vals = other._values() if alpha == 1 else other._values().to(dt) * alpha
    if vals.shape[0]:
        flat = out.view((_numel(tuple(out.shape[:sd])), *out.shape[sd:]))
        flat.index_add_(0, linear_keys(other._indices(), tuple(out.shape[:sd])), vals.to(out.dtype))
    return out


@sparse_kernel("mul.Tensor")
def mul(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """sparse * dense (or a 0-dim factor) -> sparse with the same indices; sparse * sparse via coalesce."""
    if not isinstance(other, torch.Tensor):  # a wrapped number reaches Python kernels as a number
        return mul_scalar(self, other)
    s, d = (self, other) if self.is_sparse else (other, self)
    if d.is_sparse:
        return _mul_sparse(s, d)
    if d.dim() == 0:
        return _make(s._indices(), s._values() * d, s.shape, s.is_coalesced())
    sd = s.sparse_dim()
    flat = d.expand(s.shape).reshape((_numel(tuple(s.shape[:sd])), *s.shape[sd:]))
    picked = flat.index_select(0, linear_keys(s._indices(), tuple(s.shape[:sd])))
    return _make(s._indices(), s._values() * picked, s.shape, s.is_coalesced())


def _mul_sparse(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """sparse * sparse: the intersection of the (coalesced) patterns, values multiplied (torch's result keeps the
    intersection's entries, zero products included)."""
    if a.shape != b.shape or a.sparse_dim() != b.sparse_dim():
        raise RuntimeError("mul operands have incompatible sizes")
    dt = torch.result_type(a._values(), b._values())  # duplicates sum in the result's dtype (bools count), as torch
    if dt == torch.bool and a.is_coalesced() and b.is_coalesced():  # torch's CPU error (its other path takes it)
        raise NotImplementedError('"mul_out_sparse" not implemented for \'Bool\'')
    a, b = (t if t.dtype == dt else _make(t._indices(), t._values().to(dt), t.shape, t.is_coalesced()) for t in (a, b))
    a = a if a.is_coalesced() else coalesce(a)
    b = b if b.is_coalesced() else coalesce(b)
    sizes = tuple(int(n) for n in a.shape[:a.sparse_dim()])
    ka, kb = linear_keys(a._indices(), sizes), linear_keys(b._indices(), sizes)
    va, vb = a._values(), b._values()
    if ka.numel() == 0 or kb.numel() == 0:
        return _make(a._indices()[:, :0], torch.empty((0, *va.shape[1:]), dtype=dt, device=va.device), a.shape,
                     True)
    pos = torch.searchsorted(kb, ka).clamp(max=kb.numel() - 1)  # both sorted (coalesced): the match, if any
    hit = kb[pos] == ka
    keep = hit.nonzero().reshape(-1)
    vals = va.index_select(0, keep).to(dt) * vb.index_select(0, pos.index_select(0, keep)).to(dt)
    return _make(a._indices().index_select(1, keep), vals, a.shape, True)


@sparse_kernel("sparse_mask")
def sparse_mask(self: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The values of dense ``self`` at ``mask``'s indices, as a sparse tensor (autograd of sparse mm)."""
    m = mask if mask.is_coalesced() else coalesce(mask)
    sd = m.sparse_dim()
    flat = self.reshape((_numel(tuple(self.shape[:sd])), *self.shape[sd:]))
    vals = flat.index_select(0, linear_keys(m._indices(), tuple(self.shape[:sd])))
    return _make(m._indices(), vals, self.shape, True)


@sparse_kernel("clone")
def clone(self: torch.Tensor, *, memory_format: torch.memory_format | None = None) -> torch.Tensor:
    """A copy with its own indices and values."""
    return _make(self._indices().clone(), self._values().clone(), self.shape, self.is_coalesced())


@sparse_kernel("neg")
def neg(self: torch.Tensor) -> torch.Tensor:
    """Negated values."""
    return _make(self._indices(), -self._values(), self.shape, self.is_coalesced())


@sparse_kernel("mul.Scalar")
def mul_scalar(self: torch.Tensor, other: float) -> torch.Tensor:
    """Values times a number."""
    return _make(self._indices(), self._values() * other, self.shape, self.is_coalesced())


@sparse_kernel("sub.Tensor")
def sub(self: torch.Tensor, other: torch.Tensor, *, alpha: float = 1) -> torch.Tensor:
    """``self - alpha * other``: :func:`add` with ``-alpha``."""
    return add(self, other, alpha=-alpha)


@sparse_kernel("div.Scalar")
def div_scalar(self: torch.Tensor, other: Any) -> torch.Tensor:
    """Values divided by a number (or a 0-dim tensor)."""
    return _make(self._indices(), self._values() / other, self.shape, self.is_coalesced())


@sparse_kernel("div.Tensor")
def div(self: torch.Tensor, other: Any) -> torch.Tensor:
    """A sparse ``self`` divided by a number or a 0-dim dense tensor (torch's CPU accepts no other divisor)."""
    if not isinstance(other, torch.Tensor) or (not other.is_sparse and other.dim() == 0):
        return div_scalar(self, other)
    raise RuntimeError("Sparse division requires a scalar or zero-dim dense tensor divisor")


@sparse_kernel("div_.Tensor")
def div_(self: torch.Tensor, other: Any) -> torch.Tensor:
    """In place: values divided by a number or a 0-dim dense tensor."""
    return _into(self, div(self, other))


def _into(self: torch.Tensor, r: torch.Tensor, op: str = "") -> torch.Tensor:
    """The in-place form of an op whose result is ``r``: a sparse ``self`` takes ``r``'s indices and values (torch's
    ``copy_sparse_to_sparse_``), a dense one ``r``'s numbers; torch's error if ``r``'s dtype does not cast into
    ``self``'s (an integer ``self`` and a float result, say)."""
    if not torch.can_cast(r.dtype, self.dtype):
        if op:  # torch's sparse add/mul word it their own way
            raise RuntimeError(f"Can't convert result type {scalar_type_name(r.dtype)} to output "
                               f"{scalar_type_name(self.dtype)} in {op} operation")
        raise RuntimeError(f"result type {scalar_type_name(r.dtype)} can't be cast to the desired output type "
                           f"{scalar_type_name(self.dtype)}")
    if self.is_sparse:
        if not r.is_sparse:
            raise RuntimeError("trn: a sparse tensor cannot hold a dense in-place result")
        return torch.ops.aten.copy_sparse_to_sparse_(self, r)
    return self.copy_(r.to_dense() if r.is_sparse else r)  # dense *= sparse: zeros off the pattern, as torch


@sparse_kernel("add_.Tensor")
def add_(self: torch.Tensor, other: torch.Tensor, *, alpha: float = 1) -> torch.Tensor:
    """In place: ``dense += sparse`` (scatter-add) or ``sparse += sparse``."""
    return _into(self, add(self, other, alpha=alpha), "add")


@sparse_kernel("sub_.Tensor")
def sub_(self: torch.Tensor, other: torch.Tensor, *, alpha: float = 1) -> torch.Tensor:
    """In place ``self -= alpha * other``."""
    return _into(self, add(self, other, alpha=-alpha), "add")


@sparse_kernel("mul_.Tensor")
def mul_(self: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """In place: a sparse ``self`` times a dense tensor or a 0-dim factor."""
    r = mul(self, other)
    if self.is_sparse and isinstance(other, torch.Tensor) and not other.is_sparse \
            and not torch.can_cast(r.dtype, self.dtype):
        raise RuntimeError(f"dtype of values ({scalar_type_name(r.dtype)}) must match dtype of sparse tensor "
                           f"({scalar_type_name(self.dtype)})")
    return _into(self, r, "mul")


@sparse_kernel("mul_.Scalar")
def mul_scalar_(self: torch.Tensor, other: float) -> torch.Tensor:
    """In place: values times a number."""
    return _into(self, mul_scalar(self, other))


@sparse_kernel("div_.Scalar")
def div_scalar_(self: torch.Tensor, other: float) -> torch.Tensor:
    """In place: values divided by a number."""
    return _into(self, div_scalar(self, other))


@sparse_kernel("zero_")
def zero_(self: torch.Tensor) -> torch.Tensor:
    """No nonzeros left (the size is kept)."""
    return torch.ops.aten.sparse_resize_and_clear_(self, list(self.shape), self.sparse_dim(), self.dense_dim())


def dense_to_sparse(self: torch.Tensor, sparse_dim: int | None = None) -> torch.Tensor:
    """A dense ``trn`` tensor -> coalesced COO: ``nonzero`` over the first ``sparse_dim`` dims."""
    sd = self.dim() if sparse_dim is None else int(sparse_dim)
    lead = self.reshape((_numel(tuple(self.shape[:sd])), *self.shape[sd:]))
    hit = lead != 0
    if lead.dim() > 1:
        hit = hit.flatten(1).any(1)
    keys = torch.nonzero(hit).view(-1)
    rows = []
    rest = keys
    for n in reversed(self.shape[:sd]):
        rows.append(torch.remainder(rest, int(n)))
        rest = torch.div(rest, int(n), rounding_mode="floor")
    idx = torch.stack(rows[::-1]) if rows else torch.zeros((0, 1), dtype=torch.int64, device=self.device)
    return _make(idx, lead.index_select(0, keys), self.shape, True)


@lowering("aten::_to_sparse.sparse_dim", kind="decomposition", variants=False)
def trn_to_sparse_dim(self: torch.Tensor, sparse_dim: int) -> torch.Tensor:
    """``dense.to_sparse(sparse_dim)`` on trn."""
    return dense_to_sparse(self, sparse_dim)


@lowering("aten::_to_sparse", kind="decomposition", variants=False)
def trn_to_sparse(self: torch.Tensor, *, layout: torch.layout | None = None, blocksize: list[int] | None = None,
                  dense_dim: int | None = None) -> torch.Tensor:
    """``dense.to_sparse()`` on trn (COO; other layouts: ``_to_sparse_csr`` and friends)."""
    if layout not in (None, torch.sparse_coo) or blocksize is not None:
        return decline(f"to_sparse(layout={layout}, blocksize={blocksize}): only COO is lowered here")
    return dense_to_sparse(self, self.dim() - (dense_dim or 0))
