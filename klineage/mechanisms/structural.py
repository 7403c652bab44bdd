"""Structural mechanisms that no rule can remove mechanically: detected, so audits see that they
are kept and skills list them as prior features, but never rewritten here (the versions proposer,
or an LLM proposer, removes them).

A feature per function that carries the mechanism (locus `<function>:<mechanism>`): its lines span
the evidence, its detail counts the evidence lines (`signatures`) and records what the code says
of the configuration (MMA flavour, shape and types; copy engine; stage count; swizzle mode; tile
shape; ...). Evidence comes from live code only: comments and `#if`-dead branches do not count, the
PTX in the continuation lines of a multi-line `asm volatile(...)` does, and macros are expanded
(codescan.py).

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
from typing import ClassVar

from klineage.mechanisms.base import Feature, Kernel, Mechanism, detail, number_loci, squash
from klineage.mechanisms.codescan import (COPY_CATEGORIES, MMA_CATEGORIES, Scan, assignments, base_name, call_args,
                                          callee_name, identifiers, qualified_callee, scan, strip, subscripts)
from klineage.parse import syntax
from klineage.parse.syntax import ancestors, walk


def _ptx_sites(mech, ck, wanted) -> list:
    """One site per PTX instruction `wanted(instr)` accepts."""
    out = []
    for fn in ck.module.functions:
        for i in fn.instrs:
            if wanted(i):
                site = ck.site(mech.NAME, fn, [i])
                if site is not None:
                    out.append(site)
    return out


def _bulk_destination(i) -> str:
    """The destination state space of a cp(.reduce).async.bulk[.tensor.Nd] copy."""
    for p in i.parts[3:]:
        base = p.split("::")[0]
        if base in ("shared", "global"):
            return base
    return ""


class _Signature(Mechanism):
    """Regular-expression signatures grouped per function (thread_block_cluster)."""
    STRUCTURAL = True
    COMPILED_MATCH = "function"
    SIGNATURES: ClassVar[tuple[str, ...]] = ()
    ANCHOR: ClassVar[str] = ""

    def detect(self, k: Kernel) -> list[Feature]:
        feats = []
        pats = [re.compile(p) for p in self.SIGNATURES]
        scopes = [(syntax.function_name(f), f) for f in syntax.functions(k.tree)]
        for name, fn in scopes:
            text_lines = k.tree.text_of(fn).splitlines()
            first = fn.start_point.row + 1
            hits = sorted({(first + i, p.pattern) for i, line in enumerate(text_lines) for p in pats
                           if p.search(_code(line)) and k.sem.is_live(first + i) or (
                               p.search(_code(line)) and _decl_line(line))})
            if hits:
                lines = [h[0] for h in hits]
                feats.append(Feature(self.NAME, f"{name}:{self.NAME}", (min(lines), max(lines)), anchor=self.ANCHOR,
                                     detail=detail(signatures=len(hits)), removable=False,
                                     path=f"{name} > {self.ANCHOR}"))
        top = [f for f in syntax.functions(k.tree)]
        covered = {(a, b) for f in top for a, b in [syntax.SourceTree.lines(f)]}
        # file-level signatures (e.g. __cluster_dims__ on a declaration outside any definition)
        for i, line in enumerate(k.source.splitlines(), start=1):
            if any(a <= i <= b for a, b in covered):
                continue
            if any(p.search(_code(line)) for p in pats) and not feats:
                feats.append(Feature(self.NAME, f"<file>:{self.NAME}", (i, i), anchor=self.ANCHOR,
                                     detail=detail(signatures=1), removable=False, path=f"file > {self.ANCHOR}"))
        return feats


def _code(line: str) -> str:
    return line.split("//", 1)[0]


def _decl_line(line: str) -> bool:
    # attribute-only lines (`__global__ void __cluster_dims__(2,1,1)`) start no libclang node
    return "__cluster_dims__" in line


class _Structural(Mechanism):
    """A detector over codescan facts: `evidence` gives (lines, detail) per function, or None."""
    STRUCTURAL = True
    COMPILED_MATCH = "function"
    ANCHOR: ClassVar[str] = ""
    # signatures searched outside every function when no function carries the mechanism
    FILE_SIGNATURES: ClassVar[tuple[str, ...]] = ()

    def evidence(self, s: Scan, fn) -> tuple[set[int], dict] | None:
        raise NotImplementedError

    def detect(self, k: Kernel) -> list[Feature]:
        s = scan(k)
        items = []
        for fn in s.fns:
            found = self.evidence(s, fn)
            if found is not None and found[0]:
                items.append((f"{fn.name}:{self.NAME}", (fn, found)))
        feats = []
        for locus, (fn, (lines, info)) in number_loci(items):
            ls = sorted(lines)
            feats.append(Feature(self.NAME, locus, (ls[0], ls[-1]), anchor=self.ANCHOR,
                                 detail=detail(signatures=len(ls), **info), removable=False,
                                 path=f"{fn.name} > {self.ANCHOR}"))
        if not feats and self.FILE_SIGNATURES:
            pats = [re.compile(p) for p in self.FILE_SIGNATURES]
            line = next((i for i in s.outside_functions() if any(p.search(s.code(i)) for p in pats)), None)
            if line is not None:
                feats.append(Feature(self.NAME, f"<file>:{self.NAME}", (line, line), anchor=self.ANCHOR,
                                     detail=detail(signatures=1), removable=False, path=f"file > {self.ANCHOR}"))
        return feats


def _lines(hits) -> set[int]:
    return {ln for ln, _ in hits}


def _joined(values) -> str:
    return ",".join(sorted({v for v in values if v}))


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


# ---- online softmax --------------------------------------------------------------------------

_MAX_FNS = {"fmaxf", "fmax", "max", "__hmax", "hmax", "__hmax_nan"}
_EXP_FNS = {"expf", "__expf", "exp2f", "exp2", "exp", "__exp2f", "hexp", "hexp2", "h2exp", "h2exp2"}
_FMA_FNS = {"fmaf", "fma", "__fmaf_rn", "__fmaf_rz", "__hfma", "__hfma2", "fmaf_rn"}


class OnlineSoftmax(_Structural):
    NAME = "online_softmax"
    DESCRIPTION = "online (single-pass) softmax: running max with rescaled running sum"
    ANCHOR = "running max / sum"

    def evidence(self, s, fn):
        live = [(l, op, r, st) for l, op, r, st in assignments(fn.node) if s.live(st.start_point.row + 1)]
        assigns = [(l, op, r) for l, op, r, st in live]
        maxed = {base_name(l) for l, op, r in assigns if op == "=" and (_is_call(r, _MAX_FNS) or _ternary_max(r))}
        maxed -= {None}
        pairs = set()
        for l, op, r, st in live:
            a, b, rs = base_name(l), base_name(r), strip(r)
            plain = rs.type in ("identifier", "subscript_expression", "field_expression")
            if op == "=" and a and b and a != b and plain and (a in maxed or b in maxed):
                pairs.add(frozenset((a, b)))
            elif op == "=" and a and b and a != b and plain and _raised_under(st, l, r):
                maxed.add(a)  # `if (x > m) { ...; m = x; }`: a running maximum written as a branch
                pairs.add(frozenset((a, b)))
        if not pairs:
            return None
        in_pair = set().union(*pairs)
        exp_fns = _EXP_FNS | {f.name for f in s.fns if "exp" in f.own and re.search(r"(?i)ex(?:p|2)", f.name)}
        derived: dict[str, set[str]] = {}
        for _ in range(2):
            for l, op, r in assigns:
                v = base_name(l)
                if not v or op != "=" or v in in_pair or any(_is_call(c, exp_fns) for c in walk(r)):
                    continue
                src = {i for i in identifiers(r) if i in in_pair} | set().union(*[derived.get(i, set())
                                                                                  for i in identifiers(r)])
                if src:
                    derived.setdefault(v, set()).update(src)

        def sides(node) -> set[str]:
            ids = _names(node)
            return {i for i in ids if i in in_pair} | set().union(*[derived.get(i, set()) for i in ids])

        factors = []
        for n in walk(fn.node):
            if _is_call(n, exp_fns) and s.live(n.start_point.row + 1):
                args = n.child_by_field_name("arguments")
                if args is not None and "-" in args.text.decode() and any(p <= sides(args) for p in pairs):
                    factors.append(n)
        if not factors:
            return None
        # names holding a rescale factor (`alpha = exp2f((m_prev - m) * scale)`), not self-updates using one
        fnames = {base_name(l) for l, op, r in assigns if op == "=" and any(_within(f, r) for f in factors)
                  and base_name(l) not in _names(r)} - {None}

        def scales(node) -> bool:
            return any(_within(f, node) for f in factors) or bool(identifiers(node) & fnames)

        rescaled = set()
        for l, op, r in assigns:
            acc = base_name(l)
            if not acc or acc in in_pair or acc in fnames:
                continue
            if op == "*=" and scales(r):
                rescaled.add(acc)
            elif op == "=":
                for b in walk(r):
                    if b.type == "binary_expression" and b.child_by_field_name("operator").type == "*":
                        x, y = b.child_by_field_name("left"), b.child_by_field_name("right")
                        if (base_name(x) == acc and scales(y)) or (base_name(y) == acc and scales(x)):
                            rescaled.add(acc)
                    elif _is_call(b, _FMA_FNS):
                        a2 = call_args(b)[:2]
                        if len(a2) == 2 and ((base_name(a2[0]) == acc and scales(a2[1]))
                                             or (base_name(a2[1]) == acc and scales(a2[0]))):
                            rescaled.add(acc)
        if not rescaled:
            return None
        new = {v for v in in_pair if v in maxed}
        lines = {n.start_point.row + 1 for n in walk(fn.node)
                 if n.type == "identifier" and n.text.decode() in new and s.live(n.start_point.row + 1)}
        return lines, ({"rescaled": ",".join(sorted(rescaled))} if len(rescaled) > 1 else {})


def _names(node) -> set[str]:
    """Variables and struct fields an expression reads (`md.m - m_new` -> md, m, m_new)."""
    return identifiers(node) | {n.text.decode() for n in walk(node) if n.type == "field_identifier"}


def _compares(cond, x, y) -> str | None:
    """'gt' when `cond` says x > y (`x > y`, `y < x`, with >= / <=), 'lt' when x < y, else None."""
    c = strip(cond)
    if c is not None and c.type == "condition_clause":
        c = strip(c.named_children[0]) if c.named_children else None
    if c is None or c.type != "binary_expression":
        return None
    op = c.child_by_field_name("operator").type
    left, right = (squash(c.child_by_field_name(f).text.decode()) for f in ("left", "right"))
    if (left, right) == (x, y):
        return {">": "gt", ">=": "gt", "<": "lt", "<=": "lt"}.get(op)
    if (left, right) == (y, x):
        return {">": "lt", ">=": "lt", "<": "gt", "<=": "gt"}.get(op)
    return None


def _ternary_max(node) -> bool:
    """`a > b ? a : b` (or `b < a ? a : b`): a maximum written as a conditional expression."""
    n = strip(node)
    if n is None or n.type != "conditional_expression":
        return False
    a, b = (n.child_by_field_name(f) for f in ("consequence", "alternative"))
    if a is None or b is None:
        return False
    return _compares(n.child_by_field_name("condition"), squash(a.text.decode()), squash(b.text.decode())) == "gt"


def _raised_under(stmt, lhs, rhs) -> bool:
    """`lhs = rhs` runs only when rhs > lhs: inside the then-branch of `if (rhs > lhs)`."""
    x, y = squash(rhs.text.decode()), squash(lhs.text.decode())
    for a in ancestors(stmt):
        if a.type == "if_statement":
            cons = a.child_by_field_name("consequence")
            if cons is not None and cons.start_byte <= stmt.start_byte < cons.end_byte:
                return _compares(a.child_by_field_name("condition"), x, y) == "gt"
            return False
        if a.type in ("function_definition", "for_statement", "while_statement"):
            return False
    return False


def _is_call(node, names: set[str]) -> bool:
    node = strip(node)
    return node is not None and node.type == "call_expression" and callee_name(node) in names


def _within(inner, outer) -> bool:
    return outer.start_byte <= inner.start_byte and inner.end_byte <= outer.end_byte


# ---- shared-memory swizzles ------------------------------------------------------------------

_TMA_SWIZZLE = re.compile(r"\bCU_TENSOR_MAP_SWIZZLE_(32B|64B|128B)\w*")
_DESC_SWIZZLE = re.compile(r"(?:\b([123])(?:ull|ULL|ul|UL|llu|LLU|ll|LL|u|U)?|\(\s*(?:uint64_t|unsigned long long)\s*\)"
                           r"\s*([123])|\buint64_t\s*\(\s*([123])\s*\))\s*\)?\s*<<\s*62\b|"
                           r"\blayout_type\w*\s*=\s*([123])\b")
_DESC_MODE = {"1": "128B", "2": "64B", "3": "32B"}


class SmemSwizzle(_Structural):
    NAME = "smem_swizzle"
    DESCRIPTION = ("swizzled shared-memory layouts against bank conflicts: XOR of a column (chunk) index with "
                   "masked row bits, or the TMA / wgmma-descriptor swizzle modes (128B, 64B, 32B)")
    ANCHOR = "shared index"

    def evidence(self, s, fn):
        lines, kinds, modes, masks = set(), set(), set(), set()
        if _has_shared(s):
            for x in walk(fn.node):
                if x.type != "binary_expression" or x.child_by_field_name("operator").type != "^":
                    continue
                if not s.live(x.start_point.row + 1):
                    continue
                mask = _xor_mask(x)
                if mask and _index_use(s, fn, x):
                    lines.add(x.start_point.row + 1)
                    kinds.add("xor")
                    masks.add(mask)
        for ln, m in s.find(fn, _TMA_SWIZZLE):
            lines.add(ln)
            kinds.add("tma")
            modes.add(m.group(1))
        if re.search(r"(?i)desc|>>\s*4\b", " ".join(s.code(i) for i in s.lines(fn))):
            for ln, m in s.find(fn, _DESC_SWIZZLE):
                lines.add(ln)
                kinds.add("wgmma_desc")
                modes.add(_DESC_MODE[next(g for g in m.groups() if g)])
        if not lines:
            return None
        return lines, {k: v for k, v in {"kind": _joined(kinds), "mode": _joined(modes), "mask": _joined(masks)}.items()
                       if v}


def _has_shared(s: Scan) -> bool:
    return any("__shared__" in line for line in s.code_lines)


def _xor_mask(x) -> str | None:
    """The mask when one operand of the XOR (or the XOR itself) is masked: `c ^ (r & 7)`, `(c ^ r) % 8`."""
    def masked(n):
        n = strip(n)
        while n is not None and n.type == "binary_expression" and \
                n.child_by_field_name("operator").type in (">>", "<<"):
            n = strip(n.child_by_field_name("left"))  # `(off & 0x380) >> 3`
        if n is None or n.type != "binary_expression" or n.child_by_field_name("operator").type not in ("&", "%"):
            return None
        for side in (n.child_by_field_name("right"), n.child_by_field_name("left")):
            side = strip(side)
            if side is not None and side.type in ("number_literal", "identifier"):
                text = side.text.decode()
                try:  # a parity bit (`& 1`, `% 2`) is no swizzle
                    if int(text.rstrip("uUlL"), 0) < 3:
                        return None
                except ValueError:
                    pass
                return text
        return None
    found = masked(x.child_by_field_name("left")) or masked(x.child_by_field_name("right"))
    if found:
        return found
    p = x.parent
    while p is not None and p.type == "parenthesized_expression":
        p = p.parent
    return masked(p) if p is not None else None


def _index_use(s: Scan, fn, x) -> bool:
    """The XOR feeds an index: a subscript, a variable later used as an index or offset, or the value a
    swizzle / offset helper returns."""
    for a in ancestors(x):
        if a.type == "subscript_argument_list":
            return True
        if a.type == "return_statement":
            return bool(re.search(r"(?i)swiz|swz|offset|addr|idx|index|chunk", fn.name)) or _called_as_index(s, fn.name)
        if a.type in ("init_declarator", "assignment_expression"):
            target = a.child_by_field_name("declarator" if a.type == "init_declarator" else "left")
            ty = a.parent.child_by_field_name("type") if a.type == "init_declarator" and a.parent is not None else None
            if ty is not None and ty.text.decode() in ("bool", "float", "double"):
                return False  # a flag or a value, not an index
            v = base_name(target)
            return v is not None and _used_as_index(fn.node, v, a)
        if a.type.endswith("_statement") or a.type == "declaration":
            return False
    return False


def _used_as_index(root, v: str, skip) -> bool:
    for n in walk(root):
        if n.type != "identifier" or n.text.decode() != v or _within(n, skip):
            continue
        for a in ancestors(n):
            if a.type == "subscript_argument_list":
                return True
            if a.type == "binary_expression" and a.child_by_field_name("operator").type == "+":
                return True
            if a.type in ("gnu_asm_input_operand", "gnu_asm_output_operand"):
                return True
            if a.type.endswith("_statement") or a.type == "declaration":
                break
    return False


def _called_as_index(s: Scan, name: str) -> bool:
    for f in s.fns:
        for n in walk(f.node):
            if n.type == "call_expression" and callee_name(n) == name:
                for a in ancestors(n):
                    if a.type == "subscript_argument_list" or (a.type == "binary_expression"
                                                                and a.child_by_field_name("operator").type == "+"):
                        return True
                    if a.type.endswith("_statement") or a.type == "declaration":
                        break
    return False


# ---- register tiling -------------------------------------------------------------------------


class RegisterTiling(_Structural):
    NAME = "register_tiling"
    DESCRIPTION = ("register tiling: each thread accumulates a 2-D tile of outputs in a register array "
                   "(acc[TM][TN] updated by outer-product FMAs in unrolled loops, or an array of MMA accumulator "
                   "fragments acc[MI][NI][4])")
    ANCHOR = "register accumulator tile"
    PRECONDITIONS = {
        "storage": [{"condition": "the accumulator tile and its operand fragments fit the per-thread register "
                                  "budget (255 registers; fewer at the occupancy the launch bounds ask for)",
                     "fails_without": "spills to local memory, or fewer resident warps per SM"}],
        "pipeline": [{"condition": "the loops over the tile are fully unrolled, so every index into the "
                                   "accumulator array is a compile-time constant",
                      "fails_without": "the array moves to local memory (stack frame, LDL/STL): slower"}],
        "layout": [{"condition": "the block's output extent is a multiple of the per-thread tile times the "
                                 "threads, or the edges are guarded",
                    "fails_without": "stores past the matrix edge, or outputs never written"}],
    }

    def evidence(self, s, fn):
        tiles = _register_tiles(s, fn)
        if not tiles:
            return None
        lines = set().union(*[t["lines"] for t in tiles.values()])
        info = {"arrays": ",".join(tiles), "tile": ",".join(t["tile"] for t in tiles.values()),
                "accumulate": _joined(t["how"] for t in tiles.values())}
        dtypes = {t["dtype"] for t in tiles.values() if t["dtype"]}
        if dtypes:
            info["dtype"] = _joined(dtypes)
        return lines, info


_SIMPLE_TYPES = {"float", "double", "half", "__half", "half2", "__half2", "__nv_bfloat16", "__nv_bfloat162", "int",
                 "float2", "float4"}


def _declarator_array(d):
    """(name, extents outer first) of an array declarator, through references / parentheses."""
    dims = []
    while d is not None:
        if d.type == "array_declarator":
            size = d.child_by_field_name("size")
            dims.append(size)
            d = d.child_by_field_name("declarator")
        elif d.type in ("parenthesized_declarator", "reference_declarator", "init_declarator"):
            d = d.child_by_field_name("declarator") or (d.named_children[0] if d.named_children else None)
        elif d.type == "identifier":
            return d.text.decode(), list(reversed(dims))
        else:
            return None, []
    return None, []


def _arrays(s: Scan, fn) -> dict[str, dict]:
    """Register-resident arrays of a function: non-shared, non-static local arrays and array parameters."""
    out = {}
    decls = [n for n in walk(fn.node) if n.type in ("declaration", "parameter_declaration")]
    for d in decls:
        words = {c.text.decode() for c in d.children if c.type in ("type_qualifier", "storage_class_specifier")}
        if words & {"__shared__", "static", "extern", "__constant__", "constexpr"} or \
                (d.type == "declaration" and "const" in words):
            continue
        ty = d.child_by_field_name("type")
        tname = squash(s.tree.text_of(ty)) if ty is not None else ""
        for decl in d.children_by_field_name("declarator"):
            name, dims = _declarator_array(decl)
            if name and dims:
                out[name] = {"dims": dims, "line": d.start_point.row + 1, "type": tname}
    return out


def _acc_params(s: Scan, name: str, depth: int = 0) -> set[int]:
    """Indices of the parameters of in-file function `name` that it accumulates into (asm "+f"/"+r"
    operands, or register tiles it accumulates)."""
    key = ("acc_params", name)
    if key not in s.memo:
        s.memo[key] = set()  # a recursive call sees no accumulator parameters
        s.memo[key] = _find_acc_params(s, name, depth)
    return s.memo[key]


def _find_acc_params(s: Scan, name: str, depth: int) -> set[int]:
    out = set()
    for f in s.by_name.get(name, []):
        params = _param_names(f)
        rw = {base_name(n.named_children[-1]) for n in walk(f.node) if n.type == "gnu_asm_output_operand"
              and "+" in (n.child_by_field_name("constraint") or n).text.decode()[:3] and n.named_children}
        out |= {i for i, p in enumerate(params) if p in rw}
        if depth < 3:
            acc = _accumulated(s, f, depth + 1)
            out |= {i for i, p in enumerate(params) if p in acc}
    return out


def _param_names(f) -> list[str]:
    decl = f.node.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    params = decl.child_by_field_name("parameters") if decl is not None else None
    out = []
    for p in params.named_children if params is not None else []:
        d = p.child_by_field_name("declarator")
        ids = [n for n in walk(d) if n.type == "identifier"] if d is not None else []
        out.append(ids[0].text.decode() if ids else "")
    return out


def _accumulated(s: Scan, fn, depth: int = 0) -> dict[str, tuple[str, set[int]]]:
    """Arrays of `fn` that something accumulates into: name -> (how, lines)."""
    arrays = _arrays(s, fn)
    out: dict[str, tuple[str, set[int]]] = {}

    def add(name, how, line):
        h, ls = out.get(name, (how, set()))
        out[name] = ("mma" if "mma" in (h, how) else how, ls | {line})

    loops = s.loops(fn)
    for l, op, r, st in assignments(fn.node):
        name, line = base_name(l), st.start_point.row + 1
        if name not in arrays or not s.live(line):
            continue
        fma = (op in ("+=", "-=") and (_has_product(r) or any(_is_call(c, _FMA_FNS) for c in walk(r)))) or \
            (op == "=" and _is_call(r, _FMA_FNS) and name in identifiers(call_args(strip(r))[-1])) or \
            (op == "=" and _self_plus_product(r, name))
        if not fma:
            continue
        dims = len(arrays[name]["dims"])
        loop_vars = {lp.var for lp in loops if lp.var and lp.body.start_byte <= st.start_byte
                     and st.end_byte <= lp.body.end_byte}
        idx = subscripts(l)
        used = set().union(*[identifiers(i) for i in idx]) & loop_vars if idx else set()
        flat = dims == 1 and "*" in s.tree.text_of(arrays[name]["dims"][0] or l) and idx and "*" in idx[0].text.decode()
        if len(used) >= 2 and (dims >= 2 or flat):
            add(name, "fma", line)
    for n in walk(fn.node):
        if n.type != "call_expression" or not s.live(n.start_point.row + 1):
            continue
        callee, args = callee_name(n), call_args(n)
        wmma = qualified_callee(n).endswith("mma_sync") and callee == "mma_sync"
        acc_idx = {0} if wmma else _acc_params(s, callee, depth) if callee in s.by_name and depth < 4 else set()
        for i in acc_idx:
            if i < len(args) and base_name(args[i]) in arrays:
                add(base_name(args[i]), "mma", n.start_point.row + 1)
    for n in walk(fn.node):
        if n.type == "gnu_asm_output_operand" and n.named_children and s.live(n.start_point.row + 1):
            c = n.child_by_field_name("constraint")
            name = base_name(n.named_children[-1])
            if c is not None and "+" in c.text.decode() and name in arrays and fn.own & MMA_CATEGORIES:
                add(name, "mma", n.start_point.row + 1)
    return out


def _register_tiles(s: Scan, fn) -> dict[str, dict]:
    arrays = _arrays(s, fn)
    out = {}
    for name, (how, lines) in _accumulated(s, fn).items():
        a = arrays[name]
        if len(a["dims"]) < 2 and how == "mma":
            continue
        dims = []
        for d in a["dims"]:
            text = squash(s.tree.text_of(d)) if d is not None else "?"
            v = s.value(text)
            dims.append(str(v) if v is not None else text)
        base = a["type"].split("<")[0].split("::")[-1]
        out[name] = {"tile": "x".join(dims), "how": how, "lines": lines | {a["line"]},
                     "dtype": a["type"] if a["type"] in _SIMPLE_TYPES else ("fragment" if base == "fragment" else "")}
    return out


def _has_product(node) -> bool:
    return any(b.type == "binary_expression" and b.child_by_field_name("operator").type == "*" for b in walk(node))


def _self_plus_product(r, name: str) -> bool:
    r = strip(r)
    if r is None or r.type != "binary_expression" or r.child_by_field_name("operator").type != "+":
        return False
    x, y = r.child_by_field_name("left"), r.child_by_field_name("right")
    return (base_name(x) == name and _has_product(y)) or (base_name(y) == name and _has_product(x))


class ThreadBlockCluster(_Signature):
    NAME = "thread_block_cluster"
    DESCRIPTION = "thread-block clusters with distributed shared memory (sm_90)"
    ANCHOR = "cluster launch / DSMEM"
    SIGNATURES = (r"this_cluster\s*\(", r"map_shared_rank", r"cudaLaunchAttributeClusterDimension",
                  r"__cluster_dims__", r"cluster_group\b")

    def compiled(self, ck) -> list:
        """Distributed shared memory and cluster operations (mapa, ld/st/atom on shared::cluster,
        barrier.cluster, the %cluster_* registers, .multicast::cluster copies) and the cluster shape
        directives. The .shared::cluster destination of an ordinary bulk copy, and fences scoped
        .cluster, are not: kernels without clusters write them too."""
        def wanted(i):
            if i.op == "cp":
                return any(p.startswith("multicast::cluster") for p in i.parts)
            if i.op in ("fence", "mbarrier"):
                return False
            return i.op == "mapa" or (i.op == "barrier" and i.has("cluster")) or \
                (i.op in ("ld", "st", "atom", "red") and any(p == "shared::cluster" for p in i.parts)) or \
                any(re.search(r"%(?:cluster_|nclusterid|clusterid|is_explicit_cluster)", o) for o in i.operands)
        out = _ptx_sites(self, ck, wanted)
        for fn in ck.module.functions:
            got = {d: v for d, v in fn.directives.items() if d in ("reqnctapercluster", "explicitcluster",
                                                                   "maxclusterrank")}
            if got:
                site = ck.site(self.NAME, fn, [], what=", ".join(f".{d} {v}".strip() for d, v in got.items()))
                if site is not None:
                    out.append(site)
        return out


class _Declared(Mechanism):
    """A mechanism only a version ladder (or an LLM proposer) names: no detector signature."""
    STRUCTURAL = True
    DETECTABLE = False

    def detect(self, k: Kernel) -> list[Feature]:
        return []


class WarpPerRow(_Declared):
    NAME = "warp_per_row"
    DESCRIPTION = "cooperative row reduction: one warp per row, lanes striding the row (coalesced reads)"
    PRECONDITIONS = {
        "layout": [{"condition": "rows are contiguous in memory (unit stride along the reduced axis)",
                    "fails_without": "lanes read scattered addresses; coalescing, and the gain, is lost"}],
        "pipeline": [{"condition": "every lane of a warp reaches the cross-lane combine (no early exit)",
                      "fails_without": "the warp-level combine deadlocks or reads undefined partials"}],
    }


class BlockPerRow(_Declared):
    NAME = "block_per_row"
    DESCRIPTION = "long rows split over a whole thread block, partials combined through shared memory"
    PRECONDITIONS = {
        "storage": [{"condition": "one float of shared memory per warp of the block",
                     "fails_without": "the block cannot launch (never in practice: 64 bytes for 512 threads)"}],
        "pipeline": [{"condition": "block size a multiple of 32 and every thread reaches __syncthreads",
                      "fails_without": "a deadlock at the barrier or a missing warp partial"}],
    }


ThreadBlockCluster.PRECONDITIONS = {
    "hardware": [{"condition": "compute capability 9.0 or newer (thread-block clusters, distributed shared memory)",
                  "fails_without": "the cluster launch attribute is rejected: the kernel does not run before sm_90"}],
    "pipeline": [{"condition": "cluster size <= 8 (portable limit) and the grid a multiple of the cluster size",
                  "fails_without": "cudaLaunchKernelEx fails with an invalid cluster configuration"}],
}


class TiledTranspose(_Declared):
    NAME = "tiled_transpose"
    DESCRIPTION = ("transpose through a shared-memory tile: a block reads a tile's rows (coalesced), "
                   "synchronises, and writes the tile's columns as output rows (coalesced)")
    PRECONDITIONS = {
        "storage": [{"condition": "one tile of the element type fits the block's shared memory (4 KB for a "
                                  "32x32 fp32 tile)",
                     "fails_without": "ptxas rejects the kernel, or fewer blocks fit an SM"}],
        "layout": [{"condition": "input and output are dense row-major (unit stride along each row)",
                    "fails_without": "the tile's row reads or column writes no longer coalesce"}],
        "pipeline": [{"condition": "every thread of the block reaches the __syncthreads between the load and "
                                   "the store phase, and load and store guards are the same condition mirrored",
                      "fails_without": "a deadlock, reads of the tile before it is filled, or unloaded values "
                                       "written at the matrix edge"}],
    }


class WarpScan(_Declared):
    NAME = "warp_scan"
    DESCRIPTION = ("warp-shuffle prefix scan: lanes scan their values in registers with __shfl_up_sync "
                   "(Kogge-Stone, log2(32) steps), the total broadcast from lane 31, no shared memory")
    PRECONDITIONS = {
        "data_types": [{"condition": "a 4-byte (or two-register) value per lane and an associative operator",
                        "fails_without": "the shuffle cannot move the value, or the scan is not a scan"}],
        "pipeline": [{"condition": "all 32 lanes reach every shuffle of the scan (no lane exits or branches "
                                   "around it)",
                      "fails_without": "full-mask shuffles read undefined values or hang"}],
    }


class BlockScan(_Declared):
    NAME = "block_scan"
    DESCRIPTION = ("block-wide prefix scan: warp scans in registers, the warp totals exchanged through "
                   "shared memory behind one __syncthreads, each warp adding the totals of the warps before it")
    PRECONDITIONS = {
        "storage": [{"condition": "one float of shared memory per warp and step (double-buffered: 2 x UNROLL "
                                  "x warps)",
                     "fails_without": "never in practice (256 bytes for 256 threads)"}],
        "pipeline": [{"condition": "block size a multiple of 32, every thread reaches each __syncthreads, and a "
                                   "buffer is not rewritten before the next barrier",
                      "fails_without": "a deadlock, or a warp reading the next step's totals (wrong prefixes)"}],
    }


class ReduceThenScan(_Declared):
    NAME = "reduce_then_scan"
    DESCRIPTION = ("multi-block scan of few long rows in two launches: tiles are summed, each tile's exclusive "
                   "prefix is the fixed-order sum of the earlier tiles' sums, then every tile is scanned from it")
    PRECONDITIONS = {
        "layout": [{"condition": "somewhere to keep per-tile sums between the launches that no other tile reads "
                                 "or overwrites (here: each tile's own output region, one float per earlier tile)",
                    "fails_without": "a race between a tile's final stores and another tile's prefix reads"}],
        "storage": [{"condition": "tiles of at least as many elements as there are tiles per row",
                     "fails_without": "a tile's slot array spills into the next tile's output"}],
        "pipeline": [{"condition": "the two launches ordered on one stream",
                      "fails_without": "the scan reads tile sums before they are written"}],
    }


class RegisterCache(_Declared):
    NAME = "register_cache"
    DESCRIPTION = ("values loaded once are held in registers and passed over more than once (a step's "
                   "values: their max, then their exponentials), instead of re-reading memory or updating "
                   "element by element")
    PRECONDITIONS = {
        "storage": [{"condition": "the cached values fit the per-thread register budget next to the loop state "
                                  "(CE_UNROLL vectors: 16-32 floats)",
                     "fails_without": "spills to local memory, or fewer resident blocks per SM"}],
        "pipeline": [{"condition": "every register index is a compile-time constant (the loops over the cached "
                                   "values fully unrolled)",
                      "fails_without": "the array moves to local memory (stack frame, LDL/STL): slower"}],
    }


class FastExp2(_Declared):
    NAME = "fast_exp2"
    DESCRIPTION = ("exponentials as one ex2.approx.ftz.f32 of a base-2 argument formed by one FFMA "
                   "(x*log2e - m*log2e), instead of __expf's multiply, range check and fix-ups around the MUFU op")
    PRECONDITIONS = {
        "data_types": [{"condition": "fp32 math whose tolerance admits ex2.approx's ~2^-22 relative error plus "
                                     "the rounding of m*log2e (~|m| * 2^-24 in the exponent)",
                        "fails_without": "results differ from precise expf beyond a tight tolerance"}],
        "layout": [{"condition": "results below 2^-126 may be flushed to zero: the exponentials are summed "
                                 "against a term of order 1 (the running max's)",
                    "fails_without": "a sum of only subnormal terms comes out as 0 (log of it -inf)"}],
    }


class RadixSelect(_Declared):
    NAME = "radix_select"
    DESCRIPTION = ("radix select of the k-th largest key: most significant digit first, a shared-memory "
                   "histogram of the digit among elements matching the chosen prefix, a scan of the bins picks "
                   "the digit, stopping once a bin is needed whole; then compaction of the elements above it")
    PRECONDITIONS = {
        "data_types": [{"condition": "values map to unsigned keys whose integer order is the value order (fp32: "
                                     "flip all bits of negatives, the sign bit of the others)",
                        "fails_without": "digits of the raw bits order negatives backwards: a wrong threshold"}],
        "storage": [{"condition": "the row (or its keys) and a 2^bits-bin histogram in shared memory (32 KB + 1 KB "
                                  "for 8192 floats, 8-bit digits), or re-reading the row once per pass",
                     "fails_without": "ptxas rejects the buffer, or every pass pays a trip to L2"}],
        "pipeline": [{"condition": "every thread reaches the barriers between histogram, digit pick and the next "
                                   "pass, and the histogram is cleared before it is reused",
                      "fails_without": "a pass counts with the previous pass's bins: wrong digits"}],
    }


class BitonicSort(_Declared):
    NAME = "bitonic_sort"
    DESCRIPTION = ("bitonic sorting network over a power-of-two buffer in shared memory (padded with values "
                   "below every element): log2(P)(log2(P)+1)/2 compare-exchange stages, a barrier after each")
    PRECONDITIONS = {
        "data_types": [{"condition": "a strict total order on the sorted items (e.g. key << 32 | ~index), or "
                                     "ties whose order does not matter",
                        "fails_without": "the network is not stable: equal keys come out in any order"}],
        "storage": [{"condition": "P = next power of two >= n items of shared memory (8 bytes each packed)",
                     "fails_without": "the buffer does not fit: a global-memory or multi-pass sort is needed"}],
        "pipeline": [{"condition": "every thread reaches the barrier of every stage",
                      "fails_without": "a deadlock, or a stage reading pairs the previous stage is still writing"}],
    }


class WarpBitonic(_Declared):
    NAME = "warp_bitonic"
    DESCRIPTION = ("bitonic stages whose partner is in the same warp (stride < 32) run in registers: each "
                   "thread holds its items and swaps with lane ^ stride through __shfl_xor_sync, no shared "
                   "memory and no barrier; only strides >= 32 go through shared memory")
    PRECONDITIONS = {
        "layout": [{"condition": "item i lives in lane i % 32 of its warp (thread t holds t, t + block, ...), "
                                 "so the partner i ^ j (j < 32) is lane ^ j of the same warp",
                    "fails_without": "the shuffle fetches the wrong partner: an unsorted result"}],
        "pipeline": [{"condition": "whole warps hold items (the padded size a multiple of 32) and all 32 lanes "
                                   "run every shuffle",
                      "fails_without": "full-mask shuffles read undefined values or hang"}],
        "storage": [{"condition": "the items of a thread fit in registers with compile-time indices (loops "
                                  "over them unrolled)",
                     "fails_without": "the array moves to local memory: slower than the shared-memory stages"}],
    }

