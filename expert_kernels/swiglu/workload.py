"""swiglu: out = silu(a) * b elementwise over bf16 matrices, silu(a) = a / (1 + exp(-a))."""
import torch
import torch.nn.functional as F

NAME = "swiglu"
FAMILY = "elementwise"
DTYPES = ("bfloat16",)
ENTRY = "swiglu"
ARGS = [
    {"name": "a", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "b", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
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
# bf16 output: one rounding is 2^-9 relative; 1e-2 leaves room for fast exp, not for a wrong formula.
TOLERANCE = {"rtol": 1e-2, "atol": 1e-2, "min_matched": 0.999}
# Eager F.silu(a) * b is two kernels (an intermediate goes through memory), so the reference is
# torch.compile's fused Triton kernel of the same expression.
VENDOR_NAME = "torch.compile(F.silu(a) * b, dynamic=False) (bf16, one fused Triton kernel)"


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    dims = (shape["rows"], shape["cols"])
    a = torch.randn(dims, generator=g, device=device, dtype=torch.float32).mul_(2.0)
    b = torch.randn(dims, generator=g, device=device, dtype=torch.float32)
    return {"a": a.to(torch.bfloat16), "b": b.to(torch.bfloat16)}


def outputs(shape):
    return {"out": ((shape["rows"], shape["cols"]), "bfloat16")}


def scalars(shape):
    return {"rows": shape["rows"], "cols": shape["cols"]}


def reference(inputs, shape):
    a, b = inputs["a"].double(), inputs["b"].double()
    return {"out": a * torch.sigmoid(a) * b}


def _swiglu(a, b):
    return F.silu(a) * b


_compiled = None  # built on the first vendor call (in the gate worker, during warm-up)


def vendor(inputs, shape):
    global _compiled
    if not inputs["a"].is_cuda:  # CPU checks of the contract: the same expression, eager
        return {"out": _swiglu(inputs["a"], inputs["b"])}
    if _compiled is None:
        _compiled = torch.compile(_swiglu, dynamic=False, fullgraph=True)
    return {"out": _compiled(inputs["a"], inputs["b"])}


def bytes_moved(shape):
    return 3 * 2 * shape["rows"] * shape["cols"]


def flops(shape):
    # exp, add, divide, two multiplies per element
    return 5 * shape["rows"] * shape["cols"]
