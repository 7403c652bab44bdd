"""Code the matrix-product apply workloads share (apply_workloads/matmul_<style>/, bmm_<style>/): fp32
products out = a @ b, one or a batch of them, with a stored [M, K] or [K, M] and b stored [K, N] or
[N, K], written by their naive kernels in the styles public code and benchmark problems use.

A workload.py states what is its own (NAME, ENTRY, ARGS in its kernel's names and order, the benchmark
and probe shapes) and the computation in a few names, then takes the rest of the contract:

    A_LAYOUT = "MK"          a stored [M, K] ("MK") or [K, M] ("KM", out = a^T @ b)
    B_LAYOUT = "KN"          b stored [K, N] ("KN") or [N, K] ("NK", out = a @ b^T)
    SIZES = {"M": "n", "N": "n", "K": "n"}    each extent -> the int argument (shape key) that gives it;
                             "batch" too for a batched product
    ROLES = {"a": "A", "b": "B", "out": "C"}   role -> ARGS name
    globals().update(define(globals()))

Every int argument is the shape key of its name. Inputs are unit normal. The oracle is the float64
product of the fp32 inputs; the performance reference is torch (torch.matmul / torch.bmm in fp32, with
TF32 off as torch leaves it by default).
"""
import math

import torch

# fp32 products accumulated in fp32 in any order (serial, tiled, split) err by about 1e-7 * sqrt(K) of
# the output's rms; "fp32" leaves two decades, and a product on TF32 tensor cores (operands rounded to
# 10-bit mantissas: about 4e-4 of the rms per element, up to ~2.5e-3 in the tail of 1e7 outputs)
# fails it. "benchmark" is the tolerance benchmark suites give fp32 operator problems (1e-2): it
# admits TF32 and still fails a product that misses one 32-wide k-tile (sqrt(32 / K) of the rms, 9% at
# K = 4096), an all-zero output and a copy of an input.
TOLERANCES = {"fp32": {"rtol": 1e-4, "atol": 1e-4, "min_matched": 1.0},
              "benchmark": {"rtol": 1e-2, "atol": 1e-2, "min_matched": 1.0}}


def define(ns: dict) -> dict:
    """The contract names the workload module `ns` does not set itself, from its A_LAYOUT, B_LAYOUT,
    SIZES, ROLES and ARGS (see the module docstring)."""
    a_km, b_nk = ns.get("A_LAYOUT", "MK") == "KM", ns.get("B_LAYOUT", "KN") == "NK"
    sizes, roles, args = ns["SIZES"], ns["ROLES"], ns["ARGS"]
    batched = "batch" in sizes

    def dims(shape):
        return {k: shape[v] for k, v in sizes.items()}

    def lead(d):
        return (d["batch"],) if batched else ()

    def make_inputs(shape, seed, device="cpu"):
        g = torch.Generator(device=device).manual_seed(seed)
        d = dims(shape)
        a = torch.randn(lead(d) + ((d["K"], d["M"]) if a_km else (d["M"], d["K"])), generator=g, device=device)
        b = torch.randn(lead(d) + ((d["N"], d["K"]) if b_nk else (d["K"], d["N"])), generator=g, device=device)
        return {roles["a"]: a, roles["b"]: b}

    def outputs(shape):
        d = dims(shape)
        return {roles["out"]: (lead(d) + (d["M"], d["N"]), "float32")}

    def scalars(shape):
        return {x["name"]: shape[x["name"]] for x in args if x["kind"] != "ptr"}

    def operands(inputs, dt):
        a, b = inputs[roles["a"]].to(dt), inputs[roles["b"]].to(dt)
        return (a.transpose(-1, -2) if a_km else a), (b.transpose(-1, -2) if b_nk else b)

    def reference(inputs, shape):
        a, b = operands(inputs, torch.float64)
        return {roles["out"]: torch.matmul(a, b)}

    def vendor(inputs, shape):
        a, b = operands(inputs, torch.float32)
        return {roles["out"]: torch.matmul(a, b)}

    def bytes_moved(shape):
        d = dims(shape)
        return 4 * math.prod(lead(d)) * (d["M"] * d["K"] + d["K"] * d["N"] + d["M"] * d["N"])

    def flops(shape):
        d = dims(shape)
        return 2 * math.prod(lead(d)) * d["M"] * d["N"] * d["K"]

    what = ("a^T" if a_km else "a") + " @ " + ("b^T" if b_nk else "b")
    return {
        "FAMILY": ns.get("FAMILY", "gemm"), "DTYPES": ("float32",),
        "TOLERANCE": ns.get("TOLERANCE", dict(TOLERANCES["benchmark"])),
        "VENDOR_NAME": ns.get("VENDOR_NAME", f"torch.matmul({what}) in fp32 (TF32 off)"),
        "make_inputs": make_inputs, "outputs": outputs, "scalars": scalars, "reference": reference,
        "vendor": vendor, "bytes_moved": bytes_moved, "flops": flops,
    }
