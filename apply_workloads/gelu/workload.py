"""gelu: the tanh approximation of GELU elementwise over a bf16 matrix,
out = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))."""
import math

import torch
import torch.nn.functional as F

NAME = "gelu"
FAMILY = "elementwise"
DTYPES = ("bfloat16",)
ENTRY = "gelu"
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "bfloat16", "role": "out"},
    {"name": "rows", "kind": "int"},
    {"name": "cols", "kind": "int"},
]
BENCHMARK_CASES = [{"rows": 16384, "cols": 8192}]
# Element counts not divisible by 8 (one 16-byte vector of bf16), odd widths, a single element;
# misaligned bases (offset 1, 3: 2 and 6 bytes past alignment), one large enough that a grid-stride
# fallback loops, and a base 16-byte aligned but not 256-byte aligned (offset 8) on the vector path.
PROBE_SHAPES = [
    {"rows": 1, "cols": 1},
    {"rows": 3, "cols": 5},
    {"rows": 17, "cols": 1023},
    {"rows": 1000, "cols": 4100},
    {"rows": 2, "cols": 1048583},
    {"rows": 17, "cols": 1023, "offset": 1},
    {"rows": 129, "cols": 8200, "offset": 3},
    {"rows": 33, "cols": 1001, "offset": 8},
]
# bf16 output: one rounding is at most 2^-8 (0.39%) relative, and fp32 math before it adds ~1e-7, so
# rtol 6e-3 holds for any fp32 kernel with room for a fast tanh (tanh.approx.f32, ~2^-11 relative)
# or the x * sigmoid(2u) form with a fast exp. The absolute term (2e-3 of the output's rms) covers
# the negative tail, where 1 + tanh(u) cancels and a fast tanh's absolute error (~5e-4) is all that
# is left. Arithmetic in bf16 (each step rounded) misses ~0.6% of elements and fails; so do an
# all-zero output and a copy of x (~10% of elements match). The erf form of GELU differs from this
# one by at most ~5e-4 absolute, within one bf16 step at |x| ~ 2: no bf16 output can tell the two
# apart, so the tolerance does not try.
TOLERANCE = {"rtol": 6e-3, "atol": 2e-3, "min_matched": 0.999}
VENDOR_NAME = "torch eager F.gelu(x, approximate='tanh') (bf16 in and out, fp32 math, one kernel)"

_K = math.sqrt(2.0 / math.pi)


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    # Scale 2: most values in the curved region |x| < 3, with tails on both sides.
    x = torch.randn(shape["rows"], shape["cols"], generator=g, device=device, dtype=torch.float32).mul_(2.0)
    return {"x": x.to(torch.bfloat16)}


def outputs(shape):
    return {"out": ((shape["rows"], shape["cols"]), "bfloat16")}


def scalars(shape):
    return {"rows": shape["rows"], "cols": shape["cols"]}


def reference(inputs, shape):
    x = inputs["x"].double()
    return {"out": 0.5 * x * (1.0 + torch.tanh(_K * (x + 0.044715 * x * x * x)))}


def vendor(inputs, shape):
    return {"out": F.gelu(inputs["x"], approximate="tanh")}


def bytes_moved(shape):
    # x read once (2 bytes) + out written once (2 bytes) per element
    return 2 * 2 * shape["rows"] * shape["cols"]


def flops(shape):
    # x^3 (2 mul), * 0.044715, + x, * sqrt(2/pi), tanh, + 1, * 0.5, * x: 9 per element (tanh as one)
    return 9 * shape["rows"] * shape["cols"]
