// klineage-step: mechanism=smem_tiling
// A block computes FMHA_ROWS = 8 query rows instead of one, and the keys and values are staged in
// shared memory one tile of FMHA_KEYS = 64 rows at a time: every k and v element a block reads
// from global memory now serves 8 query rows instead of one (and is read with coalesced loads).
// The block's q rows are kept in shared memory as well. The softmax is still the textbook one:
// three passes over scores materialized in shared memory (8 x S floats): the scores, then each
// row's maximum and sum of exponentials, then p v. Thread t scores key t % 64 against 4 of the
// rows; the 32 lanes of a warp walk the head dimension from 32 different starting columns, so
// their reads of 32 different key rows fall in different banks. Thread t then accumulates output
// column t of all 8 rows. Calls whose scores do not fit in shared memory (S above ~6500) or with
// D > 128 run the one-row-per-block kernel.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#define FMHA_ROWS 8        // query rows per block
#define FMHA_KEYS 64       // key / value rows per shared-memory tile
#define FMHA_THREADS 128
#define FMHA_MAX_D 128
#define FMHA_MAX_SMEM (226 * 1024)  // dynamic shared memory a block may ask for (sm_90: 227 KB)

#define NAIVE_THREADS 128
#define NAIVE_MAX_S 12288  // 48 KB of fp32 scores

// q rows (fp32), the key or value tile (fp16) and the scores of the block's rows (fp32)
static size_t tiled_smem_bytes(int S) {
    return (size_t)FMHA_ROWS * FMHA_MAX_D * sizeof(float) + (size_t)FMHA_KEYS * FMHA_MAX_D * sizeof(__half) +
           (size_t)FMHA_ROWS * S * sizeof(float);
}

__global__ void fmha_tiled_kernel(const __half* q, const __half* k, const __half* v, __half* out, int S, int D,
                                  float scale) {
    extern __shared__ float smem[];
    float* qs = smem;                                                     // [FMHA_ROWS][FMHA_MAX_D]
    float* scores = qs + FMHA_ROWS * FMHA_MAX_D;                          // [FMHA_ROWS][S]
    __half* kvs = reinterpret_cast<__half*>(scores + FMHA_ROWS * S);    // [FMHA_KEYS][FMHA_MAX_D]
    __shared__ float red[FMHA_THREADS];
    const int t = threadIdx.x, lane = t % 32;
    const int r0 = blockIdx.x * FMHA_ROWS;
    const long long head = (long long)blockIdx.y * S * D;

    // thread t loads column t of each row (D <= FMHA_MAX_D == FMHA_THREADS)
    for (int r = 0; r < FMHA_ROWS; ++r)
        if (t < D) qs[r * FMHA_MAX_D + t] = r0 + r < S ? __half2float(q[head + (long long)(r0 + r) * D + t]) : 0.0f;

    // pass 1: scores of key j of each tile against rows rg * 4 .. rg * 4 + 3
    const int j = t % FMHA_KEYS, rg = t / FMHA_KEYS;
    const int start = lane % D;  // this lane's first column: lanes read different banks
    for (int k0 = 0; k0 < S; k0 += FMHA_KEYS) {
        __syncthreads();  // the previous tile has been read (and the q rows are written)
        for (int jj = 0; jj < FMHA_KEYS; ++jj)
            if (t < D) kvs[jj * FMHA_MAX_D + t] = k0 + jj < S ? k[head + (long long)(k0 + jj) * D + t] : __float2half(0.0f);
        __syncthreads();
        if (k0 + j < S) {
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            const __half* kr = kvs + j * FMHA_MAX_D;
            const float* qr = qs + rg * 4 * FMHA_MAX_D;
            for (int d0 = 0; d0 < D; ++d0) {
                int d = start + d0;
                if (d >= D) d -= D;
                const float kd = __half2float(kr[d]);
                for (int i = 0; i < 4; ++i) acc[i] += qr[i * FMHA_MAX_D + d] * kd;
            }
            for (int i = 0; i < 4; ++i) scores[(rg * 4 + i) * S + k0 + j] = acc[i] * scale;
        }
    }
    __syncthreads();

    // pass 2: row r's maximum and sum of exponentials, 16 threads a row
    const int r = t / 16, u = t % 16;
    float m = -INFINITY;
    for (int jj = u; jj < S; jj += 16) m = fmaxf(m, scores[r * S + jj]);
    red[t] = m;
    __syncthreads();
    for (int w = 8; w > 0; w /= 2) {
        if (u < w) red[t] = fmaxf(red[t], red[t + w]);
        __syncthreads();
    }
    m = red[r * 16];
    __syncthreads();
    float sum = 0.0f;
    for (int jj = u; jj < S; jj += 16) {
        const float e = expf(scores[r * S + jj] - m);
        scores[r * S + jj] = e;
        sum += e;
    }
    red[t] = sum;
    __syncthreads();
    for (int w = 8; w > 0; w /= 2) {
        if (u < w) red[t] += red[t + w];
        __syncthreads();
    }
    // the row sums stay in red[16 * r]

    // pass 3: output column t of every row, p v over the value tiles
    float acc[FMHA_ROWS];
    for (int i = 0; i < FMHA_ROWS; ++i) acc[i] = 0.0f;
    for (int k0 = 0; k0 < S; k0 += FMHA_KEYS) {
        __syncthreads();  // the previous tile has been read
        for (int jj = 0; jj < FMHA_KEYS; ++jj)
            if (t < D) kvs[jj * FMHA_MAX_D + t] = k0 + jj < S ? v[head + (long long)(k0 + jj) * D + t] : __float2half(0.0f);
        __syncthreads();
        const int n = min(FMHA_KEYS, S - k0);
        if (t < D) {
            for (int jj = 0; jj < n; ++jj) {
                const float vd = __half2float(kvs[jj * FMHA_MAX_D + t]);
                for (int i = 0; i < FMHA_ROWS; ++i) acc[i] += scores[i * S + k0 + jj] * vd;
            }
        }
    }
    if (t < D) {
        for (int i = 0; i < FMHA_ROWS; ++i)
            if (r0 + i < S) out[head + (long long)(r0 + i) * D + t] = __float2half(acc[i] / red[16 * i]);
    }
}

