"""``@lowering(..., accepts=Accepts(...))``: what a lowering handles, declared; calls outside it fall back with the rule
as their reason, and the registry (``trn coverage``) prints the declaration."""

from __future__ import annotations

import itertools

import pytest
import torch

import trnlang.device as td
from trnlang.device import Accepts

_N = itertools.count()


def _custom_op(schema: str, cpu):
    """A fresh user op ``trnacc<N>::f`` with a CPU kernel (each test its own namespace: no cross-test state)."""
    ns = f"trnacc{next(_N)}"
    lib = torch.library.Library(ns, "DEF")
    lib.define(f"f{schema}")
    lib.impl("f", cpu, "CPU")
    return lib, f"{ns}::f", getattr(torch.ops, ns).f


def test_calls_outside_the_declaration_fall_back_with_the_rule_as_reason():
    lib, name, op = _custom_op("(Tensor self, Tensor other) -> Tensor", lambda a, b: a + b)
    calls = []

    @td.lowering(name, dtypes=(torch.float32,), accepts=Accepts(tensors=("self", "other"), contiguous=("self",),
                                                                  max_dim=2, max_numel=2**10))
    def f(self, other):
        calls.append(1)
        return self + other  # the stdlib's add: native

    x = torch.arange(6.0).reshape(2, 3)
    xt = x.to("trn")
    assert torch.allclose(op(xt, xt).cpu(), x + x) and len(calls) == 1  # inside: the lowering runs
    cases = {
        "self not contiguous": (xt.t(), xt.t()),
        "self has more than 2 dims": (xt.reshape(1, 2, 3), xt.reshape(1, 2, 3)),
        "self has 2^10 or more elements": (torch.zeros(1024, device="trn"), torch.zeros(1024, device="trn")),
    }
    for why, (a, b) in cases.items():
        before = td.fallback_reasons().get(name, {}).get(why, 0)
        got = op(a, b)
        torch.testing.assert_close(got.cpu(), op(a.cpu(), b.cpu()))  # the CPU's answer
        assert td.fallback_reasons()[name][why] == before + 1, (why, td.fallback_reasons()[name])
    assert len(calls) == 1  # none of those reached the lowering
    entry = td.registry_table()[name]
    assert entry["accepts"] == ("self, other trn tensors; self contiguous; fewer than 2^10 elements; at most 2 dims; "
                                "no conj/neg bit")
    lib._destroy()


def test_a_number_or_cpu_tensor_where_a_trn_tensor_is_declared():
    lib, name, op = _custom_op("(Tensor self, Scalar other) -> Tensor", lambda a, s: a * s)

    @td.lowering(name, dtypes=(torch.float32,), accepts=Accepts(tensors=("self",), same_dtype=True))
    def f(self, other):
        return self * other

    xt = torch.arange(4.0, device="trn")
    assert op(xt, 3.0).cpu().tolist() == [0.0, 3.0, 6.0, 9.0]
    assert td.fallback_reasons().get(name) is None  # no fallback so far
    lib._destroy()


def test_the_declaration_names_real_arguments():
    lib, name, _ = _custom_op("(Tensor self) -> Tensor", lambda a: a)
    with pytest.raises(ValueError, match=r"accepts= names \['x'\], not arguments of .*self"):
        td.lowering(name, accepts=Accepts(tensors=("x",)))(lambda self: self)
    lib._destroy()


def test_describe_reads_like_the_rules():
    assert Accepts().describe() == "no conj/neg bit"
    assert Accepts(plain=False, max_numel=2**31, same_dtype=True).describe() == "fewer than 2^31 elements; one dtype"
    assert Accepts(plain=False, max_numel=1000).describe() == "fewer than 1000 elements"
