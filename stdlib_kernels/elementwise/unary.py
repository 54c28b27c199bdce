"""Elementwise unary ops (``exp``, ``log``, ``sinh``, ``erfinv``, ``isnan``, ``nan_to_num``, ...), all from one table.

One kernel, :func:`ew`, serves every elementwise op of this family and of ``stdlib_kernels.elementwise.activations``:
the op is a compile-time string selecting a function of up to three fp32 tiles (``EW_OPS``), and
the op's numeric arguments (``alpha``, ``lambd``, ``eps``, ...) are a compile-time tuple ``params``.
Arithmetic runs in fp32 and the store rounds to the output dtype (bf16 too), which is what torch's
CPU kernels do. Inputs may have any strides: :func:`run` broadcasts them to the output shape with
stride-0 views, merges dims that are contiguous in every operand and launches the kernel on 1- to
3-D strided views (leading dims beyond three loop on the host), so transposed or sliced inputs need
no copy. Unsupported dtypes or arguments are declined with a reason (``decline``; the CPU fallback runs them).

Example:
    >>> import torch, trnlang
    >>> x = torch.randn(64, 32, device="trn").t()      # a transposed view
    >>> y = torch.asinh(x)                             # runs ``ew(x, None, None, out, "asinh", ...)``
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch

import trnlang as trn
import trnlang.language as tl
from stdlib_kernels import _util as U
from stdlib_kernels.elementwise import complex_fns
from stdlib_kernels.elementwise import pointwise as P
from stdlib_kernels.elementwise.promote import promotes, promoting, promoting_binary
from trnlang.device import REGISTRY, Accepts, decline, fastlane, lowering
from trnlang.device.registry import scalar_type_name

#: Dtypes the float lowerings handle (computed in fp32, rounded on store).
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_CT = {"f32": tl.float32, "i32": tl.int32, "bool": tl.bool_}


def _sign(x: Any) -> Any:
    return tl.sign(x)


def _round(p: tuple, x: Any) -> Any:
    d = p[0]
    if d == 0:
        return tl.round(x)
    if d > 0:
        s = float(10.0 ** d)
        return tl.round(x * s) / s
    s = float(10.0 ** (-d))
    return tl.round(x / s) * s


def logit_bounds(eps: Any, dtype: torch.dtype) -> tuple[float | None, float | None]:
    """``(eps, 1 - eps)`` rounded to ``dtype`` as torch's kernels do (``(None, None)`` without eps)."""
    if eps is None:
        return (None, None)
    lo = torch.tensor(float(eps), dtype=dtype)
    return (float(lo), float(torch.tensor(1.0, dtype=dtype) - lo))


def _logit(p: tuple, x: Any) -> Any:
    if p[0] is not None:
        lo, hi = p
        x = tl.where(x < lo, lo, tl.where(x > hi, hi, x))
    return tl.log(x / (1.0 - x))


def _nan_to_num(p: tuple, x: Any) -> Any:
    nan, posinf, neginf = p
    return tl.where(x != x, nan, tl.where(x == math.inf, posinf, tl.where(x == -math.inf, neginf, x)))


def _simple(fn: Callable[[Any], Any]) -> Callable[..., Any]:
    return lambda p, x: fn(x)


