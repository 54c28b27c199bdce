"""Code generation: trnlang IR -> LLVM IR (``llvmlite.ir``) -> object code.

- ``llvm``: the one door to LLVM (build -> optimize -> emit object -> load -> address; the only module that
  imports ``llvmlite.binding``); ``isa``: the instruction-set path chosen from the host's CPU features;
- ``lowering/``: one traced, planned kernel becomes one LLVM module (``lowering.kernel.lower_kernel``);
- ``mathlib/``: the vectorised math functions and gemm micro-kernels the lowering calls into;
- ``native``: the runtime's native helpers (launch trampoline, worker loop), built like every kernel;
- ``irutil``: small ``llvmlite.ir`` helpers shared by all of the above.

Offline generators of checked-in tables live in ``tools/``, outside this package and its fingerprint.
"""
