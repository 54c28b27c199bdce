"""Elementwise kernels: binary, unary and ternary tables, comparisons, activations, special functions.

Importing a module of this family registers its lowerings (``stdlib_kernels.register_all`` imports them all)."""
