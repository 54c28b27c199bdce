"""Elementwise ops and copies on permuted dense tensors walk memory in the output's order (one run of elements, not
a strided walk), and contiguous ops from ``FLAT_SPLIT_MIN`` elements run one flat launch per thread: values and
output strides equal the CPU's."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import trnlang  # noqa: F401
from stdlib_kernels import _util as U
from stdlib_kernels.elementwise.flat import FLAT_SPLIT_MIN

SHAPES = [(3, 5, 7), (1, 4, 130), (2, 1, 129), (0, 3, 4), (6, 128, 3)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), perm=st.sampled_from(list(itertools.permutations(range(3)))),
       op=st.sampled_from(["add", "mul", "sub_alpha", "copy", "clone"]))
def test_permuted_operands_match_cpu(shape, perm, op) -> None:
    x = torch.randn(shape).permute(perm)
    y = torch.randn(shape).permute(perm)
    a = torch.empty_strided(x.shape, x.stride(), device="trn").copy_(x.to("trn"))
    b = torch.empty_strided(y.shape, y.stride(), device="trn").copy_(y.to("trn"))
    assert a.stride() == x.stride()
    fns = {"add": lambda p, q: p + q, "mul": lambda p, q: p * q, "sub_alpha": lambda p, q: torch.sub(p, q, alpha=2.5),
           "copy": lambda p, q: q.clone().copy_(p), "clone": lambda p, q: p.clone()}
    got, exp = fns[op](a, b), fns[op](x, y)
    exact = op != "sub_alpha"  # CPU fuses x - alpha * y into one rounding (an FMA): 1 ulp apart
    torch.testing.assert_close(got.cpu(), exp, rtol=0 if exact else 1e-6, atol=0 if exact else 1e-6)
    if exp.numel():
        assert got.stride() == exp.stride()


def test_permuted_into_contiguous_out() -> None:
    """A transposed operand into a contiguous out= is still a transpose (the output's order wins)."""
    x = torch.randn(300, 200)
    o = torch.empty(200, 300, device="trn")
    torch.add(x.to("trn").t(), 1.0, out=o)
    torch.testing.assert_close(o.cpu(), x.t() + 1.0, rtol=0, atol=0)


@pytest.mark.parametrize("n", [FLAT_SPLIT_MIN - 1, FLAT_SPLIT_MIN, FLAT_SPLIT_MIN + 129, 3 * FLAT_SPLIT_MIN + 7])
def test_contiguous_ops_around_the_split(n: int) -> None:
    x, y = torch.randn(n), torch.randn(n)
    a, b = x.to("trn"), y.to("trn")
    torch.testing.assert_close(torch.add(a, b, alpha=0.5).cpu(), torch.add(x, y, alpha=0.5), rtol=0, atol=0)
    torch.testing.assert_close((a * 3.0).cpu(), x * 3.0, rtol=0, atol=0)
    a.add_(b)  # in place
    torch.testing.assert_close(a.cpu(), x + y, rtol=0, atol=0)
    torch.testing.assert_close((a.view(-1, 1) > 0).cpu(), (x + y).view(-1, 1) > 0)


def test_order_dims_doctest_shape() -> None:
    assert U.order_dims((3, 4), [[1, 3], [1, 3]]) == ([4, 3], [[3, 1], [3, 1]])
    assert U.order_dims((3, 4), [[4, 1], [4, 1]]) == ([3, 4], [[4, 1], [4, 1]])


SHAPES4 = [(4, 16, 8, 64), (2, 3, 5, 7), (1, 130, 3, 129), (3, 1, 2, 2, 5), (2, 3, 4, 5, 6)]
OPS4 = {"mul": lambda p, q: p * q, "add_alpha": lambda p, q: torch.add(p, q, alpha=-2.0), "neg": lambda p, q: -p,
        "tanh": lambda p, q: torch.tanh(p), "halves": lambda p, q: p[..., :2] * q[..., 1:3],
        "where": lambda p, q: torch.where(p > 0, p, q), "scalar": lambda p, q: p * 2.5 - 1.0,
        "bcast": lambda p, q: p * q[:1, ..., :1]}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES4), seed=st.integers(0, 10_000), op=st.sampled_from(sorted(OPS4)))
