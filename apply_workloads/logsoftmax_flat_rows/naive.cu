// Log-softmax over the last dimension of fp32 logits [B, T, V], the output argument first. One thread
// per (b, t) row, its index checked against B * T; the maximum starts from a large negative constant
// and compares element by element.
#include <cuda_runtime.h>

__global__ void logsoftmax_fwd(float* out, const float* logits, int B, int T, int V) {
    int bt = blockIdx.x * blockDim.x + threadIdx.x;
    if (bt >= B * T) { return; }
    const float* lp = logits + bt * V;
    float maxval = -10000.0f;
    for (int i = 0; i < V; i++) {
        if (lp[i] > maxval) { maxval = lp[i]; }
    }
    float sumval = 0.0f;
    for (int i = 0; i < V; i++) {
        sumval += expf(lp[i] - maxval);
    }
    float logsum = logf(sumval);
    for (int i = 0; i < V; i++) {
        out[bt * V + i] = lp[i] - maxval - logsum;
    }
}

extern "C" cudaError_t logsoftmax_forward(float* out, const float* logits, int B, int T, int V, cudaStream_t stream) {
    const int block_size = 512;
    const int n = B * T;
    logsoftmax_fwd<<<(n + block_size - 1) / block_size, block_size, 0, stream>>>(out, logits, B, T, V);
    return cudaGetLastError();
}
