// fault: host_crash
// expect: RUNTIME_ERROR
// why: the host entry point dereferences a null host pointer, killing the calling process with SIGSEGV
#include <cuda_runtime.h>

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    volatile int* p = nullptr;
    *p = rows;  // SIGSEGV in the worker process
    return cudaSuccess;
}
