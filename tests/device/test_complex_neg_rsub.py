"""complex64 ``neg`` (functional, ``out=``, in place) and ``rsub`` (tensor, real and complex numbers, ``alpha``) on
trn natively, against the CPU. ``neg`` negates both planes exactly (``-(+0)`` is ``-0``); torch's CPU kernel does
that in its scalar tail but computes ``0 - x`` in its vector body (``-(+0)`` is ``+0`` there, depending on the
element's position), so signed zeros of ``neg`` are checked against the planes' own negation."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture(autouse=True)
def _native(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


def _same(got: torch.Tensor, want: torch.Tensor, signs: torch.Tensor | None = None) -> None:
    """Values as ``want``'s; zeros signed as ``signs`` (planes) when given."""
    assert got.device.type == "trn" and got.dtype == want.dtype and got.shape == want.shape
    g, w = torch.view_as_real(got.cpu()), torch.view_as_real(want)
    torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6, equal_nan=True)
    if signs is not None:
        assert torch.equal(g.signbit() | g.isnan(), signs.signbit() | signs.isnan())


def _z(shape, seed):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(shape, dtype=torch.complex64, generator=g)
    if z.numel():
        flat = torch.view_as_real(z).view(-1)
        flat[0], flat[-1] = 0.0, -0.0  # signed zeros in both planes
    return z


@settings(max_examples=20, deadline=None)
@given(shape=st.sampled_from([(), (0,), (5,), (3, 130)]), seed=st.integers(0, 2**16))
def test_neg_matches_cpu(shape, seed):
    z = _z(shape, seed)
    zt = z.to("trn")
    exact = -torch.view_as_real(z)
    _same(-zt, -z, exact)
    out = torch.empty(shape, dtype=torch.complex64, device="trn")
    assert torch.neg(zt, out=out) is out
    _same(out, -z, exact)
    zt.neg_()
    _same(zt, -z, exact)


@settings(max_examples=20, deadline=None)
@given(shape=st.sampled_from([(), (5,), (3, 130)]), other=st.sampled_from(["tensor", "real", "complex"]),
       alpha=st.sampled_from([1, 2.5]), seed=st.integers(0, 2**16))
def test_rsub_matches_cpu(shape, other, alpha, seed):
    z = _z(shape, seed)
    o = {"tensor": _z(shape, seed + 1), "real": 1.5, "complex": complex(2.0, -1.0)}[other]
    ot = o.to("trn") if isinstance(o, torch.Tensor) else o
    _same(torch.rsub(z.to("trn"), ot, alpha=alpha), torch.rsub(z, o, alpha=alpha))
