"""Kernel arguments: torch tensors / numpy arrays -> HBM tensor params + zero-copy numpy views."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from trnlang.frontend.errors import DTypeError, LaunchError
from trnlang.ir.nodes import HbmTensor, SourceLoc
from trnlang.ir.types import DType, to_dtype, torch_dtype

_CONST_TYPES = (int, float, bool, str, type(None))
_CONST_SET = frozenset(_CONST_TYPES)
#: whether a type seen as a kernel argument is a frozen dataclass (with a ``__dict__``: not slotted)
_FROZEN: dict[type, bool] = {}
#: Types with an instance :func:`is_spec` accepted. Warm launch keys take their instances by type alone (a set
#: lookup): every new specialization still goes through :func:`describe`, which checks the instance itself.
SPEC_TYPES: set[type] = set()


def _consts(vals: Any) -> bool:
    """Every value is a compile-time constant: int, float, bool, str, None, an enum member, a dtype, or a tuple of
    those (the common types first: this runs on warm launches)."""
    for v in vals:
        t = type(v)
        if t in _CONST_SET:
            continue
        if t is tuple:
            if not _consts(v):
                return False
        elif not (isinstance(v, Enum) or to_dtype(v) is not None):
            return False
    return True


def is_spec(arg: Any) -> bool:
    """A compile-time *spec* argument: an ``enum.Enum`` member, or a frozen dataclass whose fields are constants
    (int, float, bool, str, None, a dtype, an enum member, or tuples of them).

    Kernels take a spec where they would otherwise take a row of positional flags or a string mode; it is
    specialized on like any constant (equal specs share a compiled variant) and read while tracing.

    Example:
        >>> import dataclasses, enum
        >>> class Mode(enum.Enum):
        ...     GATHER = 0
        >>> @dataclasses.dataclass(frozen=True)
        ... class Spec:
        ...     mode: Mode
        ...     wrap: bool
        >>> is_spec(Mode.GATHER), is_spec(Spec(Mode.GATHER, True)), is_spec((1, 2))
        (True, True, False)
    """
    tp = type(arg)
    if isinstance(arg, Enum):
        SPEC_TYPES.add(tp)
        return True
    frozen = _FROZEN.get(tp)
    if frozen is None:
        params = getattr(tp, "__dataclass_params__", None)
        frozen = _FROZEN[tp] = params is not None and params.frozen and hasattr(arg, "__dict__")
    if frozen and _consts(arg.__dict__.values()):
        SPEC_TYPES.add(tp)
        return True
    return False


def is_tensor(x: Any) -> bool:
    return isinstance(x, np.ndarray) or _is_torch(x)


def _is_torch(x: Any) -> bool:
    try:
        import torch
    except ImportError:  # pragma: no cover
        return False
    return isinstance(x, torch.Tensor)


_REINTERPRET: dict[Any, tuple[Any, np.dtype]] = {}  # torch dtypes numpy lacks: viewed as ints, then as ml_dtypes


def torch_to_numpy(t: Any) -> np.ndarray:
    """Zero-copy numpy view of a CPU torch tensor (bf16/fp8 reinterpreted through ml_dtypes)."""
    import torch

    t = t.detach()
    special = _REINTERPRET.get(t.dtype)
    if special is None:
        if not _REINTERPRET:
            _REINTERPRET.update({torch.bfloat16: (torch.int16, DType.bfloat16.np),
                                 torch.float16: (torch.int16, DType.float16.np),
                                 torch.float8_e4m3fn: (torch.uint8, DType.float8_e4m3.np),
                                 torch.float8_e5m2: (torch.uint8, DType.float8_e5m2.np)})
            return torch_to_numpy(t)
        try:
            return t.numpy()
        except TypeError:
            raise DTypeError(f"unsupported tensor dtype {t.dtype}") from None
    return t.view(special[0]).numpy().view(special[1])


def as_array(x: Any) -> np.ndarray:
    """Zero-copy numpy view of a numpy array, a CPU torch tensor or a ``trn`` device tensor."""
    if isinstance(x, np.ndarray):
        return x
    if x.device.type != "cpu":
        from trnlang.runtime import devices

        return devices.device_array(x)
    return torch_to_numpy(x)


class TensorPiece:
    """A strided window of a torch tensor's storage, passed to a kernel as a tensor argument.

    A warm launch needs only an argument's address and layout, so a host that splits an op into
    launch pieces can pass these instead of torch views (a view of a ``trn`` tensor is a dispatch,
    about 5 us). The first launch of a layout (before its launch plan exists) makes the torch view.
    The window is checked against the storage here: a piece never reaches outside its tensor's memory.

    Example:
        >>> import torch
        >>> t = torch.arange(12.0)
        >>> p = TensorPiece(t, (3, 2), (4, 1), 1)
        >>> p.tensor().tolist()
        [[1.0, 2.0], [5.0, 6.0], [9.0, 10.0]]
    """

    __slots__ = ("base", "shape", "strides", "offset", "key", "ptr")

    def __init__(self, base: Any, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> None:
        self.base = base
        self.shape = shape = tuple(shape)
        self.strides = strides = tuple(strides)
        self.offset = offset
        item = base.dtype.itemsize
        lo = hi = offset
        empty = False
        for n, st in zip(shape, strides):
            if n == 0:
                empty = True
            elif st > 0:
                hi += (n - 1) * st
            else:
                lo += (n - 1) * st
        if not empty and (lo < 0 or (hi + 1) * item > base.untyped_storage().nbytes()):
            raise LaunchError(f"tensor piece of shape {shape}, strides {strides}, offset {offset} is outside its "
                              "storage")
        self.key = (base.dtype, shape, strides, base.is_cpu, base.is_neg())  # as in KernelFn._plan_key
        self.ptr = base.data_ptr() + (offset - base.storage_offset()) * item

    # torch-like accessors, so host code can split a piece as it splits a tensor
    @property
    def dtype(self) -> Any:
        return self.base.dtype

    def dim(self) -> int:
        return len(self.shape)

    def stride(self, d: int | None = None) -> Any:
        return self.strides if d is None else self.strides[d]

    def storage_offset(self) -> int:
        return self.offset

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def is_contiguous(self) -> bool:
        expected = 1
        for n, st in zip(reversed(self.shape), reversed(self.strides)):
            if n != 1:
                if st != expected:
                    return False
                expected *= n
        return True

    def tensor(self) -> Any:
        """The torch view this piece stands for."""
        import torch

        return torch.as_strided(self.base, self.shape, self.strides, self.offset)


@dataclass
class Prepared:
    """One argument, described for specialization and launch."""

    key: Any
    tensor: HbmTensor | None = None
    value: Any = None
    array: np.ndarray | None = None

    def finish(self) -> None:
        """Hook after a launch (device tensors write back here)."""


def describe(arg: Any, name: str, kloc: SourceLoc) -> Prepared:
    """Specialization key and IR parameter for one argument."""
    if isinstance(arg, np.ndarray) or _is_torch(arg):
        if _is_torch(arg) and arg.device.type != "cpu":
            from trnlang.runtime import devices

            return devices.describe_device_tensor(arg, name, kloc)
        arr = as_array(arg)
        d = to_dtype(arr.dtype)
        if d is None:
            supported = ", ".join(x.name.rstrip("_") for x in DType)
            raise DTypeError(f"argument {name!r} has unsupported dtype {arg.dtype}; kernels accept {supported}")
        contiguous = arr.flags.c_contiguous
        t = HbmTensor(name, tuple(int(s) for s in arr.shape), d, "in")
        return Prepared(("T", arr.shape, d, contiguous), t, None, arr)
    if is_spec(arg):
        return Prepared(("C", type(arg).__qualname__, arg), None, arg)
    if isinstance(arg, _CONST_TYPES) or to_dtype(arg) is not None:
        return Prepared(("C", type(arg).__name__, arg if not hasattr(arg, "name") else str(arg)), None, arg)
    if isinstance(arg, (tuple, list)) and all(isinstance(v, _CONST_TYPES) for v in arg):
        return Prepared(("C", type(arg).__name__, tuple(arg)), None, tuple(arg) if isinstance(arg, tuple) else arg)
    raise LaunchError(f"argument {name!r} of type {type(arg).__name__} is neither a tensor (torch/numpy) nor a "
                      "compile-time constant (int, float, bool, str, dtype, an enum member or a frozen dataclass "
                      "of constants)")


def alloc_like(like: Any, shape: tuple[Any, ...], dtype: DType) -> Any:
    """An output tensor of the caller's kind (torch on the inputs' device, else numpy)."""
    shape = tuple(int(s) for s in shape)
    if like is not None and _is_torch(like):
        import torch

        if like.device.type != "cpu":
            from trnlang.runtime import devices

            return devices.alloc_device(like.device, shape, dtype)
        return torch.empty(shape, dtype=torch_dtype(dtype))
    return np.empty(shape, dtype.np)
