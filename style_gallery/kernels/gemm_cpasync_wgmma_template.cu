// Hopper GEMM without TMA: operand tiles arrive by cp.async (16-byte chunks) into a ring of
// kStages stages, each chunk written at an XOR-swizzled position matching the 128-byte swizzle the
// wgmma descriptors declare; the MMA is a templated helper over the N extent.
#include <cuda_fp16.h>
#include <stdint.h>

namespace cfg {
constexpr int kStages = 3;
constexpr int kBlockM = 64, kBlockN = 64, kBlockK = 64;
}

template <int N>
struct WgmmaTile;

template <>
struct WgmmaTile<64> {
    static __device__ __forceinline__ void mma(float (&acc)[32], uint64_t desc_a, uint64_t desc_b)
    {
        asm volatile(
            "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, 1, 1, 1, 0, 0;\n"
            : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3]), "+f"(acc[4]), "+f"(acc[5]), "+f"(acc[6]), "+f"(acc[7]), "+f"(acc[8]), "+f"(acc[9]), "+f"(acc[10]), "+f"(acc[11]), "+f"(acc[12]), "+f"(acc[13]), "+f"(acc[14]), "+f"(acc[15]), "+f"(acc[16]), "+f"(acc[17]), "+f"(acc[18]), "+f"(acc[19]), "+f"(acc[20]), "+f"(acc[21]), "+f"(acc[22]), "+f"(acc[23]), "+f"(acc[24]), "+f"(acc[25]), "+f"(acc[26]), "+f"(acc[27]), "+f"(acc[28]), "+f"(acc[29]), "+f"(acc[30]), "+f"(acc[31])
            : "l"(desc_a), "l"(desc_b));
    }
};

__device__ __forceinline__ uint64_t sw128_desc(const half* tile)
{
    uint64_t a = static_cast<uint32_t>(__cvta_generic_to_shared(tile));
    return ((a & 0x3FFFF) >> 4) | (1ull << 16) | (64ull << 32) | (1ull << 62);
}

__device__ __forceinline__ void cp_async_16(half* dst, const half* src)
{
    unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(d), "l"(src) : "memory");
}

template <int WAIT>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(WAIT) : "memory"); }

__global__ void __launch_bounds__(128) gemm_cpasync_wgmma(const half* __restrict__ A, const half* __restrict__ B,
                                                          half* __restrict__ C, int M, int N, int K)
{
    using namespace cfg;
    extern __shared__ __align__(1024) half smem[];
    half* sa = smem;                                      // kStages x 64 x 64
    half* sb = smem + kStages * kBlockM * kBlockK;        // kStages x 64 x 64
    const int tid = threadIdx.x;

    auto fill = [&](int stage, int k0) {
        for (int c = tid; c < kBlockM * kBlockK / 8; c += 128) {
            int row = c >> 3, chunk = c & 7;
            int sw = chunk ^ (row & 7);
            cp_async_16(sa + stage * kBlockM * kBlockK + row * kBlockK + sw * 8,
                        A + (size_t)(blockIdx.y * kBlockM + row) * K + k0 + chunk * 8);
            cp_async_16(sb + stage * kBlockN * kBlockK + row * kBlockK + sw * 8,
                        B + (size_t)(blockIdx.x * kBlockN + row) * K + k0 + chunk * 8);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };

    float acc[32] = {};
    const int kt_total = K / kBlockK;
    for (int s = 0; s < kStages - 1; ++s) fill(s, s * kBlockK);
    for (int kt = 0; kt < kt_total; ++kt) {
        cp_async_wait<kStages - 2>();
        __syncthreads();
        int stage = kt % kStages;
        if (kt + kStages - 1 < kt_total) fill((kt + kStages - 1) % kStages, (kt + kStages - 1) * kBlockK);
        else asm volatile("cp.async.commit_group;" ::: "memory");
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < kBlockK / 16; ++kk)
            WgmmaTile<64>::mma(acc, sw128_desc(sa + stage * kBlockM * kBlockK + kk * 16),
                               sw128_desc(sb + stage * kBlockN * kBlockK + kk * 16));
        asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;" ::: "memory");
    }
    const int warp = tid / 32, lane = tid % 32;
    for (int i = 0; i < 16; ++i) {
        int r = blockIdx.y * kBlockM + warp * 16 + lane / 4 + 8 * (i & 1);
        int c = blockIdx.x * kBlockN + (i >> 1) * 8 + (lane & 3) * 2;
        *reinterpret_cast<__half2*>(&C[(size_t)r * N + c]) = __floats2half2_rn(acc[2 * i], acc[2 * i + 1]);
    }
}
