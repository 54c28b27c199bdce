"""``Profile.save_html`` / ``save_png`` and ``trn profile --html``: self-contained, and drawn by a real browser."""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import sys
import zlib

import pytest
import torch

from tests.sim import published as P
from trnlang.sim.html import profile_data


def _matmul_profile():
    args = P.matmul_inputs(512, 512, 1024)
    return P.matmul_resident_b.profile(*args, simulate_only=True)


def test_html_is_self_contained(tmp_path):
    p = _matmul_profile()
    path = tmp_path / "p.html"
    p.save_html(path)
    text = path.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<canvas" in text and "<svg" in text
    for bad in ("http://", "https://", "<script src", "<link", "@import", "url("):
        assert bad not in text, bad
    data = json.loads(re.search(r"const DATA=(\[.*?\]), COLORS=", text, re.S).group(1))
    (d,) = data
    assert d["kernel"] == "matmul_resident_b" and d["time_us"] == pytest.approx(p.time_us)
    assert len(d["events"]) == p.schedule.n and d["truncated"] == 0
    assert d["rows"][:4] == ["Tensor", "Vector", "Scalar", "GpSimd"] and len(d["rows"]) == 20
    mm = [e for e in d["events"] if e[0] == 0]
    ins = d["instrs"][mm[0][3]]
    assert ins[0] == "nc_matmul" and ins[4] == 2 * 128 * 128 * 512 and "tl.matmul" in ins[3]
    dma = [e for e in d["events"] if e[0] >= 4]
    assert all(e[4] == 16 and e[5] > 0 for e in dma)  # 128-partition transfers: all engines, their bytes


def test_profile_data_truncates_big_profiles():
    x = torch.randn(4096, 256)
    p = P.copy_rows.profile(x, torch.empty_like(x), simulate_only=True)
    d = profile_data(p, max_instructions=10)
    assert len(d["events"]) == 10 and d["truncated"] == p.schedule.n - 10


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Decode a non-interlaced 8-bit RGB/RGBA PNG (what Chromium writes) into rows of raw pixels."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(b"".join(bytes(line[j:j + 3]) for j in range(0, stride, bpp)))
        prev = line
    return w, h, rows


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(_chromium() is None, reason="no headless Chromium on this machine "
                    "(apt-get install chromium) to render the HTML profile")
def test_html_renders_in_headless_chromium(tmp_path):
    p = _matmul_profile()
    page = tmp_path / "profile.html"
    p.save_html(page)
    shot = tmp_path / "profile.png"
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--window-size=1280,1100", f"--screenshot={shot}", page.as_uri()]
    subprocess.run(cmd, capture_output=True, timeout=120, check=False)
    assert shot.exists() and shot.stat().st_size > 10_000
    # the inline script ran: the utilisation bars exist in the DOM
    dom = subprocess.run(cmd[:5] + ["--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert 'class="n">DMA 15' in dom and "matmul_resident_b" in dom
    # and drew: the timeline has Tensor-engine (blue) and DMA (red) pixels
    w, h, rows = _png_pixels(shot.read_bytes())
    colours = {(78, 121, 167): 0, (225, 87, 89): 0}
    for line in rows[100:560]:
        for x in range(0, w * 3, 3):
            px = tuple(line[x:x + 3])
            if px in colours:
                colours[px] += 1
    assert all(n > 500 for n in colours.values()), colours


def test_save_png(tmp_path):
    pytest.importorskip("matplotlib", reason="save_png needs matplotlib (pip install 'trnlang[plot]')")
    p = _matmul_profile()
    out = tmp_path / "timeline.png"
    p.save_png(out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5_000


def test_save_png_without_matplotlib_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    with pytest.raises(ImportError, match="trnlang\\[plot\\]"):
        _matmul_profile().save_png(tmp_path / "x.png")


def test_trn_profile_html(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(
        "import torch\n"
        "from tests.sim import published as P\n"
        "x = torch.randn(512, 256)\n"
        "P.copy_rows(x, torch.empty_like(x))\n"
        "a = P.matmul_inputs(256, 256, 512)\n"
        "P.matmul_tiled(*a)\n")
    out = tmp_path / "out.html"
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    r = subprocess.run([sys.executable, "-m", "trnlang.cli", "profile", "--html", str(out), "--trace",
                        str(tmp_path / "t.json"), str(script)], capture_output=True, text=True, cwd=root,
                       env={**__import__("os").environ, "PYTHONPATH": str(root)}, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"wrote {out}" in r.stdout
    data = json.loads(re.search(r"const DATA=(\[.*?\]), COLORS=", out.read_text(), re.S).group(1))
    assert {d["kernel"] for d in data} == {"copy_rows", "matmul_naive"}  # tutorial 03's, as P.matmul_tiled
