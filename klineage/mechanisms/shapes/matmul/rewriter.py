"""The matmul shape rewriter: recognise a plan, take one step, emit, audit (see the package docstring)."""
from __future__ import annotations

import re
from dataclasses import asdict

from klineage.mechanisms.base import Applied, NotApplicable
from klineage.mechanisms.shapes.base import Shape, ShapeRewriter, register
from klineage.mechanisms.shapes.matmul.emit import emit
from klineage.mechanisms.shapes.matmul.forms import TF32_PRECONDITION, choose, target_form
from klineage.mechanisms.shapes.matmul.plan import MECHANISMS, _constants, plan_facts, plan_of, present, recognise_plan


_KERNEL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)\s*)?(\w+)\s*\(")


def _main_kernel(source: str) -> str:
    """The __global__ function carrying the most detected features (the first on a tie)."""
    from klineage.mechanisms import detect_all
    names = [m.group(1) for m in _KERNEL.finditer(source)]
    if not names:
        return "<file>"
    loci = [f.locus.split(":")[0] for f in detect_all(source)]
    return max(names, key=lambda n: (loci.count(n), -names.index(n)))


def _kernel_text(source: str, name: str) -> str:
    i = source.find(f"{name}(")
    start = source.rfind("__global__", 0, i) if i >= 0 else -1
    if start < 0:
        return ""
    depth, j = 0, source.find("{", i)
    for k in range(j, len(source)):
        depth += {"{": 1, "}": -1}.get(source[k], 0)
        if depth == 0:
            return source[start:k + 1]
    return source[start:]


# The rules families a ladder step takes between structural ones (the gemm ladder's order): their own
# forward rewrites, not this generator's.
RULES_STEPS = ("unroll", "launch_bounds")


@register
class MatmulRewriter(ShapeRewriter):
    name = "matmul"
    mechanisms = MECHANISMS
    # from a naive kernel to the H200 expert's form; tensor_core_mma needs unrolled fragment loops and the
    # warp-specialized register split needs launch bounds, which the rules families add
    ladder = ("smem_tiling", "register_tiling", "unroll", "tensor_core_mma", "smem_swizzle", "async_copy", "wgmma",
              "tma", "launch_bounds", "warp_specialization")

    def recognise(self, source: str, workload=None) -> Shape | NotApplicable:
        try:
            plan = recognise_plan(source, workload)
            if isinstance(plan, NotApplicable):
                return plan
            return Shape(self.name, _main_kernel(source), plan_facts(plan))
        except Exception as exc:  # a kernel this reader trips on is not one it recognises
            return NotApplicable(f"the matmul reader failed on this kernel ({type(exc).__name__}: {exc})")

    def rewrite(self, source: str, shape: Shape, mechanism: str, config: dict,
                workload=None) -> Applied | NotApplicable:
        try:
            return self._rewrite(source, shape, mechanism, config, workload)
        except Exception as exc:  # never raises: a plan the generator trips on is a reason, not a crash
            return NotApplicable(f"the matmul generator failed ({type(exc).__name__}: {exc})")

    def _rewrite(self, source: str, shape: Shape, mechanism: str, config: dict, workload) -> Applied | NotApplicable:
        from klineage.gate.compile import DEFAULT_ARCH
        from klineage.mechanisms.audit import audit_version
        from klineage.mechanisms import Kernel, detect_all, registry
        if mechanism in RULES_STEPS:  # a ladder step of a rules family (see `ladder`)
            return registry()[mechanism].reoptimize(Kernel(source), None, None)
        plan = plan_of(shape.facts)
        arch = str(config.get("arch") or DEFAULT_ARCH)
        form = target_form(plan, mechanism, arch, getattr(workload, "tolerance", None))
        if isinstance(form, NotApplicable):
            return form
        values, notes = choose(plan, form, config)
        new = emit(plan, form, values)
        known = {m.NAME for m in registry().values() if m.DETECTABLE}
        audit = audit_version(detect_all(new), detect_all(source), mechanism, known)
        if not audit["ok"]:
            return NotApplicable(f"the written kernel fails the audit: {audit['reason']}")
        # and as this rewriter reads it (shared-memory tiling, which no detector sees): exactly `mechanism` added
        again = recognise_plan(new, workload)
        if isinstance(again, NotApplicable):
            return NotApplicable(f"the written kernel is not read back as a matrix product: {again.reason}")
        was, now = set(present(plan)), set(present(again))
        if was - now or now - was != {mechanism}:
            return NotApplicable(f"the written kernel reads as {sorted(now)} against {sorted(was)} before "
                                 f"(expected {mechanism} added)")
        declared = []
        if plan.dtype == "f32" and form.tensor_cores and not plan.form.tensor_cores:
            declared.append({"category": "data_types", "condition": TF32_PRECONDITION})
        kernel = f"matmul_{form.core}_kernel"
        names = {r: n for r, n in zip(values, [t for t in _tunable_names(new, values)])}
        return Applied(new, mechanism, f"{kernel}:{mechanism}", before=_kernel_text(source, shape.kernel),
                       after=_kernel_text(new, kernel),
                       config={"form": asdict(form), "values": {names[r]: v for r, v in values.items()},
                               "notes": notes, "audit": {k: audit[k] for k in ("added_forward", "lost_forward")},
                               **({"preconditions": declared} if declared else {})})


def _tunable_names(source: str, values: dict) -> list[str]:
    """The names the written file gives the roles of `values`, in their order."""
    names, _, _ = _constants(source)
    return [names.get(r, r) for r in values]
