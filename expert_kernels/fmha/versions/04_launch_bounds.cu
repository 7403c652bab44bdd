// klineage-step: mechanism=launch_bounds
// __launch_bounds__ on both kernels: ptxas budgets registers for the 128-thread blocks they are
// launched with.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define FMHA_ROWS 16       // query rows per block
#define FMHA_KEYS 64       // key / value rows per shared-memory tile
#define FMHA_THREADS 128
#define FMHA_MAX_D 128

__global__ void __launch_bounds__(FMHA_THREADS)
fmha_tiled_kernel(const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,
                  __half* __restrict__ out, int S, int D, float scale) {
    __shared__ float qs[FMHA_ROWS * FMHA_MAX_D];
    __shared__ __half ks[FMHA_KEYS * FMHA_MAX_D];
    __shared__ __half vs[FMHA_KEYS * FMHA_MAX_D];
    __shared__ float ps[FMHA_ROWS * FMHA_KEYS];  // the tile's scores, then its probabilities
    __shared__ float red[FMHA_THREADS];
    __shared__ float m_run[FMHA_ROWS], l_run[FMHA_ROWS], corr[FMHA_ROWS];
    const int t = threadIdx.x, lane = t % 32;
    const int r0 = blockIdx.x * FMHA_ROWS;
    const long long head = (long long)blockIdx.y * S * D;

    // thread t loads column t of each row (D <= FMHA_MAX_D == FMHA_THREADS)
    for (int r = 0; r < FMHA_ROWS; ++r)
        if (t < D) qs[r * FMHA_MAX_D + t] = r0 + r < S ? __half2float(q[head + (long long)(r0 + r) * D + t]) : 0.0f;
    if (t < FMHA_ROWS) {
        m_run[t] = -INFINITY;
        l_run[t] = 0.0f;
    }
    const int j = t % FMHA_KEYS, rg = t / FMHA_KEYS;  // scores: key j against rows rg * 8 .. rg * 8 + 7
    const int sr = t / 8, sc = t % 8;                 // softmax: row sr, keys sc * 8 .. sc * 8 + 7
    const int start = lane % D;                       // this lane's first column: lanes read different banks
    float acc[FMHA_ROWS];                             // output column t of every row
    for (int i = 0; i < FMHA_ROWS; ++i) acc[i] = 0.0f;

    for (int k0 = 0; k0 < S; k0 += FMHA_KEYS) {
        __syncthreads();  // the previous tile has been consumed (and q and the statistics are written)
        for (int jj = 0; jj < FMHA_KEYS; ++jj) {
            if (t < D) {
                const bool in = k0 + jj < S;
                ks[jj * FMHA_MAX_D + t] = in ? k[head + (long long)(k0 + jj) * D + t] : __float2half(0.0f);
                vs[jj * FMHA_MAX_D + t] = in ? v[head + (long long)(k0 + jj) * D + t] : __float2half(0.0f);
            }
        }
        __syncthreads();

        // the tile's scores (keys past S score -inf: no weight)
        {
            float s[8];
            for (int i = 0; i < 8; ++i) s[i] = 0.0f;
            const __half* kr = ks + j * FMHA_MAX_D;
            const float* qr = qs + rg * 8 * FMHA_MAX_D;
            for (int d0 = 0; d0 < D; ++d0) {
                int d = start + d0;
                if (d >= D) d -= D;
                const float kd = __half2float(kr[d]);
                for (int i = 0; i < 8; ++i) s[i] += qr[i * FMHA_MAX_D + d] * kd;
            }
            const bool in = k0 + j < S;
            for (int i = 0; i < 8; ++i) ps[(rg * 8 + i) * FMHA_KEYS + j] = in ? s[i] * scale : -INFINITY;
        }
        __syncthreads();

        // online softmax of row sr: the new running maximum, the tile's probabilities and their sum,
        // the factor that rescales what was accumulated under the old maximum
        {
            float* pr = ps + sr * FMHA_KEYS + sc * 8;
            float mx = -INFINITY;
            for (int i = 0; i < 8; ++i) mx = fmaxf(mx, pr[i]);
            red[t] = mx;
            __syncthreads();
            float m_new = m_run[sr];
            for (int i = 0; i < 8; ++i) m_new = fmaxf(m_new, red[sr * 8 + i]);
            float sum = 0.0f;
            for (int i = 0; i < 8; ++i) {
                const float p = expf(pr[i] - m_new);
                pr[i] = p;
                sum += p;
            }
            __syncthreads();  // every thread has read the maxima
            red[t] = sum;
            __syncthreads();
            if (sc == 0) {
                float l = 0.0f;
                for (int i = 0; i < 8; ++i) l += red[sr * 8 + i];
                const float c = expf(m_run[sr] - m_new);
                corr[sr] = c;
                l_run[sr] = l_run[sr] * c + l;
                m_run[sr] = m_new;
            }
            __syncthreads();
        }

        // output column t: rescale, then add the tile's p v
        if (t < D) {
            for (int i = 0; i < FMHA_ROWS; ++i) acc[i] *= corr[i];
            for (int jj = 0; jj < FMHA_KEYS; ++jj) {
                const float vd = __half2float(vs[jj * FMHA_MAX_D + t]);
                for (int i = 0; i < FMHA_ROWS; ++i) acc[i] += ps[i * FMHA_KEYS + jj] * vd;
            }
        }
    }
    if (t < D) {
        for (int i = 0; i < FMHA_ROWS; ++i)
            if (r0 + i < S) out[head + (long long)(r0 + i) * D + t] = __float2half(acc[i] / l_run[i]);
    }
}

