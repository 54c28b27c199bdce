"""Documented differences of ``trn`` from the CPU in PyTorch's own test files: trn-only failures that are
understood and deliberate (or outside what a Python PrivateUse1 backend can do), each with its reason.

``trn upstream`` still counts them as trn-only failures; its report names them with the reason given here, so
a new trn-only failure is never hidden among them. A pattern is an :mod:`fnmatch` pattern of the device-neutral
test key (``Class.test_name_DEV_dtype``).

Example:
    >>> documented("TestShapeOps.test_flip_DEV_float32")[:9]
    'quantized'
    >>> documented("TestShapeOps.test_flip_DEV_int64") is None
    True
"""

from __future__ import annotations

import fnmatch

__all__ = ["DOCUMENTED", "documented"]

_QUANTIZED = ("quantized tensors: creating one needs torch's C++ QTensorImpl, which a Python PrivateUse1 backend "
              "cannot make for its own storage (quantize_per_tensor / _empty_affine_quantized on trn)")
_RANDOM_INPUTS = ("random inputs: trn's generator is its own, so the test sees other values than on the CPU; on "
                  "trn's inputs the CPU's result (bit-identical to trn's) fails the test's numpy reference the same "
                  "way (float16 sums that numpy rounds at every step)")
_SUM_ORDER = ("float32 summation order: on trn's random input (its generator differs from the CPU's) the sum of "
              "5,625 values ends 5.1e-6 (relative) from numpy's, past the test's 1.3e-6; over random inputs trn's "
              "float32 sums are closer to the exact sum than the CPU's on average (mean error at that size "
              "1.9e-4 vs 4.8e-4, 10 seeds)")

_INT_LINSPACE = ("integer linspace/logspace: torch steps them in float64 (start + i * step in double, then truncated), "
                 "which the hardware has no arithmetic for and fp32 does not reproduce at the truncation; they take "
                 "the warned CPU fallback (strict mode refuses it)")

_ZERO_DIVISOR = ("integer fmod/remainder by zero: trn raises the CPU's ZeroDivisionError; the test expects the CUDA "
                 "branch's undefined values (all-ones bit patterns) from any device that is not the CPU")

_F16_FLOOR_DIV = ("random inputs: trn's generator is its own; float16 floor division on trn is bit-identical to the "
                  "CPU's (0 differences over 368,640 full-range pairs, all three rounding modes), and the CPU's own "
                  "result misses numpy's float16 floor_divide on 2 of 122,880 such pairs: trn's draw holds one")

_REFS_COPYSIGN = ("torch._refs.copysign itself raises for a CPU 0-dim divisor beside a tensor of any other device (its "
                  "own device check, before any trn code runs); torch 2.13's OpInfo skips this test for every device "
                  "(its decorator names the test class TestBinaryUfuncsDevice, which the 2023 file does not have)")

_ZETA_DOUBLE = ("special.zeta at q < 0 with an integral x >= 7 (this test draws such pairs: int64 x, float32 q): the "
                "CPU's float kernel sums in double (acc_type), and near half-integral q terms of size up to 2^x cancel "
                "beyond float32's reach, so trn hands exactly these calls to the warned CPU fallback (strict mode "
                "refuses it); every other zeta call is native")

_C32_SUB = ("random inputs: trn's generator is its own; complex32 sub on trn is bit-identical to the CPU's (200,000 "
            "random pairs), and trn's draw holds a pair whose float16 rounding is 4.9e-4 from the test's complex64 "
            "numpy reference, past the test's complex64 tolerance (1e-5); the CPU's result on that pair is the same")

_C64_POW = ("complex64 pow is exp(w log z) in float32 on trn as on the CPU, with the same error against the exact "
            "result (on this test's 812 inputs: max relative 3.2e-6 on trn, 2.9e-6 on the CPU, both vs complex128); "
            "the test's tolerance (1.3e-6) is below that error and passes on the CPU because its numpy reference runs "
            "the same libm routine (glibc cpowf) as torch's CPU kernel, so their rounding errors coincide; for results "
            "that overflow, the signs of the infinities follow cos/sin of float32 angles past 2^24 radians, where any "
            "different last bit of log z decides them (the exact result's signs differ from the CPU's as well)")
_C64_POW_SPECIAL = ("complex64 pow of infinite or NaN operands: the CPU's values are glibc's C99 Annex G special cases "
                    "(cexpf's table, __mulsc3's infinity recovery); trn hands exactly these calls to the warned CPU "
                    "fallback (strict mode refuses it)")

_C64_INV_SPECIAL = ("complex64 asin/acos/atan/sinc of infinite or NaN operands: the CPU's values are glibc's C99 "
                    "Annex G tables (casinf/cacosf/catanf) and, for sinc, its division of those; trn computes these "
                    "functions natively for finite operands and hands exactly the non-finite calls to the warned CPU "
                    "fallback (strict mode refuses it). exp, sin/cos/tan, their hyperbolic forms, exp2, expm1, log1p, "
                    "square, sigmoid, sqrt, rsqrt, reciprocal and the logs carry the special values natively")
