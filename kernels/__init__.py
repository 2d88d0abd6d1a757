"""numba kernels for curve statistics and reader metrics."""