def test_four_and_five_dim_views_match_cpu(shape, seed, op) -> None:
    """Views of 4 or more dims that do not coalesce (rotary-embedding halves of transposed heads, permutations)
    run as 4-D launch pieces (the leading dims beyond four loop on the host) and equal the CPU's results."""
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(len(shape), generator=g).tolist()
    x, y = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
    xp, yp = x.permute(perm), y.permute(perm)
    xt, yt = x.to("trn").permute(perm), y.to("trn").permute(perm)
    trnlang.reset_fallback_stats()
    got = OPS4[op](xt, yt)
    torch.testing.assert_close(got.cpu(), OPS4[op](xp, yp), rtol=2e-6, atol=2e-6)
    assert trnlang.fallback_stats() == {}


_LAYOUTS = {  # (first operand, second operand) as functions of a 10 x 20 base, on the device given
    "contiguous, transposed": lambda t: (t[:, :10].contiguous(), t[:, 10:].t()),
    "transposed, contiguous": lambda t: (t[:, 10:].t(), t[:, :10].contiguous()),
    "gapped, transposed": lambda t: (t[:, ::2], t[:, 10:].t()),
    "transposed, gapped": lambda t: (t[:, 10:].t(), t[:, ::2]),
    "expanded row, transposed": lambda t: (t[0:1, :10].expand(10, 10), t[:, 10:].t()),
    "channels_last, contiguous": lambda t: (t.reshape(2, 5, 4, 5).contiguous(memory_format=torch.channels_last),
                                            t.reshape(2, 5, 4, 5).contiguous()),
    "contiguous, channels_last": lambda t: (t.reshape(2, 5, 4, 5).contiguous(),
                                            t.reshape(2, 5, 4, 5).contiguous(memory_format=torch.channels_last)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.complex64])
