"""gemm: out = x @ weight.T in bf16 with fp32 accumulation (a linear layer without bias).

x is M x K and weight N x K, both row-major (so both operands are K-major, the layout a linear
layer stores), out is M x N row-major bf16. The benchmark case is the published system's GEMM,
M = N = K = 4096. The oracle is the float64 product of the bf16 inputs; the vendor reference is
cuBLAS through torch (`x @ weight.T` in bf16, fp32 accumulation).
"""
import torch

NAME = "gemm"
FAMILY = "gemm"
DTYPES = ("bfloat16",)
ENTRY = "gemm"
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "weight", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "bfloat16", "role": "out"},
    {"name": "M", "kind": "int"},
    {"name": "N", "kind": "int"},
    {"name": "K", "kind": "int"},
]
BENCHMARK_CASES = [{"M": 4096, "N": 4096, "K": 4096}]
# The fast kernels' assumptions, each probed: M and N not multiples of any tile (128 x 256, 128 x
# 128, 64); K not a multiple of the 64-wide k-tile (partial last k-tile, zero-filled); K not a
# multiple of 8, so a row is not a whole number of 16-byte vectors and the tensor-copy engine (whose
# row stride must be a multiple of 16 bytes) cannot describe the matrix; a single element; a K of
# 1; a tall-skinny and a short-wide product; odd N (no paired bf16 stores); bases 1 and 3 elements
# past 16-byte alignment; and one shape large enough (2 x 2 waves of tiles) to run the pipeline's
# ring of stages around several times with partial edge tiles.
PROBE_SHAPES = [
    {"M": 1, "N": 1, "K": 1},
    {"M": 7, "N": 9, "K": 13},
    {"M": 64, "N": 64, "K": 64},
    {"M": 129, "N": 257, "K": 200},
    {"M": 300, "N": 500, "K": 1000},
    {"M": 1000, "N": 1000, "K": 1001},
    {"M": 4097, "N": 255, "K": 256},
    {"M": 33, "N": 4100, "K": 520},
    {"M": 257, "N": 383, "K": 4096},
    {"M": 2048, "N": 2049, "K": 328},
    {"M": 1500, "N": 1100, "K": 1100, "offset": 8},
    {"M": 200, "N": 300, "K": 512, "offset": 1},
    {"M": 130, "N": 140, "K": 96, "offset": 3},
]
# bf16 output: one rounding is 2^-9 relative on average and at most 2^-8 (0.39%). fp32
# accumulation of K products in any order adds ~1e-6 relative to the row's scale. Elements near
# zero (cancellation over K terms) have a relative error that means nothing, so atol is 1e-2 of the
# output's rms: far below what a wrong product shows (a missing k-tile moves an element by
# ~sqrt(64/K) of the rms, 12% at K = 4096) yet above bf16 rounding of the largest elements
# (2^-8 of ~4 rms). Accumulating in bf16 (rounded every step) misses a few percent of elements and
# fails; so do all-zero and copied outputs.
TOLERANCE = {"rtol": 8e-3, "atol": 1e-2, "min_matched": 0.9995}
VENDOR_NAME = "torch x @ weight.T (cuBLAS, bf16 in and out, fp32 accumulation)"


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    m, n, k = shape["M"], shape["N"], shape["K"]
    x = torch.randn(m, k, generator=g, device=device, dtype=torch.float32)
    w = torch.randn(n, k, generator=g, device=device, dtype=torch.float32).mul_(k ** -0.5)
    return {"x": x.to(torch.bfloat16), "weight": w.to(torch.bfloat16)}


def outputs(shape):
    return {"out": ((shape["M"], shape["N"]), "bfloat16")}


def scalars(shape):
    return {"M": shape["M"], "N": shape["N"], "K": shape["K"]}


def reference(inputs, shape):
    return {"out": inputs["x"].double() @ inputs["weight"].double().t()}


def vendor(inputs, shape):
    return {"out": inputs["x"] @ inputs["weight"].t()}


def bytes_moved(shape):
    m, n, k = shape["M"], shape["N"], shape["K"]
    return 2 * (m * k + n * k + m * n)  # x and weight read once, out written once, bf16


def flops(shape):
    return 2 * shape["M"] * shape["N"] * shape["K"]
