// Attention forward with one query row per thread: the block walks the keys in tiles of BC rows,
// K and V tiles are copied into dynamic shared memory (offsets computed by hand), and each thread
// carries its row's running maximum and denominator across tiles, rescaling its output row with
// __expf when the maximum grows.
template <int HD, int BC>
__global__ void attn_fwd_rows(const float* __restrict__ q, const float* __restrict__ k,
                              const float* __restrict__ v, float* __restrict__ o, int seq, float scale)
{
    extern __shared__ float shm[];
    float* k_tile = shm;              // BC x HD
    float* v_tile = shm + BC * HD;    // BC x HD
    const int head = blockIdx.y;
    const int qrow = blockIdx.x * blockDim.x + threadIdx.x;
    const float* qh = q + ((size_t)head * seq + qrow) * HD;
    const float* kh = k + (size_t)head * seq * HD;
    const float* vh = v + (size_t)head * seq * HD;

    float qreg[HD], out[HD];
    for (int x = 0; x < HD; ++x) { qreg[x] = qh[x] * scale; out[x] = 0.f; }
    float run_max = -INFINITY, run_den = 0.f;

    for (int t0 = 0; t0 < seq; t0 += BC) {
        for (int e = threadIdx.x; e < BC * HD; e += blockDim.x) {
            k_tile[e] = kh[(size_t)t0 * HD + e];
            v_tile[e] = vh[(size_t)t0 * HD + e];
        }
        __syncthreads();
        float scores[BC];
        float tile_max = -INFINITY;
        for (int j = 0; j < BC; ++j) {
            float dot = 0.f;
            for (int x = 0; x < HD; ++x) dot += qreg[x] * k_tile[j * HD + x];
            scores[j] = dot;
            tile_max = max(tile_max, dot);
        }
        const float new_max = max(run_max, tile_max);
        const float correction = __expf(run_max - new_max);
        run_den *= correction;
        for (int x = 0; x < HD; ++x) out[x] *= correction;
        for (int j = 0; j < BC; ++j) {
            float p = __expf(scores[j] - new_max);
            run_den += p;
            for (int x = 0; x < HD; ++x) out[x] += p * v_tile[j * HD + x];
        }
        run_max = new_max;
        __syncthreads();
    }
    float* oh = o + ((size_t)head * seq + qrow) * HD;
    for (int x = 0; x < HD; ++x) oh[x] = out[x] / run_den;
}

template __global__ void attn_fwd_rows<64, 32>(const float*, const float*, const float*, float*, int, float);
