"""Tutorial 04: layernorm and rmsnorm.

Both are row-wise: the statistics are free-axis reductions of a 128-row tile
(``tl.mean(..., keepdims=True)`` gives a ``[128, 1]`` per-partition column), the
normalisation is elementwise with the column broadcast along the free axis, and
the weight row ``[1, d]`` is loaded once, outside the loop, and broadcast along
the partitions. ``tl.rsqrt`` runs on the Scalar engine.

Run: ``python tutorials/04_layernorm.py``
"""

import torch

import trnlang as trn
import trnlang.language as tl


@trn.kernel
def layernorm(x, w, b, out, eps):
    n, d = x.shape
    cols = tl.arange(d)[None, :]
    wt = tl.load(w[0:1, 0:d])                 # [1, d], loaded once
    bt = tl.load(b[0:1, 0:d])
    for i in tl.affine_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        t = tl.load(x[rows, cols], mask=rows < n)
        xc = t - tl.mean(t, axis=1, keepdims=True)
        rstd = tl.rsqrt(tl.mean(xc * xc, axis=1, keepdims=True) + eps)
        tl.store(out[rows, cols], xc * rstd * wt + bt, mask=rows < n)


@trn.kernel
def rmsnorm(x, w, out, eps):
    n, d = x.shape
    cols = tl.arange(d)[None, :]
    wt = tl.load(w[0:1, 0:d])
    for i in tl.affine_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        t = tl.load(x[rows, cols], mask=rows < n)
        rms = tl.rsqrt(tl.mean(tl.square(t), axis=1, keepdims=True) + eps)
        tl.store(out[rows, cols], t * rms * wt, mask=rows < n)


def main() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1000, 768, generator=g)
    w = torch.randn(1, 768, generator=g)
    b = torch.randn(1, 768, generator=g)
    out = torch.empty_like(x)
    layernorm(x, w, b, out, 1e-5)
    ref = torch.nn.functional.layer_norm(x, (768,), w[0], b[0], 1e-5)
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    print("layernorm matches torch.nn.functional.layer_norm")

    rmsnorm(x, w, out, 1e-6)
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(out, ref, atol=1e-4, rtol=1e-4)
    print("rmsnorm matches the torch reference")

    p = layernorm.profile(x, w, b, out, 1e-5)
    print("\nlayernorm on the simulated device:")
    print(p.summary())


if __name__ == "__main__":
    main()
