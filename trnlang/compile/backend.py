"""The ``trn`` torch.compile backend: AOTAutograd, then fusion of each forward/backward ATen graph.

Dynamo hands the backend a torch-level FX graph; AOTAutograd traces it (and its backward, for
training) to ATen graphs with the decompositions below, so layer norm, softmax and the activations'
backward formulas arrive as pointwise ops and last-dimension reductions that the fusion pass
(:mod:`trnlang.compile.fuse`) groups into generated trnlang kernels. Everything else in the graph runs as
the ``trn`` device's own lowerings, exactly as in eager mode.

Example:
    >>> import torch, trnlang
    >>> m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()).to("trn")   # doctest: +SKIP
    >>> y = torch.compile(m, backend="trn")(torch.randn(4, 8, device="trn"))          # doctest: +SKIP
"""

from __future__ import annotations

import functools
import time
from typing import Any

import torch
import torch.fx as fx

from trnlang import config as _config
from trnlang.compile import graph as fgraph

aten = torch.ops.aten

#: ops whose ATen decomposition we want (they arrive as fusible pointwise ops and row reductions).
_EXTRA = [aten._softmax.default, aten._log_softmax.default]
#: core decompositions we do not take: the device's own kernel is better than the op soup.
_SKIP = [aten.embedding_dense_backward.default, aten.nll_loss_forward.default, aten.nll_loss_backward.default,
         aten.nll_loss2d_forward.default, aten.nll_loss2d_backward.default]

STATS: dict[str, Any] = {"graphs": 0, "kernels": 0, "fused_nodes": 0, "compile_seconds": 0.0,
                         "graph_cache_hits": 0, "graph_cache_misses": 0}


@functools.cache
def decompositions() -> dict[Any, Any]:
    """The decomposition table AOTAutograd uses for trn graphs."""
    from torch._decomp import core_aten_decompositions, get_decompositions

    table = dict(core_aten_decompositions())
    table.update(get_decompositions(_EXTRA))
    for op in _SKIP:
        table.pop(op, None)
    table[aten.native_layer_norm.default] = _layer_norm
    return table


def _layer_norm(x: torch.Tensor, shape: list[int], weight: Any, bias: Any, eps: float) -> Any:
    """Layer norm over the last dimension as mean / centre / mean of squares / rsqrt: two row reductions
    and pointwise ops, which fuse into one kernel (torch's own decomposition goes through prims.var)."""
    if len(shape) != 1:
        from torch._decomp import decomposition_table

        return decomposition_table[aten.native_layer_norm.default](x, shape, weight, bias, eps)
    xf = x.float() if x.dtype in (torch.bfloat16, torch.float16) else x
    mean = torch.mean(xf, -1, keepdim=True)
    xc = xf - mean
    rstd = torch.rsqrt(torch.mean(xc * xc, -1, keepdim=True) + eps)
    out = xc * rstd
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out.to(x.dtype), mean, rstd


def _log_code(gm: fx.GraphModule, report: list[tuple[str, list[str]]], kind: str) -> None:
    """``TORCH_LOGS=output_code``: the rewritten graph and the source of each kernel it launches."""
    # under torch's logger tree, where TORCH_LOGS installs its handlers (as Inductor's own output code)
    log = torch._logging.getArtifactLogger("torch._inductor.codegen.trnlang", "output_code")
    if not log.isEnabledFor(10):  # logging.DEBUG
        return
    parts = [f"# trnlang.compile: {kind} graph\n{gm.code}"]
    seen = set()
    for node in gm.graph.nodes:
        fk = node.target
        if node.op == "call_function" and hasattr(fk, "source"):
            parts.append(f"# {node.name}: kernel {fk.name} fuses {', '.join(getattr(fk, 'nodes', ()))}")
            if fk.source not in seen:
                seen.add(fk.source)
                parts.append(fk.source)
    log.debug("%s", "\n".join(parts))


def _views_as_reshapes(gm: fx.GraphModule) -> None:
    """``aten.view`` -> ``aten.reshape`` in a functional graph: the same view when the strides allow one, a
    copy when an extern op's output has other strides than its meta function promised (the device's
    attention returns ``[B, H, S, D]`` rows where the meta output is ``[B, S, H, D]``-major)."""
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is aten.view.default:
            node.target = aten.reshape.default
            changed = True
    if changed:
        gm.recompile()


def _compiler(kind: str) -> Any:
    def compile_graph(gm: fx.GraphModule, example_inputs: Any) -> Any:
        from torch._functorch.aot_autograd import make_boxed_func

        t0 = time.perf_counter()
        _views_as_reshapes(gm)
        if _config.current.compile_fuse:
            gm, report = fgraph.fuse_graph(gm, cache=True, stats=STATS)
        else:
            report = []
        STATS["graphs"] += 1
        STATS["kernels"] += len(report)
        STATS["fused_nodes"] += sum(len(r[1]) for r in report)
        STATS["compile_seconds"] += time.perf_counter() - t0
        _log_code(gm, report, kind)
        return make_boxed_func(gm.forward)
    return compile_graph


def trn_backend(gm: fx.GraphModule, example_inputs: list[Any], **kwargs: Any) -> Any:
    """The ``backend="trn"`` of ``torch.compile``: AOTAutograd with fused trnlang kernels.

    Example:
        >>> import torch, trnlang
        >>> f = torch.compile(lambda x: torch.softmax(x, -1) * 2, backend="trn")   # doctest: +SKIP
        >>> f(torch.randn(4, 8, device="trn")).shape                              # doctest: +SKIP
        torch.Size([4, 8])
    """
    from torch._dynamo.backends.common import aot_autograd

    aot = aot_autograd(fw_compiler=_compiler("forward"), bw_compiler=_compiler("backward"),
                       inference_compiler=_compiler("inference"), decompositions=decompositions(),
                       keep_inference_input_mutations=True)
    return aot(gm, example_inputs)
