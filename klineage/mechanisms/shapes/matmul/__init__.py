"""Tiled matrix products (mm, addmm, bmm, grouped mm): recognise one, write a structural skill into it.

Recognition reads a kernel file into a plan: its `extern "C"` entry points (which pointer is a, b, the
bias, the group offsets, the output; which integers are M, N, K, the batch or the group count), the
element type, the layout of b ([K, N] row-major, "N-major", as torch.mm takes it; or [N, K], "K-major",
as a linear layer stores its weight: read from the workload's inputs when one is given, else from how
a kernel indexes b), the mechanism kinds the detectors find, and its tuning constants by role.

A rewrite emits the whole file again from the plan and one more mechanism, from the generator's
template (templates/matmul/matmul.cu.j2): the same entry points with the same signatures and
semantics (bias, batch strides, group offsets), the same tuning-constant convention (`#ifndef NAME /
#define NAME <int> / #endif`, named as the kernel named them where a constant of that role exists),
the kernel's other mechanisms as they were (the forms below, and restrict / launch bounds / unroll /
vector access exactly when the kernel had them), and a fallback for calls the fast path cannot serve.
The forms, in the order the gemm ladder climbs them:

    naive -> smem_tiling -> register_tiling -> tensor_core_mma (mma.sync + ldmatrix) -> smem_swizzle
          -> async_copy (cp.async ring) -> wgmma -> tma (mbarrier ring) -> warp_specialization

Each step has its preconditions (what the kernel must already be, the element type, the target
architecture); a kernel that does not meet them gets NotApplicable with the reason. Every rewrite is
audited before it is returned: the detectors must see exactly the new mechanism added and no kind
lost (klineage.mechanisms.audit.audit_version, the versions audit), else NotApplicable.

Parameters come from the skill's configuration (a card's measured configuration, or flat NAME: value
pairs), each kept only where legal for the form, then the kernel's own values, then defaults.
"""
from klineage.mechanisms.shapes.matmul.rewriter import RULES_STEPS, MatmulRewriter

__all__ = ["RULES_STEPS", "MatmulRewriter"]
