"""Structural mechanisms that no rule can remove mechanically: detected, so audits see that they
are kept and skills list them as prior features, but never rewritten here (the versions proposer,
or an LLM proposer, removes them).

Each detector is a set of textual signatures (regular expressions over live code, so `#if`-dead
branches do not count) grouped per function.
"""
from __future__ import annotations

import re
from typing import ClassVar

from klineage.mechanisms.base import Feature, Kernel, Mechanism, detail
from klineage.parse import syntax


class _Signature(Mechanism):
    STRUCTURAL = True
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


class TensorCoreMMA(_Signature):
    NAME = "tensor_core_mma"
    DESCRIPTION = "tensor-core matrix multiply-accumulate (WMMA, mma.sync, wgmma)"
    ANCHOR = "MMA inner loop"
    SIGNATURES = (r"\bwmma::mma_sync\b", r"\bmma_sync\s*\(", r"mma\.sync\.aligned", r"wgmma\.mma_async",
                  r"\bwgmma\.", r"\bldmatrix\b")


class AsyncCopy(_Signature):
    NAME = "async_copy"
    DESCRIPTION = "asynchronous global->shared copies (cp.async, memcpy_async)"
    ANCHOR = "global-to-shared copy"
    SIGNATURES = (r"cp\.async\.(ca|cg)\b", r"__pipeline_memcpy_async", r"cuda::memcpy_async",
                  r"cp\.async\.commit_group", r"cp\.async\.wait_group")


class TMA(_Signature):
    NAME = "tma"
    DESCRIPTION = "Tensor Memory Accelerator bulk copies (cp.async.bulk, tensor maps)"
    ANCHOR = "bulk tensor copy"
    SIGNATURES = (r"cp\.async\.bulk", r"CUtensorMap", r"cuTensorMapEncode", r"mbarrier\.")


class MultistageBuffer(_Signature):
    NAME = "multistage_buffer"
    DESCRIPTION = "multi-stage shared-memory buffers (software pipelining over STAGES tiles)"
    ANCHOR = "shared tile ring"
    SIGNATURES = (r"__shared__[^;]*\[\s*(k?STAGES|NUM_STAGES|kStages|N_STAGES|PIPE(_DEPTH)?)\s*\]",
                  r"\bstage\s*=\s*\(\s*stage\s*\+\s*1\s*\)\s*%")


class WarpSpecialization(_Signature):
    NAME = "warp_specialization"
    DESCRIPTION = "warp specialization (producer and consumer warps with different roles)"
    ANCHOR = "warp role branch"
    SIGNATURES = (r"setmaxnreg", r"\b(is_)?producer\b", r"\bconsumer_warp", r"\bwarpgroup_role\b")


class OnlineSoftmax(_Signature):
    NAME = "online_softmax"
    DESCRIPTION = "online (single-pass) softmax: running max with rescaled running sum"
    ANCHOR = "running max / sum"
    SIGNATURES = (r"(__expf|expf|exp2f|__exp2f)\s*\(\s*\(?\s*m_?(old|prev|i)\w*\s*-\s*m_?(new|cur|ij)\w*",
                  r"\b(running_max|row_max_new|m_new)\b")


class SmemSwizzle(_Signature):
    NAME = "smem_swizzle"
    DESCRIPTION = "XOR-swizzled shared-memory addressing against bank conflicts"
    ANCHOR = "shared index"
    SIGNATURES = (r"\[[^\]]*\^[^\]]*\]\s*=|\bswizzle\w*\s*\(", r"\bswz\w*\s*\(")


class ThreadBlockCluster(_Signature):
    NAME = "thread_block_cluster"
    DESCRIPTION = "thread-block clusters with distributed shared memory (sm_90)"
    ANCHOR = "cluster launch / DSMEM"
    SIGNATURES = (r"this_cluster\s*\(", r"map_shared_rank", r"cudaLaunchAttributeClusterDimension",
                  r"__cluster_dims__", r"cluster_group\b")


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
