"""conv2d: a 3 x 3 convolution, stride 1, padding 1, fp16 NHWC in and out, fp32 accumulation.

x is [N, H, W, C] (channels last), weight [F, 3, 3, C] (each filter's taps channels-last, so a
filter is one contiguous row of 9 C values: the K-major operand of the implicit GEMM), out
[N, H, W, F]. The benchmark case is the published system's Conv2d, N=8, C=64, H=W=56, F=128. The
oracle is the float64 convolution of the fp16 inputs; the vendor reference is cuDNN through torch
(F.conv2d on channels_last fp16 tensors).
"""
import torch
import torch.nn.functional as F

NAME = "conv2d"
FAMILY = "convolution"
DTYPES = ("float16",)
ENTRY = "conv2d"
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "float16", "role": "in"},
    {"name": "weight", "kind": "ptr", "dtype": "float16", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "float16", "role": "out"},
    {"name": "N", "kind": "int"},
    {"name": "H", "kind": "int"},
    {"name": "W", "kind": "int"},
    {"name": "C", "kind": "int"},
    {"name": "F", "kind": "int"},
]
BENCHMARK_CASES = [{"N": 8, "H": 56, "W": 56, "C": 64, "F": 128}]
# The fast kernels' assumptions, each probed: C a multiple of 64 (one k-tile per tap) and not (C =
# 8, 24, 96, 200: partial channel chunks, zero-filled), C not a multiple of 8 (a pixel's channels
# are not whole 16-byte vectors: the fallback), F above, below and not a multiple of the 128-wide
# filter tile, pixel counts that leave a partial tile, 1 x 1 and 2 x 3 images (every tap but the
# centre falls in the padding), a single image, and bases 1 and 8 elements past 16-byte alignment.
PROBE_SHAPES = [
    {"N": 1, "H": 1, "W": 1, "C": 8, "F": 1},
    {"N": 1, "H": 2, "W": 3, "C": 5, "F": 7},
    {"N": 2, "H": 7, "W": 9, "C": 64, "F": 128},
    {"N": 3, "H": 13, "W": 11, "C": 24, "F": 40},
    {"N": 1, "H": 56, "W": 56, "C": 64, "F": 128},
    {"N": 2, "H": 28, "W": 28, "C": 96, "F": 200},
    {"N": 2, "H": 17, "W": 15, "C": 200, "F": 64},
    {"N": 4, "H": 14, "W": 14, "C": 128, "F": 256},
    {"N": 1, "H": 30, "W": 31, "C": 64, "F": 128, "offset": 8},
    {"N": 2, "H": 9, "W": 10, "C": 64, "F": 96, "offset": 1},
    {"N": 1, "H": 5, "W": 6, "C": 16, "F": 24, "offset": 3},
]
# fp16 output: one rounding is at most 2^-11 relative (0.05%); fp32 accumulation of 9 C products
# adds ~1e-6 of the row scale. Outputs near zero (cancellation) are judged by atol = 3e-3 of the
# output's rms, far below what a wrong tap or channel chunk shows (one missing tap of nine moves an
# element by ~1/3 of the rms). Accumulating in fp16 fails; so do zeros and copies.
TOLERANCE = {"rtol": 2e-3, "atol": 3e-3, "min_matched": 0.9995}
VENDOR_NAME = "torch F.conv2d (cuDNN, fp16 channels_last in and out, fp32 accumulation)"


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    n, h, w, c, f = shape["N"], shape["H"], shape["W"], shape["C"], shape["F"]
    x = torch.randn(n, h, w, c, generator=g, device=device, dtype=torch.float32)
    wt = torch.randn(f, 3, 3, c, generator=g, device=device, dtype=torch.float32).mul_((9 * c) ** -0.5)
    return {"x": x.to(torch.float16), "weight": wt.to(torch.float16)}


def outputs(shape):
    return {"out": ((shape["N"], shape["H"], shape["W"], shape["F"]), "float16")}


def scalars(shape):
    return {k: shape[k] for k in ("N", "H", "W", "C", "F")}


def reference(inputs, shape):
    x = inputs["x"].double().permute(0, 3, 1, 2)
    wt = inputs["weight"].double().permute(0, 3, 1, 2)
    return {"out": F.conv2d(x, wt, padding=1).permute(0, 2, 3, 1)}


def vendor(inputs, shape):
    x = inputs["x"].permute(0, 3, 1, 2)            # NCHW view of NHWC memory: channels_last
    wt = inputs["weight"].permute(0, 3, 1, 2)
    return {"out": F.conv2d(x, wt, padding=1).permute(0, 2, 3, 1)}


def bytes_moved(shape):
    n, h, w, c, f = shape["N"], shape["H"], shape["W"], shape["C"], shape["F"]
    return 2 * (n * h * w * c + f * 9 * c + n * h * w * f)  # fp16: x, weight read once, out written once


def flops(shape):
    return 2 * shape["N"] * shape["H"] * shape["W"] * shape["F"] * 9 * shape["C"]
