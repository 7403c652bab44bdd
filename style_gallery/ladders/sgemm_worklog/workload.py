"""sgemm_worklog: C = A @ B for row-major fp32 A (M, K), B (K, N), C (M, N).

A style-gallery ladder written in the habits of a public SGEMM worklog: one file per kernel
(`sgemm_N_*.cu`), tile sizes as template parameters, `CEIL_DIV`, a coalescing fix the detectors
cannot see (declared structural in versions/ladder.toml), shared-memory blocking, a 2-D register
tile whose outer product lives in a helper, float4 loads with A stored transposed, a padded pitch
held in a named constant, and a double buffer kept in one flat shared array with a computed stage
offset. Like the worklog, the tiled kernels assume whole tiles: M and N multiples of 64, K of 32,
16-byte aligned bases (DOMAIN)."""
import torch

NAME = "sgemm_worklog"
FAMILY = "matmul"
DTYPES = ("float32",)
ENTRY = "sgemm"
ARGS = [
    {"name": "A", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "B", "kind": "ptr", "dtype": "float32", "role": "in"},
    {"name": "C", "kind": "ptr", "dtype": "float32", "role": "out"},
    {"name": "M", "kind": "int"},
    {"name": "N", "kind": "int"},
    {"name": "K", "kind": "int"},
]
DOMAIN = {"multiple_of": {"M": 64, "N": 64, "K": 32}, "aligned_bytes": 16}
BENCHMARK_CASES = [{"M": 2048, "N": 2048, "K": 1024}]
# One tile, non-square shapes, a single row of tiles, a tall thin product, a long K, a base 16
# bytes off alignment; two shapes outside DOMAIN (sizes off the tiles; a base 4 bytes off), not run.
PROBE_SHAPES = [
    {"M": 64, "N": 64, "K": 32},
    {"M": 128, "N": 192, "K": 96},
    {"M": 64, "N": 512, "K": 64},
    {"M": 320, "N": 64, "K": 480},
    {"M": 64, "N": 128, "K": 1024},
    {"M": 128, "N": 64, "K": 64, "offset": 4},
    {"M": 100, "N": 60, "K": 50},
    {"M": 64, "N": 64, "K": 32, "offset": 1},
]
TOLERANCE = {"rtol": 1e-3, "atol": 1e-3, "min_matched": 0.999}
VENDOR_NAME = "torch A @ B (fp32, cuBLAS, TF32 off)"


def make_inputs(shape, seed, device="cpu"):
    g = torch.Generator(device=device).manual_seed(seed)
    A = torch.rand(shape["M"], shape["K"], generator=g, device=device, dtype=torch.float32).mul_(2).sub_(1)
    B = torch.rand(shape["K"], shape["N"], generator=g, device=device, dtype=torch.float32).mul_(2).sub_(1)
    return {"A": A, "B": B}


def outputs(shape):
    return {"C": ((shape["M"], shape["N"]), "float32")}


def scalars(shape):
    return {"M": shape["M"], "N": shape["N"], "K": shape["K"]}


def reference(inputs, shape):
    return {"C": inputs["A"].double() @ inputs["B"].double()}


def vendor(inputs, shape):
    return {"C": inputs["A"] @ inputs["B"]}


def bytes_moved(shape):
    return 4 * (shape["M"] * shape["K"] + shape["K"] * shape["N"] + shape["M"] * shape["N"])


def flops(shape):
    return 2 * shape["M"] * shape["N"] * shape["K"]
