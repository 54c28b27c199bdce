"""Integer and bool inputs of the Bessel, ``special_*`` polynomial/erfcx/ndtr and polygamma functions run
natively as torch runs them: promoted to float32 first (issue 22 item 2; elementwise/promote.py). Compared with
CPU torch under ``TRN_FALLBACK=error``, incl. 0-dim, size 1, empty and transposed inputs."""

import pytest
import torch

S = torch.special


@pytest.fixture(autouse=True)
def _native_only(monkeypatch):
    monkeypatch.setenv("TRN_FALLBACK", "error")


FNS = {
    "i0": torch.i0, "bessel_j0": S.bessel_j0, "bessel_y1": S.bessel_y1, "airy_ai": S.airy_ai, "i1e": S.i1e,
    "modified_bessel_k0": S.modified_bessel_k0, "spherical_bessel_j0": S.spherical_bessel_j0, "erfcx": S.erfcx,
    "log_ndtr": S.log_ndtr, "ndtri": S.ndtri, "polygamma2": lambda x: torch.polygamma(2, x),
    "polygamma_method": lambda x: x.polygamma(1),
    "chebyshev_t_scalar_n": lambda x: S.chebyshev_polynomial_t(x, 3),
    "chebyshev_u_tensor_n": lambda x: S.chebyshev_polynomial_u(x, x.abs().to(x.dtype)),
    "hermite_h": lambda x: S.hermite_polynomial_h(x, 2),
}


@pytest.mark.parametrize("name", sorted(FNS))
@pytest.mark.parametrize("dt", [torch.int64, torch.int32, torch.int16, torch.uint8, torch.bool])
@pytest.mark.parametrize("shape", [(), (1,), (0,), (2, 3)])
def test_special_of_integers_vs_cpu(name, dt, shape):
    f = FNS[name]
    x = torch.randint(-3, 6, shape, generator=torch.Generator().manual_seed(3)).to(dt)
    d = x.to("trn")
    if len(shape) == 2:
        x, d = x.t(), d.t()
    try:
        want = f(x)
    except RuntimeError:
        pytest.skip("the CPU refuses this dtype")
    got = f(d).cpu()
    assert got.dtype == want.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, equal_nan=True)
