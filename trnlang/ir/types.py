"""Scalar types, memory spaces and engines of the IR.

One enum per concept; the helper tables next to them are the only place that
knows sizes, numpy/torch equivalents and promotion.
"""

from __future__ import annotations

import enum
from typing import Any

import ml_dtypes
import numpy as np


class DType(enum.Enum):
    """Element types of tiles and HBM tensors (LANGUAGE.md section 5)."""

    float32 = "f32"
    bfloat16 = "bf16"
    float16 = "f16"
    float8_e4m3 = "f8e4m3"
    float8_e5m2 = "f8e5m2"
    int32 = "i32"
    int16 = "i16"
    int8 = "i8"
    uint8 = "u8"
    bool_ = "bool"
    # HBM-only storage type: torch's default integer type; loads widen/narrow it to int32.
    int64 = "i64"

    @property
    def short(self) -> str:
        return self.value

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self]

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_int(self) -> bool:
        return not self.is_float

    @property
    def np(self) -> np.dtype:
        return _NP[self]

    def __repr__(self) -> str:
        return f"tl.{self.name.rstrip('_')}"


_ITEMSIZE = {
    DType.float32: 4, DType.bfloat16: 2, DType.float16: 2, DType.float8_e4m3: 1,
    DType.float8_e5m2: 1, DType.int32: 4, DType.int16: 2, DType.int8: 1, DType.uint8: 1,
    DType.bool_: 1, DType.int64: 8,
}
_FLOATS = {DType.float32, DType.bfloat16, DType.float16, DType.float8_e4m3, DType.float8_e5m2}
_NP = {
    DType.float32: np.dtype(np.float32),
    DType.bfloat16: np.dtype(ml_dtypes.bfloat16),
    DType.float16: np.dtype(np.float16),
    DType.float8_e4m3: np.dtype(ml_dtypes.float8_e4m3fn),
    DType.float8_e5m2: np.dtype(ml_dtypes.float8_e5m2),
    DType.int32: np.dtype(np.int32),
    DType.int16: np.dtype(np.int16),
    DType.int8: np.dtype(np.int8),
    DType.uint8: np.dtype(np.uint8),
    DType.bool_: np.dtype(np.bool_),
    DType.int64: np.dtype(np.int64),
}
_BY_SHORT = {d.value: d for d in DType}
_BY_NP = {v: k for k, v in _NP.items()}


def dtype_from_short(s: str) -> DType:
    """Parse the IR spelling of a dtype (`f32`, `bf16`, ...)."""
    return _BY_SHORT[s]


def to_dtype(x: Any) -> DType | None:
    """Map a trnlang / numpy / torch dtype object (or name) to a DType; None if unknown."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        if x in _BY_SHORT:
            return _BY_SHORT[x]
        name = {"bool": "bool_", "float": "float32", "half": "float16"}.get(x, x)
        return DType.__members__.get(name)
    mod = type(x).__module__
    if mod.startswith("torch"):
        import torch

        table = {
            torch.float32: DType.float32, torch.bfloat16: DType.bfloat16, torch.float16: DType.float16,
            torch.float8_e4m3fn: DType.float8_e4m3, torch.float8_e5m2: DType.float8_e5m2,
            torch.int32: DType.int32, torch.int16: DType.int16, torch.int8: DType.int8,
            torch.uint8: DType.uint8, torch.bool: DType.bool_, torch.int64: DType.int64,
        }
        return table.get(x)
    try:
        return _BY_NP.get(np.dtype(x))
    except TypeError:
        return None


def torch_dtype(d: DType) -> Any:
    import torch

    return {
        DType.float32: torch.float32, DType.bfloat16: torch.bfloat16, DType.float16: torch.float16,
        DType.float8_e4m3: torch.float8_e4m3fn, DType.float8_e5m2: torch.float8_e5m2,
        DType.int32: torch.int32, DType.int16: torch.int16, DType.int8: torch.int8,
        DType.uint8: torch.uint8, DType.bool_: torch.bool, DType.int64: torch.int64,
    }[d]


_FLOAT_RANK = {DType.float8_e4m3: 0, DType.float8_e5m2: 0, DType.bfloat16: 1, DType.float16: 1, DType.float32: 2}
_INT_RANK = {DType.bool_: 0, DType.uint8: 1, DType.int8: 1, DType.int16: 2, DType.int32: 3, DType.int64: 3}


def promote(a: DType, b: DType) -> DType:
    """Result type of a binary op (torch-like: same type stays; mixed floats widen; int+float -> float)."""
    if a == b:
        return a if a != DType.int64 else DType.int32
    if a.is_float and b.is_float:
        ra, rb = _FLOAT_RANK[a], _FLOAT_RANK[b]
        if ra == rb:  # bf16+f16, f8e4m3+f8e5m2: torch promotes to the next wider type
            return DType.float32 if ra == 1 else DType.bfloat16
        return a if ra > rb else b
    if a.is_float:
        return a
    if b.is_float:
        return b
    ra, rb = _INT_RANK[a], _INT_RANK[b]
    if {a, b} == {DType.uint8, DType.int8}:
        return DType.int16
    r = a if ra > rb else b
    return DType.int32 if r == DType.int64 else r


def compute_type(d: DType) -> DType:
    """Arithmetic type: fp32 for floats, int32 for ints (LANGUAGE.md section 5)."""
    return DType.float32 if d.is_float else DType.int32


class Space(enum.Enum):
    """Memory spaces."""

    SBUF = "sbuf"
    PSUM = "psum"
    HBM = "hbm"
    SHARED_HBM = "shared_hbm"


class Engine(enum.Enum):
    """Engines of a NeuronCore; DMA is the set of DMA queues."""

    TENSOR = "tensor"
    VECTOR = "vector"
    SCALAR = "scalar"
    GPSIMD = "gpsimd"
    DMA = "dma"
    HOST = "host"  # debug printing only; never scheduled on the device
