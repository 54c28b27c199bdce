"""Offline generator of the fitted polynomial coefficients used by ``codegen/mathlib/vecmath.py``.

Not imported at run time.  ``python -m tools.polyfit`` prints the erf / erfc
tables pasted into ``codegen/mathlib/vecmath.py``.  Method: Lawson's iteratively reweighted
least squares converges to the minimax (here: relative error) polynomial; the
coefficients are then rounded to fp32 one at a time (lowest degree first), the
remaining ones refitted after each rounding, so the rounding error is absorbed.
"""

from __future__ import annotations

import math

import numpy as np

from codegen.mathlib.vecmath import ERF_SMALL, ERFC_MAX


def lawson(target: np.ndarray, basis: np.ndarray, weight: np.ndarray, iters: int = 200) -> np.ndarray:
    """Coefficients minimising max |weight * (target - basis @ c)| (Lawson's algorithm)."""
    wt = np.full(len(target), 1.0 / len(target))
    best_err, best = np.inf, None
    for _ in range(iters):
        sw = np.sqrt(wt)
        c, *_ = np.linalg.lstsq(basis * (weight * sw)[:, None], target * weight * sw, rcond=None)
        err = np.abs(weight * (target - basis @ c))
        if err.max() < best_err:
            best_err, best = err.max(), c
        wt = wt * err + 1e-300
        wt /= wt.sum()
    assert best is not None
    return best


def fit_fp32(u: np.ndarray, target: np.ndarray, degree: int, weight: np.ndarray) -> list[float]:
    """Minimax polynomial in ``u`` with fp32 coefficients, lowest degree first."""
    basis = np.vander(u, degree + 1, increasing=True)
    fixed: dict[int, float] = {}
    for k in range(degree + 1):
        free = [j for j in range(degree + 1) if j not in fixed]
        rhs = target - sum((basis[:, j] * v for j, v in fixed.items()), np.zeros_like(target))
        c = lawson(rhs, basis[:, free], weight)
        fixed[k] = float(np.float32(c[0]))
    return [fixed[j] for j in range(degree + 1)]


def horner_fp32(u: np.ndarray, coeffs_low_first: list[float]) -> np.ndarray:
    """Evaluate like the JIT does: fp32 Horner with fused multiply-add."""
    u32 = u.astype(np.float32).astype(np.float64)
    acc = np.full(u.shape, coeffs_low_first[-1])
    for ck in reversed(coeffs_low_first[:-1]):
        acc = (acc * u32 + ck).astype(np.float32).astype(np.float64)
    return acc


def erf_tables() -> dict[str, list[float]]:
    """ERF_P (erf(a) = a + a P(a^2), a < ERF_SMALL) and ERFC_G (erfc = e^{-a^2} t G(t)), highest degree first."""
    erf = np.vectorize(math.erf)
    erfc = np.vectorize(math.erfc)
    a = np.linspace(1e-4, ERF_SMALL, 20000).astype(np.float32).astype(np.float64)
    target = erf(a) / a - 1.0
    p = fit_fp32(a * a, target, 6, a / erf(a))
    got = a + a * horner_fp32(a * a, p)
    print(f"# erf small: max rel err (fp32 eval) {np.abs(got / erf(a) - 1).max():.3g}")
    a = np.linspace(ERF_SMALL, ERFC_MAX, 40000).astype(np.float32).astype(np.float64)
    t = 1.0 / (1.0 + 0.5 * a)
    g_target = erfc(a) * np.exp(a * a) / t
    g = fit_fp32(t, g_target, 8, 1.0 / g_target)
    got = horner_fp32(t, g)
    print(f"# erfc G: max rel err (fp32 eval) {np.abs(got / g_target - 1).max():.3g}")
    return {"ERF_P": p[::-1], "ERFC_G": g[::-1]}


def main() -> None:
    for name, coeffs in erf_tables().items():
        print(f"{name} = [{', '.join(repr(c) for c in coeffs)}]")


if __name__ == "__main__":
    main()
