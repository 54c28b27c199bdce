"""Neural-network layers: normalisation, attention, losses, convolution, pooling, upsampling, RNN cells.

Importing a module of this family registers its lowerings (``stdlib_kernels.register_all`` imports them all)."""
