"""trnlang: a tile DSL for Trainium-class accelerators, traced, checked, simulated and JIT-compiled.

Example:
    >>> import numpy as np
    >>> import trnlang as trn
    >>> import trnlang.language as tl
    >>> @trn.kernel
    ... def scale(x, out):
    ...     for i in tl.affine_range(2):
    ...         t = tl.load(x[i * 2:(i + 1) * 2, :])
    ...         tl.store(out[i * 2:(i + 1) * 2, :], t * 3.0)
    >>> x = np.ones((4, 8), np.float32); out = np.empty_like(x)
    >>> scale(x, out); float(out[3, 7])
    3.0
"""

import trnlang.compile  # noqa: E402,F401 - torch.compile(backend="trn"); trn graphs under the default backend
import trnlang.device  # noqa: E402,F401 - registers the trn torch device once torch is imported
from trnlang._version import __version__
from trnlang.frontend.errors import (
    BoundsError,
    CompileError,
    DTypeError,
    LaunchError,
    LoweringError,
    SbufOverflowError,
    ShapeError,
    TraceError,
    TrnError,
    VerifyError,
)
from trnlang.runtime.autotune import Config, autotune
from trnlang.runtime.kernel import KernelFn, kernel
from trnlang.runtime.stats import compile_stats, reset_compile_stats
from trnlang.sim.profile import Profile


def __getattr__(name: str) -> object:
    """The device layer's public names, imported on first use (``import trnlang`` stays light)."""
    if name in ("lowering", "decline", "fallback_stats", "fallback_reasons", "reset_fallback_stats",
                "register_decomposition"):
        import trnlang.device as _device

        return getattr(_device, name)
    raise AttributeError(f"module 'trnlang' has no attribute {name!r}")


__all__ = [
    "__version__", "kernel", "KernelFn", "TrnError", "TraceError", "ShapeError", "DTypeError", "BoundsError",
    "SbufOverflowError", "VerifyError", "LaunchError", "LoweringError", "CompileError", "Profile", "autotune",
    "Config", "compile_stats", "reset_compile_stats", "lowering", "decline", "fallback_stats", "fallback_reasons",
    "reset_fallback_stats", "register_decomposition",
]
