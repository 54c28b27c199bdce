"""Nested tensors on ``trn``: the jagged layout's dense kernels and the strided layout's device-generic ops.

A jagged ``NestedTensor`` (``layout=torch.jagged``) is a Python subclass over a dense ``values`` tensor and
``offsets``; almost every op on it is a dense op on ``values`` and runs on ``trn`` as it is. What reaches the
device besides are the two conversions to and from padded form, lowered here with a host-computed row index
(``offsets`` are tiny) and ``index_select`` / ``index_copy`` on ``trn``.

A strided nested tensor (the default layout, and what SDPA's math path over jagged inputs and the
``TransformerEncoderLayer`` fast path build) is torch's C++ ``NestedTensorImpl``: its ops dispatch to the
``NestedTensorPrivateUse1`` key, where torch has no kernels. Most of torch's ``NestedTensorCPU`` kernels are
device-generic C++ (metadata, or ``at::`` calls on the buffer that dispatch to ``trn`` again), so for the ops
listed in :data:`BORROWED` the ``trn`` kernel *redispatches* to the ``NestedTensorCPU`` kernel: nothing runs on
the CPU but metadata. Kernels that read the buffer's memory directly are not borrowable (the buffer's bytes are
device memory): those are lowered here (``_transform_bias_rescale_qkv``). Unlisted ops raise torch's own
"Could not run ... 'NestedTensortrn' backend" error rather than touching device memory from C++.

Example:
    >>> import torch
    >>> nt = torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(1, 3)], layout=torch.jagged,
    ...                                 device="trn")
    >>> nt.to_padded_tensor(0.0).cpu()[1]
    tensor([[1., 1., 1.],
            [0., 0., 0.]])
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch._C import DispatchKey, DispatchKeySet

from trnlang.device import lowering

__all__ = ["BORROWED", "BORROWED_DENSE", "jagged_rows"]

_CPU = DispatchKeySet(DispatchKey.CPU)
_NESTED_CPU = DispatchKeySet(DispatchKey.NestedTensorCPU)

#: ATen ops whose ``NestedTensorCPU`` kernel is device-generic and serves strided nested ``trn`` tensors as is
#: (each checked with ``TRN_FALLBACK=error`` against the CPU in tests/device/test_nested_jagged.py).
BORROWED = (
    "values", "unbind.int", "transpose.int", "clone", "mul.Scalar", "_nested_tensor_size", "_nested_tensor_strides",
    "_nested_tensor_storage_offsets", "to_padded_tensor", "_softmax", "_safe_softmax", "_softmax_backward_data",
    "matmul", "matmul_backward", "all.dim", "isneginf", "where.self_out", "add_.Tensor",
    "_nested_tensor_softmax_with_shape", "_transformer_encoder_layer_fwd", "_native_multi_head_attention",
)

#: ATen ops on dense tensors whose CPU kernel is a device-generic composition (``at::`` calls only).
BORROWED_DENSE = ("_nested_view_from_buffer", "_nested_view_from_buffer_copy", "_transformer_encoder_layer_fwd",
                  "_native_multi_head_attention", "_nested_tensor_from_mask", "_nested_from_padded")


def _redispatch(op: Any, keys: DispatchKeySet) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        return op.redispatch(keys, *args, **kwargs)

    kernel.__name__ = f"trn_borrowed_{op.__name__.replace('.', '_')}"
    return kernel


def _overload(name: str) -> Any:
    base, _, ov = name.partition(".")
    return getattr(getattr(torch.ops.aten, base), ov or "default")


_LIB = torch.library.Library("aten", "IMPL")
for _name in BORROWED:
    _LIB.impl(_name, _redispatch(_overload(_name), _NESTED_CPU), "NestedTensorPrivateUse1")
for _name in BORROWED_DENSE:
    lowering(f"aten::{_name}", kind="decomposition", device_check=False, variants=False)(
        _redispatch(_overload(_name), _CPU))


# ------------------------------------------------------------------------------------------ jagged <-> padded


def jagged_rows(offsets: torch.Tensor, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Which ``values`` rows land where in the padded ``(B * max_len)`` rows: ``(source, destination)``.

    Computed on the host (offsets are ``B + 1`` integers); rows past ``max_len`` in a component are dropped.

    Example:
        >>> src, dst = jagged_rows(torch.tensor([0, 2, 3]), 2)
        >>> src.tolist(), dst.tolist()
        ([0, 1, 2], [0, 1, 2])
    """
    off = offsets.detach().to("cpu", torch.int64)
    lengths = (off[1:] - off[:-1]).clamp(max=max_len)
    batch = torch.repeat_interleave(torch.arange(lengths.numel()), lengths)
    start = torch.cumsum(lengths, 0) - lengths
    pos = torch.arange(int(lengths.sum())) - start[batch]
    return off[:-1][batch] + pos, batch * max_len + pos