// Calls the tiled kernel does not take (D > 128): one block of 128 threads per query row; scores
// of 128 keys at a time in shared memory, online softmax, thread d accumulates output columns d
// and d + 128. Any S, any D <= 256.
__global__ void __launch_bounds__(128)
fmha_fallback_kernel(const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,
                     __half* __restrict__ out, int S, int D, float scale) {
    __shared__ float qs[256];
    __shared__ float ps[128];
    __shared__ float red[128];
    const int row = blockIdx.x, bh = blockIdx.y, t = threadIdx.x;
    const long long head = (long long)bh * S * D;
    for (int d = t; d < D; d += 128) qs[d] = __half2float(q[head + (long long)row * D + d]);
    __syncthreads();
    float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
    for (int k0 = 0; k0 < S; k0 += 128) {
        const int key = k0 + t;
        float sc = -INFINITY;
        if (key < S) {
            sc = 0.0f;
            const __half* kr = k + head + (long long)key * D;
            for (int d = 0; d < D; ++d) sc += qs[d] * __half2float(kr[d]);
            sc *= scale;
        }
        red[t] = sc;
        __syncthreads();
        for (int w = 64; w > 0; w /= 2) {
            if (t < w) red[t] = fmaxf(red[t], red[t + w]);
            __syncthreads();
        }
        const float m_new = fmaxf(m, red[0]);
        const float p = key < S ? expf(sc - m_new) : 0.0f;
        ps[t] = p;
        __syncthreads();
        const float corr = expf(m - m_new);
        float sum = 0.0f;
        const int n = min(128, S - k0);
        for (int i = 0; i < n; ++i) sum += ps[i];
        l = l * corr + sum;
        acc0 *= corr;
        acc1 *= corr;
        for (int i = 0; i < n; ++i) {
            const __half* vr = v + head + (long long)(k0 + i) * D;
            if (t < D) acc0 += ps[i] * __half2float(vr[t]);
            if (t + 128 < D) acc1 += ps[i] * __half2float(vr[t + 128]);
        }
        m = m_new;
        __syncthreads();
    }
    __half* orow = out + head + (long long)row * D;
    if (t < D) orow[t] = __float2half(acc0 / l);
    if (t + 128 < D) orow[t + 128] = __float2half(acc1 / l);
}

extern "C" cudaError_t fmha(const __half* q, const __half* k, const __half* v, __half* out, int B, int H, int S, int D,
                            cudaStream_t stream) {
    if (B <= 0 || H <= 0 || S <= 0 || D <= 0) return cudaSuccess;
    if (D > 256 || B * H > 65535) return cudaErrorInvalidValue;
    const float scale = 1.0f / sqrtf((float)D);
    if (D <= FMHA_MAX_D) {
        dim3 grid((S + FMHA_ROWS - 1) / FMHA_ROWS, B * H);
        fmha_tiled_kernel<<<grid, FMHA_THREADS, 0, stream>>>(q, k, v, out, S, D, scale);
        return cudaGetLastError();
    }
    dim3 grid(S, B * H);
    fmha_fallback_kernel<<<grid, 128, 0, stream>>>(q, k, v, out, S, D, scale);
    return cudaGetLastError();
}
