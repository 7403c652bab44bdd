"""layernorm_rows: LayerNorm over each row of an fp32 (rows, cols) matrix,
y[r, c] = (x[r, c] - mean_r) / sqrt(var_r + 1e-5) * gamma[c] + beta[c] (biased variance).

A style-gallery ladder written in the habits of a course's worked examples: three plain passes over
the row (mean, variance, normalise), each reading the row through the same `__ldg(xr + c)`, a
block-reduce helper, a column loop unrolled by hand four block-strides deep, and file headers that
say what each version adds (`// klineage-step: ...`), one of them wrongly: its header says the
loops were unrolled, while the file only adds launch bounds. Scalar loads only, so any row width
and alignment is valid."""
import torch
import torch.nn.functional as F

NAME = "layernorm_rows"
FAMILY = "normalization"
DTYPES = ("float32",)
ENTRY = "layernorm_fwd"
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "gamma", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "beta", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "y", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "rows", "kind": "int"},
    {"name": "cols", "kind": "int"},
]
BENCHMARK_CASES = [{"rows": 8192, "cols": 2048}]
# One element, rows shorter than a warp, widths off the block stride and off the unrolled stride,
# long rows, many short rows, bases one and three floats past alignment.
PROBE_SHAPES = [
    {"rows": 1, "cols": 1},
    {"rows": 3, "cols": 7},
    {"rows": 17, "cols": 1000},
    {"rows": 65, "cols": 1025},
    {"rows": 2, "cols": 20000},
    {"rows": 4097, "cols": 24},
    {"rows": 5, "cols": 300, "offset": 1},
    {"rows": 9, "cols": 2048, "offset": 3},
]
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4, "min_matched": 0.999}
VENDOR_NAME = "torch F.layer_norm(x, (cols,), gamma, beta, eps=1e-5) (fp32)"
EPS = 1e-5


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    r, c = shape["rows"], shape["cols"]
    # a row offset keeps the mean away from zero, so a wrong mean shows
    x = torch.randn(r, c, generator=g, device=device, dtype=torch.float32).add_(1.5)
    gamma = torch.rand(c, generator=g, device=device, dtype=torch.float32).add_(0.5)
    beta = torch.randn(c, generator=g, device=device, dtype=torch.float32).mul_(0.1)
    return {"x": x, "gamma": gamma, "beta": beta}


def outputs(shape):
    return {"y": ((shape["rows"], shape["cols"]), "float32")}


def scalars(shape):
    return {"rows": shape["rows"], "cols": shape["cols"]}


def reference(inputs, shape):
    x = inputs["x"].double()
    return {"y": F.layer_norm(x, (shape["cols"],), inputs["gamma"].double(), inputs["beta"].double(), eps=EPS)}


def vendor(inputs, shape):
    return {"y": F.layer_norm(inputs["x"], (shape["cols"],), inputs["gamma"], inputs["beta"], eps=EPS)}


def bytes_moved(shape):
    return 4 * (2 * shape["rows"] * shape["cols"] + 2 * shape["cols"])


def flops(shape):
    return 8 * shape["rows"] * shape["cols"]