@pytest.mark.parametrize("layout", list(_LAYOUTS))
def test_mixed_layouts_take_the_first_operands_order(dtype, layout, monkeypatch) -> None:
    """TensorIterator orders the output's dims by the first operand whose strides tell them apart: a contiguous first
    operand gives a contiguous result even when the second is transposed (upstream test_add); complex64 too."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    base = torch.randn(10, 20, dtype=torch.float32).to(dtype) * 8
    x, y = _LAYOUTS[layout](base)
    a, b = _LAYOUTS[layout](base.to("trn"))
    for fn in (torch.add, torch.mul, torch.sub):
        exp, got = fn(x, y), fn(a, b)
        assert got.stride() == exp.stride(), (fn.__name__, got.stride(), exp.stride())
        torch.testing.assert_close(got.cpu(), exp, rtol=1e-6, atol=1e-5)


@st.composite
def _layouts(draw):  # noqa: ANN001, ANN202 - a hypothesis strategy
    """A shape and 1-3 operands of it: permuted, sliced (gapped), expanded (0 strides), with size-1 and empty dims."""
    nd = draw(st.integers(2, 4))
    shape = tuple(draw(st.lists(st.sampled_from([0, 1, 2, 3, 5]), min_size=nd, max_size=nd)))
    ops = []
    for _ in range(draw(st.integers(1, 3))):
        perm = draw(st.permutations(range(nd)))
        step = draw(st.lists(st.integers(1, 2), min_size=nd, max_size=nd))
        base = torch.empty([shape[p] * step[p] for p in perm]).permute(*[list(perm).index(i) for i in range(nd)])
        t = base[tuple(slice(None, None, s) for s in step)]
        bcast = draw(st.lists(st.booleans(), min_size=nd, max_size=nd))
        t = t[tuple(slice(0, 1) if b else slice(None) for b in bcast)].expand(shape) if all(
            shape[i] >= 1 or not b for i, b in enumerate(bcast)) else t
        ops.append(t)
    return shape, ops


@settings(max_examples=300, deadline=None)
@given(layout=_layouts())
def test_elementwise_strides_match_torch(layout) -> None:
    """The fast output-stride rule gives the strides of a real CPU elementwise op (TensorIterator) over the same
    operands: one (neg), two (add) or three (addcmul)."""
    shape, ops = layout
    got = U.elementwise_strides(shape, [U.expand_strides(t, shape) for t in ops])
    cpu = torch.neg(ops[0]) if len(ops) == 1 else ops[0] + ops[1] if len(ops) == 2 else torch.addcmul(*ops)
    assert got == cpu.stride()


@settings(max_examples=60, deadline=None)
@given(layout=_layouts(), nd5=st.booleans())
def test_cat_output_layout_matches_cpu(layout, nd5) -> None:
    """cat's output takes its inputs' common suggested memory format (channels-last, 3d too) as on the CPU."""
    _, ops = layout
    xs = [t.unsqueeze(2) if nd5 and t.dim() == 4 else t for t in ops[:2]]
    xs = [x for x in xs if all(s or n < 2 for n, s in zip(x.shape, x.stride()))]  # no expanded dims
    if not xs:
        return
    xs = [x.copy_(torch.randn(x.shape)) for x in xs]
    cpu = torch.cat(xs, dim=0)
    got = torch.cat([torch.empty_strided(x.shape, x.stride(), device="trn").copy_(x.to("trn")) for x in xs], dim=0)
    assert got.stride() == cpu.stride() or cpu.numel() < 2
    torch.testing.assert_close(got.cpu(), cpu, rtol=0, atol=0)


@pytest.mark.parametrize("fmt,shape", [(torch.channels_last, (2, 3, 4, 5)), (torch.channels_last_3d, (2, 3, 2, 4, 5)),
                                       (torch.contiguous_format, (2, 3, 4, 5))])
@pytest.mark.parametrize("gapped", [False, True])
def test_cat_keeps_channels_last(fmt, shape, gapped) -> None:
    x = torch.randn(shape).contiguous(memory_format=fmt)
    if gapped:  # a channels-last view with gaps: not dense, still ordered channels-last
        x = torch.randn(*shape[:-1], shape[-1] * 2).contiguous(memory_format=fmt)[..., ::2]
    t = torch.empty_strided(x.shape, x.stride(), device="trn").copy_(x.to("trn"))
    cpu, got = torch.cat([x, x], dim=1), torch.cat([t, t], dim=1)
    assert got.stride() == cpu.stride()
    torch.testing.assert_close(got.cpu(), cpu, rtol=0, atol=0)


@settings(max_examples=80, deadline=None)
@given(layout=_layouts(), fmt=st.sampled_from([None, torch.contiguous_format, torch.preserve_format]),
       dtype=st.sampled_from([torch.float32, torch.int64, torch.bfloat16, torch.bool]))
def test_clone_layout_and_values_match_cpu(layout, fmt, dtype) -> None:
    """clone (and contiguous) of any layout: the CPU's strides (a dense input's own, size-1 dims included) and
    values, for 4-, 8-, 2- and 1-byte dtypes; expanded inputs too."""
    _, ops = layout
    v = ops[0]
    src = (torch.randn(v.shape) * 10).to(dtype)
    span = 1 + sum((n - 1) * st for n, st in zip(v.shape, v.stride())) if v.numel() else 0
    mem = torch.zeros(max(span, 1), dtype=dtype)
    x = mem.as_strided(v.shape, v.stride())
    if all(st or n < 2 for n, st in zip(v.shape, v.stride())):
        x.copy_(src)  # not expanded: writable, fill it
    t = mem.to("trn").as_strided(v.shape, v.stride())
    kw = {} if fmt is None else {"memory_format": fmt}
    cpu, got = x.clone(**kw), t.clone(**kw)
    assert got.stride() == cpu.stride() and got.dtype == cpu.dtype
    assert torch.equal(got.cpu(), cpu)
    assert torch.equal(t.contiguous().cpu(), x.contiguous())
