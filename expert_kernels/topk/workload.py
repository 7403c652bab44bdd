"""topk: the k largest values of each fp32 row, sorted descending, with their column indices.

values[b, j] is the j-th largest element of x[b, :] and indices[b, j] a column holding it: the
exact set of the k largest values per row, in descending order, with valid, unique indices. Equal
values may be reported in any order among themselves and, at the k-th value, any of the tied
columns may be chosen; so indices are not compared elementwise with an oracle: `check()` verifies
them (each index in range, unique within its row, and x[b, indices[b, j]] == values[b, j]), and
`reference()` gives only the values.
"""
import torch

NAME = "topk"
FAMILY = "selection"
DTYPES = ("float32", "int32")
ENTRY = "topk"
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "values", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "indices", "kind": "ptr", "dtype": "int32", "role": "out"},
    {"name": "batch", "kind": "int"},
    {"name": "length", "kind": "int"},
    {"name": "k", "kind": "int"},
]
BENCHMARK_CASES = [{"batch": 64, "length": 4096, "k": 512}]
# Every shape has 1 <= k <= length. Optional data keys (make_inputs only; the kernels never see
# them): "levels": N draws every element from N distinct values (heavy ties, all-equal rows for
# N = 1); "special": 1 mixes in -inf, +inf, +-FLT_MAX and +-0.0. The kernels' assumptions probed:
# a single element; k = length (a power of two and not); k = 1; rows not a multiple of the
# 4-float vector (4097, 4099, 4101) nor of the block; batch 1; rows longer than the shared-memory
# row buffer (8192 floats) and k above the shared-memory candidate buffer (1024), which take the
# fallback kernel; ties through every radix digit; infinities; bases 1 and 3 elements past
# 16-byte alignment.
PROBE_SHAPES = [
    {"batch": 1, "length": 1, "k": 1},
    {"batch": 3, "length": 7, "k": 7},
    {"batch": 5, "length": 1000, "k": 1},
    {"batch": 2, "length": 1000, "k": 1000},
    {"batch": 2, "length": 1024, "k": 1024, "levels": 5},
    {"batch": 3, "length": 4097, "k": 512},
    {"batch": 1, "length": 4096, "k": 512},
    {"batch": 4, "length": 4096, "k": 512, "levels": 3},
    {"batch": 3, "length": 2049, "k": 700, "levels": 1},
    {"batch": 2, "length": 33, "k": 17, "levels": 2},
    {"batch": 3, "length": 1500, "k": 900, "special": 1},
    {"batch": 3, "length": 4099, "k": 513, "offset": 1},
    {"batch": 2, "length": 4101, "k": 600, "levels": 7, "offset": 3},
    {"batch": 2, "length": 8195, "k": 40, "offset": 1},
    {"batch": 2, "length": 1500, "k": 1100, "special": 1},
]
# Values are copies of input elements, never computed, so the right answer is exact: min_matched
# 1.0 and tolerances far below one ulp step of any value a wrong kernel would copy instead. (The
# atol term scales with the rms of the reference, which is huge on "special" rows; check() compares
# values exactly, so that looseness lets nothing through.)
TOLERANCE = {"rtol": 1e-6, "atol": 1e-6, "min_matched": 1.0}
VENDOR_NAME = "torch.topk(x, k, dim=1, sorted=True) (fp32 values, int64 indices left unconverted)"

_FLT_MAX = 3.4028234663852886e38


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    dims = (shape["batch"], shape["length"])
    levels = shape.get("levels")
    if levels:
        # N distinct values, exact in fp32: 1.5, 1.75, 2.0, ...
        x = torch.randint(0, levels, dims, generator=g, device=device).to(torch.float32).mul_(0.25).add_(1.5)
    else:
        x = torch.randn(dims, generator=g, device=device, dtype=torch.float32)
    if shape.get("special"):
        u = torch.rand(dims, generator=g, device=device)
        # half the row -inf (so large k takes tied -inf), then +inf, +-FLT_MAX, +0.0 and -0.0
        for lo, hi, v in ((0.0, 0.50, float("-inf")), (0.50, 0.53, float("inf")), (0.53, 0.56, _FLT_MAX),
                          (0.56, 0.59, -_FLT_MAX), (0.59, 0.64, 0.0), (0.64, 0.69, -0.0)):
            x = torch.where((u >= lo) & (u < hi), torch.full_like(x, v), x)
    return {"x": x.contiguous()}


def outputs(shape):
    dims = (shape["batch"], shape["k"])
    return {"values": (dims, "float32"), "indices": (dims, "int32")}


def scalars(shape):
    return {"batch": shape["batch"], "length": shape["length"], "k": shape["k"]}


def reference(inputs, shape):
    # The sorted values only: which of several equal elements an index names is free (see check).
    top = torch.topk(inputs["x"].double(), shape["k"], dim=1, largest=True, sorted=True).values
    return {"values": top}


def check(inputs, outputs, shape):
    """Problems with the outputs (empty when valid): indices in [0, length) and unique per row,
    x[b, indices[b, j]] == values[b, j] exactly, and values equal to the k largest of the row in
    descending order, exactly. Never raises on wrong outputs (out-of-range indices are clamped
    before they are used)."""
    x, vals, idx = inputs["x"], outputs["values"], outputs["indices"]
    length, k = shape["length"], shape["k"]
    idx = idx.to(device=x.device, dtype=torch.int64)
    vals = vals.to(device=x.device, dtype=torch.float32)
    problems = []

    def first(mask):
        r, c = (int(t) for t in torch.nonzero(mask)[0])
        return r, c

    bad_range = (idx < 0) | (idx >= length)
    if bool(bad_range.any()):
        r, c = first(bad_range)
        problems.append(f"{int(bad_range.sum())} indices outside [0, {length}); first indices[{r}, {c}] = "
                        f"{int(idx[r, c])}")
    picked = x.gather(1, idx.clamp(0, length - 1))
    wrong = (picked != vals) & ~bad_range  # NaN never equals: unwritten values land here
    if bool(wrong.any()):
        r, c = first(wrong)
        problems.append(f"{int(wrong.sum())} values are not x at their index; first values[{r}, {c}] = "
                        f"{float(vals[r, c])!r} but x[{r}, {int(idx[r, c])}] = {float(picked[r, c])!r}")
    if k > 1:
        srt = torch.sort(idx, dim=1).values
        dup = srt[:, 1:] == srt[:, :-1]
        if bool(dup.any()):
            r, c = first(dup)
            problems.append(f"{int(dup.sum())} repeated indices; first row {r} repeats {int(srt[r, c])}")
    want = torch.topk(x, k, dim=1, largest=True, sorted=True).values
    off = vals != want
    if bool(off.any()):
        r, c = first(off)
        problems.append(f"{int(off.sum())} values differ from the k largest in descending order; first "
                        f"values[{r}, {c}] = {float(vals[r, c])!r}, expected {float(want[r, c])!r}")
    return problems


def vendor(inputs, shape):
    # int64 indices as torch returns them: an int32 cast would add a second kernel to the timing.
    v, i = torch.topk(inputs["x"], shape["k"], dim=1, largest=True, sorted=True)
    return {"values": v, "indices": i}


def bytes_moved(shape):
    # x read once (4 B per element), values (4 B) and indices (4 B) written once per kept element.
    return shape["batch"] * shape["length"] * 4 + shape["batch"] * shape["k"] * 8


def flops(shape):
    # No arithmetic on the values; count one comparison per element, the least a selection needs.
    return shape["batch"] * shape["length"]
