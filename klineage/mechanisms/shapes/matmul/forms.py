"""The step a mechanism takes a plan to (its preconditions), and the tuning values the step uses."""
from __future__ import annotations

import re
from dataclasses import replace

from klineage.mechanisms.base import NotApplicable
from klineage.mechanisms.shapes.matmul.plan import (DEFAULTS, FORM_ROLES, ROLE_INFO, SMEM_LIMIT, WGMMA_NS, Form, Plan,
                                                    _role_of)

# ---- the step a mechanism takes --------------------------------------------------------------------------


# fp32 operands rounded to TF32 (10-bit mantissa, relative error up to 2^-11 each): for unit-scale inputs
# of random sign the error of an output is about 4e-4 of the outputs' rms at any K (the rounding errors
# of K products add as sqrt(K), as the outputs do), up to ~2.5e-3 of it in the tail of 1e7 outputs. An
# absolute tolerance of TF32_ATOL (of the rms, klineage.gate.correctness) covers every element.
TF32_ATOL = 3e-3
TF32_PRECONDITION = ("fp32 operands rounded to TF32 (10-bit mantissa): outputs off by ~4e-4 of their rms at any K, "
                     f"up to ~2.5e-3 in the tail; needs the workload's atol >= {TF32_ATOL:g} (relative to the "
                     "output's rms)")


def tf32_verdict(tolerance) -> str:
    """Why the workload's tolerance refuses TF32 products ('' when it accepts them, or when no workload
    says: the gate's correctness check decides)."""
    if tolerance is None:
        return ""
    atol = getattr(tolerance, "atol", None)
    if atol is None and isinstance(tolerance, dict):
        atol = tolerance.get("atol")
    if atol is not None and atol < TF32_ATOL:
        return (f"f32 operands: the TF32 tensor-core path rounds them to 10-bit mantissas, and the workload's "
                f"atol {atol:g} (of the output's rms) is below the {TF32_ATOL:g} TF32 needs ({TF32_PRECONDITION})")
    return ""


