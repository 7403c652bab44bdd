"""The mechanism registry: every family's mechanisms, in the order records and the proposer rely on."""
from __future__ import annotations

from klineage.mechanisms import registry

REGISTERED = [
    "cache_hint", "fast_math", "launch_bounds", "unroll", "restrict", "coarsening", "smem_padding", "vector_access",
    "warp_reduction", "smem_staging", "tensor_core_mma", "wgmma", "async_copy", "tma", "multistage_buffer",
    "warp_specialization", "online_softmax", "smem_swizzle", "register_tiling", "thread_block_cluster",
    "warp_per_row", "block_per_row", "tiled_transpose", "warp_scan", "block_scan", "reduce_then_scan",
    "register_cache", "fast_exp2", "radix_select", "bitonic_sort", "warp_bitonic",
]


def test_registry_order():
    assert list(registry()) == REGISTERED


def test_rewritable_families_live_in_their_own_module():
    # a card names its rewrite "klineage.mechanisms.<family>": the family's module under families/
    for name, m in registry().items():
        if not m.STRUCTURAL:
            assert type(m).__module__ == f"klineage.mechanisms.families.{name}", name
