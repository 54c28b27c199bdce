"""Elementwise binary ops: ``add``/``sub`` (with ``alpha``), ``mul``, ``div`` (true division).

One kernel serves them all. Broadcasting is done with strides (stride-0 views, never copies);
dims that are contiguous in every operand are merged first, so most calls run a 1- to 3-D
kernel; higher ranks loop over the leading dims on the host. Scalars (Python numbers, CPU 0-dim
tensors, one-element device tensors) are ``[1, 1]`` device operands broadcast on chip, so new
values never recompile. Type promotion follows torch (``torch.result_type``): arithmetic runs
in fp32 (int32 for integer results) and the store rounds to the output dtype, which is what
torch's CPU kernels do for bf16/fp16 too.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from trnlang.device import lowering


def _shape3(t: Any) -> tuple[int, int, int]:
    if t.ndim == 3:
        return t.shape
    if t.ndim == 2:
        return (1, t.shape[0], t.shape[1])
    return (1, 1, t.shape[0])


def _at(t: Any, b: Any, rows: Any, cols: Any) -> Any:
    if t.ndim == 3:
        return t[b, rows, cols]
    if t.ndim == 2:
        return t[rows, cols]
    return t[cols]


def _apply(op: str, x: Any, y: Any) -> Any:
    if op == "add":
        return x + y
    if op == "sub":
        return x - y
    if op == "mul":
        return x * y
    return x / y


@trn.kernel
def elementwise(x, y, alpha, out, op, xs, ys, compute):
    """``out = op(x, y * alpha)`` over 1- to 3-D tensors (rows tiled by 128, the free dim by chunks).

    ``xs``/``ys``: the operand is a ``[1, 1]`` scalar broadcast on chip. ``alpha``: None or a
    ``[1, 1]`` tensor. ``compute``: ``"f32"`` or ``"i32"`` arithmetic.
    """
    a, n, d = _shape3(out)
    ct = tl.float32 if compute == "f32" else tl.int32
    p = min(128, n)
    f = min(d, U.FREE_CHUNK)
    ragged = n % p != 0 or d % f != 0
    x0 = tl.load(x[0:1, 0:1]).astype(ct) if xs else None
    y0 = tl.load(y[0:1, 0:1]).astype(ct) if ys else None
    if alpha is not None:
        a0 = tl.load(alpha[0:1, 0:1]).astype(ct)
        y0 = y0 * a0 if ys else None
    for b in tl.affine_range(a):
        for i in tl.affine_range(tl.cdiv(n, p)):
            rows = i * p + tl.arange(p)[:, None]
            for j in tl.affine_range(tl.cdiv(d, f)):
                cols = j * f + tl.arange(f)[None, :]
                m = ((rows < n) & (cols < d)) if ragged else None
                xt = x0 if xs else tl.load(_at(x, b, rows, cols), mask=m).astype(ct)
                if ys:
                    yt = y0
                else:
                    yt = tl.load(_at(y, b, rows, cols), mask=m).astype(ct)
                    if alpha is not None:
                        yt = yt * a0
                tl.store(_at(out, b, rows, cols), _apply(op, xt, yt), mask=m)


_BIG_1D = 4096


def _launch(op: str, full: list[torch.Tensor | None], scal: list[torch.Tensor | None], alpha: torch.Tensor | None,
            out: torch.Tensor, compute: str) -> None:
    """Coalesce dims, make strided views, launch (looping over leading dims beyond 3)."""
    shape = tuple(out.shape)
    ops = [t for t in full if t is not None]
    direct = len(shape) in (1, 2, 3) and all(tuple(t.shape) == shape for t in ops)
    if direct and not (len(shape) == 1 and shape[0] >= _BIG_1D):
        args = [full[k] if full[k] is not None else scal[k] for k in range(2)]
        elementwise(args[0], args[1], alpha, out, op, full[0] is None, full[1] is None, compute)
        return
    strides = [U.broadcast_strides(t, shape) for t in ops] + [list(out.stride())]
    sh, sts = U.coalesce(shape, strides)
    if not sh:
        sh, sts = [1], [[1] for _ in sts]
    views_of = ops + [out]
    parts: list[tuple[list[int], list[list[int]], list[int]]] = []
    if len(sh) == 1 and sh[0] >= _BIG_1D:  # one long dim: use all 128 partitions
        cols = sh[0] // 128
        rem = sh[0] - 128 * cols
        parts.append(([128, cols], [[s[0] * cols, s[0]] for s in sts], [0] * len(sts)))
        if rem:
            parts.append(([rem], [[s[0]] for s in sts], [128 * cols * s[0] for s in sts]))
    else:
        lead, inner = sh[:-3], sh[-3:]
        for idx in itertools.product(*[range(n) for n in lead]):
            offs = [sum(i * s[k] for k, i in enumerate(idx)) for s in sts]
            parts.append((inner, [s[len(lead):] for s in sts], offs))
    for pshape, pstrides, poffs in parts:
        vs = [U.view(t, pshape, pstrides[k], t.storage_offset() + poffs[k]) for k, t in enumerate(views_of)]
        it = iter(vs[:-1])
        args = [next(it) if full[k] is not None else scal[k] for k in range(2)]
        elementwise(args[0], args[1], alpha, vs[-1], op, full[0] is None, full[1] is None, compute)


def _binary(op: str, self: Any, other: Any, alpha: Any, out: torch.Tensor | None) -> Any:
    operands = (self, other)
    full: list[torch.Tensor | None] = [None, None]
    values: list[Any] = [None, None]
    for k, v in enumerate(operands):
        if U.is_trn(v):
            if v.dtype not in U.NATIVE_DTYPES:
                return NotImplemented
            full[k] = v
        else:
            sv = U.scalar_value(v)
            if sv is None:
                return NotImplemented
            values[k] = sv
    rdt = torch.result_type(self, other)
    if op == "div" and not rdt.is_floating_point:
        rdt = torch.get_default_dtype()
    if rdt not in U.NATIVE_DTYPES:
        return NotImplemented
    is_float = rdt.is_floating_point
    if alpha is not None and alpha != 1:
        if isinstance(alpha, complex) or (not is_float and not isinstance(alpha, int)):
            return NotImplemented
    else:
        alpha = None
    ops = [t for t in full if t is not None]
    if not ops:
        return NotImplemented
    shape = ops[0].shape if len(ops) == 1 or ops[0].shape == ops[1].shape else \
        torch.broadcast_shapes(*[t.shape for t in ops])
    if out is None:
        out = U.new_output(shape, rdt, ops)
    else:
        if U.is_trn(out) and out.numel() == 0 and tuple(out.shape) != tuple(shape):
            out.resize_(shape)  # the usual empty out= tensor: resized without a warning
        if (not U.is_trn(out) or tuple(out.shape) != tuple(shape) or out.dtype not in U.NATIVE_DTYPES
                or not torch.can_cast(rdt, out.dtype) or U.has_internal_overlap(out)):
            return NotImplemented
        if any(U.overlaps(out, t) and not U.same_view(out, t) for t in ops):
            return NotImplemented
    if out.numel() == 0:
        return out
    sdt = torch.float32 if is_float else torch.int32
    scal: list[torch.Tensor | None] = [None, None]
    for k in range(2):
        if full[k] is None:
            v = values[k]
            if not is_float and not -2**31 <= int(v) < 2**31:
                return NotImplemented
            scal[k] = U.scalar_tensor(float(v) if is_float else int(v), sdt)
        elif full[k].numel() == 1 and len(shape) > 0 and tuple(shape) != tuple(full[k].shape):
            scal[k] = U.as_1x1(full[k])
            full[k] = None
    if full[0] is None and full[1] is None:  # both scalars: treat x as a full one-element operand
        full[0] = U.view(scal[0], (1,), (1,), scal[0].storage_offset())
        scal[0] = None
        if out.numel() != 1:
            return NotImplemented
    alpha_t = U.scalar_tensor(float(alpha) if is_float else int(alpha), sdt) if alpha is not None else None
    _launch(op, full, scal, alpha_t, out, "f32" if is_float else "i32")
    return out


@lowering("aten::add.Tensor", dtypes=U.NATIVE_DTYPES)
def add(self: Any, other: Any, *, alpha: Any = 1, out: torch.Tensor | None = None) -> Any:
    """``self + alpha * other``."""
    return _binary("add", self, other, alpha, out)


@lowering("aten::sub.Tensor", dtypes=U.NATIVE_DTYPES)
def sub(self: Any, other: Any, *, alpha: Any = 1, out: torch.Tensor | None = None) -> Any:
    """``self - alpha * other``."""
    return _binary("sub", self, other, alpha, out)


@lowering("aten::mul.Tensor", dtypes=U.NATIVE_DTYPES)
def mul(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
    """``self * other``."""
    return _binary("mul", self, other, None, out)


@lowering("aten::div.Tensor", dtypes=U.NATIVE_DTYPES)
def div(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
    """``self / other`` (true division; integers divide in fp32)."""
    return _binary("div", self, other, None, out)


@lowering("aten::neg", dtypes=U.NATIVE_DTYPES)
def neg(self: torch.Tensor, *, out: torch.Tensor | None = None) -> Any:
    """``-self`` (a multiply by -1: exact, and -0.0 for 0.0 as torch gives)."""
    return _binary("mul", self, -1, None, out)
