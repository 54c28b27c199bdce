"""The standard library of trnlang kernels and their ATen lowerings for the ``trn`` device.

One family per module; importing a module registers its lowerings (``@lowering``).
:func:`register_all` imports them all (the device layer calls it at first use).
"""

from __future__ import annotations

import importlib

FAMILIES = ("stdlib_kernels.pointwise", "stdlib_kernels.matmul", "stdlib_kernels.reduce",
            "stdlib_kernels.softmax", "stdlib_kernels.copy", "stdlib_kernels.decompositions",
            "stdlib_kernels.unary", "stdlib_kernels.ternary", "stdlib_kernels.compare",
            "stdlib_kernels.activations", "stdlib_kernels.scans", "stdlib_kernels.sort",
            "stdlib_kernels.gather_scatter", "stdlib_kernels.advanced_index", "stdlib_kernels.masked",
            "stdlib_kernels.linalg", "stdlib_kernels.rnn", "stdlib_kernels.conv",
            "stdlib_kernels.pool", "stdlib_kernels.upsample", "stdlib_kernels.norm", "stdlib_kernels.batchnorm",
            "stdlib_kernels.attention",
            "stdlib_kernels.loss", "stdlib_kernels.movement", "stdlib_kernels.creation", "stdlib_kernels.random",
            "stdlib_kernels.bessel", "stdlib_kernels.special", "stdlib_kernels.fft", "stdlib_kernels.linalg_eig",
            "stdlib_kernels.selection", "stdlib_kernels.sampling", "stdlib_kernels.gamma_fns", "stdlib_kernels.unique",
            "stdlib_kernels.search", "stdlib_kernels.fft_complex", "stdlib_kernels.random_pool", "stdlib_kernels.bags",
            "stdlib_kernels.distance", "stdlib_kernels.ctc", "stdlib_kernels.renorm",
            "stdlib_kernels.segment")


def register_all() -> None:
    """Import every family (each registers its lowerings once)."""
    for name in FAMILIES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:
                raise
