"""Structural families of the pipelined matrix main loop: tensor-core MMAs, asynchronous
global->shared copies, multi-stage shared buffers and warp specialization.

Two mechanisms are umbrellas over a Hopper-specific one, so a version ladder that moves from the
general form to the Hopper form keeps the general kind and adds exactly the specific one:
- tensor_core_mma: any tensor-core MMA, `flavour` wmma / mma.sync / wgmma;
  wgmma: the warpgroup form only (wgmma.mma_async, fence / commit_group / wait_group, shared-memory
  matrix descriptors), sm_90a;
- async_copy: any asynchronous global->shared copy, `engine` cp.async / tma;
  tma: the Tensor Memory Accelerator only (bulk tensor copies, CUtensorMap, mbarrier transaction
  counts).
"""
from __future__ import annotations

import re

from klineage.mechanisms.codescan import COPY_CATEGORIES, MMA_CATEGORIES, Scan, assignments, base_name, identifiers
from klineage.mechanisms.structural import _joined, _lines, _ptx_sites, _Structural
from klineage.parse.syntax import walk


def _bulk_destination(i) -> str:
    """The destination state space of a cp(.reduce).async.bulk[.tensor.Nd] copy."""
    for p in i.parts[3:]:
        base = p.split("::")[0]
        if base in ("shared", "global"):
            return base
    return ""


# ---- stage counts ----------------------------------------------------------------------------

_NOT_A_COUNT = re.compile(r"(?i)bytes|size|elem|tile|offset|idx|index|stride")


def _is_stage_name(name: str) -> bool:
    """A name for the number of pipeline stages: STAGES, kStages, GEMM_STAGES, NSTAGE, PIPE_DEPTH."""
    if _NOT_A_COUNT.search(name):
        return False
    return bool(re.search(r"(?i)stages", name) or re.fullmatch(r"[A-Z0-9_]*STAGE[A-Z0-9_]*", name)
                or re.search(r"(?i)pipe(?:line)?_?depth", name) or re.fullmatch(r"k?_?(?:PIPE|Pipe)", name)
                or re.fullmatch(r"(?:k_?)?(?:RING|Ring|DEPTH|Depth|NBUF|NBufs?|NUM_BUFS?|NumBufs?|BUFFERS|Buffers)",
                                name))


def _stage_names(s: Scan, fn) -> list[str]:
    """Stage-count names the function's live code uses, most used first."""
    counts: dict[str, int] = {}
    for i in s.lines(fn):
        for w in re.findall(r"[A-Za-z_]\w*", s.code(i)):
            if _is_stage_name(w):
                counts[w] = counts.get(w, 0) + 1
    return sorted(counts, key=lambda w: (-counts[w], w))


def _stages(s: Scan, fn, names: list[str]) -> dict:
    for n in names:
        v = s.value(n, fn)
        if v is not None:
            return {"stages": v}
    return {"stages": names[0]} if names else {}


# ---- tensor cores ----------------------------------------------------------------------------

_PTX_TYPES = ("f64", "f32", "f16", "bf16", "tf32", "e4m3", "e5m2", "s32", "s8", "u8", "s4", "u4", "b1")
_C_TYPES = {"half": "f16", "__half": "f16", "__nv_bfloat16": "bf16", "nv_bfloat16": "bf16", "float": "f32",
            "double": "f64", "int": "s32", "signed char": "s8", "unsigned char": "u8", "tf32": "tf32"}
_MMA_PTX = re.compile(r"\bmma\.(?:sp(?:::ordered_metadata)?\.)?sync\.aligned\.(m\d+n\d+k\d+)((?:\.\w+)*)")
_LDMATRIX = re.compile(r"\bldmatrix\.sync\.aligned\.m8n8\.(x[124])(\.trans)?")
_WMMA_API = re.compile(r"\b(?:nvcuda::)?wmma::(?:mma_sync|load_matrix_sync|store_matrix_sync|fill_fragment|fragment)\b")
_WMMA_BARE = re.compile(r"(?<![\w:.])(?:mma_sync|load_matrix_sync|store_matrix_sync|fill_fragment)\s*\(|"
                        r"(?<![\w:.])fragment\s*<\s*(?:matrix_a|matrix_b|accumulator)\b")
