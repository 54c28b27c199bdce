"""IR -> ``llvmlite.ir``: one traced, planned kernel becomes one LLVM module (``kernel.lower_kernel``)."""
