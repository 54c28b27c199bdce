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


def register() -> None:
    """Register the ``trn`` c10d backend and its ``c10d`` kernels (idempotent; no-op without torch.distributed).

    Cheap: ``torch.distributed`` is already imported by ``import torch``; this adds one backend entry and the
    ``PrivateUse1`` kernels of the ``c10d`` ops.

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
        from trnlang.distributed import c10d

        c10d.register_kernels()
        if BACKEND not in dist.Backend.backend_list:
            dist.Backend.register_backend(BACKEND, c10d.create_backend, extended_api=True, devices=[BACKEND])
        _state["registered"] = True