_WMMA_FRAG = re.compile(r"\bfragment\s*<\s*(?:(?:nvcuda::)?wmma::)?(matrix_a|matrix_b|accumulator)\s*,\s*(\w+)\s*,"
                        r"\s*(\w+)\s*,\s*(\w+)\s*,\s*([\w:]+(?:\s+\w+)?)")
_WGMMA = re.compile(r"\bwgmma\.(mma_async|fence|commit_group|wait_group)\b")
_WGMMA_SHAPE = re.compile(r"\bwgmma\.mma_async(?:\.sp)?\.sync\.aligned\.(m64n\d+k\d+)((?:\.\w+)*)")


def _ptx_types(suffix: str) -> list[str]:
    return [t for t in suffix.split(".") if t in _PTX_TYPES]


def _wgmma_info(s: Scan, fn) -> tuple[set[int], dict]:
    ops = s.find(fn, _WGMMA)
    if not ops:
        return set(), {}
    shapes = s.find(fn, _WGMMA_SHAPE)
    types = [_ptx_types(m.group(2)) for _, m in shapes]
    info = {"ops": _joined(m.group(1) for _, m in ops), "shape": _joined(m.group(1) for _, m in shapes),
            "accum": _joined(t[0] for t in types if t), "dtype": _joined(t[1] for t in types if len(t) > 1)}
    return _lines(ops), {k: v for k, v in info.items() if v}


class TensorCoreMMA(_Structural):
    NAME = "tensor_core_mma"
    DESCRIPTION = ("tensor-core matrix multiply-accumulate, any flavour: WMMA fragments (nvcuda::wmma), mma.sync "
                   "with ldmatrix fragments, or warpgroup wgmma (also its own mechanism, wgmma)")
    ANCHOR = "MMA inner loop"
    FILE_SIGNATURES = (r"\bwmma::mma_sync\b", r"\bmma_sync\s*\(", r"mma\.sync\.aligned", r"wgmma\.mma_async",
                       r"\bwgmma\.", r"\bldmatrix\b")

    def evidence(self, s, fn):
        ptx, ldm = s.find(fn, _MMA_PTX), s.find(fn, _LDMATRIX)
        wmma = s.find(fn, _WMMA_API)
        if "wmma" in " ".join(s.code_lines):  # `using namespace nvcuda::wmma`: unqualified calls
            wmma += s.find(fn, _WMMA_BARE)
        wg_lines, wg = _wgmma_info(s, fn)
        lines = _lines(ptx) | _lines(ldm) | _lines(wmma) | wg_lines
        if not lines:
            return None
        flavours = {"mma.sync" for _ in ptx[:1] + ldm[:1]} | {"wmma" for _ in wmma[:1]} | {"wgmma" for _ in wg_lines}
        shapes = {m.group(1) for _, m in ptx} | set(filter(None, [wg.get("shape")]))
        accum, dtype = set(filter(None, [wg.get("accum")])), set(filter(None, [wg.get("dtype")]))
        for _, m in ptx:
            t = _ptx_types(m.group(2))
            accum |= set(t[:1])
            dtype |= set(t[1:2])
        for _, m in s.find(fn, _WMMA_FRAG):
            use, mm, nn, kk, ty = m.groups()
            shapes.add(f"m{mm}n{nn}k{kk}")
            ty = _C_TYPES.get(ty.split("::")[-1], ty.split("::")[-1])
            (accum if use == "accumulator" else dtype).add(ty)
        info = {"flavour": _joined(flavours), "shape": _joined(shapes), "accum": _joined(accum),
                "dtype": _joined(dtype), "ldmatrix": _joined(m.group(1) + (m.group(2) or "") for _, m in ldm)}
        return lines, {k: v for k, v in info.items() if v}

    def compiled(self, ck) -> list:
        """mma.sync, wmma.mma.sync and wgmma.mma_async instructions."""
        return _ptx_sites(self, ck, _is_mma)


def _is_mma(i) -> bool:
    return i.op == "mma" or (i.op == "wmma" and i.has("mma")) or (i.op == "wgmma" and i.has("mma_async"))


