"""The families' compiler-evidence signatures on PTX nvcc writes here: precise, not mere presence
(fast math as the source asked for it, .nc only where asked, staging as data flow from global loads
through shared stores into computation, reductions as shuffles combined with the lane's own value)."""
from pathlib import Path

import pytest

from klineage.mechanisms import registry
from klineage.mechanisms.base import Kernel
from klineage.mechanisms.compiled import compile_kernel, instr_class

pytestmark = pytest.mark.nvcc
GALLERY = Path(__file__).resolve().parents[2] / "style_gallery" / "kernels"


def sites(source: str, family: str):
    ck = compile_kernel(Kernel(source))
    assert ck.ok, ck.reason
    return registry()[family].compiled(ck)


def gallery(name: str) -> str:
    return (GALLERY / f"{name}.cu").read_text()


def math(expr: str) -> str:
    return ("__global__ void k(const float* __restrict__ a, float* __restrict__ o) {\n"
            f"    float x = a[threadIdx.x], y = a[threadIdx.x + 1];\n    o[threadIdx.x] = {expr};\n}}\n")


@pytest.mark.parametrize("expr,fast", [
    ("__expf(x)", True), ("__fdividef(x, y)", True), ("__sinf(x)", True), ("__logf(x)", True), ("__powf(x, y)", True),
    ("expf(x)", False), ("exp2f(x)", False), ("exp2f(x * 1.4426950f)", False), ("rsqrtf(x)", False),
    ("tanhf(x)", False), ("erff(x)", False), ("x / y", False), ("1.0f / sqrtf(x)", False)])
def test_fast_math_is_what_the_source_asked_for(expr, fast):
    assert bool(sites(math(expr), "fast_math")) is fast, expr


def test_hand_written_approximations_count_except_the_base_2_exponential():
    assert sites(gallery("gelu_tanh_asm"), "fast_math")  # tanh.approx.f32 in asm
    src = math("x").replace("o[threadIdx.x] = x;", 'float r; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));'
                                                   " o[threadIdx.x] = r;")
    assert sites(src, "fast_math") == []  # fast_exp2, a mechanism of its own


def test_cache_hints_where_asked_not_the_read_only_path_restrict_gives():
    restrict_only = gallery("softplus_precise")  # const __restrict__: the compiler picks ld.global.nc itself
    assert any(i.has("nc") for f in compile_kernel(Kernel(restrict_only)).module.functions for i in f.instrs)
    assert sites(restrict_only, "cache_hint") == []
    assert {s.what for s in sites(gallery("scale_streaming_asm"), "cache_hint")} == {"ld.global.cs.v4.f32",
                                                                                    "st.global.cs.v4.f32"}
    assert sites(gallery("axpy_ldg_macro"), "cache_hint")  # __ldg behind a macro
    assert sites(gallery("copy_ldcg_stwt_float2"), "cache_hint")


def test_staging_is_data_flow_not_presence_of_shared_memory():
    for name in ("sgemm_smem_tiles_2d", "rmsnorm_smem_row", "stencil_1d_radius", "conv_tile_loader_helper",
                 "attn_fwd_row_per_thread"):
        assert sites(gallery(name), "smem_staging"), name
    for name in ("reduce_sdata_tree", "transpose_padded_2d", "block_scan_pingpong", "exp2_softmax_precise",
                 "histogram_shared_atomics", "ws_bulk_producer_warp", "cluster_mapa_launch"):
        assert sites(gallery(name), "smem_staging") == [], name


def test_reductions_are_shuffles_combined_with_the_lanes_own_value():
    for name in ("rowsum_cg_reduce", "softmax_online_ifelse", "reduce_while_functor", "count_redux_sync",
                 "dot_double_shfl", "fmha_mma_pipeline"):
        assert sites(gallery(name), "warp_reduction"), name
    for name in ("warp_bitonic_sort", "warp_scan_shfl_up", "broadcast_shfl_idx", "count_warp_aggregated_atomics"):
        assert sites(gallery(name), "warp_reduction") == [], name


def test_helper_sites_name_the_helper_and_its_kernel():
    (s, *_) = sites(gallery("rowmax_tile_shfl"), "warp_reduction")
    assert s.function == "tile_max" and s.kernel == "row_max" and s.helper
    assert len(s.lines) >= 2  # the helper's line, then where it was inlined


def test_widths_directives_copies_and_hopper_instructions():
    assert sites(gallery("scale_streaming_asm"), "vector_access")
    assert sites(gallery("rope_sincos_fast"), "vector_access")  # float2
    assert sites(gallery("softplus_precise"), "vector_access") == []
    assert [s.what for s in sites(gallery("layernorm_bwd_unroll4"), "launch_bounds")] == [".maxntid 512, 1, 1, "
                                                                                          ".minnctapersm 2"]
    assert sites(gallery("kernel_macro_qualifiers"), "launch_bounds")
    assert sites(gallery("conv1d_pipeline_prims"), "async_copy")
    assert sites(gallery("ws_bulk_producer_warp"), "tma") and sites(gallery("ws_bulk_producer_warp"), "async_copy")
    assert sites(gallery("gemm_wgmma_tma_ws"), "warp_specialization")  # setmaxnreg
    assert sites(gallery("gemm_wgmma_tma_ws"), "wgmma") and sites(gallery("hgemm_wmma_padded"), "tensor_core_mma")
    assert sites(gallery("hgemm_wmma_padded"), "wgmma") == []
    for name in ("cluster_dsmem_reduce", "cluster_mapa_launch", "tma_multicast_cluster"):
        assert sites(gallery(name), "thread_block_cluster"), name
    # a bulk copy's .shared::cluster destination and .cluster-scoped fences are not clusters
    assert sites(gallery("gemm_wgmma_tma_ws"), "thread_block_cluster") == []


def test_evidence_table_per_function():
    ck = compile_kernel(Kernel(gallery("rmsnorm_smem_row")))
    (fn,) = ck.table()
    assert fn["function"] == "rmsnorm_staged" and fn["kind"] == "entry"
    assert fn["resources"]["registers"] > 0 and fn["resources"]["shared_bytes"] == 128
    classes = fn["classes"]
    assert classes["shfl.bfly"]["count"] == 5 and classes["barrier"]["count"] >= 2
    assert "shared.st" in classes and "shared.ld" in classes
    assert any(c.startswith("global.ld.16B") for c in classes)
    assert all(v["lines"] for v in classes.values())
    for f in compile_kernel(Kernel(gallery("gemm_wgmma_tma_ws"))).module.functions:
        kinds = {instr_class(i) for i in f.instrs}
        assert {"cp.async.bulk.tensor", "mbarrier", "wgmma.mma_async", "setmaxnreg"} <= kinds
