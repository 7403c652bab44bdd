"""Row-wise reductions and normalisations: one output row from one input row (sum, max, softmax,
RMSNorm, LayerNorm, a fused residual add + norm, cross entropy), and the structural rewrites that
make them fast.

The start is the plainest such kernel, one thread per row walking its row serially in passes:

    __global__ void k(const T* x, ..., int rows, int cols, ...) {
        int r = blockIdx.x * blockDim.x + threadIdx.x;
        if (r >= rows) return;
        ... per-row declarations ...
        float acc = 0.0f;
        for (int c = 0; c < cols; ++c) acc += f(x[r * cols + c]);      // a pass: reduces the row
        ... per-row scalar code ...
        for (int c = 0; c < cols; ++c) out[r * cols + c] = g(x[..c], acc);   // a pass: writes the row
        out2[r] = ...;                                                 // a per-row store
    }
    ... k<<<grid, block, 0, stream>>>(...);   // grid = rows / block, rounded up

It is read by what it computes, names only as hints. The row index is the flat thread index (or the
block index of a launch with one thread a block), declared after any declarations; its bounds check
returns early (`r >= B`, `B <= r`, `!(r < B)`, `{ return; }`) or encloses the rest of the body (`if (r <
B) { ... }`), B an expression of integer parameters (`rows`, `B * T`, or a local holding one). A pass
is a top-level `for` over the row's columns from a constant (0, or 1 after a maximum taken from the
row's first element) to `cols` by 1 whose body holds no loop, writes no variable declared outside it
except reduction accumulators (`a += e`, `a = a + e`, `a = fmaxf(a, e)`, fminf, max, min, `if (e > a) a
= e;`), reads memory only at its own column where it writes (a compound `out[c] /= s` included), and
neither breaks, continues nor returns. An access's index is read as linear in the column, base + c *
step, through local index variables (`int idx = r * n + c; x[idx]`): a step of 1 is a contiguous row;
any other step (`x[(b * C + c) * L + l]`, `a[r * n_cols + col]`) a strided one, a reduction over a
dimension that is not the innermost. Where a kernel is none of these, NotApplicable names the fact
that blocked it (a bounds check on two indices, a grid-stride loop, a nest, a carried value).

Each rewrite adds one mechanism and keeps everything else; they compose in any order the card
library (or a random control) asks for, except where a reason says why not:

  warp_per_row     the row shared by a warp: `r` becomes the warp's index, each pass walks the row
                   from the lane with stride 32 (coalesced), each accumulator is combined across the
                   warp after its pass (a shared-memory tree), per-row stores go to lane 0; the host
                   launches a warp per row (the block size a tuning constant, from the card);
  block_per_row    the same with a whole block per row (stride blockDim.x, a block-wide tree, one
                   block per row, a power-of-two block size from the card). A strided row ("line")
                   is shared by a block's warps instead: 32 neighbouring lines a block, one per lane,
                   so each warp's load reads 32 neighbouring elements, each line walked by one lane
                   of every warp and combined through a shared-memory tree across the warps; the
                   lines past the last compute the last one (their loads stay in bounds), walk no
                   element and store nothing, so every thread of a block reaches its barriers. A
                   warp per strided row (32 far-apart loads), its shuffles, vectors and register
                   cache are NotApplicable with that reason;
  warp_reduction   the combines through warp shuffles (a butterfly of __shfl_xor_sync; a block adds
                   its warps' partials through shared memory) instead of shared-memory trees;
  online_softmax   a max pass followed by a pass summing exp(y - max) becomes one pass with a running
                   max and a rescaled running sum (combined as max, rescale, sum across the row's
                   threads);
  vector_access    every pass reads (anchor "global load") or writes (anchor "global store") its
                   row through 16-byte vectors of VEC elements, the lanes' bodies applied per element,
                   with the row's tail and rows whose bases are not 16-byte aligned element by element;
  register_cache   passes that read the same row: when the row fits ITEMS units per thread (a tuning
                   constant, from the card), the first pass keeps what it reads in registers and the
                   later ones read those, so the row is read from memory once; longer rows take the
                   passes as they were.

The combines are device functions (`kl_row_sum`, `kl_row_max`, `kl_row_min`) written before the
kernel, so moving between warp and block, or between trees and shuffles, rewrites only them, the
row index and the launch. vector_access and register_cache are decorations read back to the passes
they decorate (the element-by-element loop each keeps verbatim) before any other rewrite, and
rewritten after it; a decorated kernel that does not read back exactly (edited by hand) is left
alone. Anything this module does not understand gives NotApplicable with the reason, never a kernel.
Correctness is the gate's business; semantics are those of the thread-per-row kernel for each row.
"""
from klineage.mechanisms.shapes.rowwise.model import MECHANISMS
from klineage.mechanisms.shapes.rowwise.rewriter import RowwiseRewriter, add, analyse, present

__all__ = ["MECHANISMS", "RowwiseRewriter", "add", "analyse", "present"]