class Wgmma(_Structural):
    NAME = "wgmma"
    DESCRIPTION = ("warpgroup MMA (sm_90a): wgmma.mma_async over 128 threads with operands read from shared "
                   "memory through matrix descriptors, ordered by wgmma.fence / commit_group / wait_group")
    ANCHOR = "warpgroup MMA"
    FILE_SIGNATURES = (r"\bwgmma\.",)
    PRECONDITIONS = {
        "hardware": [{"condition": "the arch-specific sm_90a target (wgmma is not in sm_90, sm_80, sm_100 or sm_120)",
                      "fails_without": "ptxas rejects wgmma.* for every other target"}],
        "storage": [{"condition": "operand tiles in shared memory laid out as their matrix descriptors state "
                                  "(major-ness, swizzle mode matching whatever wrote the tile, 1024-byte aligned "
                                  "bases for the 128-byte swizzle)",
                     "fails_without": "wgmma reads other elements than meant: silently wrong products"}],
        "pipeline": [{"condition": "all 128 threads of the warpgroup run wgmma.fence, the MMAs, commit_group and "
                                   "wait_group together, and no accumulator register is read or written until the "
                                   "wait_group that retires its group",
                      "fails_without": "undefined accumulators (stale or torn values) or a hang"}],
        "data_types": [{"condition": "operand types the instruction has (f16/bf16 with an f32 or f16 accumulator, "
                                     "tf32, e4m3/e5m2, s8/u8) and the shape's K (16 for 16-bit operands)",
                        "fails_without": "the asm does not assemble, or the operands are reinterpreted bit for bit"}],
    }

    def evidence(self, s, fn):
        lines, info = _wgmma_info(s, fn)
        return (lines, info) if lines else None

    def compiled(self, ck) -> list:
        """wgmma.mma_async instructions."""
        return _ptx_sites(self, ck, lambda i: i.op == "wgmma" and i.has("mma_async"))


# ---- asynchronous copies ---------------------------------------------------------------------

_CP_ASYNC = re.compile(r"\bcp\.async\.(ca|cg)\.shared(?:::cta)?\.global(?:\.[\w:]+)*\s*\[[^\]]*\]\s*,\s*\[[^\]]*\]"
                       r"\s*,\s*(\d+)|\bcp\.async\.(ca|cg)\b")
_CP_GROUP = re.compile(r"\bcp\.async\.(?:commit_group|wait_group|wait_all)\b|\b__pipeline_(?:commit|wait_prior)\s*\(")
_CP_API = re.compile(r"\b__pipeline_memcpy_async\s*\(|\b(?:cuda|cooperative_groups|cg)::memcpy_async\s*\(|"
                     r"\bcuda::(?:make_)?pipeline\b|\.producer_(?:acquire|commit)\s*\(|"
                     r"\.consumer_(?:wait|release)\s*\(")
# the depth a cp.async wait leaves in flight: PTX, the pipeline primitive, or a helper `cp_async_wait<N>()`
_CP_WAIT = re.compile(r"\bcp\.async\.wait_group\s+(\d+)|\b__pipeline_wait_prior\s*\(\s*([^()]+?)\s*\)|"
                      r"\b(?=\w*wait)(?=\w*(?:async|pipe|cp_))\w+\s*<\s*([^<>()]+?)\s*>\s*\(")
# bulk copies: the state space after the shape is the destination (shared: a load, global: a store)
_BULK_COPY = re.compile(r"\bcp\.(?:reduce\.)?async\.bulk(?:\.tensor\.(\d)d)?\.(shared|global)[\w:.]*|"
                        r"\bcp_async_bulk_tensor_(\d)d_(global_to_shared|shared_to_global)\w*\s*\(|"
                        r"\bmemcpy_async_tx\s*\(")

_TMA_OTHER = re.compile(r"\bcp\.async\.bulk\.(?:prefetch|commit_group|wait_group)[\w:.]*|\bCUtensorMap\b|"
                        r"\bcuTensorMapEncode\w*|\bprefetch\.tensormap\b|\bfence\.proxy\.tensormap\w*|"
                        r"\btensormap\.replace\b|\bexpect_tx\b|\bcomplete_tx\b|\bbarrier_arrive_tx\s*\(")
_MBARRIER = re.compile(r"\bmbarrier\.[\w:.]+|\bfence\.mbarrier_init\b")


def _bulk_loads(hits):
    return [(ln, m) for ln, m in hits if m.group(2) == "shared" or m.group(4) == "global_to_shared"
            or m.group(0).startswith("memcpy_async_tx")]


