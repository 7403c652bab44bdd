"""reduce_blocks: the sum of an fp32 vector, out[0] = sum_i x[i].

A style-gallery ladder written in the habits of a vendor's samples: the classic progression of block
reductions (interleaved, strided, sequential addressing, add during load, last warp, a templated
complete unroll, several elements per thread), `extern __shared__` buffers, and the block size
chosen by the caller at run time: the entry point takes `threads`, a launch configuration the
workload declares in LAUNCH (256 by default; a sweep may try 128, 512, 1024). Inputs are small
integers, so every partial sum is exact in fp32 and any order of additions gives the same result."""
import torch

NAME = "reduce_blocks"
FAMILY = "reduction"
DTYPES = ("float32",)
ENTRY = "reduce_sum"
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "n", "kind": "int"},
    {"name": "threads", "kind": "int"},
]
LAUNCH = {"threads": [256, 128, 512, 1024]}
BENCHMARK_CASES = [{"n": 1 << 25}]
# One element, fewer elements than a warp or a block, sizes off every power of two, more than one
# grid-stride sweep; bases 4 and 12 bytes past alignment (the float4 path must step aside).
PROBE_SHAPES = [
    {"n": 1},
    {"n": 7},
    {"n": 1000},
    {"n": 4097},
    {"n": 65537},
    {"n": 3000017},
    {"n": 4099, "offset": 1},
    {"n": 100003, "offset": 3},
]
TOLERANCE = {"rtol": 1e-6, "atol": 1e-6, "min_matched": 1.0}
VENDOR_NAME = "torch x.sum() (fp32)"


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    # integers in [-8, 8]: every partial sum of up to 2^25 of them is exact in fp32
    x = torch.randint(-8, 9, (shape["n"],), generator=g, device=device).to(torch.float32)
    return {"x": x}


def outputs(shape):
    return {"out": ((1,), "float32")}


def scalars(shape):
    return {"n": shape["n"]}


def reference(inputs, shape):
    return {"out": inputs["x"].double().sum().reshape(1)}


def vendor(inputs, shape):
    return {"out": inputs["x"].sum().reshape(1)}


def bytes_moved(shape):
    return 4 * shape["n"] + 4


def flops(shape):
    return shape["n"]
