// Hopper GEMM over pre-packed operand tiles: one thread moves each 64x64 tile with a 1-D bulk copy
// (cp.async.bulk) that completes on an mbarrier, tiles alternate between two buffers ([2][TILE]),
// and the warpgroup multiplies with wgmma through a project macro. No swizzle (interleaved
// 8x8 core matrices, descriptor layout 0).
#include <cuda_bf16.h>
#include <stdint.h>

#define TK 64
#define TILE_ELEMS (64 * TK)

#define SMEM_ADDR(p) static_cast<uint32_t>(__cvta_generic_to_shared(p))

#define WGMMA_M64N64K16_BF16(D, DESC_A, DESC_B)                                                   \
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "                         \
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, 1, 1, 1, 0, 0;\n"                                          \
                 : "+f"(D[0]), "+f"(D[1]), "+f"(D[2]), "+f"(D[3]), "+f"(D[4]), "+f"(D[5]), "+f"(D[6]), "+f"(D[7]), "+f"(D[8]), "+f"(D[9]), "+f"(D[10]), "+f"(D[11]), "+f"(D[12]), "+f"(D[13]), "+f"(D[14]), "+f"(D[15]), "+f"(D[16]), "+f"(D[17]), "+f"(D[18]), "+f"(D[19]), "+f"(D[20]), "+f"(D[21]), "+f"(D[22]), "+f"(D[23]), "+f"(D[24]), "+f"(D[25]), "+f"(D[26]), "+f"(D[27]), "+f"(D[28]), "+f"(D[29]), "+f"(D[30]), "+f"(D[31])                                                                         \
                 : "l"(DESC_A), "l"(DESC_B))

__device__ __forceinline__ uint64_t core_matrix_desc(uint32_t saddr)
{
    return ((uint64_t)((saddr & 0x3FFFF) >> 4)) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(256 >> 4) << 32);
}

__global__ void __launch_bounds__(128) gemm_bulk_wgmma(const __nv_bfloat16* __restrict__ Apack,
                                                       const __nv_bfloat16* __restrict__ Bpack,
                                                       float* __restrict__ C, int ktiles, int ldc)
{
    __shared__ __align__(128) __nv_bfloat16 a_buf[2][TILE_ELEMS];
    __shared__ __align__(128) __nv_bfloat16 b_buf[2][TILE_ELEMS];
    __shared__ __align__(8) uint64_t ready[2];

    const __nv_bfloat16* a_src = Apack + (size_t)blockIdx.y * ktiles * TILE_ELEMS;
    const __nv_bfloat16* b_src = Bpack + (size_t)blockIdx.x * ktiles * TILE_ELEMS;
    const uint32_t bytes = 2 * TILE_ELEMS * sizeof(__nv_bfloat16);

    if (threadIdx.x == 0) {
        for (int i = 0; i < 2; ++i)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(SMEM_ADDR(&ready[i])));
        asm volatile("fence.proxy.async.shared::cta;");
    }
    __syncthreads();

    auto issue = [&](int kt) {
        int buf = kt & 1;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(SMEM_ADDR(&ready[buf])), "r"(bytes));
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(SMEM_ADDR(a_buf[buf])), "l"(a_src + (size_t)kt * TILE_ELEMS), "r"(bytes / 2),
                        "r"(SMEM_ADDR(&ready[buf])) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(SMEM_ADDR(b_buf[buf])), "l"(b_src + (size_t)kt * TILE_ELEMS), "r"(bytes / 2),
                        "r"(SMEM_ADDR(&ready[buf])) : "memory");
    };

    float D[32];
    for (int i = 0; i < 32; ++i) D[i] = 0.0f;
    if (threadIdx.x == 0) issue(0);
    for (int kt = 0; kt < ktiles; ++kt) {
        const int buf = kt & 1;
        if (threadIdx.x == 0 && kt + 1 < ktiles) issue(kt + 1);
        asm volatile("{\n .reg .pred ok;\n LAB_WAIT:\n"
                     " mbarrier.try_wait.parity.shared::cta.b64 ok, [%0], %1;\n @!ok bra LAB_WAIT;\n}"
                     :: "r"(SMEM_ADDR(&ready[buf])), "r"((kt >> 1) & 1));
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        for (int kk = 0; kk < TK / 16; ++kk) {
            uint64_t da = core_matrix_desc(SMEM_ADDR(a_buf[buf] + kk * 64 * 16));
            uint64_t db = core_matrix_desc(SMEM_ADDR(b_buf[buf] + kk * 64 * 16));
            WGMMA_M64N64K16_BF16(D, da, db);
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        __syncthreads();
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float* out = C + (size_t)(blockIdx.y * 64) * ldc + blockIdx.x * 64;
    for (int i = 0; i < 16; ++i) {
        int r = warp * 16 + lane / 4 + 8 * (i & 1), c = (i >> 1) * 8 + (lane % 4) * 2;
        *reinterpret_cast<float2*>(&out[r * ldc + c]) = make_float2(D[2 * i], D[2 * i + 1]);
    }
}
