"""The structural families only a version ladder (or an LLM proposer) names: no code analysis reads
them."""
from __future__ import annotations

from klineage.mechanisms.base import Feature, Kernel, Mechanism


class _Declared(Mechanism):
    """A mechanism only a version ladder (or an LLM proposer) names: no detector signature."""
    STRUCTURAL = True
    DETECTABLE = False

    def detect(self, k: Kernel) -> list[Feature]:
        return []


class WarpPerRow(_Declared):
    NAME = "warp_per_row"
    DESCRIPTION = "cooperative row reduction: one warp per row, lanes striding the row (coalesced reads)"
    PRECONDITIONS = {
        "layout": [{"condition": "rows are contiguous in memory (unit stride along the reduced axis)",
                    "fails_without": "lanes read scattered addresses; coalescing, and the gain, is lost"}],
        "pipeline": [{"condition": "every lane of a warp reaches the cross-lane combine (no early exit)",
                      "fails_without": "the warp-level combine deadlocks or reads undefined partials"}],
    }


class BlockPerRow(_Declared):
    NAME = "block_per_row"
    DESCRIPTION = "long rows split over a whole thread block, partials combined through shared memory"
    PRECONDITIONS = {
        "storage": [{"condition": "one float of shared memory per warp of the block",
                     "fails_without": "the block cannot launch (never in practice: 64 bytes for 512 threads)"}],
        "pipeline": [{"condition": "block size a multiple of 32 and every thread reaches __syncthreads",
                      "fails_without": "a deadlock at the barrier or a missing warp partial"}],
    }


class TiledTranspose(_Declared):
    NAME = "tiled_transpose"
    DESCRIPTION = ("transpose through a shared-memory tile: a block reads a tile's rows (coalesced), "
                   "synchronises, and writes the tile's columns as output rows (coalesced)")
    PRECONDITIONS = {
        "storage": [{"condition": "one tile of the element type fits the block's shared memory (4 KB for a "
                                  "32x32 fp32 tile)",
                     "fails_without": "ptxas rejects the kernel, or fewer blocks fit an SM"}],
        "layout": [{"condition": "input and output are dense row-major (unit stride along each row)",
                    "fails_without": "the tile's row reads or column writes no longer coalesce"}],
        "pipeline": [{"condition": "every thread of the block reaches the __syncthreads between the load and "
                                   "the store phase, and load and store guards are the same condition mirrored",
                      "fails_without": "a deadlock, reads of the tile before it is filled, or unloaded values "
                                       "written at the matrix edge"}],
    }


class WarpScan(_Declared):
    NAME = "warp_scan"
    DESCRIPTION = ("warp-shuffle prefix scan: lanes scan their values in registers with __shfl_up_sync "
                   "(Kogge-Stone, log2(32) steps), the total broadcast from lane 31, no shared memory")
    PRECONDITIONS = {
        "data_types": [{"condition": "a 4-byte (or two-register) value per lane and an associative operator",
                        "fails_without": "the shuffle cannot move the value, or the scan is not a scan"}],
        "pipeline": [{"condition": "all 32 lanes reach every shuffle of the scan (no lane exits or branches "
                                   "around it)",
                      "fails_without": "full-mask shuffles read undefined values or hang"}],
    }


class BlockScan(_Declared):
    NAME = "block_scan"
    DESCRIPTION = ("block-wide prefix scan: warp scans in registers, the warp totals exchanged through "
                   "shared memory behind one __syncthreads, each warp adding the totals of the warps before it")
    PRECONDITIONS = {
        "storage": [{"condition": "one float of shared memory per warp and step (double-buffered: 2 x UNROLL "
                                  "x warps)",
                     "fails_without": "never in practice (256 bytes for 256 threads)"}],
        "pipeline": [{"condition": "block size a multiple of 32, every thread reaches each __syncthreads, and a "
                                   "buffer is not rewritten before the next barrier",
                      "fails_without": "a deadlock, or a warp reading the next step's totals (wrong prefixes)"}],
    }


class ReduceThenScan(_Declared):
    NAME = "reduce_then_scan"
    DESCRIPTION = ("multi-block scan of few long rows in two launches: tiles are summed, each tile's exclusive "
                   "prefix is the fixed-order sum of the earlier tiles' sums, then every tile is scanned from it")
    PRECONDITIONS = {
        "layout": [{"condition": "somewhere to keep per-tile sums between the launches that no other tile reads "
                                 "or overwrites (here: each tile's own output region, one float per earlier tile)",
                    "fails_without": "a race between a tile's final stores and another tile's prefix reads"}],
        "storage": [{"condition": "tiles of at least as many elements as there are tiles per row",
                     "fails_without": "a tile's slot array spills into the next tile's output"}],
        "pipeline": [{"condition": "the two launches ordered on one stream",
                      "fails_without": "the scan reads tile sums before they are written"}],
    }


