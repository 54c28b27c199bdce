"""The standard library of trnlang kernels and their ATen lowerings for the ``trn`` device.

One sub-package per family (``elementwise``, ``reduction``, ``nn``, ``indexing``, ``linalg``, ``fft``,
``tensor``) over a small core (``_util``: operand classification and launch helpers; ``tiling``: loop skeletons;
``decompositions``: ops lowered as torch's own decompositions). Importing a module registers its lowerings
(``@lowering``); :func:`register_all` imports them all (the device layer calls it at first use).
"""

from __future__ import annotations

import importlib

#: every module with lowerings, in registration order (``family.module`` under ``stdlib_kernels``)
FAMILIES = tuple(f"stdlib_kernels.{m}" for m in (
    "elementwise.pointwise", "elementwise.binops", "linalg.matmul", "reduction.reduce", "reduction.softmax",
    "tensor.copy",
    "decompositions", "elementwise.unary", "elementwise.ternary", "elementwise.compare", "elementwise.activations",
    "reduction.scans", "reduction.sort", "indexing.gather_scatter", "indexing.index_dim", "indexing.advanced_index",
    "indexing.masked",
    "linalg.cholesky", "nn.rnn", "nn.conv", "nn.pool", "nn.upsample", "nn.norm", "nn.batchnorm", "nn.attention",
    "nn.loss", "tensor.movement", "tensor.creation", "tensor.random", "elementwise.bessel", "elementwise.special",
    "fft.dft", "linalg.eig", "reduction.selection", "nn.sampling", "elementwise.gamma_fns", "reduction.unique",
    "reduction.search", "fft.complex_ops", "nn.random_pool", "nn.bags", "nn.distance", "nn.ctc", "nn.renorm",
    "reduction.segment", "sparse.nested", "sparse.coo", "sparse.csr",
))


def register_all() -> None:
    """Import every family (each registers its lowerings once)."""
    for name in FAMILIES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
