"""The Tensor Memory Accelerator (sm_90): bulk tensor copies."""
from __future__ import annotations

from klineage.gate.compile import targets_from
from klineage.mechanisms.base import Family, Form
from klineage.mechanisms.families._pipeline import _BULK_COPY, _MBARRIER, _TMA_OTHER, _bulk_loads, _stage_names, _stages
from klineage.mechanisms.structural import _joined, _lines, _ptx_sites, _Structural


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


FAMILY = Family(
    TMA, rank=230,
    forms=(
        Form("cp.async.bulk(.tensor) copies, CUtensorMap descriptors and mbarrier transaction counts",
             rewritable=False),
    ),
    compiler="bulk copies (cp.async.bulk, .tensor, cp.reduce.async.bulk) in either direction",
    forward=("shape",),
    addresses=frozenset(),  # none: see Family.addresses
    rules=("shared_memory",),
    hardware=("tma",),
    scope=targets_from("sm_90"),
)