@lowering("aten::_jagged_to_padded_dense_forward", kind="decomposition", device_check=False)
def trn_jagged_to_padded(values: torch.Tensor, offsets: list[torch.Tensor], max_lengths: list[int],
                         padding_value: float = 0.0) -> torch.Tensor:
    """``values`` (total, *D) with one ragged dim -> padded (B, max_len, *D), pad rows ``padding_value``."""
    if len(offsets) != 1:
        raise NotImplementedError("trn: _jagged_to_padded_dense_forward with more than one ragged dim")
    batch, max_len = offsets[0].numel() - 1, int(max_lengths[0])
    rest = tuple(values.shape[1:])
    out = torch.full((batch * max_len, *rest), padding_value, dtype=values.dtype, device=values.device)
    src, dst = jagged_rows(offsets[0], max_len)
    if src.numel():
        rows = values.index_select(0, src.to(values.device))
        out.index_copy_(0, dst.to(values.device), rows)
    return out.view(batch, max_len, *rest)


@lowering("aten::_padded_dense_to_jagged_forward", kind="decomposition", device_check=False)
def trn_padded_to_jagged(dense: torch.Tensor, offsets: list[torch.Tensor], total_L: int | None = None) -> torch.Tensor:
    """Padded (B, max_len, *D) -> ``values`` (total_L, *D): the rows each component's length keeps."""
    if len(offsets) != 1:
        raise NotImplementedError("trn: _padded_dense_to_jagged_forward with more than one ragged dim")
    max_len, rest = dense.shape[1], tuple(dense.shape[2:])
    src, dst = jagged_rows(offsets[0], max_len)
    total = int(offsets[0][-1].item()) if total_L is None else int(total_L)
    out = torch.zeros((total, *rest), dtype=dense.dtype, device=dense.device)
    if src.numel():
        flat = dense.reshape(-1, *rest).index_select(0, dst.to(dense.device))
        out.index_copy_(0, src.to(dense.device), flat)
    return out


# ------------------------------------------------------------------------------------------ fast-path attention


def _bias_rescale_qkv(qkv: torch.Tensor, qkv_bias: torch.Tensor,
                      num_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(B, T, 3E) projections + bias -> q, k, v as (B, heads, T, E / heads), q scaled by 1/sqrt(E / heads)."""
    if qkv.is_nested:
        qkv = qkv.to_padded_tensor(0.0)
    b, t, e3 = qkv.shape
    e = e3 // 3
    dh = e // num_heads
    x = (qkv + qkv_bias).view(b, t, 3, num_heads, dh).permute(2, 0, 3, 1, 4)
    q = (x[0] * (1.0 / math.sqrt(dh))).contiguous()
    return q, x[1].contiguous(), x[2].contiguous()


lowering("aten::_transform_bias_rescale_qkv", kind="decomposition", variants=False)(_bias_rescale_qkv)
_LIB.impl("_transform_bias_rescale_qkv", _bias_rescale_qkv, "NestedTensorPrivateUse1")


@lowering("aten::_masked_softmax", kind="decomposition", variants=False)
def trn_masked_softmax(self: torch.Tensor, mask: torch.Tensor, dim: int | None = None,
                       mask_type: int | None = None) -> torch.Tensor:
    """Softmax where ``mask`` is False (True = masked out: weight 0); rows masked entirely give NaN, as on the CPU.

    ``mask_type`` 0: an (L, L) attention mask; 1: a (B, L) key padding mask for (B, heads, L, L) scores;
    otherwise ``mask`` broadcasts to ``self``.
    """
    d = self.dim() - 1 if dim is None else dim % self.dim()
    m = mask.to(self.device)
    if mask_type == 1 and self.dim() == 4 and m.dim() == 2:
        m = m.view(m.shape[0], 1, 1, m.shape[1])
    m = m.expand(self.shape)
    return torch.softmax(self.masked_fill(m, float("-inf")), d)


def _nested_layer_norm(x: torch.Tensor, normalized_shape: list[int], weight: torch.Tensor | None,
                       bias: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``native_layer_norm`` of a strided nested tensor: the dense layer norm of its buffer's rows."""
    aten = torch.ops.aten
    if not x.is_contiguous():
        x = x.contiguous()
    rows = x.values().view(-1, *normalized_shape)
    out, mean, rstd = aten.native_layer_norm.default(rows, normalized_shape, weight, bias, eps)
    nested = aten._nested_view_from_buffer.default(out.view(-1), aten._nested_tensor_size.default(x),
                                                   aten._nested_tensor_strides.default(x),
                                                   aten._nested_tensor_storage_offsets.default(x))
    return nested, mean.view(-1), rstd.view(-1)


_LIB.impl("native_layer_norm", _nested_layer_norm, "NestedTensorPrivateUse1")


@lowering("aten::_nested_tensor_from_mask_left_aligned", kind="decomposition", variants=False)
def trn_mask_left_aligned(t: torch.Tensor, mask: torch.Tensor) -> bool:
    """Whether each row of ``mask`` (True = a token) is a run of Trues followed by Falses only."""
    if mask.dim() != 2 or mask.shape[1] < 2:
        return True
    m = mask.to(torch.int32)
    return bool((m[:, 1:] <= m[:, :-1]).all().item())
