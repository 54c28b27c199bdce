"""Creation ops as torch's test_tensor_creation_ops checks them (issue 22): ``out=`` a non-contiguous view or a
tensor of another shape with the right number of elements keeps its shape and is written through its strides
(arange/linspace/logspace wrote it as contiguous: wrong values); cat keeps channels_last; complex32 random
fills; torch's errors for empty_strided and uniform_ ranges. Compared with the CPU, natively."""

import pytest
import torch

import trnlang


def _native(fn):
    trnlang.reset_fallback_stats()
    r = fn()
    assert trnlang.fallback_stats() == {}, trnlang.fallback_stats()
    return r


_FILLS = [
    ("arange", lambda out: torch.arange(0, 4, out=out)),
    ("arange_int", lambda out: torch.arange(1, 9, 2, out=out)),
    ("linspace", lambda out: torch.linspace(0, 3, 4, out=out)),
    ("logspace", lambda out: torch.logspace(0, 3, 4, out=out)),
    ("linspace_c", lambda out: torch.linspace(0, 3 + 1j, 4, out=out)),
]


@pytest.mark.parametrize("name,fill", _FILLS, ids=[n for n, _ in _FILLS])
@pytest.mark.parametrize("view", ["narrow", "transpose", "same_numel", "resized"])
def test_out_views_are_written_through(name, fill, view):
    dtype = torch.int64 if name.endswith("_int") else torch.complex64 if name.endswith("_c") else torch.float32
    base = torch.zeros(2, 3, dtype=dtype) if view != "transpose" else torch.zeros(2, 2, dtype=dtype)
    views = {"narrow": lambda b: b.narrow(1, 1, 2), "transpose": lambda b: b.t(),
             "same_numel": lambda b: b.view(-1)[:4].view(2, 2), "resized": lambda b: b.view(-1)[:0]}
    want_base = base.clone()
    want = fill(views[view](want_base))
    got_base = base.to("trn")
    got = _native(lambda: fill(views[view](got_base)))
    assert got.shape == want.shape and got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
    torch.testing.assert_close(got_base.cpu(), want_base, rtol=0, atol=0)


@pytest.mark.parametrize("fmt,shape", [(torch.channels_last, (2, 3, 4, 5)), (torch.channels_last_3d, (2, 3, 2, 2, 3))])
def test_cat_keeps_channels_last(fmt, shape):
    x = torch.randn(shape).contiguous(memory_format=fmt)
    y = torch.randn(shape).contiguous(memory_format=fmt)
    for dim in range(len(shape)):
        got = _native(lambda: torch.cat((x.to("trn"), y.to("trn")), dim))
        want = torch.cat((x, y), dim)
        assert got.is_contiguous(memory_format=fmt) and got.stride() == want.stride()
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
    mixed = _native(lambda: torch.cat((x.to("trn"), y.contiguous().to("trn"))))
    assert mixed.is_contiguous()  # formats disagree: contiguous, as torch


@pytest.mark.parametrize("dtype", [torch.complex32, torch.complex64])
def test_complex_random_fills(dtype):
    t = torch.empty(4000, dtype=dtype, device="trn")
    _native(lambda: t.normal_(1.0, 2.0))
    v = torch.view_as_real(t.cpu().to(torch.complex64))
    assert abs(float(v[:, 0].mean()) - 1) < 0.1 and abs(float(v[:, 1].std()) - 2 ** 0.5) < 0.1
    _native(lambda: t.uniform_(-1, 3))
    v = torch.view_as_real(t.cpu().to(torch.complex64))
    assert float(v.min()) >= -1 and float(v.max()) <= 3 and float(v.std()) > 0.5


def test_torchs_errors():
    with pytest.raises(RuntimeError, match=r"dimensionality of sizes \(1\) must match dimensionality of strides"):
        torch.empty(2, device="trn").new_empty_strided((2,), ())
    fmax = torch.finfo(torch.float32).max
    with pytest.raises(RuntimeError, match="uniform_ expects to-from"):
        torch.empty(3, device="trn").uniform_(-fmax, fmax)