// One block per query row, the row's S scores in shared memory, three passes (S <= 12288, any D).
__global__ void fmha_naive_kernel(const __half* q, const __half* k, const __half* v, __half* out, int S, int D,
                                  float scale) {
    extern __shared__ float scores[];
    __shared__ float red[NAIVE_THREADS];
    const int row = blockIdx.x, t = threadIdx.x;
    const long long head = (long long)blockIdx.y * S * D;
    const __half* qr = q + head + (long long)row * D;
    for (int j = t; j < S; j += NAIVE_THREADS) {
        float s = 0.0f;
        for (int d = 0; d < D; ++d) s += __half2float(qr[d]) * __half2float(k[head + (long long)j * D + d]);
        scores[j] = s * scale;
    }
    __syncthreads();
    float m = -INFINITY;
    for (int j = t; j < S; j += NAIVE_THREADS) m = fmaxf(m, scores[j]);
    red[t] = m;
    __syncthreads();
    for (int w = NAIVE_THREADS / 2; w > 0; w /= 2) {
        if (t < w) red[t] = fmaxf(red[t], red[t + w]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (int j = t; j < S; j += NAIVE_THREADS) {
        const float e = expf(scores[j] - m);
        scores[j] = e;
        sum += e;
    }
    red[t] = sum;
    __syncthreads();
    for (int w = NAIVE_THREADS / 2; w > 0; w /= 2) {
        if (t < w) red[t] += red[t + w];
        __syncthreads();
    }
    sum = red[0];
    for (int d = t; d < D; d += NAIVE_THREADS) {
        float acc = 0.0f;
        for (int j = 0; j < S; ++j) acc += scores[j] * __half2float(v[head + (long long)j * D + d]);
        out[head + (long long)row * D + d] = __float2half(acc / sum);
    }
}

extern "C" cudaError_t fmha(const __half* q, const __half* k, const __half* v, __half* out, int B, int H, int S, int D,
                            cudaStream_t stream) {
    if (B <= 0 || H <= 0 || S <= 0 || D <= 0) return cudaSuccess;
    if (B * H > 65535) return cudaErrorInvalidValue;
    const float scale = 1.0f / sqrtf((float)D);
    const size_t smem = tiled_smem_bytes(S);
    if (D <= FMHA_MAX_D && smem <= FMHA_MAX_SMEM) {
        cudaError_t err = cudaFuncSetAttribute(fmha_tiled_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (err != cudaSuccess) return err;
        dim3 grid((S + FMHA_ROWS - 1) / FMHA_ROWS, B * H);
        fmha_tiled_kernel<<<grid, FMHA_THREADS, smem, stream>>>(q, k, v, out, S, D, scale);
        return cudaGetLastError();
    }
    if (S > NAIVE_MAX_S) return cudaErrorInvalidValue;
    dim3 grid(S, B * H);
    fmha_naive_kernel<<<grid, NAIVE_THREADS, S * sizeof(float), stream>>>(q, k, v, out, S, D, scale);
    return cudaGetLastError();
}
