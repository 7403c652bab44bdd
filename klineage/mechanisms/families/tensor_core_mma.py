"""Tensor-core matrix multiply-accumulate, any flavour (an umbrella over wgmma)."""
from __future__ import annotations

from klineage.gate.compile import targets_from
from klineage.mechanisms.base import Family, Form
from klineage.mechanisms.families._pipeline import (_C_TYPES, _LDMATRIX, _MMA_PTX, _WMMA_API, _WMMA_BARE, _WMMA_FRAG,
                                                    _ptx_types, _wgmma_info)
from klineage.mechanisms.structural import _joined, _lines, _ptx_sites, _Structural


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


FAMILY = Family(
    TensorCoreMMA, rank=200,
    forms=(
        Form("WMMA fragments and calls (nvcuda::wmma)", rewritable=False),
        Form("mma.sync with ldmatrix fragments in inline PTX", rewritable=False),
        Form("warpgroup wgmma.mma_async", rewritable=False),
    ),
    compiler="mma.sync, wmma.mma.sync and wgmma.mma_async instructions",
    forward=("shape",),
    addresses=frozenset(),  # none: see Family.addresses
    rules=("dtype_intrinsics",),
    hardware=("wgmma", "setmaxnreg", "tcgen05", "mma.sync"),
    scope=targets_from("sm_80"),
)