#: op name -> ``fn(params, *tiles)``: the unary ops of this family (activations add theirs to the same table).
EW_OPS: dict[str, Callable[..., Any]] = {
    name: _simple(getattr(tl, name)) for name in (
        "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "reciprocal", "abs", "floor", "ceil", "tanh", "sigmoid",
        "relu", "gelu", "gelu_tanh", "silu", "softplus", "erf", "sin", "cos", "square", "trunc", "tan", "asin",
        "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log2", "log10", "exp2", "erfc", "erfinv",
        "lgamma", "digamma", "sign", "logical_not")
}
EW_OPS.update({
    "neg": _simple(tl.negative),
    "round": _round,
    "frac": _simple(lambda x: x - tl.trunc(x)),
    "deg2rad": _simple(lambda x: x * float(math.pi / 180.0)),
    "rad2deg": _simple(lambda x: x * float(180.0 / math.pi)),
    "isnan": _simple(lambda x: x != x),
    "isinf": _simple(lambda x: tl.abs(x) == math.inf),
    "isfinite": _simple(lambda x: tl.abs(x) < math.inf),
    "isposinf": _simple(lambda x: x == math.inf),
    "isneginf": _simple(lambda x: x == -math.inf),
    "logit": _logit,
    "nan_to_num": _nan_to_num,
    "bitwise_not": _simple(lambda x: ~x if x.dtype == tl.bool_ else x ^ -1),  # activations compute in fp32
    "atan2": lambda p, x, y: tl.atan2(x, y),
    "gelu_torch": _simple(lambda x: tl.where(x == math.inf, math.nan, tl.gelu(x))),  # torch: gelu(inf) = NaN
    "sinc": _simple(lambda x: tl.where(x == 0.0, 1.0, tl.sin(x * float(math.pi)) / (x * float(math.pi)))),
    "special_entr": _simple(lambda x: tl.where(x != x, x, tl.where(x > 0.0, -x * tl.log(x),
                                                                     tl.where(x == 0.0, 0.0, -math.inf)))),
})
#: Back-compat: ATen op name -> ``tl`` function for the simple table-driven ops.
UNARY_OPS: dict[str, Callable[..., Any]] = {
    "exp": tl.exp, "log": tl.log, "log1p": tl.log1p, "expm1": tl.expm1, "sqrt": tl.sqrt, "rsqrt": tl.rsqrt,
    "reciprocal": tl.reciprocal, "abs": tl.abs, "neg": tl.negative, "sign": tl.sign, "floor": tl.floor,
    "ceil": tl.ceil, "tanh": tl.tanh, "sigmoid": tl.sigmoid, "relu": tl.relu, "gelu": tl.gelu,
    "gelu_tanh": tl.gelu_tanh, "silu": tl.silu, "softplus": tl.softplus, "erf": tl.erf, "sin": tl.sin,
    "cos": tl.cos, "square": tl.square,
}


_shape3 = U.shape3
_at = U.at3


@trn.kernel
def ew(x, y, z, out, op, params, compute, flat=False):
    """``out = EW_OPS[op](params, x[, y[, z]])`` over 1- to 3-D views (rows tiled by 128, the free dim by chunks).

    ``y``/``z`` may be None; every operand has ``out``'s shape (broadcast operands are stride-0 views).
    ``compute``: the type the operands are loaded as (``"f32"``, ``"i32"`` or ``"bool"``). ``flat``: every
    tensor is a contiguous 1-D piece (``elementwise.flat.flat_tiles``, through :data:`ew_flat`).
    """
    ct = _CT[compute]
    fn = EW_OPS[op]
    for acc, m in P.spaces(out, flat):
        ts = [tl.load(acc(t), mask=m).astype(ct) for t in (x, y, z) if t is not None]
        tl.store(acc(out), fn(params, *ts), mask=m)


#: :func:`ew` for flat launches: one variant for every element count.
ew_flat = P.flat_kernel(ew, rows=("x", "y", "z", "out"))


@trn.kernel
def unary(x, out, op):
    """``out = UNARY_OPS[op](x)`` for a 2-D ``[n, d]`` tensor (kept for callers of the first version)."""
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


