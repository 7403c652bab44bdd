"""What the held-out GEMM instances share (heldout_ops.mm, bmm, addmm and grouped_mm): the family, the
kernel file of the mm, bmm and addmm entries, and the tolerance of a bf16 product accumulated in fp32."""
FAMILY = "gemm"
# Start kernels, relative to the heldout/ folder (mm, addmm and bmm; grouped_mm has its own).
STARTS_MM = {"idiom": "kernels/gemm_mm.cu"}
# bf16 output: one rounding is at most 2^-8 (0.39%) relative; fp32 accumulation of K products in any
# order (serial, tree, split-K) adds ~1e-6 of the row's scale. Elements near zero (cancellation over K
# terms) have a relative error that means nothing, so atol is 1e-2 of the output's rms: far below what a
# wrong product shows (a missing 32-wide k-tile moves an element by ~sqrt(32 / K) of the rms, 9% at
# K = 4096) yet above the rounding of any element up to 1.28 rms. Every element of a kernel that
# accumulates in fp32 and rounds once is therefore within rtol (|ref| > 1.28 rms) or atol, so min_matched
# is 1.0: one wrong edge row or column fails. Accumulating in bf16 (rounded every step) matches only
# 15-30% of the elements at K = 1000-4096 and fails; so do all-zero and copied outputs.
TOLERANCE = {"rtol": 8e-3, "atol": 1e-2, "min_matched": 1.0}
