"""Asynchronous global->shared copies, any engine (an umbrella over tma)."""
from __future__ import annotations

from klineage.gate.compile import targets_from
from klineage.mechanisms.base import Family, Form
from klineage.mechanisms.families._pipeline import (_BULK_COPY, _CP_API, _CP_ASYNC, _CP_GROUP, _CP_WAIT, _bulk_destination,
                                                    _bulk_loads, _stage_names, _stages)
from klineage.mechanisms.structural import _joined, _lines, _ptx_sites, _Structural


class AsyncCopy(_Structural):
    NAME = "async_copy"
    DESCRIPTION = ("asynchronous global->shared copies, any engine: cp.async (and memcpy_async, the pipeline "
                   "primitives) or the TMA's bulk copies (also their own mechanism, tma)")
    ANCHOR = "global-to-shared copy"
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


FAMILY = Family(
    AsyncCopy, rank=220,
    forms=(
        Form("cp.async (.ca / .cg) copies, commit and wait groups in inline PTX", rewritable=False),
        Form("__pipeline_memcpy_async, cuda::memcpy_async and the pipeline primitives", rewritable=False),
        Form("bulk (TMA) copies into shared memory", rewritable=False),
    ),
    compiler="copies from global into shared memory that skip registers: cp.async.ca/.cg and bulk copies to shared",
    forward=("shape",),
    addresses=frozenset(),  # none: see Family.addresses
    rules=("shared_memory",),
    hardware=("tma", "cp.async"),
    companions=frozenset({"multistage_buffer"}),
    # a copy engine filling shared memory takes over from the register path (smem_staging): a step
    # adding asynchronous copies may take that staging away
    replaces=("smem_staging",),
    scope=targets_from("sm_80"),
)
