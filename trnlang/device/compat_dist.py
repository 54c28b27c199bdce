"""torch.distributed glue: keep CPU-only distributed code doing what it does without trnlang.

Registering ``trn`` (PyTorch's PrivateUse1 backend, renamed) makes it the process's *accelerator*:
``torch._C._get_accelerator()`` returns the PrivateUse1 device as soon as it has a name, whether or not any
tensor lives there. FSDP2's ``fully_shard`` (and ``replicate``) build their default device mesh on that
accelerator, so a plain CPU model sharded in a gloo group would be moved to ``trn``: FSDP moves each
parameter with ``param.data = param.to("trn")``, which C++ refuses ("``variable`` and ``tensor`` have
incompatible tensor type": PrivateUse1 and CPU tensors are not shallow-copy compatible in torch 2.13), and
gloo has no ``trn`` collectives anyway.

:func:`patch_fsdp_default_mesh` makes that default mesh a CPU mesh when the default process group has no
backend for ``trn`` (what torch picks when no accelerator is present); a group that does serve ``trn`` keeps
torch's choice. torch's FSDP modules are heavy to import, so the patch waits for them (a post-import hook)
instead of importing them at ``import torch``.

Likewise :func:`patch_default_backend`: ``dist.init_process_group()`` with no backend named picks the
accelerator's default backend only (``trn:trn``, so CPU tensors would have none); an undefined backend means
the CPU's default backend (gloo) for CPU tensors, as without trnlang, plus ``trn:trn`` once trnlang's c10d
backend is registered (``trnlang.distributed``).
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

#: The module whose ``init_device_mesh`` global FSDP2's ``_init_default_mesh`` calls.
FSDP_INIT = "torch.distributed.fsdp._fully_shard._fsdp_init"
#: The module whose ``BackendConfig`` maps an undefined backend to the accelerator's default one.
C10D = "torch.distributed.distributed_c10d"


def _group_serves_trn() -> bool:
    """True when the default process group has a communication backend for ``trn`` tensors."""
    import torch
    import torch.distributed as dist

    try:
        dist.distributed_c10d._get_default_group()._get_backend(torch.device("trn"))
    except (RuntimeError, ValueError):
        return False
    return True


def _sharding_a_cpu_module() -> bool:
    """True when the default mesh is being made for ``fully_shard(module)`` / ``replicate(module)`` of a module
    whose parameters and buffers all live on the CPU: such a model keeps a CPU mesh, as without trnlang.

    FSDP2 builds its default mesh without looking at the module, so the calling frame's ``module`` argument
    is read (a few frames up: fully_shard -> _init_default_mesh -> init_device_mesh)."""
    import itertools

    import torch

    f: FrameType | None = sys._getframe(2)
    for _ in range(6):
        if f is None:
            return False
        m = f.f_locals.get("module")
        mods: list[Any] = list(m) if isinstance(m, (list, tuple)) else [m]
        if mods and all(isinstance(x, torch.nn.Module) for x in mods):
            devs = {t.device.type for x in mods for t in itertools.chain(x.parameters(), x.buffers())}
            return devs == {"cpu"}
        f = f.f_back
    return False


def _patch_loaded_fsdp_init(mod: Any) -> None:
    """Wrap ``init_device_mesh`` as seen by FSDP2's default-mesh helper (idempotent)."""
    orig = mod.init_device_mesh
    if getattr(orig, "_trn_patched", False):
        return

    @functools.wraps(orig)
    def init_device_mesh(device_type: str, *args: Any, **kwargs: Any) -> Any:
        if device_type == "trn" and (not _group_serves_trn() or _sharding_a_cpu_module()):
            device_type = "cpu"  # torch's choice when no accelerator is present
        return orig(device_type, *args, **kwargs)

    init_device_mesh._trn_patched = True  # type: ignore[attr-defined]
    mod.init_device_mesh = init_device_mesh


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``then(module)`` right after ``name`` has been imported (once)."""

    def __init__(self, name: str, then: Callable[[Any], None]) -> None:
        self.name, self.then = name, then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        orig, then = spec.loader.exec_module, self.then

        def exec_module(module: Any) -> None:
            orig(module)
            then(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _when_imported(name: str, attr: str, then: Callable[[Any], None]) -> None:
    """Run ``then(module)`` now if ``name`` is imported (``attr`` defined), else right after its import."""
    mod = sys.modules.get(name)
    if mod is not None and hasattr(mod, attr):
        then(mod)
    elif not any(isinstance(f, _AfterImport) and f.name == name for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport(name, then))


def patch_fsdp_default_mesh() -> None:
    """Patch FSDP2's default mesh now if its module is loaded, else right after it is imported (idempotent)."""
    _when_imported(FSDP_INIT, "init_device_mesh", _patch_loaded_fsdp_init)


