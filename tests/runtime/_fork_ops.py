"""Big trn ops that split across host threads, run in a parent and in its children (tests/runtime/test_fork_safety.py).

Importable by name so that ``multiprocessing`` children made by the spawn and forkserver contexts can run
:func:`child_main` (they import this module afresh).
"""

from __future__ import annotations

import traceback
from typing import Any

import numpy as np
import torch

from tests.kernels import vector_add_grid

add_rows = vector_add_grid  # one program instance per 128-row tile (launch ``add_rows[cdiv(n, 128)]``)


def run_ops(seed: int = 0) -> dict[str, float]:
    """Run the ops on ``trn`` and return each one's largest error against the CPU (all ~0 when correct)."""
    import trnlang.device as td

    td.register()
    # references in numpy: a torch CPU op in a fork child of a process that ran parallel torch CPU ops hangs in
    # libgomp (torch's own limitation, hence torch.set_num_threads(1) in DataLoader workers); trn must not
    errs: dict[str, float] = {}
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4096, 1024), dtype=np.float32)
    got = float((torch.from_numpy(x).to("trn") * 2).sum().cpu())
    want = float((x.astype(np.float64) * 2).sum())
    errs["mul_sum"] = abs(got - want) / (1.0 + abs(want))
    s = rng.standard_normal((4096, 4096), dtype=np.float32)
    sm = torch.softmax(torch.from_numpy(s).to("trn"), dim=1).cpu().numpy()
    e = np.exp(s - s.max(axis=1, keepdims=True))
    errs["softmax"] = float(np.abs(sm - e / e.sum(axis=1, keepdims=True)).max())
    a = rng.standard_normal((16384, 256), dtype=np.float32)
    b = np.ones_like(a)
    out = np.empty_like(a)
    for _ in range(4):  # the first launches are timed sequentially, the later ones run on the grid pool
        out[...] = 0
        add_rows[a.shape[0] // 128](a, b, out)
    errs["kernel_grid"] = float(np.abs(out - (a + b)).max())
    return errs


def child_main(conn: Any) -> None:
    """Entry point of a ``multiprocessing`` child: send ``("ok", errors)`` or ``("error", traceback)``."""
    try:
        conn.send(("ok", run_ops(1)))
    except BaseException:  # noqa: BLE001 - report anything to the parent
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()
