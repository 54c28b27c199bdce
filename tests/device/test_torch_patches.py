"""The table of patches to torch, and the rule they keep: CPU code behaves exactly as without trnlang.

The comparisons run one probe script in two fresh interpreters, with ``TORCH_DEVICE_BACKEND_AUTOLOAD=1``
(torch loads trnlang's entry point: ``trn`` registered, every patch applied) and ``=0`` (plain torch), and
compare what the script saw.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import pytest
import torch

from trnlang.device import torch_patches

ROOT = pathlib.Path(__file__).resolve().parents[2]

_PROBE = r'''
import copy, json, os, socket, sys, warnings
import torch

out = {"registered": hasattr(torch, "trn"), "trnlang_loaded": "trnlang.device" in sys.modules}


def rec(key, fn):
    try:
        out[key] = fn()
    except Exception as e:  # the error is part of the behaviour being compared
        out[key] = f"raised {type(e).__name__}: {e}"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def fsdp(backend=None):
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    free_port()
    dist.init_process_group(backend, rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
        fully_shard(m)
        opt = torch.optim.Adam(m.parameters(), lr=0.1)
        loss = m(torch.randn(5, 8)).square().mean()
        loss.backward()
        opt.step()
        return {"loss": loss.item(), "devices": [str(p.device) for p in m.parameters()],
                "types": [type(p).__name__ for p in m.parameters()],
                "params": [p.full_tensor().tolist() for p in m.parameters()]}
    finally:
        dist.destroy_process_group()


def default_group():
    import torch.distributed as dist

    free_port()
    dist.init_process_group(rank=0, world_size=1)  # no backend named: torch picks one
    try:
        t = torch.arange(4.0)
        dist.all_reduce(t)
        dist.barrier()
        pg = dist.distributed_c10d._get_default_group()
        return {"backend": str(dist.get_backend()), "config": str(dist.get_backend_config()),
                "devices": sorted(str(d) for d in pg._device_types), "sum": t.tolist()}
    finally:
        dist.destroy_process_group()


def conversions():
    torch.manual_seed(0)
    m = torch.nn.Linear(3, 2)
    w = m.weight
    m.weight.grad = torch.ones(2, 3)
    r = {"to_f64_is_self": m.to(torch.float64) is m, "weight_kept": m.weight is w,
         "dtype": str(m.weight.dtype), "grad_dtype": str(m.weight.grad.dtype)}
    r["to_cpu_is_self"] = m.to("cpu") is m
    r["to_cpu_kept"] = m.weight is w
    r["cpu_is_self"] = m.cpu() is m
    r["cpu_kept"] = m.weight is w
    r["to_dev_dtype"] = str(m.to(torch.device("cpu"), torch.float16).weight.dtype)
    r["values"] = m.weight.float().tolist()
    r["swap_flag"] = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        m.to(torch.float32)
        r["swap_kept"] = m.weight is w
    finally:
        torch.__future__.set_swap_module_params_on_conversion(False)
    c = torch.nn.Conv2d(2, 2, 1).to(memory_format=torch.channels_last)
    r["channels_last"] = c.weight.is_contiguous(memory_format=torch.channels_last)
    return r


def reprs():
    torch.manual_seed(0)
    ts = [torch.arange(6.0).reshape(2, 3), torch.tensor([1, 2]), torch.tensor([True, False]),
          torch.tensor([1 + 2j]), torch.zeros(0), torch.randn(2000), torch.tensor(3.5),
          torch.ones(2, requires_grad=True) * 2, torch.ones(2, dtype=torch.float64),
          torch.ones(2, dtype=torch.bfloat16), torch.arange(4.0)[::2]]
    r = [repr(t) for t in ts] + [str(ts[0])]
    torch.set_printoptions(precision=2)
    r.append(repr(ts[5][:5]))
    torch.set_printoptions(profile="default")
    return r


def storages():
    r = {}
    s = torch.UntypedStorage(8)
    r["sized"] = [s.size(), str(s.device), type(s).__name__]
    r["from_list"] = torch.UntypedStorage([1, 2, 3]).tolist()
    r["from_bytes"] = torch.UntypedStorage(b"ab").tolist()
    r["cpu_kw"] = str(torch.UntypedStorage(4, device="cpu").device)
    r["cpu_device"] = str(torch.UntypedStorage(4, device=torch.device("cpu")).device)
    r["empty"] = torch.UntypedStorage().size()
    s3 = torch.UntypedStorage([4, 5, 6])
    r["deepcopy"] = [copy.deepcopy(s3).tolist(), str(copy.deepcopy(s3).device)]
    r["clone"] = [s3.clone().tolist(), str(s3.clone().device)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r["typed"] = [torch.TypedStorage(3, dtype=torch.float32).size(), str(torch.FloatStorage(2).device)]
    rec("storage_bad_device", lambda: torch.UntypedStorage(4, device="foo"))
    rec("storage_bad_args", lambda: torch.UntypedStorage(1.5))
    return r


rec("fsdp", lambda: fsdp("gloo"))
rec("fsdp_default_group", fsdp)  # the default group also serves trn with the package: the model stays on CPU
rec("default_group", default_group)
rec("conversions", conversions)
rec("reprs", reprs)
rec("storages", storages)
print("PROBE" + json.dumps(out))
'''


def _run_probe(autoload: str) -> dict[str, Any]:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD=autoload, MASTER_ADDR="127.0.0.1")
    r = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, cwd=str(ROOT),
                       timeout=600)
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("PROBE")]
    assert r.returncode == 0 and line, r.stderr[-3000:]
    return json.loads(line[-1][len("PROBE"):])


@pytest.fixture(scope="module")
def probes() -> tuple[dict[str, Any], dict[str, Any]]:
    """(with the package autoloaded, without it): what the same CPU-only script saw."""
    with_pkg, without = _run_probe("1"), _run_probe("0")
    assert with_pkg["registered"] and with_pkg["trnlang_loaded"], "the package was not autoloaded"
    assert not without["registered"] and not without["trnlang_loaded"], "the package loaded despite AUTOLOAD=0"
    return with_pkg, without


def test_fsdp2_on_a_cpu_model_unchanged(probes: tuple[dict[str, Any], dict[str, Any]]) -> None:
    with_pkg, without = probes
    assert isinstance(without["fsdp"], dict), without["fsdp"]
    assert without["fsdp"]["devices"] == ["cpu"] * 4 and without["fsdp"]["types"] == ["DTensor"] * 4
    assert with_pkg["fsdp"] == without["fsdp"]  # same devices, the very same parameters after a step
    assert with_pkg["fsdp_default_group"] == without["fsdp_default_group"] == without["fsdp"]


def test_default_process_group_unchanged(probes: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """``dist.init_process_group()`` with no backend: CPU tensors on gloo, as without trnlang; with trnlang the
    group also serves trn tensors (trnlang's c10d backend, ``trn:trn``)."""
    with_pkg, without = probes
    assert isinstance(without["default_group"], dict), without["default_group"]
    assert without["default_group"]["config"] == "cpu:gloo" and without["default_group"]["sum"] == [0, 1, 2, 3]
    seen = dict(with_pkg["default_group"])
    assert (seen.pop("config"), seen.pop("devices")) == ("cpu:gloo,trn:trn", ["cpu", "trn"])
    assert seen == {k: v for k, v in without["default_group"].items() if k not in ("config", "devices")}


def test_cpu_module_conversions_unchanged(probes: tuple[dict[str, Any], dict[str, Any]]) -> None:
    with_pkg, without = probes
    assert without["conversions"]["weight_kept"] and without["conversions"]["dtype"] == "torch.float64"
    assert with_pkg["conversions"] == without["conversions"]


def test_cpu_tensor_repr_unchanged(probes: tuple[dict[str, Any], dict[str, Any]]) -> None:
    with_pkg, without = probes
    assert without["reprs"][0] == "tensor([[0., 1., 2.],\n        [3., 4., 5.]])"
    assert with_pkg["reprs"] == without["reprs"]


def test_cpu_storage_construction_unchanged(probes: tuple[dict[str, Any], dict[str, Any]]) -> None:
    with_pkg, without = probes
    assert without["storages"]["from_list"] == [1, 2, 3]
    for key in ("storages", "storage_bad_device", "storage_bad_args"):
        assert with_pkg[key] == without[key], key


_ACC_NAMES = ("synchronize", "memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved",
              "memory_stats", "reset_peak_memory_stats", "reset_accumulated_memory_stats", "get_memory_info")


def _outcome(fn: Any, *args: Any) -> str:
    try:
        return f"returned {fn(*args)!r}"
    except Exception as e:  # the error is the behaviour compared
        return f"raised {type(e).__name__}: {e}"


@pytest.mark.parametrize("name", _ACC_NAMES)
def test_accelerator_queries_on_cpu_unchanged(name: str) -> None:
    """Naming another device (the CPU) gets torch's own function's answer, not ``torch.trn``'s.

    (Not the answer of a process without trnlang: torch itself makes any named PrivateUse1 backend the
    accelerator, and then answers "cpu doesn't match the current accelerator trn".)
    """
    import torch.accelerator.memory as accmem

    patched = getattr(torch.accelerator, name)
    orig = patched.__wrapped__
    assert getattr(patched, "_trn_patched", False)
    for dev in ("cpu", torch.device("cpu")):
        assert _outcome(patched, dev) == _outcome(orig, dev), dev
        if hasattr(accmem, name):
            assert _outcome(getattr(accmem, name), dev) == _outcome(orig, dev), dev


def test_accelerator_defaults_to_trn() -> None:
    """By design (torch makes any named PrivateUse1 backend the accelerator): no device named means trn."""
    assert torch.accelerator.current_accelerator().type == "trn"
    assert torch.accelerator.memory_allocated() == torch.trn.memory_allocated()


def _function_names(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_every_row_names_pinning_tests_that_exist() -> None:
    assert len({p.target for p in torch_patches.PATCHES}) == len(torch_patches.PATCHES)
    for p in torch_patches.PATCHES:
        assert p.kind in ("monkeypatch", "registration") and p.why and p.torch_versions and p.remove_when, p.target
        assert p.pinned_by, p.target
        for test_id in p.pinned_by:
            path, _, name = test_id.partition("::")
            assert (ROOT / path).is_file(), test_id
            assert name in _function_names(ROOT / path), test_id


def test_apply_all_is_idempotent() -> None:
    to, new, tstr = torch.nn.Module.to, torch.UntypedStorage.__new__, torch._tensor_str._tensor_str
    torch_patches.apply_all()
    for p in torch_patches.PATCHES:  # each row's own function too
        p.apply()
    assert torch.nn.Module.to is to and torch.UntypedStorage.__new__ is new
    assert torch._tensor_str._tensor_str is tstr and getattr(to, "_trn_patched", False)


def _assigns_torch_attribute(node: ast.AST) -> bool:
    def rooted_at_torch(e: ast.AST) -> bool:
        while isinstance(e, ast.Attribute):
            e = e.value
        return isinstance(e, ast.Name) and e.id == "torch"

    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return any(isinstance(t, ast.Attribute) and rooted_at_torch(t) for t in targets)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
        return bool(node.args) and rooted_at_torch(node.args[0])
    return False


def test_no_torch_patch_outside_the_table_modules() -> None:
    allowed = {ROOT / "trnlang/device/compat.py", ROOT / "trnlang/device/compat_dist.py"}
    offenders = []
    for top in ("trnlang", "stdlib_kernels"):
        for path in sorted((ROOT / top).rglob("*.py")):
            if path in allowed:
                continue
            offenders += [f"{path.relative_to(ROOT)}:{n.lineno}" for n in ast.walk(ast.parse(path.read_text()))
                          if _assigns_torch_attribute(n)]
    assert offenders == []


def test_docs_section_matches_the_table() -> None:
    doc = (ROOT / "docs/trn_device.md").read_text()
    assert "## Patches to torch" in doc
    assert torch_patches.markdown_table() in doc
