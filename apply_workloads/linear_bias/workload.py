"""linear_bias: a linear layer with bias, out = x @ weight.T + bias, bf16 in and out, fp32 accumulation.

x is M x K and weight N x K, both row-major (K-major operands, as a linear layer stores its weight),
bias has N elements broadcast over the rows, out is M x N row-major bf16. The benchmark case is a
transformer MLP's up-projection of 4096 tokens (hidden 1536 to 3072). An admission target of the
matrix-product family (klineage.lineage.analyze.admission_workloads): no held-out instance and no
expert lineage measures this operator. The oracle is the float64 product of the bf16 inputs plus
the bias; the vendor reference is cuBLAS through torch (torch.nn.functional.linear).
"""
import torch
import torch.nn.functional as F

NAME = "linear_bias"
FAMILY = "gemm"
DTYPES = ("bfloat16",)
ENTRY = "linear_bias"
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "weight", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "bias", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "bfloat16", "role": "out"},
    {"name": "M", "kind": "int"},
    {"name": "N", "kind": "int"},
    {"name": "K", "kind": "int"},
]
BENCHMARK_CASES = [{"M": 4096, "N": 3072, "K": 1536}]
# M and N off every tile size (64, 128, 256), K off the 64-wide k-slice (a partial last slice) and
# off a multiple of 8 (a row is no whole number of 16-byte vectors: no tensor copy can describe it),
# a single element, K of 1, odd N (no paired bf16 stores), a product large enough to run a copy ring
# around several times with partial edge tiles, and bases 1 and 3 elements past 16-byte alignment.
PROBE_SHAPES = [
    {"M": 1, "N": 1, "K": 1},
    {"M": 5, "N": 7, "K": 11},
    {"M": 64, "N": 128, "K": 64},
    {"M": 130, "N": 258, "K": 190},
    {"M": 777, "N": 1025, "K": 1000},
    {"M": 1024, "N": 768, "K": 2051},
    {"M": 300, "N": 301, "K": 512, "offset": 1},
    {"M": 100, "N": 260, "K": 96, "offset": 3},
]
# bf16 output of an fp32 sum of K products and the bias: one rounding (at most 2^-8 relative) and
# ~1e-6 of the row's scale from the summation order; atol 1e-2 of the output's rms admits elements
# that cancel to near zero. A lost k-slice moves an element by ~sqrt(64 / K) of the rms, a missing
# bias by ~1 rms, accumulation in bf16 by a few percent of the elements: each fails.
TOLERANCE = {"rtol": 8e-3, "atol": 1e-2, "min_matched": 0.9995}
VENDOR_NAME = "torch.nn.functional.linear(x, weight, bias) (cuBLAS, bf16 in and out, fp32 accumulation)"


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    m, n, k = shape["M"], shape["N"], shape["K"]
    x = torch.randn(m, k, generator=g, device=device, dtype=torch.float32)
    # weight scaled by K^-1/2: a product of unit scale whatever K is, the bias of the same scale
    w = torch.randn(n, k, generator=g, device=device, dtype=torch.float32).mul_(k ** -0.5)
    b = torch.randn(n, generator=g, device=device, dtype=torch.float32)
    return {"x": x.to(torch.bfloat16), "weight": w.to(torch.bfloat16), "bias": b.to(torch.bfloat16)}


def outputs(shape):
    return {"out": ((shape["M"], shape["N"]), "bfloat16")}


def scalars(shape):
    return {"M": shape["M"], "N": shape["N"], "K": shape["K"]}


def reference(inputs, shape):
    return {"out": inputs["x"].double() @ inputs["weight"].double().t() + inputs["bias"].double()}


def vendor(inputs, shape):
    return {"out": F.linear(inputs["x"], inputs["weight"], inputs["bias"])}


def bytes_moved(shape):
    m, n, k = shape["M"], shape["N"], shape["K"]
    return 2 * (m * k + n * k + n + m * n)  # x, weight and bias read once, out written once, bf16


def flops(shape):
    return 2 * shape["M"] * shape["N"] * shape["K"] + shape["M"] * shape["N"]