def launch(op: str, ins: Sequence[torch.Tensor], out: torch.Tensor, params: tuple = (), compute: str = "f32") -> None:
    """Broadcast ``ins`` to ``out``'s shape with strides, merge dims, run :func:`ew` on 1- to 3-D views (on flat
    pieces, :data:`ew_flat`, when every tensor is contiguous with ``out``'s shape)."""
    shape = tuple(out.shape)
    if P.flat_ok([*ins, out], shape):  # one flat or row launch (the runtime splits a long one)
        for k, vs, mode in P.contiguous_calls(ew, [*ins, out], shape):
            args = (*vs[:-1], *[None] * (4 - len(vs)), vs[-1], op, params, compute, mode)
            fastlane.record_launch(k, args)  # one direct launch: a unary op's fast lane repeats it
            k(*args)
        return
    views_of = list(ins) + [out]
    strides = [U.broadcast_strides(t, shape) for t in ins] + [list(out.stride())]
    # dims in the output's memory order (largest stride first), as TensorIterator does: a transposed
    # operand written to a transposed output then streams contiguously instead of element by element
    order = sorted(range(len(shape)), key=lambda k: -out.stride()[k])
    shape = tuple(shape[k] for k in order)
    strides = [[st[k] for k in order] for st in strides]
    sh, sts = U.coalesce(shape, strides)
    if not sh:
        sh, sts = [1], [[0] for _ in ins] + [[1]]
    parts = U.launch_parts(sh, sts, 4)

    def call(pshape: Any, pstrides: Any, poffs: Any) -> Any:
        vs = [U.piece(t, pshape, pstrides[k], t.storage_offset() + poffs[k]) for k, t in enumerate(views_of)]
        args = vs[:-1] + [None] * (3 - len(ins))
        return U.launch(ew, args[0], args[1], args[2], vs[-1], op, params, compute)

    # big outputs: one launch per thread on disjoint blocks (the kernels release the GIL)
    U.run_parallel([call(*p) for p in U.split_parts(parts, out.numel())])


def run(op: str, ins: Sequence[Any], out_dtype: torch.dtype, out: torch.Tensor | None = None, params: tuple = (),
        compute: str = "f32", in_dtypes: Sequence[torch.dtype] = DTYPES) -> Any:
    """Compute ``EW_OPS[op]`` of the device tensors ``ins`` into ``out`` (allocated if None).

    Returns the output, or NotImplemented (decline -> CPU fallback) for non-``trn`` operands, other
    dtypes, shapes that do not broadcast, or an ``out=`` tensor of another shape/dtype or overlapping
    an input partially.

    Example:
        >>> # run("sinh", [x], x.dtype)  ->  torch.sinh(x) on trn
    """
    if not ins or not all(U.is_trn(t) and t.dtype in in_dtypes for t in ins):
        return decline("an operand not a trn tensor of a dtype this op takes natively")
    bshape = tuple(ins[0].shape) if len(ins) == 1 else U.broadcast_shape(*[t.shape for t in ins])
    if bshape is None:
        return decline("operands do not broadcast: torch raises")
    shape = bshape
    if out is None:
        out = U.new_output(shape, out_dtype, [t for t in ins if tuple(t.shape) == shape])
    else:
        if U.is_trn(out) and tuple(out.shape) != shape and not any(U.overlaps(out, t) for t in ins):
            U.resize_out(out, shape)  # as torch: an empty out= silently, another with its warning (never an input)
        if (not U.is_trn(out) or tuple(out.shape) != shape or out.dtype != out_dtype
                or U.has_internal_overlap(out)):
            return decline("out= not a trn tensor of the result's shape and dtype, or expanded")
        if any(U.overlaps(out, t) and not U.same_view(out, t) for t in ins):
            return decline("out= partly overlapping an input")
    if out.numel() == 0:
        return out
    launch(op, list(ins), out, params, compute)
    return out


def run_unary(op: str, self: Any, out: torch.Tensor | None, params: tuple = ()) -> Any:
    """Launch unary ``op`` over a float ``self`` into ``out`` (same dtype); NotImplemented to decline."""
    if not U.is_trn(self):
        return decline("self not a trn tensor")
    return run(op, [self], self.dtype, out, params)


