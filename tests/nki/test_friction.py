"""Issue 20's friction items that the other test files of tests/nki do not pin: the ``[P]`` reduction result
in stores, assignments, in-place updates and casts, ``v[:, None]``, ``tl.constexpr``, specializations named
apart in ``trn profile`` (table, Chrome trace, HTML page), and the clear errors of what is not supported yet
(``.ap()`` on HBM tensors, ``reduce_cmd.load_reduce``, read masks on a reduction's input).

docs/nki.md's "Friction items" table points here."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest

import trnlang as trn
import trnlang.language as tl
import trnlang.nki as nki
import trnlang.nki.isa as nisa
import trnlang.nki.language as nl
from trnlang import cli

rng = np.random.default_rng(20)


def _marked_line(fn, mark: str = "# MARK") -> str:
    src = inspect.getsource(fn)
    return next(ln.strip() for ln in src.splitlines() if mark in ln).split("  #")[0].strip()


def _at_users_line(exc: pytest.ExceptionInfo, fn, *facts: str) -> None:
    """The message names the user's marked line (file and text) and every fact."""
    msg = str(exc.value)
    assert __file__.split("/")[-1] in msg and _marked_line(fn) in msg, msg
    for f in facts:
        assert f in msg, (f, msg)


# ------------------------------------------------------------------ [P] results against 2-D destinations
@trn.kernel
def store_pvec(x, out):
    t = tl.load(x[0:128, 0:128])
    tl.store(out[0:128, 0:128], tl.max(t, axis=1))  # MARK


@trn.kernel
def assign_pvec(x, out):
    t = tl.load(x[0:128, 0:128])
    acc = tl.zeros((128, 128), tl.float32)
    acc[:, :] = tl.sum(t, axis=1)  # MARK
    tl.store(out[0:128, 0:128], acc)


@trn.kernel
def inplace_pvec(x, out):
    t = tl.load(x[0:128, 0:128])
    acc = tl.zeros((128, 128), tl.float32)
    acc += tl.sum(t, axis=1)  # MARK
    tl.store(out[0:128, 0:128], acc)


@trn.kernel
def cast_pvec(x, out):
    t = tl.load(x[0:128, 0:128])
    s = tl.sum(t, axis=1).astype(tl.bfloat16)  # a cast is still one value per partition
    tl.store(out[0:128, 0:128], t - tl.copy(s))  # MARK


@trn.kernel
def where_pvec(x, out):
    t = tl.load(x[0:128, 0:128])
    s = tl.where(tl.max(t, axis=1) > 0.0, tl.sum(t, axis=1), 0.0)  # a choice between per-partition values
    tl.store(out[0:128, 0:128], t * s)  # MARK


@pytest.mark.parametrize("kernel, against", [(store_pvec, "the store's access"),
                                             (assign_pvec, "an assignment to a tile"),
                                             (inplace_pvec, "an in-place update of a tile"),
                                             (cast_pvec, "a tile"), (where_pvec, "a tile")])
def test_partition_vector_is_refused_wherever_it_would_broadcast_along_the_free_axis(kernel, against):
    x = np.zeros((128, 128), np.float32)
    with pytest.raises(trn.ShapeError) as e:
        kernel(x, np.zeros_like(x))
    _at_users_line(e, kernel.fn, f"Against {against} of shape (128, 128)", "keepdims=True", "value[:, None]",
                   "tl.broadcast_to")


@trn.kernel
def rows_by_newaxis(x, out, row):
    t = tl.load(x[0:128, 0:128])
    m = tl.mean(t, axis=1)
    tl.store(out[0:128, 0:128], t - m[:, None])  # numpy's new axis: the per-partition [P, 1]
    tl.store(row[0:1, 0:128], m)  # [P] into a [1, P] row is no broadcast: the row takes the P values


