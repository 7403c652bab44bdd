#include <cuda_runtime.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;

// kernel 3: same as 2, plus restrict on every pointer and rsqrtf (one commit: "small perf fixes").
__global__ void layernorm_forward_kernel3(float* __restrict__ out, const float* __restrict__ inp,
                                          const float* __restrict__ weight, const float* __restrict__ bias,
                                          int N, int C) {
    cg::thread_block block = cg::this_thread_block();
    cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
    int idx = blockIdx.x * warp.meta_group_size() + warp.meta_group_rank();
    if (idx >= N) {
        return;
    }
    const float* x = inp + (size_t)idx * C;

    float sum = 0.0f;
    for (int i = warp.thread_rank(); i < C; i += warp.size()) {
        sum += x[i];
    }
    sum = cg::reduce(warp, sum, cg::plus<float>{});
    float m = sum / C;

    sum = 0.0f;
    for (int i = warp.thread_rank(); i < C; i += warp.size()) {
        float diff = x[i] - m;
        sum += diff * diff;
    }
    sum = cg::reduce(warp, sum, cg::plus<float>{});
    float s = rsqrtf(sum / C + 1e-5f);

    float* o = out + (size_t)idx * C;
    for (int c = warp.thread_rank(); c < C; c += warp.size()) {
        float n = s * (x[c] - m);
        o[c] = n * weight[c] + bias[c];
    }
}

extern "C" cudaError_t layernorm_forward(const float* inp, const float* weight, const float* bias, float* out,
                                         int N, int C, cudaStream_t stream) {
    const int block_size = 256;
    const int grid_size = (N * 32 + block_size - 1) / block_size;
    layernorm_forward_kernel3<<<grid_size, block_size, 0, stream>>>(out, inp, weight, bias, N, C);
    return cudaGetLastError();
}