class AsyncCopy(_Structural):
    NAME = "async_copy"
    DESCRIPTION = ("asynchronous global->shared copies, any engine: cp.async (and memcpy_async, the pipeline "
                   "primitives) or the TMA's bulk copies (also their own mechanism, tma)")
    ANCHOR = "global-to-shared copy"
    # a copy engine filling shared memory takes over from the register path (smem_staging): a step
    # adding asynchronous copies may take that staging away
    REPLACES = ("smem_staging",)
    FILE_SIGNATURES = (r"cp\.async\.(ca|cg)\b", r"__pipeline_memcpy_async", r"cuda::memcpy_async",
                       r"cp\.async\.commit_group", r"cp\.async\.wait_group", r"cp\.async\.bulk\.tensor")

    def evidence(self, s, fn):
        cp = s.find(fn, _CP_ASYNC) + s.find(fn, _CP_GROUP) + s.find(fn, _CP_API)
        bulk = _bulk_loads(s.find(fn, _BULK_COPY))
        if not cp and not bulk:
            return None
        copies = s.find(fn, _CP_ASYNC)
        info = {"engine": _joined(["cp.async" if cp else "", "tma" if bulk else ""]),
                "cache": _joined(m.group(1) or m.group(3) for _, m in copies),
                "bytes": _joined(m.group(2) for _, m in copies),
                "wait": _joined(next((g for g in m.groups() if g), "") for _, m in s.find(fn, _CP_WAIT)) if cp else ""}
        info.update(_stages(s, fn, _stage_names(s, fn)))
        return _lines(cp) | _lines(bulk), {k: v for k, v in info.items() if v != ""}

    def compiled(self, ck) -> list:
        """Copies from global into shared memory that do not pass through registers: cp.async.ca/.cg and
        bulk (tensor) copies whose destination is shared memory."""
        def wanted(i):
            if i.op != "cp" or not i.has("async"):
                return False
            if i.has("bulk"):
                return _bulk_destination(i) == "shared" and not i.has("prefetch")
            return (i.has("ca") or i.has("cg")) and any(p.startswith("shared") for p in i.parts)
        return _ptx_sites(self, ck, wanted)


class TMA(_Structural):
    NAME = "tma"
    DESCRIPTION = ("Tensor Memory Accelerator (sm_90): bulk tensor copies (cp.async.bulk.tensor) described by a "
                   "CUtensorMap, completing on an mbarrier with a transaction count")
    ANCHOR = "bulk tensor copy"
    FILE_SIGNATURES = (r"cp\.async\.bulk", r"CUtensorMap", r"cuTensorMapEncode")

    def evidence(self, s, fn):
        copies = s.find(fn, _BULK_COPY)
        core = copies + s.find(fn, _TMA_OTHER)
        if not core:
            return None
        loads = _bulk_loads(copies)
        info = {"dims": _joined(f"{m.group(1) or m.group(3)}d" for _, m in copies if m.group(1) or m.group(3)),
                "copies": _joined(["load" if loads else "", "store" if len(loads) < len(copies) else ""]),
                "multicast": "cluster" if any("multicast::cluster" in m.group(0) for _, m in copies) else ""}
        info.update(_stages(s, fn, _stage_names(s, fn)))
        return _lines(core) | _lines(s.find(fn, _MBARRIER)), {k: v for k, v in info.items() if v != ""}

    def compiled(self, ck) -> list:
        """Bulk copies (cp.async.bulk, .tensor, cp.reduce.async.bulk) in either direction."""
        return _ptx_sites(self, ck, lambda i: i.op == "cp" and i.has("bulk") and not i.has("commit_group")
                          and not i.has("wait_group"))


