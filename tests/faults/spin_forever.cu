// fault: hang
// expect: TIMEOUT
// why: every thread spins on a volatile flag that nobody ever sets; the kernel never finishes
#include <cuda_runtime.h>

__global__ void spin(const float* x, float* out, int rows, int* never_set) {
    volatile int* flag = never_set;
    while (*flag == 0) {
    }
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) out[r] = x[0];
}

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    // The flag is out[0], zeroed on the same stream just before; nothing ever makes it non-zero.
    int* flag = reinterpret_cast<int*>(out);
    cudaMemsetAsync(flag, 0, sizeof(int), stream);
    spin<<<(rows + 255) / 256, 256, 0, stream>>>(x, out, rows, flag);
    return cudaGetLastError();
}
