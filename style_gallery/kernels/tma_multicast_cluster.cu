// Broadcast of a shared weight tile to every block of a 2-block cluster: the leader issues one
// TMA copy with .multicast::cluster, each block's mbarrier counts the bytes, then every block scales
// its own rows by the tile.
#include <cuda.h>
#include <stdint.h>

__device__ __forceinline__ uint32_t s2u(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128)
scale_by_shared_tile(const __grid_constant__ CUtensorMap wmap, const float* __restrict__ x,
                     float* __restrict__ y, int cols)
{
    __shared__ __align__(128) float w_tile[32 * 32];
    __shared__ __align__(8) uint64_t bar;
    uint32_t rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));

    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(s2u(&bar)));
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(s2u(&bar)), "r"(32 * 32 * 4));
    }
    asm volatile("barrier.cluster.arrive.aligned;\nbarrier.cluster.wait.aligned;" ::: "memory");
    if (rank == 0 && threadIdx.x == 0) {
        uint16_t mask = 0x3;
        asm volatile(
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
            " [%0], [%1, {%2, %3}], [%4], %5;"
            :: "r"(s2u(w_tile)), "l"(&wmap), "r"(0), "r"(0), "r"(s2u(&bar)), "h"(mask) : "memory");
    }
    asm volatile("{\n .reg .pred p;\n W1:\n mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n @!p bra W1;\n}"
                 :: "r"(s2u(&bar)));
    const int row = blockIdx.x;
    for (int c = threadIdx.x; c < cols; c += blockDim.x)
        y[(size_t)row * cols + c] = x[(size_t)row * cols + c] * w_tile[(row % 32) * 32 + (c % 32)];
}
