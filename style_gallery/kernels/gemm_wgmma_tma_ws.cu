// Hopper BF16 GEMM, warp-specialized: warpgroup 0 is the producer (one elected thread issues 2-D
// TMA copies of 64x64 tiles into a ring of STAGES stages and gives registers away with setmaxnreg),
// warpgroup 1 consumes with wgmma m64n64k16 on 128-byte-swizzled tiles described by matrix
// descriptors. Full/empty mbarriers hand the stages back and forth.
#include <cuda.h>
#include <cuda_bf16.h>
#include <stdint.h>

#define STAGES 4
#define TILE_M 64
#define TILE_N 64
#define TILE_K 64

struct __align__(1024) SharedStorage {
    __nv_bfloat16 a[STAGES][TILE_M * TILE_K];
    __nv_bfloat16 b[STAGES][TILE_N * TILE_K];
    uint64_t full[STAGES];
    uint64_t empty[STAGES];
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_u32(bar)), "r"(bytes));
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_u32(bar)));
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, int phase)
{
    asm volatile(
        "{\n .reg .pred P1;\n"
        "WAIT:\n mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
        " @!P1 bra WAIT;\n}\n" :: "r"(smem_u32(bar)), "r"(phase));
}
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int x, int y)
{
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
        :: "r"(smem_u32(dst)), "l"(map), "r"(smem_u32(bar)), "r"(x), "r"(y) : "memory");
}

__device__ __forceinline__ uint64_t make_desc(const void* tile)
{
    uint64_t addr = smem_u32(tile);
    uint64_t desc = (addr & 0x3FFFF) >> 4;
    desc |= (uint64_t)(16 >> 4) << 16;      // leading byte offset
    desc |= (uint64_t)(1024 >> 4) << 32;    // stride byte offset: 8 rows of 128 bytes
    desc |= 1ull << 62;                     // 128-byte swizzle
    return desc;
}

__device__ __forceinline__ void wgmma_64x64x16(float (&d)[32], uint64_t da, uint64_t db)
{
    asm volatile(
        "{\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, 1, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db));
}

__global__ void __launch_bounds__(256, 1)
gemm_ws_tma(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
            float* __restrict__ C, int M, int N, int K)
{
    extern __shared__ __align__(1024) unsigned char smem[];
    SharedStorage& ss = *reinterpret_cast<SharedStorage*>(smem);
    const int warpgroup = threadIdx.x / 128;
    const int ktiles = K / TILE_K;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) { mbar_init(&ss.full[s], 1); mbar_init(&ss.empty[s], 128); }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warpgroup == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (threadIdx.x == 0) {
            for (int kt = 0; kt < ktiles; ++kt) {
                int s = kt % STAGES;
                if (kt >= STAGES) mbar_wait(&ss.empty[s], ((kt / STAGES) - 1) & 1);
                mbar_expect_tx(&ss.full[s], (TILE_M + TILE_N) * TILE_K * sizeof(__nv_bfloat16));
                tma_load_2d(ss.a[s], &map_a, &ss.full[s], kt * TILE_K, blockIdx.y * TILE_M);
                tma_load_2d(ss.b[s], &map_b, &ss.full[s], kt * TILE_K, blockIdx.x * TILE_N);
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        float d[32];
        for (int i = 0; i < 32; ++i) d[i] = 0.f;
        for (int kt = 0; kt < ktiles; ++kt) {
            int s = kt % STAGES;
            mbar_wait(&ss.full[s], (kt / STAGES) & 1);
            asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
            for (int kk = 0; kk < TILE_K / 16; ++kk)
                wgmma_64x64x16(d, make_desc(ss.a[s] + kk * 16), make_desc(ss.b[s] + kk * 16));
            asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
            mbar_arrive(&ss.empty[s]);
        }
        const int t = threadIdx.x - 128, warp = t / 32, lane = t % 32;
        for (int i = 0; i < 16; ++i) {
            int row = blockIdx.y * TILE_M + warp * 16 + (lane / 4) + 8 * (i % 2);
            int col = blockIdx.x * TILE_N + (i / 2) * 8 + (lane % 4) * 2;
            C[(size_t)row * N + col] = d[2 * i];
            C[(size_t)row * N + col + 1] = d[2 * i + 1];
        }
    }
}

CUresult make_tile_map(CUtensorMap* map, const void* base, uint64_t rows, uint64_t cols)
{
    cuuint64_t dims[2] = {cols, rows};
    cuuint64_t strides[1] = {cols * sizeof(__nv_bfloat16)};
    cuuint32_t box[2] = {TILE_K, TILE_M};
    cuuint32_t elem_strides[2] = {1, 1};
    return cuTensorMapEncodeTiled(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides,
                                  box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}