def test_elementwise_outputs_of_overlapping_or_gapped_inputs_follow_tensoriterator():
    """exp of a non-dense input (overlapping, gapped, 0-strided) gets TensorIterator's output layout, which the
    ``*_like`` factories also give (torch's test_like_fn_stride_proparation_vs_tensoriterator_unary_op)."""
    import itertools

    tset = [torch.empty_strided((4, 3, 2), st) for st in ((10, 3, 1), (10, 0, 3), (10, 1, 2), (10, 1, 1))]
    tset += [torch.empty_strided((4, 2, 3), (10, 3, 3)), torch.empty_strided((4, 1, 1, 2), (10, 0, 0, 2)),
             torch.randn(4, 3, 2)[:, :, ::2]]
    for t in tset:
        t.fill_(1.0)
        for p in itertools.permutations(range(t.dim())):
            tp = t.permute(p)
            dev = torch.empty_strided(tp.shape, tp.stride(), device="trn").fill_(1.0)
            got = torch.exp(dev)
            assert got.stride() == torch.exp(tp).stride() == torch.zeros_like(dev).stride()
            assert torch.equal(got.cpu(), torch.exp(tp))


def test_cat_complex32_randperm_dtypes_and_range():
    x = torch.tensor([[1, 2], [3, 4]], dtype=torch.chalf)
    for d in (0, 1):
        got = _native(lambda: torch.cat((x.to("trn"), x.to("trn")), d))
        assert got.dtype == torch.chalf and torch.equal(torch.view_as_real(got.cpu()),
                                                        torch.view_as_real(torch.cat((x, x), d)))
    for dt in (torch.float16, torch.bfloat16, torch.int32, torch.uint8, torch.float32):
        r = _native(lambda: torch.randperm(200, dtype=dt, device="trn")).cpu()
        assert r.dtype == dt and torch.equal(r.sort().values.long(), torch.arange(200))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.range is deprecated
        for args in ((0, 1, 0.25), (1, 4), (10, 1, -3), (-1, 1, 0.1)):
            got = _native(lambda: torch.range(*args, device="trn"))
            torch.testing.assert_close(got.cpu(), torch.range(*args), rtol=0, atol=1e-6)


@pytest.mark.parametrize("a,b,st", [(0, 100 * 1449629115440469, 1449629115440469), (-(2**40), 2**40, 2**33 + 3),
                                    (2**61, -(2**61), -(2**55)), (-(2**33), 7, 2**33 - 1)])
def test_int64_arange_beyond_int32(a, b, st, monkeypatch):
    """int64 ramps past int32 (torch's test_arange: ``arange(0, 100 * w, w)``, w ~ 1.4e15) on the int32 words,
    also into a strided out=."""
    monkeypatch.setenv("TRN_FALLBACK", "error")
    assert torch.equal(torch.arange(a, b, st, device="trn").cpu(), torch.arange(a, b, st))
    x, y = torch.zeros(3, 200, dtype=torch.int64), torch.zeros(3, 200, dtype=torch.int64, device="trn")
    n = torch.arange(a, b, st).numel()
    torch.arange(a, b, st, out=x[:, :n].t() if n <= 3 else x[1, :n])
    torch.arange(a, b, st, out=y[:, :n].t() if n <= 3 else y[1, :n])
    assert torch.equal(y.cpu(), x)


def test_arange_warns_like_torch_when_it_resizes_out():
    import warnings

    for out_shape, args in (((1, 49), (-1, 1, 2.0 / 49)), ((7,), (0, 3 * 2**40, 2**40)), ((0,), (5,))):
        dt = torch.float32 if isinstance(args[-1], float) else torch.int64
        with warnings.catch_warnings(record=True) as want:
            warnings.simplefilter("always")
            torch.arange(*args, out=torch.zeros(out_shape, dtype=dt))
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            torch.arange(*args, out=torch.zeros(out_shape, dtype=dt, device="trn"))
        assert [str(w.message).split(" (Triggered")[0] for w in got] == \
            [str(w.message).split(" (Triggered")[0] for w in want]
