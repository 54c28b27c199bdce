"""In-place ops whose result shares memory with an operand raise on ``trn`` exactly where they raise on CPU.

torch checks these before computing anything (``at::assert_no_partial_overlap`` for ``copy_``,
``assert_no_overlap`` for ``index_copy_``); ``take`` / ``put_`` take int64 indices only.
"""

from __future__ import annotations

import pytest
import torch


def _both(fn):
    """``fn(device)`` on CPU and on trn: (CPU result or error, trn result or error)."""
    out = []
    for dev in ("cpu", "trn"):
        try:
            out.append(fn(dev).cpu())
        except RuntimeError as e:
            out.append(e)
    return out


def _same_outcome(fn) -> None:
    cpu, trn = _both(fn)
    if isinstance(cpu, Exception):
        assert isinstance(trn, RuntimeError), f"CPU raises {cpu!r}, trn returned {trn!r}"
        assert str(trn) == str(cpu)
    else:
        assert not isinstance(trn, Exception), f"CPU returns {cpu!r}, trn raised {trn!r}"
        torch.testing.assert_close(trn, cpu)


def _shift_copy(dtype):
    def f(dev):
        x = torch.arange(6, device=dev).to(dtype)
        x[1:].copy_(x[:-1])
        return x

    return f


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int64], ids=str)
def test_partially_overlapping_copy_raises_like_cpu(dtype):
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        _shift_copy(dtype)("cpu")
    x = torch.arange(6, device="trn").to(dtype)
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        x[1:].copy_(x[:-1])
    torch.testing.assert_close(x.cpu(), torch.arange(6).to(dtype))  # nothing written
    _same_outcome(_shift_copy(dtype))


def _copy_case(name):
    def f(dev):
        x = torch.arange(8.0, device=dev)
        if name == "identical":
            x.copy_(x)
        elif name == "identical_views":
            x.view(2, 4).t().copy_(x.view(2, 4).t())
        elif name == "disjoint":
            x[:4].copy_(x[4:])
        elif name == "reinterpret_full":  # same bytes, same strides, another dtype: torch allows it
            x.view(torch.int32).copy_(x)
        elif name == "strided_too_hard":  # not dense: torch does not check, the copy runs in order
            x[2::2].copy_(x[::2][:3])
        elif name == "transposed_self":  # same bytes, other strides: a partial overlap
            x[:4].view(2, 2).copy_(x[:4].view(2, 2).t())
        elif name == "expanded_destination":
            torch.zeros(3, device=dev).expand(2, 3).copy_(torch.ones(2, 3, device=dev))
        return x

    return f


@pytest.mark.parametrize("name", ["identical", "identical_views", "disjoint", "reinterpret_full", "strided_too_hard",
                                  "transposed_self", "expanded_destination"])
def test_other_aliasing_copies_match_cpu(name):
    _same_outcome(_copy_case(name))


def _index_copy_case(name):
    def f(dev):
        x = torch.arange(6.0, device=dev)
        if name == "partial":
            x.index_copy_(0, torch.tensor([0, 1], device=dev), x[2:4])
        elif name == "full":
            x.index_copy_(0, torch.arange(6, device=dev), x)
        elif name == "index_aliases_self":
            y = torch.arange(6, device=dev)
            y.index_copy_(0, y[:2], torch.zeros(2, dtype=torch.int64, device=dev))
            return y
        elif name == "out_aliases_source":
            src = torch.zeros(6, device=dev)
            torch.index_copy(x, 0, torch.tensor([0, 1], device=dev), src[:2], out=src)
        elif name == "disjoint":
            x.index_copy_(0, torch.tensor([0, 1], device=dev), torch.zeros(2, device=dev))
        elif name == "out_of_place_overlap":  # a new result: no overlap check
            x = x.index_copy(0, torch.tensor([0, 1], device=dev), x[2:4])
        return x

    return f


@pytest.mark.parametrize("name", ["partial", "full", "index_aliases_self", "out_aliases_source"])
def test_self_overlapping_index_copy_raises_like_cpu(name):
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        _index_copy_case(name)("cpu")
    _same_outcome(_index_copy_case(name))


@pytest.mark.parametrize("name", ["disjoint", "out_of_place_overlap"])
def test_index_copy_without_overlap_still_runs(name):
    _same_outcome(_index_copy_case(name))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16], ids=str)
def test_take_and_put_reject_non_long_indices_like_cpu(dtype):
    def take(dev):
        return torch.take(torch.arange(6.0, device=dev), torch.tensor([0, 5], dtype=dtype, device=dev))

    def put(dev):
        return torch.zeros(6, device=dev).put_(torch.tensor([0, 5], dtype=dtype, device=dev),
                                               torch.ones(2, device=dev))

    for fn, op in ((take, "take"), (put, "put_")):
        with pytest.raises(RuntimeError, match=rf"{op}\(\): Expected a long tensor for index"):
            fn("cpu")
        _same_outcome(fn)


def test_take_and_put_with_long_indices_still_run():
    def f(dev):
        x = torch.arange(6.0, device=dev)
        idx = torch.tensor([0, -1, 2], device=dev)
        return torch.cat([torch.take(x, idx), x.clone().put_(idx, torch.full((3,), 9.0, device=dev))])

    _same_outcome(f)