def target_form(plan: Plan, mechanism: str, arch: str, tolerance=None) -> Form | NotApplicable:
    """The form `mechanism` takes the kernel to, or why it cannot (its preconditions). `tolerance`: the
    workload's (an fp32 product takes tensor cores as TF32 only where it admits TF32's rounding)."""
    f = plan.form
    sixteen = plan.dtype in ("bf16", "f16")
    hopper = re.fullmatch(r"sm_(\d+)a?", arch)
    sm = int(hopper.group(1)) if hopper else 0
    if mechanism == "smem_tiling":
        if f.core != "naive":
            return NotApplicable("the kernel already stages its operands in shared memory")
        return replace(f, core="smem")
    if mechanism == "register_tiling":
        if f.core in ("regtile", "mma", "wgmma"):
            return NotApplicable("the kernel already accumulates a tile of outputs per thread in registers")
        if f.core == "naive":
            return NotApplicable("register tiling here tiles the shared-memory slices of a tiled kernel: apply "
                                 "smem_tiling first")
        return replace(f, core="regtile")
    if mechanism == "tensor_core_mma":
        if f.tensor_cores:
            return NotApplicable("the kernel already runs its products on tensor cores")
        if not sixteen and plan.dtype != "f32":
            return NotApplicable(f"{plan.dtype} operands: mma.sync here takes bf16, fp16 or fp32 (as TF32)")
        if plan.dtype == "f32" and tf32_verdict(tolerance):
            return NotApplicable(tf32_verdict(tolerance))
        if plan.dtype == "f32" and sm and sm < 80:
            return NotApplicable(f"TF32 mma.sync needs sm_80 or newer (this target is {arch})")
        if f.core != "regtile":
            return NotApplicable("the mma.sync fragments replace a register tile of outputs: apply register_tiling "
                                 "first")
        if not f.unroll:
            return NotApplicable("the loops over the MMA fragments must be unrolled (#pragma unroll), or the "
                                 "accumulators move to local memory: apply unroll first")
        return replace(f, core="mma", copy="sync", swizzle=False)
    if mechanism == "smem_swizzle":
        if f.swizzle:
            return NotApplicable("the kernel's shared-memory tiles are already swizzled")
        if f.core != "mma":
            return NotApplicable("the swizzle here permutes the 16-byte chunks that ldmatrix reads: the kernel has no "
                                 "mma.sync operand tiles")
        return replace(f, swizzle=True)
    if mechanism == "async_copy":
        if f.copy != "sync":
            return NotApplicable("the kernel already copies its tiles asynchronously")
        if not f.tensor_cores:
            return NotApplicable("the cp.async ring here feeds tensor-core tiles of 128-byte rows: apply "
                                 "tensor_core_mma first")
        return replace(f, copy="cp_async")
    if mechanism == "wgmma":
        if f.core == "wgmma":
            return NotApplicable("the kernel already uses warpgroup MMA")
        if f.core != "mma":
            return NotApplicable("wgmma replaces mma.sync tiles: apply tensor_core_mma first")
        if not sixteen:
            return NotApplicable(f"{plan.dtype} operands: the wgmma form here takes bf16 or fp16 (its TF32 form is "
                                 "not written)")
        if plan.a_mmajor:
            return NotApplicable("a stored [K, M]: the wgmma form here reads a K-major a")
        if not f.swizzle:
            return NotApplicable("wgmma here reads 128-byte swizzled tiles through its descriptors: apply "
                                 "smem_swizzle first")
        if arch != "sm_90a":
            return NotApplicable(f"wgmma needs the arch-specific sm_90a target (this target is {arch})")
        return replace(f, core="wgmma")
    if mechanism == "tma":
        if f.copy == "tma":
            return NotApplicable("the kernel already loads its tiles with the TMA")
        if not f.tensor_cores or f.copy != "cp_async":
            return NotApplicable("the TMA ring here replaces a cp.async ring of tensor-core tiles: apply async_copy "
                                 "first")
        if not f.swizzle:
            return NotApplicable("the TMA here writes 128-byte swizzled tiles: apply smem_swizzle first")
        if sm < 90:
            return NotApplicable(f"the TMA needs sm_90 or newer (this target is {arch})")
        if not sixteen:
            return NotApplicable(f"{plan.dtype} operands: the TMA ring here loads 16-bit tiles")
        if plan.a_mmajor:
            return NotApplicable("a stored [K, M]: the TMA ring here loads a K-major a")
        return replace(f, copy="tma")
    if mechanism == "warp_specialization":
        if f.ws:
            return NotApplicable("the kernel is already warp-specialized")
        if f.core != "wgmma" or f.copy != "tma":
            return NotApplicable("warp specialization here gives the TMA ring to a producer warpgroup feeding wgmma "
                                 "consumers: apply wgmma and tma first")
        if not f.lb:
            return NotApplicable("the producer/consumer register split (setmaxnreg) needs __launch_bounds__ to size "
                                 "the registers: apply launch_bounds first")
        if arch != "sm_90a":
            return NotApplicable(f"setmaxnreg and wgmma need the sm_90a target (this target is {arch})")
        return replace(f, ws=True)
    return NotApplicable(f"the matmul rewriter does not write {mechanism}")


# ---- parameters ------------------------------------------------------------------------------------------


def card_values(config: dict) -> dict:
    """role -> value of a skill configuration: flat {NAME: int} pairs; or a card's carrier (or the card
    itself) with its measured configuration ([{"workload", "values": [{name, value, role, axis}]}], the
    gemm workload's kernel first; under "measured" as admission passes it) and example configuration
    ([{name, value}]); or one "values" list. The first value found for a role wins, flat pairs first."""
    out: dict = {}
    carrier = config.get("carrier") if isinstance(config.get("carrier"), dict) else config
    items: list[dict] = [{"name": k, "value": v} for k, v in config.items() if type(v) is int]
    groups = (carrier.get("measured_configuration") or carrier.get("measured")
              or ([{"values": config["values"]}] if "values" in config else []))
    groups = sorted(groups, key=lambda g: g.get("workload") != "gemm") if isinstance(groups, list) else []
    for g in groups:
        items += [it for it in g.get("values") or [] if isinstance(it, dict)]
    examples = carrier.get("example_configuration")
    items += [it for it in examples if isinstance(it, dict)] if isinstance(examples, list) else []
    for it in items:
        role = _role_of(str(it.get("name", "")))
        if role and isinstance(it.get("value"), int) and role not in out:
            out[role] = it["value"]
    return out


