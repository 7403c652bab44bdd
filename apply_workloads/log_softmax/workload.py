"""log_softmax: out[r, c] = x[r, c] - log(sum_j exp(x[r, j])) over the rows of a bf16 matrix, bf16 out.

The log-probabilities a language model's sampler or loss reads, kept stable by subtracting the row's
maximum first: out = x - m - log(sum_j exp(x[r, j] - m)). An admission target of the row-reduction
family (klineage.lineage.analyze.admission_workloads): no held-out instance and no expert lineage
measures this operator. The benchmark case is 16384 rows of an 8192-entry vocabulary slice. The
oracle is the float64 log_softmax of the bf16 inputs; the vendor reference is
torch.log_softmax(x, dim=1) on bf16 (one reduction kernel, fp32 math inside).
"""
import torch

NAME = "log_softmax"
FAMILY = "reduction"
DTYPES = ("bfloat16",)
ENTRY = "log_softmax"
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "bfloat16", "role": "out"},
    {"name": "rows", "kind": "int"},
    {"name": "cols", "kind": "int"},
]
BENCHMARK_CASES = [{"rows": 16384, "cols": 8192}]
# Widths off the 8-element (16-byte) vector and off every block size, a single element and a single
# row, a row longer than a block's registers can hold (a register cache must fall back), many short
# rows, and bases 1 and 3 elements past 16-byte alignment (no vector access is legal there).
PROBE_SHAPES = [
    {"rows": 1, "cols": 1},
    {"rows": 3, "cols": 5},
    {"rows": 1, "cols": 1023},
    {"rows": 17, "cols": 4099},
    {"rows": 3, "cols": 65539},
    {"rows": 4097, "cols": 33},
    {"rows": 9, "cols": 1031, "offset": 1},
    {"rows": 33, "cols": 2050, "offset": 3},
]
# bf16 output: one rounding, at most 2^-8 relative; the fp32 normaliser (a sum of up to 65539
# exponentials) adds ~1e-6 of it. Outputs are of order -log(cols) ~ -9 with entries near the maximum
# close to 0, so atol 2e-2 (about one bf16 step at 4) admits those. An un-shifted exp (overflow on the
# planted large entries), a softmax (no log), a normaliser without the maximum added back and a
# missing normaliser each fail.
TOLERANCE = {"rtol": 8e-3, "atol": 2e-2, "min_matched": 0.9995}
VENDOR_NAME = "torch.log_softmax(x, dim=1) on bf16 (one reduction kernel, fp32 math inside)"
SHIFT = 90.0  # every 7th row gets one entry this large: exp() of it overflows fp32 unless the max is taken out


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    rows, cols = shape["rows"], shape["cols"]
    x = torch.randn(rows, cols, generator=g, device=device, dtype=torch.float32).mul_(2.0)
    if rows and cols:
        pick = torch.randint(0, cols, (rows,), generator=g, device=device)
        big = torch.arange(rows, device=device) % 7 == 3
        x[big, pick[big]] = SHIFT
    return {"x": x.to(torch.bfloat16)}


def outputs(shape):
    return {"out": ((shape["rows"], shape["cols"]), "bfloat16")}


def scalars(shape):
    return {"rows": shape["rows"], "cols": shape["cols"]}


def reference(inputs, shape):
    return {"out": torch.log_softmax(inputs["x"].double(), dim=1)}


def vendor(inputs, shape):
    return {"out": torch.log_softmax(inputs["x"], dim=1)}


def bytes_moved(shape):
    return 2 * 2 * shape["rows"] * shape["cols"]  # x read once and out written once, bf16


def flops(shape):
    return 5 * shape["rows"] * shape["cols"]  # a max, a subtraction, an exp, an add and the output's subtraction