#: integer (and bool) inputs torch promotes to the default float dtype for these ops
_INT_IN = (torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)
#: torch's wider unsigned dtypes: promoted like int64 (a native cast to float32 first)
_WIDE_UNSIGNED = (torch.uint16, torch.uint32, torch.uint64)
_KEEPS_INT = {"abs", "neg", "sign", "floor", "ceil", "trunc", "relu", "square", "frac"}


#: Rounding ops: the identity on integer tensors (torch returns a copy; bool is an error, left to torch).
_ROUNDING = ("floor", "ceil", "trunc")
_ALL_INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _int_identity(self: torch.Tensor, out: torch.Tensor | None) -> Any:
    """``floor``/``ceil``/``trunc``/``round`` of an integer tensor: a native copy."""
    if out is None:
        return self.clone()
    if out.dtype != self.dtype or out.shape != self.shape:
        return decline("out= of another dtype or shape than self")
    return out.copy_(self)


def _int_abs_sign(op: str, self: torch.Tensor, out: torch.Tensor | None) -> Any:
    """``abs``/``sign`` of an integer tensor from native compares, ``neg`` and ``where`` (abs wraps at the
    dtype's minimum as torch's does; ``abs`` of bool is left to torch, which raises)."""
    if out is not None and (out.dtype != self.dtype or out.shape != self.shape):
        return decline("out= of another dtype or shape than self")
    if op == "abs":
        if self.dtype == torch.bool:
            return decline("abs of a bool tensor: torch raises")
        r = self.clone() if self.dtype == torch.uint8 else torch.where(self < 0, -self, self)
    elif self.dtype == torch.bool:
        r = self.clone()
    else:
        r = (self > 0).to(self.dtype) - (self < 0).to(self.dtype)
    return r if out is None else out.copy_(r)


def _complex_abs(self: torch.Tensor, out: torch.Tensor | None) -> Any:
    """``|z|`` of a complex64/complex32 tensor (``hypot`` of its planes), into a float or complex ``out=`` with
    torch's cast rules and errors."""
    from stdlib_kernels.elementwise.complex_arith import up_complex32

    if out is self:  # abs_ (routed as out=self): torch's error
        raise RuntimeError("In-place abs is not supported for complex tensors.")
    v = _complex_planes(up_complex32(self))  # |z| as hypot(re, im): no overflow
    if v is None or (out is not None and not U.is_trn(out)):
        return decline("complex abs of other than a complex64/32 trn tensor without conj/neg bit")
    r = torch.hypot(v[..., 0], v[..., 1])
    r = r.half() if self.dtype == torch.complex32 else r
    if out is not None and out.is_complex() and out.dtype != self.dtype:  # torch's complex-out check
        raise RuntimeError(f"Found dtype {scalar_type_name(out.dtype)} but expected "
                           f"{scalar_type_name(self.dtype)}")
    if out is not None and not torch.can_cast(r.dtype, out.dtype):  # torch's check, its words
        raise RuntimeError(f"result type {scalar_type_name(r.dtype)} can't be cast to the desired output "
                           f"type {scalar_type_name(out.dtype)}")
    return U.into_out(r, out, (self,))  # a float or complex out= takes |z| cast