class RegisterCache(_Declared):
    NAME = "register_cache"
    WRITTEN_WITH = ("coarsening",)
    DESCRIPTION = ("values loaded once are held in registers and passed over more than once (a step's "
                   "values: their max, then their exponentials), instead of re-reading memory or updating "
                   "element by element")
    PRECONDITIONS = {
        "storage": [{"condition": "the cached values fit the per-thread register budget next to the loop state "
                                  "(CE_UNROLL vectors: 16-32 floats)",
                     "fails_without": "spills to local memory, or fewer resident blocks per SM"}],
        "pipeline": [{"condition": "every register index is a compile-time constant (the loops over the cached "
                                   "values fully unrolled)",
                      "fails_without": "the array moves to local memory (stack frame, LDL/STL): slower"}],
    }


class FastExp2(_Declared):
    NAME = "fast_exp2"
    DESCRIPTION = ("exponentials as one ex2.approx.ftz.f32 of a base-2 argument formed by one FFMA "
                   "(x*log2e - m*log2e), instead of __expf's multiply, range check and fix-ups around the MUFU op")
    PRECONDITIONS = {
        "data_types": [{"condition": "fp32 math whose tolerance admits ex2.approx's ~2^-22 relative error plus "
                                     "the rounding of m*log2e (~|m| * 2^-24 in the exponent)",
                        "fails_without": "results differ from precise expf beyond a tight tolerance"}],
        "layout": [{"condition": "results below 2^-126 may be flushed to zero: the exponentials are summed "
                                 "against a term of order 1 (the running max's)",
                    "fails_without": "a sum of only subnormal terms comes out as 0 (log of it -inf)"}],
    }


class RadixSelect(_Declared):
    NAME = "radix_select"
    DESCRIPTION = ("radix select of the k-th largest key: most significant digit first, a shared-memory "
                   "histogram of the digit among elements matching the chosen prefix, a scan of the bins picks "
                   "the digit, stopping once a bin is needed whole; then compaction of the elements above it")
    PRECONDITIONS = {
        "data_types": [{"condition": "values map to unsigned keys whose integer order is the value order (fp32: "
                                     "flip all bits of negatives, the sign bit of the others)",
                        "fails_without": "digits of the raw bits order negatives backwards: a wrong threshold"}],
        "storage": [{"condition": "the row (or its keys) and a 2^bits-bin histogram in shared memory (32 KB + 1 KB "
                                  "for 8192 floats, 8-bit digits), or re-reading the row once per pass",
                     "fails_without": "ptxas rejects the buffer, or every pass pays a trip to L2"}],
        "pipeline": [{"condition": "every thread reaches the barriers between histogram, digit pick and the next "
                                   "pass, and the histogram is cleared before it is reused",
                      "fails_without": "a pass counts with the previous pass's bins: wrong digits"}],
    }


class BitonicSort(_Declared):
    NAME = "bitonic_sort"
    DESCRIPTION = ("bitonic sorting network over a power-of-two buffer in shared memory (padded with values "
                   "below every element): log2(P)(log2(P)+1)/2 compare-exchange stages, a barrier after each")
    PRECONDITIONS = {
        "data_types": [{"condition": "a strict total order on the sorted items (e.g. key << 32 | ~index), or "
                                     "ties whose order does not matter",
                        "fails_without": "the network is not stable: equal keys come out in any order"}],
        "storage": [{"condition": "P = next power of two >= n items of shared memory (8 bytes each packed)",
                     "fails_without": "the buffer does not fit: a global-memory or multi-pass sort is needed"}],
        "pipeline": [{"condition": "every thread reaches the barrier of every stage",
                      "fails_without": "a deadlock, or a stage reading pairs the previous stage is still writing"}],
    }


class WarpBitonic(_Declared):
    NAME = "warp_bitonic"
    DESCRIPTION = ("bitonic stages whose partner is in the same warp (stride < 32) run in registers: each "
                   "thread holds its items and swaps with lane ^ stride through __shfl_xor_sync, no shared "
                   "memory and no barrier; only strides >= 32 go through shared memory")
    PRECONDITIONS = {
        "layout": [{"condition": "item i lives in lane i % 32 of its warp (thread t holds t, t + block, ...), "
                                 "so the partner i ^ j (j < 32) is lane ^ j of the same warp",
                    "fails_without": "the shuffle fetches the wrong partner: an unsorted result"}],
        "pipeline": [{"condition": "whole warps hold items (the padded size a multiple of 32) and all 32 lanes "
                                   "run every shuffle",
                      "fails_without": "full-mask shuffles read undefined values or hang"}],
        "storage": [{"condition": "the items of a thread fit in registers with compile-time indices (loops "
                                  "over them unrolled)",
                     "fails_without": "the array moves to local memory: slower than the shared-memory stages"}],
    }