def legal(form: Form, v: dict, b_kmajor: bool, panel: int = 64, a_mmajor: bool = False) -> str:
    """Why the values `v` (role -> int) cannot build the form; '' when they can. `panel`: the columns of
    a 128-byte row (64 16-bit elements, 32 fp32) that an MN-major operand is staged in."""
    c = form.core
    if c == "smem":
        return "" if 1 <= v["tile"] <= 32 else "tile must be 1 to 32"
    if c == "regtile":
        bm, bn, bk, tm, tn = (v[k] for k in ("bm", "bn", "bk", "tm", "tn"))
        if min(bm, bn, bk, tm, tn) < 1 or bm % tm or bn % tn:
            return "BM / BN must be multiples of TM / TN"
        threads = (bm // tm) * (bn // tn)
        if not 32 <= threads <= 1024 or (bm + bn) * bk * 4 > 48 * 1024:
            return "threads or static shared memory out of range"
        if (tm * tn + tm + tn + 56) * threads > 65536:  # accumulators, operands, addresses: no spills
            return "the accumulators of a block exceed the register file"
        if form.vec and tn % 2:
            return "pair stores need an even TN"
        return ""
    stages = v.get("stages", 4) if form.copy != "sync" else 1
    if form.copy != "sync" and stages < 2:
        return "at least 2 stages"
    if c == "mma":
        bm, bn, wm, wn = v["bm"], v["bn"], v["warps_m"], v["warps_n"]
        if min(bm, bn, wm, wn) < 1 or bm % (16 * wm) or bn % (16 * wn) or wm * wn > 32:
            return "BM / BN must be multiples of 16 x WARPS_M / WARPS_N"
        if (bm // wm // 16) * (bn // wn // 8) * 4 > 128:
            return "a warp tile over 128 accumulators per thread"
    else:
        bm, bn = v["bm"], v["bn"]
        if bm not in (64, 128) or bn not in WGMMA_NS or (form.ws and bm != 128):
            return "wgmma tiles: BM 64 or 128 (128 with warp specialization), BN 64, 128 or 256"
    if not b_kmajor and bn % panel:
        return f"BN must be a multiple of {panel} (b staged in {panel}-column panels)"
    if a_mmajor and bm % panel:
        return f"BM must be a multiple of {panel} (a staged in {panel}-column panels)"
    barriers = (2 if form.ws else 1) * stages * 8 if form.copy == "tma" else 0
    if stages * (bm + bn) * 128 + barriers + 1024 > SMEM_LIMIT:
        return "the stages exceed 227 KB of shared memory"
    return ""


def choose(plan: Plan, form: Form, config: dict) -> tuple[dict, list[str]]:
    """role -> value for the form: per role the card's value, else the kernel's, else the default, each kept
    only if the whole set stays legal; and notes on values not taken."""
    roles = FORM_ROLES[form.core]
    if form.copy == "sync" and form.tensor_cores:
        roles = tuple(r for r in roles if r != "stages")
    panel = 32 if plan.dtype == "f32" else 64

    def why(vals: dict) -> str:
        return legal(form, vals, plan.b_kmajor, panel, plan.a_mmajor)
    base = {r: DEFAULTS[form.core].get(r, ROLE_INFO[r][0]) for r in roles}
    if why(base):
        raise AssertionError(f"defaults of {form.core} illegal: {why(base)}")
    card = card_values(config)
    notes = []
    v = dict(base)
    for source_name, src in (("kernel", plan.values), ("card", card)):  # the card's values win
        trial = dict(v)
        for r in roles:
            if r in src:
                trial[r] = src[r]
        if not why(trial):
            v = trial
            continue
        for r in roles:  # one at a time, so one illegal value does not drop the others
            if r in src and src[r] != v[r]:
                one = {**v, r: src[r]}
                if why(one):
                    notes.append(f"{source_name} {r}={src[r]} not used: {why(one)}")
                else:
                    v = one
    if form.tensor_cores and form.copy != "sync":
        while why(v) and v["stages"] > 2:  # shrink the ring to fit
            v["stages"] -= 1
    return v, notes