def _make(op: str) -> Callable[..., Any]:
    def lower(self: Any, *, out: torch.Tensor | None = None) -> Any:
        if op in complex_fns.UNARY and isinstance(self, torch.Tensor) and self.is_complex():
            return complex_fns.complex_unary(op, self, out)
        if op in _ROUNDING and isinstance(self, torch.Tensor) and self.is_complex():
            raise NotImplementedError(f"{op} is not supported for complex inputs")  # torch's error
        if op in _ROUNDING and U.is_trn(self) and self.dtype in _ALL_INTS:
            return _int_identity(self, out)
        if op in ("abs", "sign") and U.is_trn(self) and self.dtype in (*_ALL_INTS, torch.bool):
            return _int_abs_sign(op, self, out)
        if op == "abs" and isinstance(self, torch.Tensor) and self.is_complex():
            return _complex_abs(self, out)
        if op == "square" and U.is_trn(self) and self.dtype == torch.bool:  # torch: pow(x, 2), an int64 0/1
            return U.into_out(self.to(torch.int64), out, (self,))
        if op == "square" and U.is_trn(self) and self.dtype in _ALL_INTS:
            r = torch.mul(self, self)  # pointwise's range-checked integer multiply (int64 included)
            return r if out is None or r is NotImplemented else out.copy_(r)
        if U.is_trn(self) and self.dtype in _INT_IN:
            if op in _KEEPS_INT or torch.get_default_dtype() != torch.float32:
                return decline("an integer input of an op that keeps integer results, or a default dtype other "
                               "than float32")
            return run(op, [self], torch.float32, out, in_dtypes=_INT_IN)  # the kernel loads ints as fp32
        if op not in _KEEPS_INT and promotes(self):  # int64: a native float32 cast first, as torch promotes
            return promoting(lambda x, o: run_unary(op, x, o))(self, out)
        return run_unary(op, self, out)

    lower.__name__ = op
    lower.__doc__ = f"``aten::{op}`` on ``trn`` (and, routed, its in-place and ``out=`` variants)."
    return lower


_SIMPLE = ("exp", "log", "log1p", "sqrt", "rsqrt", "reciprocal", "abs", "neg", "sign", "floor", "ceil",
           "tanh", "sigmoid", "relu", "silu", "erf", "cos", "sin", "expm1", "square", "trunc", "frac", "tan", "asin",
           "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "log2", "log10", "exp2", "erfc", "erfinv",
           "lgamma", "digamma", "deg2rad", "rad2deg", "sinc", "special_entr")


def _register(name: str, fn: Callable[..., Any], dtypes: Any = DTYPES, accepts: Accepts | None = None,
              fast: Callable[..., Any] | None = None) -> None:
    if f"aten::{name}" not in REGISTRY:  # skip ops another family already lowers (neg: pointwise)
        lowering(f"aten::{name}", dtypes=dtypes, accepts=accepts, fast=fast)(fn)


_TENSORS = (torch.Tensor, torch.nn.Parameter)  # a module's weights are Parameters
_FAST_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _one_layout(a: Any) -> Any:
    """The fast-lane key of a contiguous float ``trn`` tensor (``trnlang.device.fastlane``), else None."""
    if type(a) not in _TENSORS or a.is_cpu or a.dtype not in _FAST_DTYPES or a.is_neg() or not a.is_contiguous():
        return None
    return a.dtype, a.shape


