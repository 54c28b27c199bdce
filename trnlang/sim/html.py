"""Pictures of a profile: one self-contained HTML page, and a PNG of the timeline.

The page (:func:`render_html`) needs nothing but a browser: the data is embedded as JSON and drawn by a small
inline script on a ``<canvas>``; no network, no external scripts or fonts. It shows, per profile:

- the headline numbers (time, MFU, MBU, bytes, flops);
- the engine timeline: one row per engine (Tensor, Vector, Scalar, GpSimd) and per DMA engine; a DMA transfer
  is drawn on every DMA engine it is split over. Mouse wheel zooms around the pointer, dragging pans,
  double-click resets; hovering an instruction shows its IR text, source line, start, duration, bytes or flops;
- per-engine utilisation bars;
- the roofline (bandwidth and compute roofs) with the kernel's point.

Several profiles (e.g. every kernel ``trn profile`` saw) share one page with a selector.

Example:
    >>> import os, tempfile, torch
    >>> from tests.kernels import softmax
    >>> p = softmax.profile(torch.randn(256, 64), torch.empty(256, 64), simulate_only=True)
    >>> path = os.path.join(tempfile.mkdtemp(), "p.html")
    >>> p.save_html(path)
    >>> text = open(path).read()
    >>> "<canvas" in text and "<script src" not in text and "softmax" in text
    True
"""

from __future__ import annotations

import html
import json
import math
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from trnlang.sim.program import ENGINES

if TYPE_CHECKING:
    from trnlang.sim.profile import Profile

__all__ = ["profile_data", "render_html", "save_png"]

_NAMES = ["Tensor", "Vector", "Scalar", "GpSimd"]
_COLORS = ["#4e79a7", "#59a14f", "#f28e2b", "#b07aa1"]
_DMA_COLOR = "#e15759"


def profile_data(p: Profile, max_instructions: int = 200_000) -> dict[str, Any]:
    """The profile as plain data for the page: rows, instructions (first ``max_instructions``), engine stats,
    roofline.

    Example:
        >>> import torch
        >>> from tests.kernels import vector_add
        >>> x = torch.randn(256, 64)
        >>> d = profile_data(vector_add.profile(x, x, torch.empty_like(x), simulate_only=True))
        >>> d["rows"][:4], len(d["rows"]), d["events"][0][1] >= 0
        (['Tensor', 'Vector', 'Scalar', 'GpSimd'], 20, True)
    """
    s = p.schedule
    tps = s.program.templates
    ne = len(ENGINES)
    n = min(s.n, max_instructions)
    used = sorted(set(s.tmpl[:n].tolist()))
    index = {t: i for i, t in enumerate(used)}
    instrs = []
    for t in used:
        tp = tps[t]
        loc = f"{os.path.basename(tp.loc.filename)}:{tp.loc.lineno}" if tp.loc else ""
        instrs.append([tp.ins.op.value, tp.text, loc, tp.loc.text.strip() if tp.loc else "", float(tp.flops)])
    events = [[int(r), round(float(st) * 1e6, 6), round(float(du) * 1e6, 6), index[int(tm)], int(sp), float(nb)]
              for r, st, du, tm, sp, nb in zip(s.res[:n].tolist(), s.start[:n].tolist(), s.dur[:n].tolist(),
                                               s.tmpl[:n].tolist(), s.span[:n].tolist(), s.nbytes[:n].tolist())]
    busy = s.busy()
    t_s = s.makespan
    util = [[_NAMES[i], float(busy[i] / t_s) if t_s else 0.0] for i in range(ne)]
    util += [[f"DMA {q}", float(busy[ne + q] / t_s) if t_s else 0.0] for q in range(s.n_dma)]
    r = p.roofline()
    return {
        "kernel": p.kernel, "target": p.target.name, "core": p.target.core, "grid": list(p.grid),
        "time_us": p.time_us, "mfu": p.mfu, "mbu": p.mbu, "flops": p.flops, "bytes": p.dma_bytes,
        "rows": _NAMES + [f"DMA {q}" for q in range(s.n_dma)], "n_engines": ne,
        "events": events, "instrs": instrs, "truncated": s.n - n, "util": util,
        "roofline": {"intensity": r.intensity if math.isfinite(r.intensity) else None,
                     "achieved": r.achieved_flops_per_s, "peak_flops": r.peak_flops_per_s,
                     "peak_bytes": r.peak_bytes_per_s, "ridge": r.ridge, "bound": r.bound},
    }