def _patch_loaded_c10d(mod: Any) -> None:
    """Wrap ``BackendConfig.__init__`` so an undefined backend means what it means without trnlang."""
    import torch

    cls = mod.BackendConfig
    orig = cls.__init__
    if getattr(orig, "_trn_patched", False):
        return

    @functools.wraps(orig)
    def __init__(self: Any, backend: Any) -> None:
        table = mod.Backend.default_device_backend_map
        if str(backend) == mod.Backend.UNDEFINED and torch._C._get_accelerator().type == "trn":
            # torch would serve the accelerator only; CPU tensors keep the CPU's default backend (gloo), as
            # without trnlang, and trn tensors get the trn c10d backend when it is registered
            backend = f"cpu:{table['cpu']}" + (f",trn:{table['trn']}" if "trn" in table else "")
        orig(self, backend)

    __init__._trn_patched = True  # type: ignore[attr-defined]
    cls.__init__ = __init__


def patch_default_backend() -> None:
    """``dist.init_process_group()`` with no backend picks one for the accelerator only: without a c10d
    backend for ``trn`` torch raises ("We detected accelerator trn ... don't know which communication
    backend"), with one CPU tensors have no backend. An undefined backend means ``cpu:gloo`` (as without
    trnlang) plus ``trn:trn`` when trnlang's c10d backend is registered."""
    _when_imported(C10D, "BackendConfig", _patch_loaded_c10d)


#: what a front door returns for a call torch's own function must handle
DECLINE = object()
#: ``torch.distributed.all_reduce``'s front door for ``trn`` tensors: set by ``trnlang.distributed.c10d`` when
#: its kernels register (the first group with a ``trn`` backend); None until then
ALL_REDUCE_DOOR: list[Callable[..., Any] | None] = [None]


def _patch_loaded_all_reduce(mod: Any) -> None:
    """Wrap ``all_reduce`` (``torch.distributed`` and ``distributed_c10d``) with the front door (idempotent)."""
    import torch

    orig = mod.all_reduce
    if getattr(orig, "_trn_patched", False):
        return
    tensor_type, door = torch.Tensor, ALL_REDUCE_DOOR

    @functools.wraps(orig)
    def all_reduce(tensor: Any, op: Any = mod.ReduceOp.SUM, group: Any = None, async_op: bool = False) -> Any:
        if type(tensor) is tensor_type and not tensor.is_cpu and door[0] is not None:
            out = door[0](tensor, op, group, async_op)
            if out is not DECLINE:
                return out
        return orig(tensor, op, group, async_op)

    all_reduce._trn_patched = True  # type: ignore[attr-defined]
    mod.all_reduce = all_reduce
    pkg = sys.modules.get("torch.distributed")
    if pkg is not None and getattr(pkg, "all_reduce", None) is orig:
        pkg.all_reduce = all_reduce  # type: ignore[attr-defined]


def patch_all_reduce() -> None:
    """``dist.all_reduce`` of a ``trn`` tensor reaches its backend through torch's C++ dispatcher, which can
    only box the call into a Python kernel: that round trip costs more than gloo's whole all-reduce of a small
    tensor. A plain ``trn`` tensor goes through ``trnlang.distributed``'s front door instead (the same check
    and gloo call, no dispatcher); every other call, and every call until a ``trn`` group exists, is
    torch's function unchanged."""
    _when_imported(C10D, "all_reduce", _patch_loaded_all_reduce)
