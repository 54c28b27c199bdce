"""Kernels take spec arguments: enum members and frozen dataclasses of constants are compile-time constants
(specialized on by value, read while tracing), instead of rows of positional flags and string modes."""

from __future__ import annotations

import dataclasses
import enum

import numpy as np
import pytest
import torch

import trnlang as trn
import trnlang.language as tl
from trnlang.frontend.errors import LaunchError


class Op(enum.Enum):
    ADD = "add"
    MUL = "mul"


@dataclasses.dataclass(frozen=True)
class Spec:
    op: Op
    scale: float
    bias: bool
    dims: tuple[int, ...] = ()


def _make():
    @trn.kernel(dynamic=False)
    def apply(x, out, spec):
        n = x.shape[0]
        r = tl.arange(n)
        t = tl.load(x[r])
        t = t + spec.scale if spec.op == Op.ADD else t * spec.scale
        if spec.bias:
            t = t + 1.0
        tl.store(out[r], t)

    return apply


def _want(x: np.ndarray, spec: Spec) -> np.ndarray:
    y = x + np.float32(spec.scale) if spec.op == Op.ADD else x * np.float32(spec.scale)
    return y + np.float32(1.0) if spec.bias else y


def test_equal_specs_share_a_variant_and_different_ones_do_not():
    k = _make()
    x = np.arange(8, dtype=np.float32)
    specs = [Spec(Op.ADD, 2.0, False), Spec(Op.ADD, 2.0, False), Spec(Op.MUL, 2.0, True), Spec(Op.ADD, 3.0, True)]
    for s in specs:
        out = np.empty_like(x)
        k(x, out, s)
        np.testing.assert_array_equal(out, _want(x, s))
    stats = k.compile_stats()
    assert (stats["traces"], stats["variants"]) == (3, 3)  # the repeated spec reused its variant


def test_torch_launches_of_a_spec_kernel_make_launch_plans():
    """Warm launches of torch tensors go through the launch plan (no slow path per call) with a spec argument."""
    k = _make()
    x = torch.arange(8, dtype=torch.float32)
    s = Spec(Op.MUL, 0.5, False, (1, 2))
    for _ in range(3):
        out = torch.empty_like(x)
        k(x, out, s)
        torch.testing.assert_close(out, x * 0.5)
    assert k._cache.plans, "no launch plan was made for a call with a spec argument"
    out = torch.empty_like(x)
    k(x, out, Spec(Op.MUL, 0.25, False, (1, 2)))  # another value: another plan, not the old one
    torch.testing.assert_close(out, x * 0.25)


def test_warm_launches_with_a_spec_take_the_generated_plan_key():
    """The plan key of a warm launch with a spec argument comes from the straight-line function made for its
    argument types (runtime.kernel._key_function), with the spec's value in it: alternating specs stay correct."""
    k = _make()
    x = torch.arange(8, dtype=torch.float32)
    for s in (Spec(Op.MUL, 0.5, False), Spec(Op.ADD, 1.0, True)) * 3:
        out = torch.empty_like(x)
        k(x, out, s)
        torch.testing.assert_close(out, torch.from_numpy(_want(x.numpy(), s)))
    assert k._keyfn is not None, "a spec argument sent every warm launch to the general key loop"


def test_an_enum_member_alone_is_a_constant():
    @trn.kernel
    def pick(x, out, op):
        r = tl.arange(x.shape[0])
        t = tl.load(x[r])
        tl.store(out[r], t + t if op == Op.ADD else t * t)

    x = np.arange(4, dtype=np.float32)
    for op, want in ((Op.ADD, x + x), (Op.MUL, x * x)):
        out = np.empty_like(x)
        pick(x, out, op)
        np.testing.assert_array_equal(out, want)


@dataclasses.dataclass
class Mutable:
    scale: float


@dataclasses.dataclass(frozen=True)
class HoldsArray:
    data: object


@pytest.mark.parametrize("bad", [Mutable(1.0), HoldsArray(np.zeros(2))], ids=["not frozen", "a non-constant field"])
def test_other_objects_are_not_constants(bad):
    k = _make()
    x = np.arange(4, dtype=np.float32)
    with pytest.raises(LaunchError, match="neither a tensor"):
        k(x, np.empty_like(x), bad)
