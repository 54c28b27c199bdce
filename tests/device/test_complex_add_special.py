"""complex64 ``add``/``sub`` form ``alpha * other`` as torch's CPU kernels do: a complex product, even for alpha = 1.

``(1 + 0i) * (inf + 1i)`` is ``(inf, nan)`` there (``0 * inf``), so the CPU's ``(1 + 2i) - (inf + 0i)`` is
``(-inf, nan)``, and numpy, the upstream test's reference, agrees (``np.subtract(a, np.multiply(alpha, b))``).
Values (NaN placement and signed zeros included) must equal the CPU's for every pairing of special values.
"""

from __future__ import annotations

import itertools

import pytest
import torch

INF, NAN = float("inf"), float("nan")
SPECIAL = [complex(INF, INF), complex(INF, 0), complex(1, INF), complex(-INF, -2), complex(NAN, 0), complex(0, NAN),
           complex(1, 2), complex(-0.0, -0.0), complex(0.0, -3), complex(-0.0, 2), complex(3e38, -3e38)]


@pytest.fixture(autouse=True)
def _native(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRN_FALLBACK", "error")


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Planes with NaNs made canonical, as int32 bits (so signed zeros count)."""
    r = torch.view_as_real(t.cpu().contiguous())
    return torch.where(r.isnan(), torch.full_like(r, NAN), r).view(torch.int32)


def _pairs() -> tuple[torch.Tensor, torch.Tensor]:
    a, b = zip(*itertools.product(SPECIAL, SPECIAL))
    return torch.tensor(a, dtype=torch.complex64), torch.tensor(b, dtype=torch.complex64)


@pytest.mark.parametrize("op", [torch.add, torch.sub])
@pytest.mark.parametrize("alpha", [1, 2, -1, -1.5, 0.0])
def test_special_values_match_the_cpu(op, alpha) -> None:
    a, b = _pairs()
    want = op(a, b, alpha=alpha)
    assert torch.equal(_bits(op(a.to("trn"), b.to("trn"), alpha=alpha)), _bits(want))
    out = torch.empty_like(a, device="trn")
    op(a.to("trn"), b.to("trn"), alpha=alpha, out=out)
    assert torch.equal(_bits(out), _bits(want))
    x = a.to("trn")
    getattr(x, op.__name__ + "_")(b.to("trn"), alpha=alpha)
    assert torch.equal(_bits(x), _bits(want))


@pytest.mark.parametrize("op", [torch.add, torch.sub])
@pytest.mark.parametrize("other", [complex(INF, 0), complex(1, NAN), 2.5, -INF])
def test_with_a_number_or_a_real_tensor(op, other) -> None:
    a, b = _pairs()
    assert torch.equal(_bits(op(a.to("trn"), other)), _bits(op(a, other)))
    real = b.real.contiguous()
    assert torch.equal(_bits(op(a.to("trn"), real.to("trn"))), _bits(op(a, real)))


@pytest.mark.parametrize("op", [torch.add, torch.sub])
def test_complex_alpha_is_one_product(op) -> None:
    a, b = _pairs()
    want = op(a, b, alpha=2 - 1j)
    assert torch.equal(_bits(op(a.to("trn"), b.to("trn"), alpha=2 - 1j)), _bits(want))
