"""What the structural families of the pipelined matrix main loop share: stage counts, the
tensor-core and copy signatures (tensor_core_mma, wgmma, async_copy, tma, multistage_buffer,
warp_specialization).

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

from klineage.mechanisms.codescan import Scan
from klineage.mechanisms.structural import _joined, _lines


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
