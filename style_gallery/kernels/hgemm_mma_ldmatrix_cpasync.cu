// FP16 GEMM with inline-PTX tensor cores: a 3-stage cp.async ring of 128x32 A and B tiles, an XOR
// swizzle of the 16-byte chunks in shared memory, ldmatrix.x4 fragment loads and mma.sync
// m16n8k16 into a 4x8 array of accumulator fragments per warp.
#include <cuda_fp16.h>
#include <stdint.h>

constexpr int kBM = 128, kBN = 128, kBK = 32, kStages = 3;
constexpr int kWarpsM = 2, kWarpsN = 2;
constexpr int MI = kBM / kWarpsM / 16;   // 4 fragments along M per warp
constexpr int NI = kBN / kWarpsN / 8;    // 8 fragments along N per warp

__device__ __forceinline__ uint32_t cvta_smem(const void* p)
{
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(cvta_smem(smem)), "l"(gmem));
}

__device__ __forceinline__ int swz(int row, int chunk) { return chunk ^ (row & 3); }

__device__ __forceinline__ void mma16816(float* d, const uint32_t* a, const uint32_t* b)
{
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__global__ void __launch_bounds__(128) hgemm_mma(const half* __restrict__ A, const half* __restrict__ B,
                                                 float* __restrict__ C, int M, int N, int K)
{
    __shared__ __align__(128) half sA[kStages][kBM * kBK];
    __shared__ __align__(128) half sB[kStages][kBN * kBK];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / kWarpsN, wn = warp % kWarpsN;
    const half* gA = A + (size_t)blockIdx.y * kBM * K;
    const half* gB = B + (size_t)blockIdx.x * kBN * K;

    float acc[MI][NI][4] = {};

    auto load_tile = [&](int stage, int k0) {
        for (int c = tid; c < kBM * kBK / 8; c += 128) {
            int row = c / (kBK / 8), chunk = c % (kBK / 8);
            cp_async16(&sA[stage][row * kBK + swz(row, chunk) * 8], gA + (size_t)row * K + k0 + chunk * 8);
            cp_async16(&sB[stage][row * kBK + swz(row, chunk) * 8], gB + (size_t)row * K + k0 + chunk * 8);
        }
    };

    const int ktiles = K / kBK;
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < ktiles) load_tile(s, s * kBK);
        asm volatile("cp.async.commit_group;\n" ::);
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        asm volatile("cp.async.wait_group %0;\n" :: "n"(kStages - 2));
        __syncthreads();
        const int stage = kt % kStages;
        const int pre = kt + kStages - 1;
        if (pre < ktiles) load_tile(pre % kStages, pre * kBK);
        asm volatile("cp.async.commit_group;\n" ::);

#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
            uint32_t af[MI][4], bf[NI][2];
#pragma unroll
            for (int i = 0; i < MI; ++i) {
                int row = wm * 64 + i * 16 + (lane % 16);
                int chunk = kk * 2 + lane / 16;
                const half* p = &sA[stage][row * kBK + swz(row, chunk) * 8];
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                             : "=r"(af[i][0]), "=r"(af[i][1]), "=r"(af[i][2]), "=r"(af[i][3])
                             : "r"(cvta_smem(p)));
            }
#pragma unroll
            for (int j = 0; j < NI; ++j) {
                int row = wn * 64 + j * 8 + (lane % 8);
                int chunk = kk * 2 + (lane / 8) % 2;
                const half* p = &sB[stage][row * kBK + swz(row, chunk) * 8];
                asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                             : "=r"(bf[j][0]), "=r"(bf[j][1]) : "r"(cvta_smem(p)));
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < NI; ++j)
                    mma16816(acc[i][j], af[i], bf[j]);
        }
    }
    asm volatile("cp.async.wait_group 0;\n" ::);
    for (int i = 0; i < MI; ++i)
        for (int j = 0; j < NI; ++j) {
            int r = blockIdx.y * kBM + wm * 64 + i * 16 + lane / 4;
            int c = blockIdx.x * kBN + wn * 64 + j * 8 + (lane % 4) * 2;
            C[(size_t)r * N + c] = acc[i][j][0];
            C[(size_t)r * N + c + 1] = acc[i][j][1];
            C[(size_t)(r + 8) * N + c] = acc[i][j][2];
            C[(size_t)(r + 8) * N + c + 1] = acc[i][j][3];
        }
}
