"""Ops lowered as torch's own decompositions into ops that have native lowerings.

``rsub`` decomposes into ``mul``/``sub``, which run as trnlang kernels (complex64 too, on real/imaginary
planes); ``addcmul``/``addcdiv`` have native kernels in ``stdlib_kernels.elementwise.ternary``, ``baddbmm`` in
``stdlib_kernels.linalg.matmul``. In-place and ``out=`` variants are routed to the same decomposition. Calls with
other dtypes run through the CPU fallback.
"""

from __future__ import annotations

import torch

from stdlib_kernels.elementwise.pointwise import OPERAND_DTYPES
from trnlang.device.registry import lowering, resolve

DECOMPOSED = ("aten::rsub.Tensor", "aten::rsub.Scalar")


def _register() -> None:
    from torch._decomp import decomposition_table

    for name in DECOMPOSED:
        fn = decomposition_table[resolve(name)]
        lowering(name, dtypes=(*OPERAND_DTYPES, torch.complex64), kind="decomposition")(fn)


_register()
