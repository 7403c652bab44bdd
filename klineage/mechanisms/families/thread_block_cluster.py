"""Thread-block clusters with distributed shared memory (sm_90), found by their regular-expression
signatures."""
from __future__ import annotations

import re
from typing import ClassVar

from klineage.gate.compile import targets_from
from klineage.mechanisms.base import Family, Feature, Form, Kernel, Mechanism, detail
from klineage.mechanisms.structural import _ptx_sites
from klineage.parse import syntax


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


class ThreadBlockCluster(_Signature):
    NAME = "thread_block_cluster"
    DESCRIPTION = "thread-block clusters with distributed shared memory (sm_90)"
    ANCHOR = "cluster launch / DSMEM"
    SIGNATURES = (r"this_cluster\s*\(", r"map_shared_rank", r"cudaLaunchAttributeClusterDimension",
                  r"__cluster_dims__", r"cluster_group\b")
    PRECONDITIONS = {
        "hardware": [{"condition": "compute capability 9.0 or newer (thread-block clusters, distributed shared "
                                   "memory)",
                      "fails_without": "the cluster launch attribute is rejected: the kernel does not run before "
                                       "sm_90"}],
        "pipeline": [{"condition": "cluster size <= 8 (portable limit) and the grid a multiple of the cluster size",
                      "fails_without": "cudaLaunchKernelEx fails with an invalid cluster configuration"}],
    }

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


FAMILY = Family(
    ThreadBlockCluster, rank=290,
    forms=(
        Form("the cluster API and attributes: this_cluster(), map_shared_rank, __cluster_dims__, the cluster "
             "launch attribute", rewritable=False),
    ),
    compiler=("distributed shared memory and cluster operations (mapa, shared::cluster accesses, barrier.cluster, "
              "%cluster_* registers) and the cluster shape directives"),
    addresses=frozenset({"latency", "memory"}),
    hardware=("cluster",),
    scope=targets_from("sm_90"),
)
