"""Warpgroup MMA (sm_90a): the Hopper-specific tensor-core form."""
from __future__ import annotations

from klineage.mechanisms.base import Family, Form
from klineage.mechanisms.families._pipeline import _wgmma_info
from klineage.mechanisms.structural import _ptx_sites, _Structural


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


FAMILY = Family(
    Wgmma, rank=210,
    forms=(
        Form("wgmma.mma_async with wgmma.fence / commit_group / wait_group in inline PTX", rewritable=False),
    ),
    compiler="wgmma.mma_async instructions",
    forward=("shape",),
    addresses=frozenset(),  # none: see Family.addresses
    rules=("shared_memory", "dtype_intrinsics"),
    hardware=("wgmma",),
    scope=("sm_90a",),
)
