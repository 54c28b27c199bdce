"""The math library the lowering calls into, generated as ``llvmlite.ir``: vectorised fp32 transcendental
functions (``vecmath``) and the register-blocked fp32 / bf16 gemm micro-kernels (``gemm``, ``gemm_bf16``)."""
