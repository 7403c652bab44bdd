// Single-query attention for decoding, one block per head, one key per thread and step: the running
// maximum is saved, raised by a branch, and only then are the running sum and the output row
// rescaled from the saved value.
#define HEAD_DIM 64

__global__ void decode_attention(const float* __restrict__ q, const float* __restrict__ k,
                                 const float* __restrict__ v, float* __restrict__ o, int seq_len, float scale) {
    const int head = blockIdx.x;
    const float* qh = q + head * HEAD_DIM;
    const float* kh = k + (size_t)head * seq_len * HEAD_DIM;
    const float* vh = v + (size_t)head * seq_len * HEAD_DIM;
    const int d = threadIdx.x;  // one output dimension per thread

    float running_max = -1e30f;
    float running_sum = 0.0f;
    float acc = 0.0f;
    for (int t = 0; t < seq_len; ++t) {
        float s = 0.0f;
        for (int i = 0; i < HEAD_DIM; ++i) s += qh[i] * kh[t * HEAD_DIM + i];
        s *= scale;
        const float old_max = running_max;
        if (s > running_max) running_max = s;
        const float correction = __expf(old_max - running_max);
        const float p = __expf(s - running_max);
        running_sum = running_sum * correction + p;
        acc = acc * correction + p * vh[t * HEAD_DIM + d];
    }
    o[head * HEAD_DIM + d] = acc / running_sum;
}
