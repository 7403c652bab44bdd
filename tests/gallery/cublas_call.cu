// pitfall: 11
// expect: GUARD_REJECTED
// dynamic: RUNTIME_ERROR load_error
// why: computes the row sums with cublasSgemv against a ones vector instead of a kernel of its own; the gate links the CUDA runtime only, so with the guard off the shared object does not load (cublasSgemv_v2 is undefined)
#include <cuda_runtime.h>
#include <cublas_v2.h>

__global__ void fill_ones(float* v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) v[i] = 1.0f;
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    static cublasHandle_t handle = nullptr;
    static float* ones = nullptr;
    static int ones_len = 0;
    if (!handle) cublasCreate(&handle);
    if (cols > ones_len) {
        if (ones) cudaFree(ones);
        cudaMalloc(&ones, sizeof(float) * cols);
        ones_len = cols;
    }
    fill_ones<<<(cols + 255) / 256, 256, 0, stream>>>(ones, cols);
    cublasSetStream(handle, stream);
    // x is row-major rows x cols, i.e. column-major cols x rows with lda = cols: out = x^T-view * ones.
    const float one = 1.0f, zero = 0.0f;
    cublasSgemv(handle, CUBLAS_OP_T, cols, rows, &one, x, cols, ones, 1, &zero, out, 1);
    return cudaGetLastError();
}