class MultistageBuffer(_Structural):
    NAME = "multistage_buffer"
    DESCRIPTION = "multi-stage shared-memory buffers (software pipelining over STAGES tiles)"
    ANCHOR = "shared tile ring"
    FILE_SIGNATURES = ()

    def evidence(self, s, fn):
        names = [n for n in _stage_names(s, fn) if s.value(n, fn) is None or s.value(n, fn) >= 2]
        lines, stages = set(), {}
        if names:
            alt = "|".join(map(re.escape, names))
            ring = re.compile(rf"%\s*\(?\s*(?:{alt})\b|&\s*\(\s*(?:{alt})\s*-\s*1\s*\)|\+\+\s*\w+\s*==\s*(?:{alt})\b|"
                              rf"\b\w+\s*\+\s*1\s*==\s*(?:{alt})\b|==\s*(?:{alt})\s*-\s*1\s*\?|"
                              rf"__shared__[^;]*\[\s*(?:{alt})\s*\]")
            hits = s.find(fn, ring)
            rings = {m.group(0) for _, m in hits}
            used = [n for n in names if any(re.search(rf"\b{re.escape(n)}\b", r) for r in rings)]
            used += [n for n in names if n not in used and _struct_ring(s, fn, n)]
            if used:
                lines = _lines(hits) | _lines(s.find(fn, rf"\b(?:{alt})\b"))
                stages = _stages(s, fn, used)
        for ln, m in s.find(fn, r"\b(\w*(?:stage|buf|pipe|slot)\w*)\s*=\s*\(\s*\1\s*\+\s*1\s*\)\s*%\s*(\w+)"):
            v = s.value(m.group(2), fn)
            if v is not None and v >= 2:
                lines.add(ln)
                stages = stages or {"stages": v}
        if not lines and fn.cats & {"cp_async", "tma_copy"}:
            lines = _double_buffer(s, fn)
            stages = {"stages": 2} if lines else {}
        if not lines:
            lines = _prefetch_double_buffer(s, fn)
            stages = {"stages": 2} if lines else {}
        if not lines:
            return None
        info = dict(stages)
        info["copy"] = _joined(["cp.async" if "cp_async" in fn.cats else "", "tma" if "tma_copy" in fn.cats else ""])
        if "cp_async" in fn.cats:
            info["wait"] = _joined(next((g for g in m.groups() if g), "") for _, m in s.find(fn, _CP_WAIT))
        return lines, {k: v for k, v in info.items() if v != ""}


def _struct_ring(s: Scan, fn, name: str) -> bool:
    """The function uses a struct (e.g. the shared-storage struct) with a field dimensioned by `name`."""
    structs = set()
    for n in walk(s.tree.root):
        if n.type == "struct_specifier" and n.child_by_field_name("name") is not None:
            body = n.child_by_field_name("body")
            if body is not None and re.search(rf"\[\s*{re.escape(name)}\s*\]", s.tree.text_of(body)):
                structs.add(s.tree.text_of(n.child_by_field_name("name")))
    return bool(structs) and any(re.search(rf"\b{re.escape(t)}\b", s.code(i)) for t in structs for i in s.lines(fn))


def _double_buffer(s: Scan, fn) -> set[int]:
    """`__shared__ T buf[2][...]` indexed by a toggled variable (`b ^= 1`, `b = 1 - b`, `k & 1`, `k % 2`)."""
    arrays = {m.group(1): ln for ln, m in s.find(fn, r"__shared__[^;=]*?\b(\w+)\s*\[\s*2\s*\]\s*\[")}
    if not arrays:
        return set()
    flips = s.find(fn, r"\b(\w+)\s*\^=\s*1\b|\b(\w+)\s*=\s*1\s*-\s*\2\b")
    toggles = "|".join(sorted({re.escape(m.group(1) or m.group(2)) for _, m in flips})) or "(?!)"
    out = set()
    for name, decl in arrays.items():
        idx = (rf"\b{re.escape(name)}\s*\[\s*(?:(?:{toggles})\s*(?:\^\s*1\s*)?\]|1\s*-\s*(?:{toggles})\s*\]|"
               rf"[^\]]*?(?:&\s*1|%\s*2)\s*\)?\s*\])")
        hits = s.find(fn, idx)
        if hits:
            out |= {decl} | _lines(hits) | {ln for ln, m in flips if any(
                re.search(rf"\b{re.escape(m.group(1) or m.group(2))}\b", h.group(0)) for _, h in hits)}
    return out


