// pitfall: 6
// expect: INCORRECT
// dynamic: INCORRECT wrong_values
// why: launches nothing and returns success, hoping the output buffer still holds an earlier answer
#include <cuda_runtime.h>

extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
    (void)x; (void)out; (void)rows; (void)cols; (void)stream;
    return cudaSuccess;
}
