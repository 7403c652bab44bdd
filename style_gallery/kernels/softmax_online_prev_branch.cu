// Row softmax, one thread per row, in one sweep for the statistics: when an element beats the
// running maximum, the old maximum is kept aside and the sum is rescaled from it; otherwise the
// element's term is added at the current maximum.
#include <math.h>

__global__ void softmax_forward_online(float* out, const float* inp, int N, int C) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    const float* inp_row = inp + (size_t)i * C;
    float* out_row = out + (size_t)i * C;

    float maxval = -INFINITY;
    float sum = 0.0f;
    for (int j = 0; j < C; j++) {
        if (inp_row[j] > maxval) {
            float maxval_prev = maxval;
            maxval = inp_row[j];
            sum = sum * expf(maxval_prev - maxval) + expf(inp_row[j] - maxval);
        } else {
            sum += expf(inp_row[j] - maxval);
        }
    }
    for (int j = 0; j < C; j++) {
        out_row[j] = expf(inp_row[j] - maxval) / sum;
    }
}