def _prefetch_double_buffer(s: Scan, fn) -> set[int]:
    """Two shared stages used as a pipeline without (or around) a copy engine: an array of two tiles
    (`[2][N]`, or one `[2 * N]` array) whose halves are picked by a toggled or parity variable (`cur =
    k & 1`, `nxt = cur ^ 1`, `b ^= 1`), written with values that do not come from the array itself
    (the next tile's global loads) while the other half is read. A scan's ping-pong halves, each
    written from the other, are not a pipeline."""
    arrays = {m.group(1): ln for ln, m in s.find(fn, r"__shared__[^;=]*?\b(\w+)\s*\[\s*(?:2\s*\]\s*\[|2\s*\*|"
                                                     r"[^\]]*\*\s*2\s*\])")}
    if not arrays:
        return set()
    flips = s.find(fn, r"\b(\w+)\s*\^=\s*1\b|\b(\w+)\s*=\s*1\s*-\s*\2\b|\b(\w+)\s*=\s*[^;=]*?(?:&\s*1|%\s*2)\s*\)?\s*;|"
                   r"\b(\w+)\s*=\s*\w+\s*\^\s*1\s*;")
    toggles = {next(g for g in m.groups() if g) for _, m in flips}
    if not toggles:
        return set()
    alt = "|".join(sorted(map(re.escape, toggles)))
    out = set()
    for name, decl in arrays.items():
        idx = rf"\b{re.escape(name)}\s*\[\s*\(?\s*(?:{alt})\s*(?:\]|\*|\^\s*1\s*\])"
        hits = s.find(fn, idx)
        if hits and not _written_from_itself(s, fn, name):
            out |= {decl} | _lines(hits) | {ln for ln, m in flips if any(
                re.search(rf"\b{re.escape(next(g for g in m.groups() if g))}\b", h.group(0)) for _, h in hits)}
    return out


def _written_from_itself(s: Scan, fn, name: str) -> bool:
    """Some store into array `name` (or a pointer into it) takes a value read from the array."""
    aliases = {name}
    defs: dict[str, str] = {}
    for lhs, op, rhs, _ in assignments(fn.node):
        v = base_name(lhs)
        if v:
            defs[v] = defs.get(v, "") + " " + rhs.text.decode()
        if v and re.search(rf"&\s*{re.escape(name)}\s*\[|\b{re.escape(name)}\s*\+", rhs.text.decode()):
            aliases.add(v)
    reads = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(aliases))) + r")\s*\[")
    named = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(aliases))) + r")\b")
    for lhs, op, rhs, _ in assignments(fn.node):
        target = lhs.text.decode()
        if not (reads.search(target) or (target.lstrip().startswith("*") and named.search(target))):
            continue  # not a store into the array (the declaration of a pointer into it, say)
        text = rhs.text.decode() + (" " + lhs.text.decode() if op != "=" else "")
        if reads.search(text) or any(reads.search(defs.get(i, "")) for i in identifiers(rhs)):
            return True
    return False


# ---- warp specialization ---------------------------------------------------------------------

_SETMAXNREG = re.compile(r"\bsetmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s*(\d+)?")
_TID_EXPR = r"(?:threadIdx\.x|{aliases})"


class WarpSpecialization(_Structural):
    NAME = "warp_specialization"
    DESCRIPTION = ("warp specialization: warps (or warpgroups) with different roles, producers issuing the copies "
                   "and consumers computing, split by a branch on the warp(group) index; setmaxnreg moves "
                   "registers from producers to consumers")
    ANCHOR = "warp role branch"
    FILE_SIGNATURES = (r"setmaxnreg",)

    def evidence(self, s, fn):
        regs = s.find(fn, _SETMAXNREG)
        roles, role_lines, patterns = _role_vars(s, fn)
        branch_lines, splits = set(), set()
        for n in walk(fn.node):
            if n.type != "if_statement" or not s.live(n.start_point.row + 1):
                continue
            cond = n.child_by_field_name("condition")
            split = _role_split(s, fn, cond, roles, patterns)
            if split and _producer_consumer(s, n):
                branch_lines.add(n.start_point.row + 1)
                splits.add(split)
        if not regs and not branch_lines:
            return None
        lines = _lines(regs) | branch_lines
        used = {v for v in roles if any(re.search(rf"\b{re.escape(v)}\b", s.code(ln)) for ln in branch_lines)}
        for _ in range(3):  # and the role variables those are computed from
            used |= {w for v, ln in role_lines if v in used for w in roles
                     if re.search(rf"\b{re.escape(w)}\b", s.code(ln))}
        lines |= {ln for v, ln in role_lines if v in used}
        lines |= _lines(s.find(fn, r"(?i)\b\w*(?:producer|consumer)\w*\b(?!\s*\()")) if branch_lines else set()
        info = {"split": _joined(splits), "roles": "producer/consumer" if branch_lines else "",
                "setmaxnreg": ", ".join(dict.fromkeys(f"{m.group(1)} {m.group(2)}".strip() for _, m in regs))}
        return lines, {k: v for k, v in info.items() if v}

    def compiled(self, ck) -> list:
        """setmaxnreg, the register hand-over between warp roles (the role branch itself leaves no
        instruction of its own)."""
        return _ptx_sites(self, ck, lambda i: i.op == "setmaxnreg")