@pytest.mark.parametrize("interpret", [False, True])
def test_newaxis_is_the_per_partition_fix_and_a_row_store_stays_legal(interpret):
    x = rng.standard_normal((128, 128)).astype(np.float32)
    o, row = np.zeros_like(x), np.zeros((1, 128), np.float32)
    trn.KernelFn(rows_by_newaxis.fn, interpret=interpret)(x, o, row)  # the JIT and the numpy reference
    np.testing.assert_allclose(o, x - x.mean(1, keepdims=True), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(row[0], x.mean(1), rtol=1e-5, atol=1e-6)


def test_newaxis_in_front_of_the_partition_dimension_is_a_clear_error():
    @trn.kernel
    def k(x, out):
        t = tl.load(x[0:128, 0:128])
        tl.store(out[0:128, 0:128], t + tl.sum(t, axis=1)[None, :])  # MARK

    x = np.zeros((128, 128), np.float32)
    with pytest.raises(trn.ShapeError) as e:
        k(x, np.zeros_like(x))
    _at_users_line(e, k.fn, "partition dimension", "v[:, None]")


# ------------------------------------------------------------------ Triton's constexpr meta-parameters
@trn.kernel
def scaled_rows(x, out, ROWS: tl.constexpr = 64, SCALE: tl.constexpr = 2.0):
    tl.store(out[0:ROWS, 0:32], tl.load(x[0:ROWS, 0:32]) * tl.constexpr(SCALE))


def test_constexpr_meta_parameters_by_keyword():
    x = rng.standard_normal((128, 32)).astype(np.float32)
    for rows, scale in ((64, 2.0), (128, 0.5)):
        o = np.zeros_like(x)
        scaled_rows(x, o, SCALE=scale, ROWS=rows)
        np.testing.assert_allclose(o[:rows], x[:rows] * scale, rtol=1e-6)
        assert not o[rows:].any()


# ------------------------------------------------------------------ specializations named apart in trn profile
_CONST_SPECS_SCRIPT = """
import numpy as np
import trnlang as trn
import trnlang.language as tl

@trn.kernel
def friction_scale(x, out, SCALE: tl.constexpr):
    tl.store(out[0:128, 0:64], tl.load(x[0:128, 0:64]) * SCALE)

x = np.ones((128, 64), np.float32)
for s in (2.0, 3.0, 2.0):
    friction_scale(x, np.empty_like(x), SCALE=s)
"""


def test_profile_names_specializations_with_one_signature_apart(tmp_path: Path, capsys, monkeypatch):
    """Two specializations that differ only by a constant: two rows, two trace processes, two HTML pages."""
    monkeypatch.setenv("TRN_CACHE_DIR", str(tmp_path / "cache"))
    script = tmp_path / "consts.py"
    script.write_text(_CONST_SPECS_SCRIPT)
    trace, page = tmp_path / "trace.json", tmp_path / "profile.html"
    assert cli.main(["profile", "--trace", str(trace), "--html", str(page), str(script)]) == 0
    out = capsys.readouterr().out
    sig = "friction_scale(f32[128,64],f32[128,64])"
    rows = {ln.split()[0]: ln.split()[1] for ln in out.splitlines() if ln.startswith("friction_scale(")}
    assert rows == {sig: "2", sig + "#2": "1"}, out  # launches per specialization
    procs = [e["args"]["name"] for e in json.loads(trace.read_text())["traceEvents"] if e.get("name") == "process_name"]
    assert sorted(p.split(" on ")[0] for p in procs if p.startswith("friction_scale")) == [sig, sig + "#2"]
    html = page.read_text()
    assert f'"{sig} (2 launches)"' in html and f'"{sig}#2 (1 launch)"' in html


# ------------------------------------------------------------------ not supported yet: a clear error at the user's line
@nki.jit
def hbm_ap(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.load(x.ap(pattern=[[128, 128], [1, 64]], offset=0)))  # MARK
    return out


@nki.jit
def load_reduce(x):
    out = nl.ndarray((128, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    r = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    cmd = nisa.reduce_cmd.load_reduce
    nisa.activation(op=nl.copy, data=nl.load(x), reduce_op=nl.add, reduce_res=r, reduce_cmd=cmd)  # MARK
    nl.store(out, value=r)
    return out


@nki.jit
def masked_reduction_input(x):
    out = nl.ndarray((128, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    i_f = nl.arange(64)[None, :]
    nl.store(out, value=nl.sum(nl.load(x), axis=1, keepdims=True, mask=(i_f < 32)))  # MARK
    return out


@pytest.mark.parametrize("kernel, error, facts", [
    (hbm_ap, trn.TraceError, (".ap() on an HBM tensor is not supported yet", "index values")),
    (load_reduce, trn.TraceError, ("reduce_cmd=load_reduce", "not supported yet", "reset_reduce")),
    (masked_reduction_input, trn.ShapeError, ("not supported yet", "mask the load")),
])
def test_not_yet_supported_forms_raise_a_clear_error_at_the_users_line(kernel, error, facts):
    with pytest.raises(error) as e:
        kernel(np.ones((128, 128 if kernel is hbm_ap else 64), np.float32))
    _at_users_line(e, kernel.fn if hasattr(kernel, "fn") else kernel, *facts)


# ------------------------------------------------------------------ the store's shape error says it is the store
def test_store_shape_mismatch_says_it_is_the_store():
    @trn.kernel
    def k(x, out):
        tl.store(out[0:128, 0:32], tl.load(x[0:128, 0:64]))  # MARK

    x = np.zeros((128, 64), np.float32)
    with pytest.raises(trn.ShapeError) as e:
        k(x, np.zeros((128, 32), np.float32))
    _at_users_line(e, k.fn, "cannot store a tile of shape (128, 64) into an access of shape (128, 32)")


# ------------------------------------------------------------------ bf16 intermediates round after every instruction
@trn.kernel
def bf16_chain(x, out):
    t = tl.load(x[0:64, 0:96])
    a = tl.multiply(t, t, dtype=tl.bfloat16)  # rounded to bf16 here (to nearest even) ...
    b = tl.multiply(a, 3.0, dtype=tl.bfloat16)  # ... and again here
    tl.store(out[0:64, 0:96], tl.add(b, t))  # fp32


@pytest.mark.parametrize("interpret", [False, True])
def test_bf16_intermediates_are_rounded_after_every_instruction(interpret):
    import torch

    x = rng.standard_normal((64, 96)).astype(np.float32)
    o = np.zeros_like(x)
    trn.KernelFn(bf16_chain.fn, interpret=interpret)(x, o)
    xt = torch.from_numpy(x)
    a = (xt * xt).bfloat16().float()
    want = ((a * 3.0).bfloat16().float() + xt).numpy()
    np.testing.assert_array_equal(o, want)  # bit-exact: the rule, not a tolerance
    assert not np.array_equal(o, (x * x * 3.0 + x).astype(np.float32))  # and it differs from the fp32 chain


# ------------------------------------------------------------------ Tile.broadcast_to, tile_size.bn_stats_fmax
@nki.jit
def row_broadcast(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    row = nl.load(x[0:1, 0:64])
    nl.store(out, value=row.broadcast_to((128, 64)))  # one partition replicated to 128
    return out


@nki.jit
def chunked_stats(x):
    out = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    fmax = nl.tile_size.bn_stats_fmax
    n = x.shape[1] // fmax
    t = nl.load(x)
    st = nl.ndarray((128, 6 * n), dtype=nl.float32)
    for j in nl.affine_range(n):
        st[:, j * 6:(j + 1) * 6] = nisa.bn_stats(t[:, j * fmax:(j + 1) * fmax])
    nl.store(out, value=nisa.bn_aggr(st))
    return out


@nki.jit
def nl_softmax(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.softmax(nl.load(x), axis=1))
    return out


def test_nl_softmax_along_the_free_axis_of_a_square_tile():
    x = rng.standard_normal((128, 128)).astype(np.float32) * 4
    e = np.exp(x - x.max(1, keepdims=True))
    want = e / e.sum(1, keepdims=True)
    np.testing.assert_allclose(nl_softmax(x), want, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(nki.simulate_kernel(nl_softmax, x), want, rtol=1e-5, atol=1e-7)


def test_tile_broadcast_to_and_bn_stats_fmax():
    x = rng.standard_normal((4, 64)).astype(np.float32)
    np.testing.assert_array_equal(row_broadcast(x), np.broadcast_to(x[0:1], (128, 64)))
    np.testing.assert_array_equal(nki.simulate_kernel(row_broadcast, x), np.broadcast_to(x[0:1], (128, 64)))
    assert nl.tile_size.bn_stats_fmax == 512
    y = rng.random((128, 3 * 512), np.float32)
    np.testing.assert_allclose(chunked_stats(y), np.stack([y.mean(1), y.var(1)], 1), rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------ a missing builtin names the user's line
def test_missing_builtin_inside_a_kernel_names_the_users_line():
    import traceback

    @trn.kernel
    def k(x, out):
        tl.store(out[0:4, 0:8], tl.sofmax(tl.load(x[0:4, 0:8])))  # MARK

    x = np.zeros((4, 8), np.float32)
    with pytest.raises(AttributeError) as e:  # still an AttributeError (hasattr(tl, name) is False) ...
        k(x, x.copy())
    assert isinstance(e.value, trn.TraceError)  # ... and a TraceError at the kernel's line
    _at_users_line(e, k.fn, "trnlang.language has no builtin 'sofmax'", "docs/language_reference.md")
    last = traceback.extract_tb(e.value.__traceback__)[-1]
    assert last.filename == __file__ and "# MARK" in last.line  # no trnlang frame is the last one
    assert not hasattr(tl, "sofmax") and not hasattr(nl, "expp")


def test_view_from_an_illegal_start_partition_is_a_clear_error_at_the_users_line():
    @nki.jit
    def odd_rows(x):
        out = nl.ndarray((4, 8), dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.load(x)
        i_p, i_f = nl.mgrid[0:4, 0:8]
        nl.store(out, value=nl.copy(t[2 * i_p + 1, i_f]))  # MARK
        return out

    with pytest.raises(trn.VerifyError) as e:
        odd_rows(np.ones((8, 8), np.float32))
    _at_users_line(e, odd_rows.fn, "starts at partition 1", "must start at partition 0 or 32 or 64 or 96")
