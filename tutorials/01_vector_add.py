"""Tutorial 01: vector add.

The smallest useful kernel: load two tiles from HBM into SBUF, add them on the
Vector engine, store the result. Rows are processed in tiles of 128 partitions;
the last tile is ragged, so loads and stores are masked with ``rows < n``.

Run: ``python tutorials/01_vector_add.py``
"""

import torch

import trnlang as trn
import trnlang.language as tl


@trn.kernel
def vector_add(x, y, out):
    n, d = x.shape
    for i in tl.affine_range(tl.cdiv(n, 128)):          # a real loop in the IR, never unrolled
        rows = i * 128 + tl.arange(128)[:, None]          # partition index  [128, 1]
        cols = tl.arange(d)[None, :]                      # free index       [1, d]
        a = tl.load(x[rows, cols], mask=rows < n)         # HBM -> SBUF (DMA)
        b = tl.load(y[rows, cols], mask=rows < n)
        tl.store(out[rows, cols], a + b, mask=rows < n)   # Vector engine add, SBUF -> HBM


@trn.kernel
def vector_add_grid(x, y, out):
    """The SPMD form: one program instance per 128-row tile, launched as ``vector_add_grid[grid](...)``."""
    n, d = x.shape
    rows = tl.program_id(0) * 128 + tl.arange(128)[:, None]
    cols = tl.arange(d)[None, :]
    tl.store(out[rows, cols], tl.load(x[rows, cols], mask=rows < n) + tl.load(y[rows, cols], mask=rows < n),
             mask=rows < n)


def main() -> None:
    x = torch.randn(1000, 256)
    y = torch.randn(1000, 256)
    out = torch.empty_like(x)
    vector_add(x, y, out)
    torch.testing.assert_close(out, x + y)
    print("vector_add matches torch:", tuple(out.shape))

    out2 = torch.empty_like(x)
    vector_add_grid[tl.cdiv(1000, 128)](x, y, out2)
    torch.testing.assert_close(out2, x + y)
    print("vector_add_grid[8] matches torch")

    print("\nThe traced IR (note the single affine_range loop and the masked DMA accesses):")
    print(vector_add.ir(x, y, out))


if __name__ == "__main__":
    main()