def _role_vars(s: Scan, fn) -> tuple[dict[str, str], list[tuple[str, int]], dict]:
    """Variables holding a warpgroup or warp index (or derived from one): name -> 'warpgroup' / 'warp'."""
    assigns = [(base_name(l), r, st.start_point.row + 1) for l, op, r, st in assignments(fn.node) if op == "="]
    aliases = {v for v, r, _ in assigns if v and re.fullmatch(r"\(?(?:int|unsigned)?\)?\(?threadIdx\.x\)?",
                                                                 re.sub(r"\s+|static_cast<\w+>", "", r.text.decode()))}
    tid = _TID_EXPR.format(aliases="|".join(map(re.escape, sorted(aliases))) or "(?!)")
    group = re.compile(rf"{tid}\s*(?:/\s*(?:128\b|\(\s*(?:4\s*\*\s*32|32\s*\*\s*4)\s*\)|\w*(?:WARP_?GROUP|WarpGroup|"
                       rf"warpgroup|Warpgroup)\w*)|>>\s*7\b)|\b\w*[Ww]arp_?[Gg]roup_?(?:idx|id|index)\w*\s*\(")
    warp = re.compile(rf"{tid}\s*(?:/\s*(?:32\b|warpSize\b|WARP_SIZE\b|kWarpSize\b)|>>\s*5\b)")
    roles: dict[str, str] = {}
    lines = []
    for _ in range(3):
        for v, r, ln in assigns:
            if not v or v in roles or not s.live(ln):
                continue
            text = r.text.decode()
            kind = "warpgroup" if group.search(text) else "warp" if warp.search(text) else \
                next((roles[i] for i in identifiers(r) if i in roles), None)
            if kind:
                roles[v] = kind
                lines.append((v, ln))
    return roles, lines, {"warpgroup": group, "warp": warp, "tid": tid}


def _role_split(s: Scan, fn, cond, roles: dict[str, str], patterns: dict) -> str | None:
    """How the condition splits the block: by a warpgroup or warp index, or a thread-index threshold."""
    if cond is None:
        return None
    for i in identifiers(cond):
        if i in roles:
            return roles[i]
    text = cond.text.decode()
    for kind in ("warpgroup", "warp"):
        if patterns[kind].search(text):
            return kind
    m = re.search(rf"{patterns['tid']}\s*(?:<|>=|>|<=)\s*([\w\s*()+]+)", text)
    if m:
        v = s.value(m.group(1).strip().rstrip(")"), fn)
        if v is not None and v >= 32 and v % 32 == 0:
            return "threads"
    return None


def _producer_consumer(s: Scan, branch) -> bool:
    """One side of the branch issues copies and runs no MMA; the other side does not copy, or runs the MMAs."""
    cons = branch.child_by_field_name("consequence")
    alt = branch.child_by_field_name("alternative")
    if alt is not None and alt.type == "else_clause":
        alt = alt.named_children[0] if alt.named_children else None
    sides = [s.cats_of(cons)] if cons is not None else []
    if alt is not None:
        sides.append(s.cats_of(alt))
    elif cons is not None and any(n.type == "return_statement" for n in walk(cons)):
        rest, nxt = set(), branch.next_named_sibling
        while nxt is not None:
            rest |= s.cats_of(nxt)
            nxt = nxt.next_named_sibling
        sides.append(rest)
    if len(sides) != 2:
        return False

    def role(c):
        if c & COPY_CATEGORIES and not c & MMA_CATEGORIES:
            return "producer"
        return "consumer" if c & MMA_CATEGORIES or not c & COPY_CATEGORIES else None
    return {role(sides[0]), role(sides[1])} == {"producer", "consumer"}