def render_html(profiles: list[tuple[str, Profile]], title: str = "trnlang profile",
                max_instructions: int = 200_000) -> str:
    """One self-contained HTML page for ``(label, profile)`` pairs (a selector switches between them)."""
    data = [{"label": label, **profile_data(p, max_instructions)} for label, p in profiles]
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return (_PAGE.replace("__TITLE__", html.escape(title)).replace("__DATA__", payload)
            .replace("__COLORS__", json.dumps(_COLORS)).replace("__DMA_COLOR__", _DMA_COLOR))


def save_png(p: Profile, path: str | os.PathLike[str], width: float = 12.0) -> None:
    """Draw the engine/DMA timeline to a PNG (needs matplotlib: ``pip install 'trnlang[plot]'``).

    Raises:
        ImportError: when matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("Profile.save_png needs matplotlib (pip install 'trnlang[plot]')") from e
    s = p.schedule
    ne = len(ENGINES)
    rows = _NAMES + [f"DMA {q}" for q in range(s.n_dma)]
    fig, ax = plt.subplots(figsize=(width, 0.3 * len(rows) + 1.5))
    for i in range(ne):
        sel = s.res == i
        if sel.any():
            ax.broken_barh(list(zip(s.start[sel] * 1e6, s.dur[sel] * 1e6)), (len(rows) - 1 - i - 0.4, 0.8),
                           facecolors=_COLORS[i])
    dma = np.nonzero(s.is_dma)[0]
    for q in range(s.n_dma):
        row = ne + q
        sel = dma[(s.res[dma] <= row) & (s.res[dma] + s.span[dma] > row)]
        if sel.size:
            ax.broken_barh(list(zip(s.start[sel] * 1e6, s.dur[sel] * 1e6)), (len(rows) - 1 - row - 0.4, 0.8),
                           facecolors=_DMA_COLOR)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(list(reversed(rows)))
    ax.set_xlabel("time (us)")
    ax.set_xlim(0, max(p.time_us, 1e-3))
    ax.set_title(f"{p.kernel} on {p.target.name}: {p.time_us:,.2f} us, MFU {p.mfu:.3f}, MBU {p.mbu:.3f}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


_PAGE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font:13px system-ui,sans-serif;margin:12px;color:#222;background:#fafafa}
h1{font-size:18px;margin:0 0 6px}#head span{margin-right:18px}
.panel{background:#fff;border:1px solid #ddd;border-radius:4px;padding:8px;margin:8px 0}
#tl{width:100%;height:420px;display:block;cursor:crosshair}
#tip{position:fixed;pointer-events:none;background:#222;color:#fff;padding:6px 8px;border-radius:4px;
 font:12px monospace;max-width:640px;white-space:pre-wrap;display:none;z-index:5}
.bar{display:flex;align-items:center;margin:2px 0}.bar .n{width:70px}.bar .b{height:12px;background:#4e79a7}
.bar .v{margin-left:6px;color:#555}#flex{display:flex;gap:8px}#flex>div{flex:1}
button,select{font:inherit;margin-right:6px}
</style></head><body>
<h1>__TITLE__</h1>
<div><select id="sel"></select><button id="reset">reset zoom</button>
<span style="color:#666">wheel: zoom, drag: pan, double-click: reset, hover: details</span></div>
<div id="head" class="panel"></div>
<div class="panel"><canvas id="tl"></canvas></div>
<div id="flex"><div class="panel"><b>Engine utilisation</b><div id="util"></div></div>
<div class="panel"><b>Roofline</b><br><svg id="roof" width="420" height="280"></svg></div></div>
<div id="tip"></div>
<script>
"use strict";
const DATA=__DATA__, COLORS=__COLORS__, DMA_COLOR="__DMA_COLOR__";
const sel=document.getElementById("sel"), cv=document.getElementById("tl"), tip=document.getElementById("tip");
const ctx=cv.getContext("2d"); let P=null, v0=0, v1=1, rowsEv=[], drag=null;
const LEFT=70, TOP=18;
DATA.forEach((d,i)=>{const o=document.createElement("option");o.value=i;o.textContent=d.label;sel.appendChild(o);});
function fmt(x,u){if(x>=1e12)return (x/1e12).toFixed(2)+" T"+u;if(x>=1e9)return (x/1e9).toFixed(2)+" G"+u;
 if(x>=1e6)return (x/1e6).toFixed(2)+" M"+u;if(x>=1e3)return (x/1e3).toFixed(2)+" k"+u;return x.toFixed(0)+" "+u;}
function load(i){P=DATA[i];v0=0;v1=Math.max(P.time_us,1e-3);rowsEv=P.rows.map(()=>[]);
 P.events.forEach((e,k)=>{const r=e[0];if(r<P.n_engines)rowsEv[r].push(k);
  else for(let j=0;j<e[4];j++)rowsEv[r+j].push(k);});
 rowsEv.forEach(l=>l.sort((a,b)=>P.events[a][1]-P.events[b][1]));
 document.getElementById("head").innerHTML="<b>"+P.kernel+"</b> on "+P.target+" ("+P.core+"), grid "+
  JSON.stringify(P.grid)+
  "<br><span>time <b>"+P.time_us.toFixed(2)+" us</b></span><span>MFU <b>"+P.mfu.toFixed(3)+"</b></span><span>MBU <b>"+
  P.mbu.toFixed(3)+"</b></span><span>"+fmt(P.flops,"FLOP")+"</span><span>"+fmt(P.bytes,"B")+" of DMA</span><span>"+
  P.events.length+" instructions"+(P.truncated?" (+"+P.truncated+" not shown)":"")+"</span>";
 let u="";P.util.forEach(([n,x])=>{u+='<div class="bar"><span class="n">'+n+'</span><span class="b" style="width:'+
  Math.round(260*Math.min(x,1))+'px;background:'+(n.startsWith("DMA")?DMA_COLOR:COLORS[P.rows.indexOf(n)])+
  '"></span><span class="v">'+(100*x).toFixed(1)+'%</span></div>';});
 document.getElementById("util").innerHTML=u;roof();draw();}
function rowH(){return (cv.height-TOP-4)/P.rows.length;}
function X(t){return LEFT+(t-v0)/(v1-v0)*(cv.width-LEFT-8);}
function T(x){return v0+(x-LEFT)/(cv.width-LEFT-8)*(v1-v0);}
function draw(){const w=cv.clientWidth;cv.width=w;cv.height=cv.clientHeight;ctx.clearRect(0,0,cv.width,cv.height);
 const h=rowH();ctx.font="11px sans-serif";ctx.fillStyle="#333";
 for(let s=0;s<6;s++){const t=v0+(v1-v0)*s/5,x=X(t);ctx.fillStyle="#999";ctx.fillRect(x,TOP-4,1,cv.height);
  ctx.fillStyle="#333";ctx.textAlign=s===5?"right":"left";ctx.fillText(t.toFixed(2)+" us",s===5?x-2:x+2,11);}
 ctx.textAlign="left";
 P.rows.forEach((name,r)=>{const y=TOP+r*h;ctx.fillStyle=r%2?"#f4f4f4":"#fff";ctx.fillRect(LEFT,y,cv.width-LEFT,h);
  ctx.fillStyle="#333";ctx.fillText(name,4,y+h*0.7);const col=r<P.n_engines?COLORS[r]:DMA_COLOR;ctx.fillStyle=col;
  for(const k of rowsEv[r]){const e=P.events[k];if(e[1]>v1)break;if(e[1]+e[2]<v0)continue;
   const x=X(e[1]),ww=Math.max(1,X(e[1]+e[2])-x);ctx.fillRect(x,y+1,ww,h-2);}});}
function hit(mx,my){const h=rowH(),r=Math.floor((my-TOP)/h);if(r<0||r>=P.rows.length||mx<LEFT)return null;
 const t=T(mx),tol=(v1-v0)/(cv.width)*2;for(const k of rowsEv[r]){const e=P.events[k];
  if(e[1]-tol<=t&&t<=e[1]+e[2]+tol)return e;if(e[1]>t+tol)break;}return null;}
cv.addEventListener("mousemove",ev=>{const b=cv.getBoundingClientRect(),mx=ev.clientX-b.left,my=ev.clientY-b.top;
 if(drag){const dt=T(drag.x)-T(mx);v0=drag.v0+dt;v1=drag.v1+dt;draw();return;}
 const e=hit(mx,my);if(!e){tip.style.display="none";return;}const ins=P.instrs[e[3]];
 let s=ins[0]+"  start "+e[1].toFixed(3)+" us, duration "+e[2].toFixed(3)+" us\n"+ins[2]+"  "+ins[3]+"\n"+ins[1];
 if(e[0]>=P.n_engines)s+="\n"+fmt(e[5],"B")+" over "+e[4]+" DMA engine(s)";else if(ins[4])s+="\n"+fmt(ins[4],"FLOP");
 tip.textContent=s;tip.style.display="block";tip.style.left=(ev.clientX+12)+"px";tip.style.top=(ev.clientY+12)+"px";});
cv.addEventListener("mouseleave",()=>{tip.style.display="none";drag=null;});
cv.addEventListener("mousedown",ev=>{const b=cv.getBoundingClientRect();drag={x:ev.clientX-b.left,v0:v0,v1:v1};});
window.addEventListener("mouseup",()=>{drag=null;});
cv.addEventListener("wheel",ev=>{ev.preventDefault();const b=cv.getBoundingClientRect(),t=T(ev.clientX-b.left);
 const f=ev.deltaY<0?0.8:1.25;v0=t-(t-v0)*f;v1=t+(v1-t)*f;draw();},{passive:false});
function reset(){v0=0;v1=Math.max(P.time_us,1e-3);draw();}
cv.addEventListener("dblclick",reset);document.getElementById("reset").onclick=reset;
sel.onchange=()=>load(+sel.value);window.addEventListener("resize",draw);
function roof(){const R=P.roofline,svg=document.getElementById("roof"),W=420,H=280,L=50,B=30;
 const xs=[1e-2,1e4],ylo=Math.log10(R.peak_flops)-5,yhi=Math.log10(R.peak_flops)+0.3;
 const lx=x=>L+(Math.log10(x)+2)/6*(W-L-10),ly=y=>H-B-(Math.log10(Math.max(y,1))-ylo)/(yhi-ylo)*(H-B-10);
 let pts=[];for(let i=0;i<=60;i++){const x=Math.pow(10,-2+6*i/60);
  pts.push(lx(x)+","+ly(Math.min(R.peak_flops,x*R.peak_bytes)));}
 let s='<rect x="0" y="0" width="'+W+'" height="'+H+'" fill="#fff"/>';
 s+='<polyline fill="none" stroke="#4e79a7" stroke-width="2" points="'+pts.join(" ")+'"/>';
 s+='<line x1="'+L+'" y1="'+(H-B)+'" x2="'+(W-10)+'" y2="'+(H-B)+'" stroke="#888"/><line x1="'+L+'" y1="10" x2="'+L+
  '" y2="'+(H-B)+'" stroke="#888"/>';
 for(let e=-2;e<=4;e++)s+='<text x="'+(lx(Math.pow(10,e))-8)+'" y="'+(H-B+14)+'" font-size="10">1e'+e+'</text>';
 s+='<text x="'+(W/2-70)+'" y="'+(H-4)+'" font-size="11">flop per DMA byte</text>';
 s+='<text x="2" y="14" font-size="10">'+fmt(R.peak_flops,"FLOP/s")+'</text>';
 if(R.intensity!==null&&R.achieved>0){s+='<circle cx="'+lx(Math.min(Math.max(R.intensity,1e-2),1e4))+
  '" cy="'+ly(R.achieved)+
  '" r="5" fill="#e15759"/><text x="'+(L+8)+'" y="'+(H-B-8)+'" font-size="11">'+P.kernel+": "+R.intensity.toFixed(1)+
  " flop/B, "+fmt(R.achieved,"FLOP/s")+" ("+R.bound+" bound)</text>";}
 else s+='<text x="'+(L+8)+'" y="'+(H-B-8)+'" font-size="11">no Tensor-engine flops: '+fmt(P.bytes,"B")+' moved</text>';
 svg.innerHTML=s;}
load(0);
</script></body></html>
"""
