"""Matrix products and dense linear algebra (Cholesky, LU, QR, LDL, eigen/SVD).

Importing a module of this family registers its lowerings (``stdlib_kernels.register_all`` imports them all)."""
