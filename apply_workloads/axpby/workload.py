"""axpby: out = alpha * x + beta * y over flat fp32 vectors, alpha and beta float arguments."""
import torch

NAME = "axpby"
FAMILY = "elementwise"
DTYPES = ("float32",)
ENTRY = "axpby"
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "y", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "n", "kind": "int64"},
    {"name": "alpha", "kind": "float"},
    {"name": "beta", "kind": "float"},
]
BENCHMARK_CASES = [{"n": 1 << 27}]
# Lengths not divisible by 4 (one 16-byte float4) or 8, a single element, lengths just off a block
# multiple; misaligned bases (offset 1, 3: 4 and 12 bytes past alignment), one large enough that a
# grid-stride fallback loops, and a base 16-byte aligned but not 256-byte aligned (offset 4).
PROBE_SHAPES = [
    {"n": 1},
    {"n": 3},
    {"n": 7},
    {"n": 1000},
    {"n": 1023},
    {"n": 4099},
    {"n": 4194311},
    {"n": 1023, "offset": 1},
    {"n": 100003, "offset": 3},
    {"n": 4101, "offset": 4},
]
# fp32 output: alpha*x + beta*y in fp32 (two roundings, or one with FMA) errs by at most ~1.2e-7 of
# |alpha*x| + |beta*y|, so rtol 1e-5 holds wherever the terms do not cancel and the absolute term
# (1e-5 of the output's rms) where they do. A bf16 (2^-8) or fp16 (2^-11) shortcut fails.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5, "min_matched": 0.999}
VENDOR_NAME = "torch eager torch.add(x * alpha, y, alpha=beta) (fp32, two kernels)"

# (alpha, beta) by n % 3, so a kernel cannot bake the coefficients in; all exact in fp32, none 0 or 1.
# The benchmark length 2^27 has n % 3 == 2.
_COEFS = ((-0.625, 2.25), (0.3125, 1.0625), (1.5, -0.75))


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(shape["n"], generator=g, device=device, dtype=torch.float32)
    y = torch.randn(shape["n"], generator=g, device=device, dtype=torch.float32)
    return {"x": x, "y": y}


def outputs(shape):
    return {"out": ((shape["n"],), "float32")}


def scalars(shape):
    alpha, beta = _COEFS[shape["n"] % 3]
    return {"n": shape["n"], "alpha": alpha, "beta": beta}


def reference(inputs, shape):
    s = scalars(shape)
    return {"out": s["alpha"] * inputs["x"].double() + s["beta"] * inputs["y"].double()}


def vendor(inputs, shape):
    s = scalars(shape)
    return {"out": torch.add(inputs["x"] * s["alpha"], inputs["y"], alpha=s["beta"])}


def bytes_moved(shape):
    # x and y read once + out written once, 4 bytes each per element: 12 * n
    return 3 * 4 * shape["n"]


def flops(shape):
    # two multiplies and one add per element
    return 3 * shape["n"]
