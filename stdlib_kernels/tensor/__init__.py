"""Tensor plumbing: device copies with casts, data movement, factories, random numbers.

Importing a module of this family registers its lowerings (``stdlib_kernels.register_all`` imports them all)."""
