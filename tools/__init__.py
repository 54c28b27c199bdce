"""Offline developer tools: generators of tables and coefficients that are checked into the tree.

Nothing here is imported when trnlang runs, and these files are not part of the JIT's code fingerprint
(``trnlang.runtime.jit``), so editing a tool does not invalidate anyone's compiled-kernel cache.
Run them as modules from the repository root, e.g. ``python -m tools.vecmath_accuracy``.
"""
