"""Tutorial 02: fused softmax.

One pass over each 128-row tile: the row max and the row sum are free-axis
reductions on the Vector engine, ``exp`` runs on the Scalar engine, and nothing
but the input and the output touches HBM. ``tl.max(..., keepdims=True)`` gives
a per-partition ``[128, 1]`` column that broadcasts against the ``[128, d]``
tile (a ``tensor_scalar`` instruction, half the cost of a ``tensor_tensor``).

Run: ``python tutorials/02_fused_softmax.py``
"""

import torch

import trnlang as trn
import trnlang.language as tl


@trn.kernel
def softmax(x, out):
    n, d = x.shape
    for i in tl.affine_range(tl.cdiv(n, 128)):
        rows = i * 128 + tl.arange(128)[:, None]
        cols = tl.arange(d)[None, :]
        t = tl.load(x[rows, cols], mask=rows < n)
        e = tl.exp(t - tl.max(t, axis=1, keepdims=True))
        tl.store(out[rows, cols], e / tl.sum(e, axis=1, keepdims=True), mask=rows < n)


def main() -> None:
    x = torch.randn(1823, 781)
    out = torch.empty_like(x)
    softmax(x, out)
    torch.testing.assert_close(out, torch.softmax(x, dim=-1), atol=1e-6, rtol=1e-5)
    print("softmax matches torch.softmax on", tuple(x.shape))
    print("\nIR of the kernel (n is the runtime size x_size0; d, a tile shape, is a constant):")
    print(softmax.ir(x, out))

    # Shape polymorphism: a new row count is not a new compilation (docs/specialization.md).
    for n in (7, 300, 1000, 2049):
        y = torch.randn(n, 781)
        o = torch.empty_like(y)
        softmax(y, o)
        torch.testing.assert_close(o, torch.softmax(y, dim=-1), atol=1e-6, rtol=1e-5)
        print(f"rows {n:5d}: compiled variants so far {softmax.compile_stats()['variants']}")

    stdlib_softmax_over_new_sizes()


def stdlib_softmax_over_new_sizes() -> None:
    """``torch.softmax`` on the ``trn`` device follows the same policy: the standard library's softmax kernel is
    shape-polymorphic (sizes are runtime values; the host rounds the row length up to a tile bucket and masks the
    tail), so new sizes in a bucket reuse its compiled variant. ``trn.compile_stats()`` counts every kernel
    behind the device: compilations (``compiles``) and variants loaded from the disk cache (``disk_hits``)."""
    import trnlang.device  # noqa: F401  (registers the trn device)

    print("\ntorch.softmax on trn over new sizes (128 rows or more x a row length in the bucket of 128):")
    trn.reset_compile_stats()
    for n, d in ((130, 100), (300, 100), (301, 120), (777, 65), (1000, 97), (1999, 128)):
        x = torch.randn(n, d)
        torch.testing.assert_close(torch.softmax(x.to("trn"), -1).cpu(), torch.softmax(x, -1), atol=1e-6, rtol=1e-5)
        s = trn.compile_stats()
        k = s["kernels"]["softmax_fwd"]
        print(f"  {n:5d} x {d:3d}: softmax_fwd variants {k['compiles'] + k['disk_hits']}, all kernels' compilations "
              f"{s['compiles']}")


if __name__ == "__main__":
    main()
