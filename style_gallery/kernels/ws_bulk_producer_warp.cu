// Streaming column sums with a producer warp: warp 0 moves 8 KB chunks into a 4-deep ring with
// bulk copies (cp.async.bulk) and full/empty mbarriers; warps 1..4 consume each chunk from shared
// memory and accumulate. Roles split by warp index with an early return for the producer.
#include <stdint.h>

#define RING 4
#define CHUNK_FLOATS 2048

__device__ __forceinline__ uint32_t sa(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void wait_parity(uint64_t* b, uint32_t parity)
{
    asm volatile("{\n .reg .pred done;\n SPIN:\n mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 " @!done bra SPIN;\n}" :: "r"(sa(b)), "r"(parity) : "memory");
}

__global__ void colsum_ws(const float* __restrict__ x, float* __restrict__ colsum, int nchunks)
{
    __shared__ __align__(128) float ring[RING][CHUNK_FLOATS];
    __shared__ __align__(8) uint64_t full_bar[RING], empty_bar[RING];
    const int warp_id = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int consumers = blockDim.x / 32 - 1;

    if (threadIdx.x == 0) {
        for (int i = 0; i < RING; ++i) {
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sa(&full_bar[i])));
            asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(sa(&empty_bar[i])), "r"(consumers));
        }
    }
    __syncthreads();

    if (warp_id == 0) {
        if (lane == 0) {
            for (int c = 0; c < nchunks; ++c) {
                int slot = c % RING;
                if (c >= RING) wait_parity(&empty_bar[slot], ((c / RING) + 1) & 1);
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                             :: "r"(sa(&full_bar[slot])), "r"(CHUNK_FLOATS * 4));
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                             :: "r"(sa(ring[slot])), "l"(x + (size_t)(blockIdx.x * nchunks + c) * CHUNK_FLOATS),
                                "r"(CHUNK_FLOATS * 4), "r"(sa(&full_bar[slot])) : "memory");
            }
        }
        return;
    }

    const int t = threadIdx.x - 32;
    float acc[CHUNK_FLOATS / 128] = {};
    for (int c = 0; c < nchunks; ++c) {
        int slot = c % RING;
        wait_parity(&full_bar[slot], (c / RING) & 1);
        for (int j = t, k = 0; j < CHUNK_FLOATS; j += 128, ++k) acc[k] += ring[slot][j];
        __syncwarp();
        if (lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(sa(&empty_bar[slot])));
    }
    for (int j = t, k = 0; j < CHUNK_FLOATS; j += 128, ++k)
        atomicAdd(&colsum[j], acc[k]);
}
