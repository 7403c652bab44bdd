// Producer/consumer split with libcu++: the first warp copies tiles with cuda::memcpy_async into a
// cuda::pipeline of kDepth stages, the other warps wait on the pipeline and apply a bias+ReLU to
// each tile. Roles are chosen by a thread-index threshold.
#include <cuda/pipeline>
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

#pragma nv_diag_suppress static_var_with_dynamic_init

constexpr int kDepth = 2;
constexpr int kTile = 1024;

__global__ void bias_relu_pipelined(const float* __restrict__ in, const float* __restrict__ bias,
                                    float* __restrict__ out, int tiles)
{
    __shared__ float buf[kDepth][kTile];
    __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, kDepth> state;
    auto block = cg::this_thread_block();
    const bool producer = threadIdx.x < 32;
    const auto role = producer ? cuda::pipeline_role::producer : cuda::pipeline_role::consumer;
    auto pipe = cuda::make_pipeline(block, &state, role);

    if (threadIdx.x < 32) {
        for (int t = 0; t < tiles; ++t) {
            pipe.producer_acquire();
            const float* src = in + ((size_t)blockIdx.x * tiles + t) * kTile;
            for (int i = threadIdx.x; i < kTile; i += 32)
                cuda::memcpy_async(&buf[t % kDepth][i], src + i, sizeof(float), pipe);
            pipe.producer_commit();
        }
    } else {
        const int c = threadIdx.x - 32, nc = blockDim.x - 32;
        for (int t = 0; t < tiles; ++t) {
            pipe.consumer_wait();
            float* dst = out + ((size_t)blockIdx.x * tiles + t) * kTile;
            for (int i = c; i < kTile; i += nc)
                dst[i] = fmaxf(buf[t % kDepth][i] + bias[i], 0.f);
            pipe.consumer_release();
        }
    }
}
