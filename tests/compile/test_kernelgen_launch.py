"""Generated kernels: integer powers as torch computes them, and launches split over the host threads."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trnlang.compile import kernelgen


@settings(max_examples=12, deadline=None)
@given(rows=st.sampled_from([0, 1, 7, 128, 129, 300]), cols=st.sampled_from([1, 16, 200, 513]),
       e=st.sampled_from([2.0, 3.0, -2.0, 0.5, -1.0, 1.7]))
def test_scalar_powers_match_torch(rows: int, cols: int, e: float) -> None:
    """``x ** 3`` and ``x ** -2`` are products (torch's CPU kernel special-cases them the same way): bit-equal;
    other exponents go through ``tl.power`` and stay close."""
    x = torch.randn(rows, cols, generator=torch.Generator().manual_seed(rows * 1000 + cols)) + 0.25

    def f(t: torch.Tensor) -> torch.Tensor:
        return torch.pow(t * 1.5, e) + 1.0

    got = torch.compile(f, backend="trn")(x.to("trn")).cpu()
    want = f(x)
    if e in (2.0, 3.0, -2.0, -1.0):
        assert torch.equal(got, want)
    else:
        torch.testing.assert_close(got, want, rtol=2e-6, atol=1e-6, equal_nan=True)


def test_generated_kernel_is_one_program_whose_loop_the_runtime_splits() -> None:
    """The generated source has grid (1,) and no program ids; the runtime splits its tile loop (here into 3
    parts, at once) and the results match the CPU for row counts that are not multiples of the tile or of
    the part count."""
    from tests.runtime.test_affine_split import _always_split

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        y = (a + b) * b
        return y - y.mean(-1, keepdim=True)

    cf = torch.compile(f, backend="trn")
    with _always_split() as seen:
        for rows in (4099, 2048, 3001, 1, 0):
            a, b = torch.randn(rows, 512), torch.randn(rows, 512)
            at, bt = a.to("trn"), b.to("trn")
            for _ in range(2):  # the general path (cold), then the warm launch plan
                out = cf(at, bt)
                torch.testing.assert_close(out.cpu(), f(a, b), rtol=1e-5, atol=1e-5)
    assert seen and set(seen) == {3}
    src = kernelgen.launchers()[-1].source
    assert "program_id" not in src and "tl.affine_range(tl.cdiv(n, p))" in src


@pytest.mark.parametrize("threads", ["1", "3"])
def test_thread_count_does_not_change_the_source(threads: str) -> None:
    import trnlang.config as config

    with config.override(TRN_NUM_THREADS=threads):
        f = torch.compile(lambda x: torch.softmax(x * 2.0, -1), backend="trn")
        x = torch.randn(5, 7)
        torch.testing.assert_close(f(x.to("trn")).cpu(), torch.softmax(x * 2.0, -1))
    assert "program_id" not in kernelgen.launchers()[-1].source
