// klineage-step: mechanism=vector_access
// 16-byte accesses: the q, k and v tiles come in as uint4 loads of 8 halves each (k and v go to
// shared memory as they are, 16 bytes a store; q is widened to fp32 and stored as two float4),
// the p v loop reads two value columns at once as __half2, and each thread writes its two output
// columns as one __half2. A thread now accumulates columns 2c and 2c + 1 of 8 rows. The 16-byte
// loads need D % 8 == 0 and 16-byte aligned q, k, v and out; other calls take the fallback kernel.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define FMHA_ROWS 16       // query rows per block
#define FMHA_KEYS 64       // key / value rows per shared-memory tile
#define FMHA_THREADS 128
#define FMHA_MAX_D 128

__global__ void __launch_bounds__(FMHA_THREADS)
fmha_tiled_kernel(const __half* __restrict__ q, const __half* __restrict__ k, const __half* __restrict__ v,
                  __half* __restrict__ out, int S, int D, float scale) {
    __shared__ float4 qs4[FMHA_ROWS * FMHA_MAX_D / 4];
    __shared__ uint4 ks4[FMHA_KEYS * FMHA_MAX_D / 8];
    __shared__ uint4 vs4[FMHA_KEYS * FMHA_MAX_D / 8];
    __shared__ float ps[FMHA_ROWS * FMHA_KEYS];  // the tile's scores, then its probabilities
    __shared__ float red[FMHA_THREADS];
    __shared__ float m_run[FMHA_ROWS], l_run[FMHA_ROWS], corr[FMHA_ROWS];
    const float* qs = reinterpret_cast<const float*>(qs4);
    const __half* ks = reinterpret_cast<const __half*>(ks4);
    const __half2* vs2 = reinterpret_cast<const __half2*>(vs4);
    const int t = threadIdx.x, lane = t % 32;
    const int r0 = blockIdx.x * FMHA_ROWS;
    const long long head = (long long)blockIdx.y * S * D;
    const int chunks = D / 8;  // 16-byte chunks of a row

    for (int i = t; i < FMHA_ROWS * chunks; i += FMHA_THREADS) {
        const int r = i / chunks, c = i % chunks;
        uint4 raw = make_uint4(0u, 0u, 0u, 0u);
        if (r0 + r < S) raw = *reinterpret_cast<const uint4*>(q + head + (long long)(r0 + r) * D + c * 8);
        const __half2* h = reinterpret_cast<const __half2*>(&raw);
        const float2 a = __half22float2(h[0]), b = __half22float2(h[1]), e = __half22float2(h[2]),
                     f = __half22float2(h[3]);
        qs4[r * (FMHA_MAX_D / 4) + 2 * c] = make_float4(a.x, a.y, b.x, b.y);
        qs4[r * (FMHA_MAX_D / 4) + 2 * c + 1] = make_float4(e.x, e.y, f.x, f.y);
    }
    if (t < FMHA_ROWS) {
        m_run[t] = -INFINITY;
        l_run[t] = 0.0f;
    }
    const int j = t % FMHA_KEYS, rg = t / FMHA_KEYS;  // scores: key j against rows rg * 8 .. rg * 8 + 7
    const int sr = t / 8, sc = t % 8;                 // softmax: row sr, keys sc * 8 .. sc * 8 + 7
    const int cp = t % 64, rh = t / 64;               // output: columns 2cp, 2cp + 1 of rows rh * 8 .. rh * 8 + 7
    const int start = lane % D;                       // this lane's first column: lanes read different banks
    float acc0[8], acc1[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        acc0[i] = 0.0f;
        acc1[i] = 0.0f;
    }

    for (int k0 = 0; k0 < S; k0 += FMHA_KEYS) {
        __syncthreads();  // the previous tile has been consumed (and q and the statistics are written)
#pragma unroll 4
        for (int i = t; i < FMHA_KEYS * chunks; i += FMHA_THREADS) {
            const int jj = i / chunks, c = i % chunks;
            uint4 kr = make_uint4(0u, 0u, 0u, 0u), vr = make_uint4(0u, 0u, 0u, 0u);
            if (k0 + jj < S) {
                kr = *reinterpret_cast<const uint4*>(k + head + (long long)(k0 + jj) * D + c * 8);
                vr = *reinterpret_cast<const uint4*>(v + head + (long long)(k0 + jj) * D + c * 8);
            }
            ks4[jj * (FMHA_MAX_D / 8) + c] = kr;
            vs4[jj * (FMHA_MAX_D / 8) + c] = vr;
        }
        __syncthreads();

        // the tile's scores (keys past S score -inf: no weight)
        {
            float s[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) s[i] = 0.0f;
            const __half* kr = ks + j * FMHA_MAX_D;
            const float* qr = qs + rg * 8 * FMHA_MAX_D;
#pragma unroll 4
            for (int d0 = 0; d0 < D; ++d0) {
                int d = start + d0;
                if (d >= D) d -= D;
                const float kd = __half2float(kr[d]);
#pragma unroll
                for (int i = 0; i < 8; ++i) s[i] += qr[i * FMHA_MAX_D + d] * kd;
            }
            const bool in = k0 + j < S;
#pragma unroll
            for (int i = 0; i < 8; ++i) ps[(rg * 8 + i) * FMHA_KEYS + j] = in ? s[i] * scale : -INFINITY;
        }
        __syncthreads();

        // online softmax of row sr: the new running maximum, the tile's probabilities and their sum,
        // the factor that rescales what was accumulated under the old maximum
        {
            float* pr = ps + sr * FMHA_KEYS + sc * 8;
            float mx = -INFINITY;
#pragma unroll
            for (int i = 0; i < 8; ++i) mx = fmaxf(mx, pr[i]);
            red[t] = mx;
            __syncthreads();
            float m_new = m_run[sr];
#pragma unroll
            for (int i = 0; i < 8; ++i) m_new = fmaxf(m_new, red[sr * 8 + i]);
            float sum = 0.0f;
#pragma unroll
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
#pragma unroll
                for (int i = 0; i < 8; ++i) l += red[sr * 8 + i];
                const float c = expf(m_run[sr] - m_new);
                corr[sr] = c;
                l_run[sr] = l_run[sr] * c + l;
                m_run[sr] = m_new;
            }
            __syncthreads();
        }

        // output columns 2cp, 2cp + 1: rescale, then add the tile's p v
        if (2 * cp < D) {
            const float* pr = ps + rh * 8 * FMHA_KEYS;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                acc0[i] *= corr[rh * 8 + i];
                acc1[i] *= corr[rh * 8 + i];
            }
#pragma unroll 8
            for (int jj = 0; jj < FMHA_KEYS; ++jj) {
                const float2 vd = __half22float2(vs2[jj * (FMHA_MAX_D / 2) + cp]);
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const float p = pr[i * FMHA_KEYS + jj];
                    acc0[i] += p * vd.x;
                    acc1[i] += p * vd.y;
                }
            }
        }
    }
    if (2 * cp < D) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int row = r0 + rh * 8 + i;
            if (row < S) {
                const float inv = 1.0f / l_run[rh * 8 + i];
                *reinterpret_cast<__half2*>(out + head + (long long)row * D + 2 * cp) =
                    __floats2half2_rn(acc0[i] * inv, acc1[i] * inv);
            }
        }
    }
}

// Calls the tiled kernel does not take (D > 128 or not a multiple of 8, bases not 16-byte aligned): one block of 128 threads per query row; scores
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
    const bool aligned = ((reinterpret_cast<uintptr_t>(q) | reinterpret_cast<uintptr_t>(k) |
                           reinterpret_cast<uintptr_t>(v) | reinterpret_cast<uintptr_t>(out)) & 15) == 0;
    if (D <= FMHA_MAX_D && D % 8 == 0 && aligned) {
        dim3 grid((S + FMHA_ROWS - 1) / FMHA_ROWS, B * H);
        fmha_tiled_kernel<<<grid, FMHA_THREADS, 0, stream>>>(q, k, v, out, S, D, scale);
        return cudaGetLastError();
    }
    dim3 grid(S, B * H);
    fmha_fallback_kernel<<<grid, 128, 0, stream>>>(q, k, v, out, S, D, scale);
    return cudaGetLastError();
}
