"""rope: rotary position embedding, rotate-half convention, on bf16 x of shape (tokens, heads, dim)
with fp32 cos/sin tables of shape (tokens, dim/2) shared by every head of a token:
    x1, x2 = x[..., :dim/2], x[..., dim/2:]
    out[..., :dim/2] = x1 * cos - x2 * sin
    out[..., dim/2:] = x2 * cos + x1 * sin
dim is a shape key and an argument (even; 128 in the benchmark) so kernels cannot bake it in."""
import torch

NAME = "rope"
FAMILY = "positional"
DTYPES = ("bfloat16", "float32")
ENTRY = "rope"
# The tables are cos_tab / sin_tab rather than cos / sin so that no parameter shadows the math
# functions of the same name inside a kernel.
ARGS = [
    {"name": "x", "kind": "ptr", "dtype": "bfloat16", "role": "in"},
    {"name": "cos_tab", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "sin_tab", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "out", "kind": "ptr", "dtype": "bfloat16", "role": "out"},
    {"name": "tokens", "kind": "int"},
    {"name": "heads", "kind": "int"},
    {"name": "dim", "kind": "int"},
]
BENCHMARK_CASES = [{"tokens": 16384, "heads": 32, "dim": 128}]
# Head dims off the vector width (dim 10 and 130: half-widths 5 and 65, so neither the pairs nor a
# token's table row fill a 16-byte vector; dim 96: half 48, no power of two; dim 2: one pair), odd head
# counts, a single element pair; misaligned bases (offset 1, 3: x 2 / 6 bytes and the tables 4 / 12
# bytes past alignment), one large enough that a grid-stride fallback loops, and bases 16-byte
# aligned but not 256-byte aligned (offset 8) on the vector path.
PROBE_SHAPES = [
    {"tokens": 1, "heads": 1, "dim": 2},
    {"tokens": 3, "heads": 5, "dim": 10},
    {"tokens": 17, "heads": 7, "dim": 128},
    {"tokens": 1000, "heads": 3, "dim": 64},
    {"tokens": 33, "heads": 32, "dim": 96},
    {"tokens": 5, "heads": 3, "dim": 130},
    {"tokens": 8191, "heads": 2, "dim": 128},
    {"tokens": 17, "heads": 7, "dim": 128, "offset": 1},
    {"tokens": 129, "heads": 9, "dim": 128, "offset": 3},
    {"tokens": 7, "heads": 5, "dim": 10, "offset": 3},
    {"tokens": 33, "heads": 5, "dim": 128, "offset": 8},
]
# bf16 output: one rounding is at most 2^-8 relative and comes after fp32 math (~1e-7 of the terms,
# in any order, with or without FMA), so every fp32 kernel matches every element under rtol 1e-2.
# The absolute term is small (1e-3 of the rms of out) because an output near zero from cancellation
# (x1 * cos ~ x2 * sin) gets no help from rtol: rounding the tables or the products to bf16 errs by
# ~2^-9 of |x| there and fails, as does an all-zero output or x itself.
TOLERANCE = {"rtol": 1e-2, "atol": 1e-3, "min_matched": 0.999}
VENDOR_NAME = ("torch eager torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1).to(bf16) "
               "(bf16 x, fp32 tables, fp32 math, several kernels)")

ROPE_BASE = 10000.0


def _check_dim(shape):
    if shape["dim"] % 2:
        raise ValueError(f"rope: dim must be even, got {shape['dim']}")
    return shape["dim"] // 2


def make_inputs(shape, seed, device="cpu"):
    half = _check_dim(shape)
    t, h = shape["tokens"], shape["heads"]
    g = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(t, h, 2 * half, generator=g, device=device, dtype=torch.float32)
    # Real tables: position p = start + token, frequency base^(-2i/dim), angles in float64, the
    # tables rounded once to fp32. The start comes from the seed (1..8192), so no position is
    # implied by the token index and the first token is already rotated.
    start = 1 + int(torch.randint(0, 8192, (1,), generator=g, device=device))
    pos = torch.arange(t, dtype=torch.float64, device=device) + start
    inv_freq = ROPE_BASE ** (-torch.arange(half, dtype=torch.float64, device=device) * 2.0 / (2 * half))
    ang = pos[:, None] * inv_freq[None, :]
    return {"x": x.to(torch.bfloat16), "cos_tab": torch.cos(ang).float().contiguous(),
            "sin_tab": torch.sin(ang).float().contiguous()}


def outputs(shape):
    return {"out": ((shape["tokens"], shape["heads"], shape["dim"]), "bfloat16")}


def scalars(shape):
    return {"tokens": shape["tokens"], "heads": shape["heads"], "dim": shape["dim"]}


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def reference(inputs, shape):
    return {"out": _rope(inputs["x"].double(), inputs["cos_tab"].double(), inputs["sin_tab"].double())}


def vendor(inputs, shape):
    # bf16 x times fp32 tables promotes to fp32; the result is rounded to bf16 once at the end.
    return {"out": _rope(inputs["x"], inputs["cos_tab"], inputs["sin_tab"]).to(torch.bfloat16)}


def bytes_moved(shape):
    # x read once + out written once (2 bytes each per element) + the two fp32 tables read once
    # (4 bytes each per token and pair): 4*T*H*D + 2 * 4*T*(D/2) = 4*T*H*D + 4*T*D
    t, h, d = shape["tokens"], shape["heads"], shape["dim"]
    return 4 * t * h * d + 4 * t * d


def flops(shape):
    # per (token, head, pair): 4 multiplies + 2 adds, D/2 pairs -> 3 * T * H * D
    return 3 * shape["tokens"] * shape["heads"] * shape["dim"]
