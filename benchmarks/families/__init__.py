"""Per-family benchmark cases for ``benchmarks/bench_stdlib.py`` (one module per stdlib family).

Each module defines ``cases(quick: bool) -> list[tuple[str, Callable[[], Any], Callable[[], Any]]]``:
``(name, cpu_thunk, trn_thunk)``. Both thunks run the same op on tensors prepared once (the trn
one on ``trn`` tensors); the driver warms both up, times them alternately and prints the ratio.
"""
