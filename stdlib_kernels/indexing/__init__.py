"""Indexing: the indirect-DMA engine and gather/scatter, advanced indexing, masked ops built on it.

Importing a module of this family registers its lowerings (``stdlib_kernels.register_all`` imports them all)."""
