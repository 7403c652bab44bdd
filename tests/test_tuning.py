"""klineage.tuning: the roles of tuning constants and the configuration a kernel is written at."""
from klineage.tuning import axis, canonical, configuration, matches, role

SRC = """
#ifndef K_STAGES
#define K_STAGES 3   // ring depth
#endif
#define K_BM 128
#define K_BN (256)
#define K_BK 64u
#define K_BM 64
#define ROW_MIN_VEC_PER_CTA 2048
#define HEAD_DIM 128
constexpr int kThreads = 256;
constexpr int kWarps = 128 * 2;
constexpr int kBlockN = 32;
__global__ void __launch_bounds__(512, 2) a() {}
__global__ void __launch_bounds__(kThreads) b() {}
"""


def test_roles_and_axes_from_names():
    assert canonical("kBlockM") == "K_BLOCK_M" and canonical("GEMM_BM") == "GEMM_BM"
    assert [role(n) for n in ("GEMM_BM", "ATTN_BLOCK_N", "TILE_K", "kThreads", "GEMM_WARPS_M", "CONV_MIN_BLOCKS",
                              "GEMM_STAGES", "CE_UNROLL", "HEAD_DIM", "__launch_bounds__")] == \
        ["tile", "tile", "tile", "block", "warps", "occupancy", "stages", "factor", None, "block"]
    assert [axis(n) for n in ("GEMM_BM", "ATTN_BLOCK_N", "kBlockK", "GEMM_STAGES")] == ["M", "N", "K", None]


def test_configuration_reads_literal_constants_in_file_order():
    got = [(c["name"], c["value"], c["role"], c.get("axis")) for c in configuration(SRC)]
    assert got == [("K_STAGES", 3, "stages", None), ("K_BM", 128, "tile", "M"), ("K_BN", 256, "tile", "N"),
                   ("K_BK", 64, "tile", "K"), ("kThreads", 256, "block", None), ("kBlockN", 32, "tile", "N"),
                   ("__launch_bounds__", 512, "block", None)]
    # the first definition of a name only; a byte count named ..._VEC_PER_CTA is not a vector factor;
    # expressions (kWarps) and names without a role (HEAD_DIM) are left out
    assert configuration("#define X_UNROLL 4\n") == [{"name": "X_UNROLL", "value": 4, "role": "factor"}]
    assert configuration("") == []


def test_an_item_speaks_to_a_constant_of_its_role_and_axis():
    bn = {"name": "K_BN", "value": 256, "role": "tile", "axis": "N"}
    assert matches("GEMM_BLOCK_N", bn) and not matches("GEMM_BLOCK_M", bn) and not matches("RMS_THREADS", bn)
    assert matches("RMS_THREADS", {"name": "__launch_bounds__", "value": 512, "role": "block"})
    assert not matches("HEAD_DIM", bn)
