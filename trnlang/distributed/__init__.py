"""torch.distributed on ``trn`` tensors: a c10d backend named ``"trn"``, carried by gloo.

:func:`register` (run when the ``trn`` device registers, so normally never called by hand) makes
``"trn"`` a c10d backend for the ``trn`` device. Then

- ``init_process_group("cpu:gloo,trn:trn")``: ``trn`` tensors go to the ``trn`` backend, CPU tensors to gloo;
- ``init_process_group("trn")``: ``trn`` tensors only (a CPU tensor collective raises torch's
  ``No backend type associated with device type cpu``);
- DDP, FSDP2 (``fully_shard``), DTensor / tensor parallelism and DCP work on ``trn`` models.

The transport is gloo (``ProcessGroupGloo``) on zero-copy CPU views of the ``trn`` tensors' device memory
(device memory is host memory); see :mod:`trnlang.distributed.c10d`.

Example:
    >>> import torch, torch.distributed as dist, trnlang.distributed
    >>> trnlang.distributed.register()  # doctest: +SKIP
    >>> dist.init_process_group("cpu:gloo,trn:trn", init_method="tcp://127.0.0.1:29599",
    ...                         rank=0, world_size=1)  # doctest: +SKIP
    >>> t = torch.arange(4.0, device="trn"); dist.all_reduce(t); t.cpu().tolist()  # doctest: +SKIP
    [0.0, 1.0, 2.0, 3.0]
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["register", "is_registered", "BACKEND"]

#: The c10d backend name (also the device type it serves).
BACKEND = "trn"

_lock = threading.Lock()
_state = {"registered": False}


def is_registered() -> bool:
    """True once the ``trn`` c10d backend is registered in this process.

    Example:
        >>> import trnlang.distributed as td
        >>> isinstance(td.is_registered(), bool)
        True
    """
    return _state["registered"]


def _create_backend(opts: Any, backend_options: Any = None) -> Any:
    """The creator torch calls for a group with a ``trn`` backend; the ``c10d`` kernels register here, at the
    first such group, so that registering the backend at ``import torch`` costs next to nothing."""
    from trnlang.distributed import c10d

    c10d.register_kernels()
    return c10d.create_backend(opts, backend_options)


def register() -> None:
    """Register the ``trn`` c10d backend (idempotent; a no-op when torch.distributed is unavailable).

    Called when the ``trn`` device registers. Cheap (a few dictionary entries in ``torch.distributed``,
    which ``import torch`` has already loaded); the ``c10d`` kernels for ``trn`` tensors register when the
    first group with a ``trn`` backend is created.

    Example:
        >>> import trnlang.distributed as td
        >>> td.register()  # doctest: +SKIP
        >>> td.is_registered()  # doctest: +SKIP
        True
    """
    if _state["registered"]:
        return
    with _lock:
        if _state["registered"]:
            return
        import torch.distributed as dist

        if not dist.is_available():
            return
        if BACKEND not in dist.Backend.backend_list:
            dist.Backend.register_backend(BACKEND, _create_backend, extended_api=True, devices=[BACKEND])
        _state["registered"] = True