_C64_SINC_BIG = ("complex64 sinc with |Im z| > 25: sin(pi z) overflows float32 and the CPU divides the infinities "
                 "(inf/inf NaN patterns of its formula); trn hands exactly these calls to the warned CPU fallback")

_F64_WARNS = ("the test counts the warnings of a float64/complex128 call (an out= resize warning, say); on trn that "
              "call takes the documented CPU fallback (the hardware has no float64 arithmetic), which warns once per "
              "op and process (trn's FallbackWarning), so the first such call of an op counts one warning more; the "
              "values and errors are the CPU's own")
_CUDA_BRANCH = ("the test's branch for devices other than the CPU expects CUDA's behaviour (a CUDA-only error message, "
                "or bfloat16 addbmm raising on GPUs older than sm_53); trn behaves as the CPU does")

#: test-key pattern -> why it fails on trn only.
DOCUMENTED: dict[str, str] = {
    "TestShapeOps.test_flip_DEV_float32": _QUANTIZED,
    "TestOldViewOps.test_flatten_DEV": _QUANTIZED,
    "TestOldViewOps.test_ravel_DEV": _QUANTIZED,
    "TestReductions.test_ref_duplicate_values_nansum_DEV_float16": _RANDOM_INPUTS,
    "TestReductions.test_ref_duplicate_values_masked_sum_DEV_float16": _RANDOM_INPUTS,
    "TestReductions.test_nansum_out_dtype_DEV_float32": _SUM_ORDER,
    "TestTensorCreation.test_linspace_DEV_int*": _INT_LINSPACE,
    "TestTensorCreation.test_linspace_DEV_uint*": _INT_LINSPACE,
    "TestTensorCreation.test_linspace_vs_numpy_integral_DEV_*": _INT_LINSPACE,
    "TestTensorCreation.test_large_linspace_DEV_int*": _INT_LINSPACE,
    "TestTensorCreation.test_logspace_DEV_int*": _INT_LINSPACE,
    "TestTensorCreation.test_logspace_DEV_uint*": _INT_LINSPACE,
    "TestBinaryUfuncs.test_fmod_remainder_by_zero_integral_DEV_*": _ZERO_DIVISOR,
    "TestBinaryUfuncs.test_div_rounding_numpy_DEV_float16": _F16_FLOOR_DIV,
    "TestBinaryUfuncs.test_type_promotion__refs_copysign_DEV": _REFS_COPYSIGN,
    "TestBinaryUfuncs.test_type_promotion*_special_zeta_DEV": _ZETA_DOUBLE,
    "TestBinaryUfuncs.test_reference_numerics*_sub_DEV_complex32": _C32_SUB,
    "TestBinaryUfuncs.test_reference_numerics_extremal_values_*pow_DEV_complex64": _C64_POW_SPECIAL,
    "TestUnaryUfuncs.test_reference_numerics_extremal_*asin_DEV_complex64": _C64_INV_SPECIAL,
    "TestUnaryUfuncs.test_reference_numerics_extremal_*acos_DEV_complex64": _C64_INV_SPECIAL,
    "TestUnaryUfuncs.test_reference_numerics_extremal_*atan_DEV_complex64": _C64_INV_SPECIAL,
    "TestUnaryUfuncs.test_reference_numerics_extremal_*sinc_DEV_complex64": _C64_INV_SPECIAL,
    "TestUnaryUfuncs.test_reference_numerics_large_*sinc_DEV_complex64": _C64_SINC_BIG,
    "TestBinaryUfuncs.test_reference_numerics_*pow_DEV_complex64": _C64_POW,
    "TestBinaryUfuncs.test_reference_numerics_large_values_*pow_DEV_complex64": _C64_POW,
    "TestBinaryUfuncs.test_scalar_support_*pow_DEV_complex64": _C64_POW,
    **{f"TestLinalg.test_{t}_errors_and_warnings_DEV_{d}": _F64_WARNS
       for t in ("cholesky", "cholesky_inverse", "cholesky_solve_out", "cond", "eigh", "kron", "matrix_rank_out",
                 "pinv", "slogdet")
       for d in ("float64", "complex128")},
    "TestLinalg.test_linalg_lstsq_input_checks_DEV_*": _CUDA_BRANCH,
    "TestLinalg.test_addbmm_DEV_bfloat16": _CUDA_BRANCH,
}


def documented(key: str) -> str | None:
    """The documented reason a test with this key fails on trn only, else None."""
    return next((why for pat, why in DOCUMENTED.items() if fnmatch.fnmatchcase(key, pat)), None)
