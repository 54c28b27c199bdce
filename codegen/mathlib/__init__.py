"""The math library the lowering calls into: vectorised fp32 transcendental functions and the register-blocked fp32 / bf16 gemm micro-kernels, all generated as ``llvmlite.ir``."""
