"""The step a mechanism takes a plan to (its preconditions), and the tuning values the step uses."""
from __future__ import annotations

import re
from dataclasses import replace

from klineage.mechanisms.base import NotApplicable
from klineage.mechanisms.shapes.matmul.plan import (DEFAULTS, FORM_ROLES, ROLE_INFO, SMEM_LIMIT, WGMMA_NS, Form, Plan,
                                                    _role_of)

# ---- the step a mechanism takes --------------------------------------------------------------------------


def target_form(plan: Plan, mechanism: str, arch: str) -> Form | NotApplicable:
    """The form `mechanism` takes the kernel to, or why it cannot (its preconditions)."""
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
        if not sixteen:
            return NotApplicable(f"{plan.dtype} operands: mma.sync here takes bf16 or fp16 (tf32 would change the "
                                 "numerics)")
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


def legal(form: Form, v: dict, b_kmajor: bool) -> str:
    """Why the values `v` (role -> int) cannot build the form; '' when they can."""
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
    if not b_kmajor and bn % 64:
        return "BN must be a multiple of 64 (b staged in 64-column panels)"
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
    base = {r: DEFAULTS[form.core].get(r, ROLE_INFO[r][0]) for r in roles}
    if legal(form, base, plan.b_kmajor):
        raise AssertionError(f"defaults of {form.core} illegal: {legal(form, base, plan.b_kmajor)}")
    card = card_values(config)
    notes = []
    v = dict(base)
    for source_name, src in (("kernel", plan.values), ("card", card)):  # the card's values win
        trial = dict(v)
        for r in roles:
            if r in src:
                trial[r] = src[r]
        if not legal(form, trial, plan.b_kmajor):
            v = trial
            continue
        for r in roles:  # one at a time, so one illegal value does not drop the others
            if r in src and src[r] != v[r]:
                one = {**v, r: src[r]}
                if legal(form, one, plan.b_kmajor):
                    notes.append(f"{source_name} {r}={src[r]} not used: {legal(form, one, plan.b_kmajor)}")
                else:
                    v = one
    if form.tensor_cores and form.copy != "sync":
        while legal(form, v, plan.b_kmajor) and v["stages"] > 2:  # shrink the ring to fit
            v["stages"] -= 1
    return v, notes
