"""Discrete Fourier transforms and the complex elementwise kernels they use.

Importing a module of this family registers its lowerings (``stdlib_kernels.register_all`` imports them all)."""
