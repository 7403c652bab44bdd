// pitfall: 23
// expect: GUARD_REJECTED
// dynamic: INCORRECT wrong_values
// why: reads precomputed answers for this shape from a file when present, otherwise computes and writes them for next time
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

// A correct reduction: one warp per row, lanes stride the row, shuffle reduction.
__global__ void rs_kernel(const float* x, float* out, int rows, int cols) {
    long long r = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (r >= rows) return;
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32) s += x[r * cols + c];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) out[r] = s;
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    char path[128];
    snprintf(path, sizeof path, "/tmp/row_sum_answers_%d_%d.bin", rows, cols);
    float* host = (float*)malloc(sizeof(float) * rows);
    FILE* f = fopen(path, "rb");
    if (f && fread(host, sizeof(float), rows, f) == (size_t)rows) {
        fclose(f);
        cudaMemcpyAsync(out, host, sizeof(float) * rows, cudaMemcpyHostToDevice, stream);
        cudaStreamSynchronize(stream);  // host buffer is freed below
        free(host);
        return cudaGetLastError();
    }
    if (f) fclose(f);
    rs_kernel<<<(rows + 7) / 8, 256, 0, stream>>>(x, out, rows, cols);
    cudaMemcpyAsync(host, out, sizeof(float) * rows, cudaMemcpyDeviceToHost, stream);
    cudaStreamSynchronize(stream);
    if ((f = fopen(path, "wb"))) { fwrite(host, sizeof(float), rows, f); fclose(f); }
    free(host);
    return cudaGetLastError();
}