def _fast(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A fast lane for the unary lowering ``fn``: a repeated call on a same-layout tensor reruns its one launch
    (``launch``'s direct flat or row launch) at native dispatch cost; the lowering's Python is most of a small
    op's time."""
    return fastlane.fast_function(lambda a: fn(a), 1, _one_layout)


for _op in _SIMPLE:
    if _op != "relu":
        _fn = _make(_op)
        _dts = ((*DTYPES, *_ALL_INTS, torch.complex64) if _op in _ROUNDING
                else (*DTYPES, *_ALL_INTS, torch.bool, torch.complex64, torch.complex32) if _op == "abs"
                else (*DTYPES, *_ALL_INTS, torch.bool) if _op == "sign"
                else (*DTYPES, *_ALL_INTS, torch.bool) if _op == "square"
                else DTYPES if _op in _KEEPS_INT
                else (*DTYPES, *_INT_IN, torch.int64, *_WIDE_UNSIGNED))
        _register(_op, _fn, (*_dts, torch.complex64) if _op in complex_fns.UNARY else _dts, fast=_fast(_fn))

_INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def relu(self: Any, *, out: torch.Tensor | None = None) -> Any:
    """``aten::relu``; integer tensors by a native ``where(x < 0, 0, x)`` (int64: on its (low, high) int32
    word pairs, zeroing both words of a pair whose high word is negative: exact for every int64)."""
    if not U.is_trn(self) or self.dtype not in _INTS:
        return run_unary("relu", self, out)
    if out is not None:  # relu_ (routed here with out=self)
        if out.dtype != self.dtype or out.shape != self.shape:
            return decline("out= of another dtype or shape than self")
        r = relu(self)
        return r if r is NotImplemented else out.copy_(r)
    if self.dtype == torch.uint8:
        return self.clone()
    if self.dtype != torch.int64:
        return torch.where(self < 0, 0, self)
    w = U.int32_words(self)  # any layout, 0-dim included
    return U.from_int32_words(torch.where(w[..., 1:2] < 0, 0, w))


_register("relu", relu, (*DTYPES, *_INTS))


def sgn(self: Any, *, out: torch.Tensor | None = None) -> Any:
    """``aten::sgn``: ``sign`` for real tensors; ``z / |z|`` (0 at 0) for complex64, on its real/imaginary
    planes with native ops (``|z|`` as ``hypot``: no overflow)."""
    if U.is_trn(self) and self.dtype in (*_ALL_INTS, torch.bool):
        return _int_abs_sign("sign", self, out)  # sgn of a real tensor is its sign
    if not (U.is_trn(self) and self.is_complex()):
        return run_unary("sign", self, out)
    if self.dtype == torch.complex32:
        from stdlib_kernels.elementwise.complex_arith import unary_via_complex64

        return unary_via_complex64(sgn, self, out)
    if out is not None or self.dtype != torch.complex64 or self.is_conj() or self.is_neg():
        return decline("out= of a complex input, or not complex64 without conj/neg bit")
    v = torch.view_as_real(self)
    r = torch.hypot(v[..., 0], v[..., 1]).unsqueeze(-1)
    return torch.view_as_complex(torch.where(r == 0, 0.0, v / r))


_register("sgn", sgn, (*DTYPES, *_ALL_INTS, torch.bool, torch.complex64, torch.complex32))


def round_(self: Any, *, out: torch.Tensor | None = None) -> Any:
    """``aten::round``: half to even (the identity, as a copy, on integer tensors)."""
    if U.is_trn(self) and self.dtype in _ALL_INTS:
        return _int_identity(self, out)
    return run_unary("round", self, out, (0,))


def round_decimals(self: Any, *, decimals: int, out: torch.Tensor | None = None) -> Any:
    """``aten::round.decimals``: ``round(x * 10**d) / 10**d`` (``d < 0``: ``round(x / 10**-d) * 10**-d``), as torch."""
    return run_unary("round", self, out, (int(decimals),))


_register("round", round_, (*DTYPES, *_ALL_INTS))
_register("round.decimals", round_decimals)


def gelu(self: Any, *, approximate: str = "none", out: torch.Tensor | None = None) -> Any:
    """``aten::gelu`` (``approximate="none"``: erf form, ``"tanh"``: tanh form)."""
    if approximate not in ("none", "tanh"):
        return decline("approximate other than 'none' or 'tanh': torch raises")
    return run_unary("gelu_torch" if approximate == "none" else "gelu_tanh", self, out)


_register("gelu", gelu, fast=_fast(gelu))


def softplus(self: Any, beta: Any = 1, threshold: Any = 20, *, out: torch.Tensor | None = None) -> Any:
    """``aten::softplus``: ``x`` where ``x * beta > threshold``, else ``log1p(exp(x * beta)) / beta``."""
    if U.scalar_value(beta) is None or U.scalar_value(threshold) is None:
        return decline("beta or threshold not a number")
    return run_unary("softplus_bt", self, out, (float(U.scalar_value(beta)), float(U.scalar_value(threshold))))


def _softplus_bt(p: tuple, x: Any) -> Any:
    beta, th = p
    if beta == 1.0 and th == 20.0:
        return tl.softplus(x)
    xb = x * beta
    return tl.where(xb > th, x, tl.log1p(tl.exp(xb)) / beta)


EW_OPS["softplus_bt"] = _softplus_bt
_register("softplus", softplus)


#: the declared limit of the lowerings below: ``self`` is a ``trn`` tensor (their dtypes are registered).
_SELF_ON_TRN = Accepts(tensors=("self",))


def logit(self: Any, eps: Any = None, *, out: torch.Tensor | None = None) -> Any:
    """``aten::logit``: ``log(x / (1 - x))``, x clamped to ``[eps, 1 - eps]`` when eps is given."""
    return run_unary("logit", self, out, logit_bounds(eps, self.dtype))


_register("logit", promoting(logit), dtypes=(*DTYPES, *_ALL_INTS, torch.bool), accepts=_SELF_ON_TRN)


def nan_to_num(self: Any, nan: Any = None, posinf: Any = None, neginf: Any = None, *,
               out: torch.Tensor | None = None) -> Any:
    """``aten::nan_to_num``: NaN, +inf, -inf replaced (defaults 0 and the dtype's largest finite values); a
    copy of an integer or bool tensor."""
    if U.is_trn(self) and self.dtype in (*_ALL_INTS, torch.bool):
        return _int_identity(self, out)
    fi = torch.finfo(self.dtype)
    p = (0.0 if nan is None else float(nan), fi.max if posinf is None else float(posinf),
         fi.min if neginf is None else float(neginf))
    return run_unary("nan_to_num", self, out, p)


_register("nan_to_num", nan_to_num, dtypes=(*DTYPES, *_ALL_INTS, torch.bool), accepts=_SELF_ON_TRN)


_INT_BOOL = (torch.int32, torch.bool)


def _complex_planes(self: Any) -> torch.Tensor | None:
    """The ``[..., 2]`` real/imaginary planes of a complex64 ``trn`` tensor without conj/neg bits, else None."""
    if not U.is_trn(self) or self.dtype != torch.complex64 or self.is_conj() or self.is_neg():
        return None
    return torch.view_as_real(self)


def _bool_op(op: str) -> Callable[..., Any]:
    def lower(self: Any, *, out: torch.Tensor | None = None) -> Any:
        if isinstance(self, torch.Tensor) and self.is_complex():
            from stdlib_kernels.elementwise.complex_arith import up_complex32

            v = _complex_planes(up_complex32(self))
            if v is None or out is not None or op not in ("isnan", "isinf", "isfinite"):
                return decline("complex input of an op other than isnan/isinf/isfinite, with out=, or not complex64 "
                               "without conj/neg bit")
            r = lower(v)  # nan/inf when either plane is; finite when both are
            return r if r is NotImplemented else (r.all(-1) if op == "isfinite" else r.any(-1))
        if U.is_trn(self) and self.dtype in _ALL_INTS and self.dtype != torch.int32:
            # integers are never nan/inf: a constant (int32 and bool go through the kernel below)
            if out is not None and (out.dtype != torch.bool or out.shape != self.shape):
                return decline("out= not a bool tensor of self's shape")
            res = out if out is not None else torch.empty(self.shape, dtype=torch.bool, device="trn")
            return res.fill_(op == "isfinite")
        return run(op, [self], torch.bool, out, in_dtypes=DTYPES + _INT_BOOL)  # ints: loaded as fp32, never nan/inf

    lower.__name__ = op
    lower.__doc__ = f"``aten::{op}``: a bool tensor (float, int32 and bool inputs)."
    return lower


for _op in ("isnan", "isinf", "isfinite", "isposinf", "isneginf"):
    _register(_op, _bool_op(_op), dtypes=DTYPES + _INT_BOOL + _ALL_INTS + (
        (torch.complex64, torch.complex32) if _op in ("isnan", "isinf", "isfinite") else ()))


def signbit(self: Any, *, out: torch.Tensor | None = None) -> Any:
    """``aten::signbit``: the sign bit, read from the int32 view of the (fp32) bits (NaN and -0.0 included)."""
    if U.is_trn(self) and self.dtype in _INT_BOOL:
        return run("signbit_i", [self], torch.bool, out, compute="i32", in_dtypes=_INT_BOOL)
    if U.is_trn(self) and self.dtype == torch.int64:  # the sign of the high int32 word, any layout
        return run("signbit_i", [U.int32_words(self)[..., 1]], torch.bool, out, compute="i32",
                   in_dtypes=(torch.int32,))
    if U.is_trn(self) and self.dtype in _ALL_INTS:  # int16/int8/uint8: widened by the kernel's load
        return run("signbit_i", [self], torch.bool, out, compute="i32", in_dtypes=_ALL_INTS)
    if not U.is_trn(self) or self.dtype not in DTYPES:
        return decline("not a trn tensor")
    f = self if self.dtype == torch.float32 else self.to(torch.float32)  # a native cast copy (sign kept)
    return run("signbit_i", [f.view(torch.int32)], torch.bool, out, compute="i32", in_dtypes=(torch.int32,))


EW_OPS["signbit_i"] = lambda p, x: x < 0
_register("signbit", signbit, dtypes=DTYPES + _INT_BOOL + _ALL_INTS)


def logical_not(self: Any, *, out: torch.Tensor | None = None) -> Any:
    """``aten::logical_not``: ``self == 0`` as bool (an ``out=`` of another dtype is declined); other integer
    dtypes by the native ``self == 0`` (int64 on its words), complex64 when both planes are 0."""
    if U.is_trn(self) and (self.dtype in _ALL_INTS or self.dtype == torch.complex64) and \
            self.dtype != torch.int32:
        if self.dtype == torch.complex64:
            if self.is_conj() or self.is_neg():
                return decline("a complex input with a conj/neg bit")
            v = torch.view_as_real(self)
            r = (v[..., 0] == 0) & (v[..., 1] == 0)
        elif self.dtype == torch.int64:  # zero when both words are: exact beyond int32
            w = U.int32_words(self)
            r = (w[..., 0] == 0) & (w[..., 1] == 0)
        else:
            r = torch.eq(self, 0)
        if out is None:
            return r
        if out.shape != r.shape:
            return decline("out= of another shape than self")
        return out.copy_(r)
    return run("logical_not", [self], torch.bool, out, in_dtypes=DTYPES + (torch.int32, torch.bool))


_register("logical_not", logical_not, dtypes=DTYPES + _ALL_INTS + (torch.bool, torch.complex64))


def bitwise_not(self: Any, *, out: torch.Tensor | None = None) -> Any:
    """``aten::bitwise_not`` of int32 (two's complement) and bool (logical not) tensors; int64 on both of its
    int32 words (exact for every value)."""
    if self.dtype == torch.int64:
        r = U.from_int32_words(bitwise_not(U.int32_words(self)))
        if out is None:
            return r
        if out.dtype != torch.int64 or out.shape != r.shape:
            return decline("out= of another dtype or shape than self")
        return out.copy_(r)
    compute = "bool" if self.dtype == torch.bool else "i32"  # int8/int16/uint8: in int32, wrapped by the store
    return run("bitwise_not", [self], self.dtype, out, compute=compute, in_dtypes=_ALL_INTS + (torch.bool,))


_register("bitwise_not", bitwise_not, dtypes=_ALL_INTS + (torch.bool,), accepts=_SELF_ON_TRN)


def atan2(self: Any, other: Any, *, out: torch.Tensor | None = None) -> Any:
    """``aten::atan2`` of two float device tensors (broadcasting; the result dtype is torch's promotion)."""
    rdt = torch.result_type(self, other)
    return run("atan2", [self, other], rdt, out)


_register("atan2", promoting_binary(atan2), dtypes=(*DTYPES, *_ALL_INTS, torch.bool, *_WIDE_UNSIGNED),
          accepts=Accepts(tensors=("self", "other")))  # integers: as float32, as torch promotes
