"""Reductions along free axes, softmax, scans, sorting and sort-based selection, search, segments.

Importing a module of this family registers its lowerings (``stdlib_kernels.register_all`` imports them all)."""
