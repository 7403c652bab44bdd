// klineage-step: mechanism=register_tiling
// The three dense products of a chunk keep 2-D output tiles in registers: K K^T with Q K^T and K S0
// with Q S0 as 4 x 4 tiles per thread (8 operand loads from shared memory feed 32 FMAs), the state
// update K^T (exp(G_last - G) U) as an 8 x 4 tile per thread, instead of one output per thread and
// two shared-memory loads per FMA.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#define GDN_D 128        // head dim of q/k and v
#define GDN_C 64         // chunk length
#define GDN_VS 64        // value columns per block
#define GDN_THREADS 256

// shared memory layout (bytes)
#define OFF_K 0                                   // bf16 [64][128]
#define OFF_Q (OFF_K + GDN_C * GDN_D * 2)         // bf16 [64][128]
#define OFF_V (OFF_Q + GDN_C * GDN_D * 2)         // bf16 [64][64]
#define OFF_G (OFF_V + GDN_C * GDN_VS * 2)        // fp32 [64] in-chunk cumulative g
#define OFF_BETA (OFF_G + GDN_C * 4)              // fp32 [64]
#define OFF_F (OFF_BETA + GDN_C * 4)              // fp32 [64] exp(G_last - G_j)
#define OFF_S (OFF_F + GDN_C * 4)                 // fp32 [128][64] state slice
#define OFF_A (OFF_S + GDN_D * GDN_VS * 4)        // fp32 [64][64]
#define OFF_TM (OFF_A + GDN_C * GDN_C * 4)        // fp32 [64][64] T = (I + A)^-1
#define OFF_P (OFF_TM + GDN_C * GDN_C * 4)        // fp32 [64][64]
#define OFF_R (OFF_P + GDN_C * GDN_C * 4)         // fp32 [64][64]
#define OFF_U (OFF_R + GDN_C * GDN_VS * 4)        // fp32 [64][64]
#define OFF_Y (OFF_U + GDN_C * GDN_VS * 4)        // fp32 [64][64]
#define OFF_M (OFF_Y + GDN_C * GDN_VS * 4)        // fp32 [3][16][16] solve scratch
#define SMEM_BYTES (OFF_M + 3 * 256 * 4)

__global__ void gdn_chunk_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                 const float* g, const float* beta, __nv_bfloat16* o, float* state, int T, int H,
                                 int HV) {
    extern __shared__ __align__(16) unsigned char smem[];
    const int tid = threadIdx.x;
    const int slice = blockIdx.x, hv = blockIdx.y, b = blockIdx.z;
    const int h = hv / (HV / H);
    const int v0 = slice * GDN_VS;
    const int nc = (T + GDN_C - 1) / GDN_C;
    const float scale = 1.0f / sqrtf((float)GDN_D);
    const size_t qk_stride = (size_t)H * GDN_D;
    const size_t v_stride = (size_t)HV * GDN_D;
    const __nv_bfloat16* qb = q + ((size_t)b * T * H + h) * GDN_D;
    const __nv_bfloat16* kb = k + ((size_t)b * T * H + h) * GDN_D;
    const __nv_bfloat16* vb = v + ((size_t)b * T * HV + hv) * GDN_D + v0;
    __nv_bfloat16* ob = o + ((size_t)b * T * HV + hv) * GDN_D + v0;
    const float* gb = g + (size_t)b * T * HV + hv;
    const float* bb = beta + (size_t)b * T * HV + hv;

    __nv_bfloat16* sK = reinterpret_cast<__nv_bfloat16*>(smem + OFF_K);
    __nv_bfloat16* sQ = reinterpret_cast<__nv_bfloat16*>(smem + OFF_Q);
    __nv_bfloat16* sV = reinterpret_cast<__nv_bfloat16*>(smem + OFF_V);
    float* sG = reinterpret_cast<float*>(smem + OFF_G);
    float* sBeta = reinterpret_cast<float*>(smem + OFF_BETA);
    float* sF = reinterpret_cast<float*>(smem + OFF_F);
    float* sS = reinterpret_cast<float*>(smem + OFF_S);
    float* sA = reinterpret_cast<float*>(smem + OFF_A);
    float* sTm = reinterpret_cast<float*>(smem + OFF_TM);
    float* sP = reinterpret_cast<float*>(smem + OFF_P);
    float* sR = reinterpret_cast<float*>(smem + OFF_R);
    float* sU = reinterpret_cast<float*>(smem + OFF_U);
    float* sY = reinterpret_cast<float*>(smem + OFF_Y);
    float* sM = reinterpret_cast<float*>(smem + OFF_M);

    for (int i = tid; i < GDN_D * GDN_VS; i += GDN_THREADS) sS[i] = 0.0f;

    for (int c = 0; c < nc; ++c) {
        const int t0 = c * GDN_C;
        // stage the chunk; rows past T are zeros (k = q = v = 0, g = beta = 0 mask the tail)
        for (int i = tid; i < GDN_C * GDN_D; i += GDN_THREADS) {
            const int row = i / GDN_D, col = i % GDN_D;
            const bool valid = t0 + row < T;
            const size_t off = (size_t)(t0 + row) * qk_stride + col;
            sK[i] = valid ? kb[off] : __float2bfloat16(0.0f);
            sQ[i] = valid ? qb[off] : __float2bfloat16(0.0f);
        }
        for (int i = tid; i < GDN_C * GDN_VS; i += GDN_THREADS) {
            const int row = i / GDN_VS, col = i % GDN_VS;
            sV[i] = t0 + row < T ? vb[(size_t)(t0 + row) * v_stride + col] : __float2bfloat16(0.0f);
        }
        if (tid < GDN_C) {
            const bool valid = t0 + tid < T;
            sG[tid] = valid ? gb[(size_t)(t0 + tid) * HV] : 0.0f;
            sBeta[tid] = valid ? bb[(size_t)(t0 + tid) * HV] : 0.0f;
        }
        __syncthreads();
        if (tid == 0)
            for (int i = 1; i < GDN_C; ++i) sG[i] += sG[i - 1];
        __syncthreads();

        // A, P; X -> R, Y: 4 x 4 output tiles per thread
        {
            const int i0 = (tid / 16) * 4, j0 = (tid % 16) * 4;
            float aa[4][4], pa[4][4];
            for (int r = 0; r < 4; ++r)
                for (int e = 0; e < 4; ++e) aa[r][e] = pa[r][e] = 0.0f;
            for (int d = 0; d < GDN_D; ++d) {
                float ki[4], qi[4], kj[4];
                for (int r = 0; r < 4; ++r) {
                    ki[r] = __bfloat162float(sK[(i0 + r) * GDN_D + d]);
                    qi[r] = __bfloat162float(sQ[(i0 + r) * GDN_D + d]);
                    kj[r] = __bfloat162float(sK[(j0 + r) * GDN_D + d]);
                }
                for (int r = 0; r < 4; ++r)
                    for (int e = 0; e < 4; ++e) {
                        aa[r][e] += ki[r] * kj[e];
                        pa[r][e] += qi[r] * kj[e];
                    }
            }
            for (int r = 0; r < 4; ++r)
                for (int e = 0; e < 4; ++e) {
                    const int i = i0 + r, j = j0 + e;
                    sA[i * GDN_C + j] = j < i ? sBeta[i] * expf(sG[i] - sG[j]) * aa[r][e] : 0.0f;
                    sP[i * GDN_C + j] = j <= i ? expf(sG[i] - sG[j]) * pa[r][e] : 0.0f;
                }
        }
        {
            const int i0 = (tid / 16) * 4, n0 = (tid % 16) * 4;
            float xa[4][4], ya[4][4];
            for (int r = 0; r < 4; ++r)
                for (int e = 0; e < 4; ++e) xa[r][e] = ya[r][e] = 0.0f;
            for (int d = 0; d < GDN_D; ++d) {
                float ki[4], qi[4], sv[4];
                for (int r = 0; r < 4; ++r) {
                    ki[r] = __bfloat162float(sK[(i0 + r) * GDN_D + d]);
                    qi[r] = __bfloat162float(sQ[(i0 + r) * GDN_D + d]);
                    sv[r] = sS[d * GDN_VS + n0 + r];
                }
                for (int r = 0; r < 4; ++r)
                    for (int e = 0; e < 4; ++e) {
                        xa[r][e] += ki[r] * sv[e];
                        ya[r][e] += qi[r] * sv[e];
                    }
            }
            for (int r = 0; r < 4; ++r)
                for (int e = 0; e < 4; ++e) {
                    const int i = i0 + r, n = n0 + e;
                    sR[i * GDN_VS + n] = sBeta[i] * (__bfloat162float(sV[i * GDN_VS + n]) - expf(sG[i]) * xa[r][e]);
                    sY[i * GDN_VS + n] = ya[r][e];
                }
        }
        __syncthreads();

        // T = (I + A)^-1: diagonal 16x16 blocks, one thread per column, substituting down in place
        if (tid < 64) {
            const int blk = tid / 16, cc = tid % 16;
            float* tcol = sTm + 16 * blk * GDN_C + 16 * blk + cc;
            const float* a = sA + 16 * blk * GDN_C + 16 * blk;
            for (int r = 0; r < 16; ++r) tcol[r * GDN_C] = r == cc ? 1.0f : 0.0f;
            for (int jj = 0; jj < 16; ++jj) {
                const float xj = tcol[jj * GDN_C];
                for (int r = jj + 1; r < 16; ++r) tcol[r * GDN_C] -= a[r * GDN_C + jj] * xj;
            }
        }
        __syncthreads();
        // off-diagonal blocks by distance d: T_ij = -T_ii sum_{k=j}^{i-1} A_ik T_kj, i = j + d
        {
            const int r = tid / 16, cc = tid % 16;
            for (int d = 1; d < 4; ++d) {
                for (int jb = 0; jb < 4 - d; ++jb) {
                    const int ib = jb + d;
                    float acc = 0.0f;
                    for (int kb2 = jb; kb2 < ib; ++kb2)
                        for (int qq = 0; qq < 16; ++qq)
                            acc += sA[(16 * ib + r) * GDN_C + 16 * kb2 + qq] * sTm[(16 * kb2 + qq) * GDN_C + 16 * jb + cc];
                    sM[jb * 256 + r * 16 + cc] = acc;
                }
                __syncthreads();
                for (int jb = 0; jb < 4 - d; ++jb) {
                    const int ib = jb + d;
                    float acc = 0.0f;
                    for (int qq = 0; qq < 16; ++qq)
                        acc += sTm[(16 * ib + r) * GDN_C + 16 * ib + qq] * sM[jb * 256 + qq * 16 + cc];
                    sTm[(16 * ib + r) * GDN_C + 16 * jb + cc] = -acc;
                }
                __syncthreads();
            }
        }

        // U = T R; the state-update weights exp(G_last - G_j)
        for (int idx = tid; idx < GDN_C * GDN_VS; idx += GDN_THREADS) {
            const int i = idx / GDN_VS, n = idx % GDN_VS;
            float u = 0.0f;
            for (int j = 0; j <= i; ++j) u += sTm[i * GDN_C + j] * sR[j * GDN_VS + n];
            sU[idx] = u;
        }
        if (tid < GDN_C) sF[tid] = expf(sG[GDN_C - 1] - sG[tid]);
        __syncthreads();

        // O = scale (exp(G) Y + P U)
        for (int idx = tid; idx < GDN_C * GDN_VS; idx += GDN_THREADS) {
            const int i = idx / GDN_VS, n = idx % GDN_VS;
            float acc = expf(sG[i]) * sY[idx];
            for (int j = 0; j <= i; ++j) acc += sP[i * GDN_C + j] * sU[j * GDN_VS + n];
            if (t0 + i < T) ob[(size_t)(t0 + i) * v_stride + n] = __float2bfloat16(scale * acc);
        }
        // S = exp(G_last) S + K^T (exp(G_last - G) U): 8 x 4 tiles per thread. Every thread's O reads
        // of U above finish before the barrier below; S is read and written only by its owner here.
        {
            const int d0 = (tid / 16) * 8, n0 = (tid % 16) * 4;
            const float gl = expf(sG[GDN_C - 1]);
            float acc[8][4];
            for (int r = 0; r < 8; ++r)
                for (int e = 0; e < 4; ++e) acc[r][e] = gl * sS[(d0 + r) * GDN_VS + n0 + e];
            for (int j = 0; j < GDN_C; ++j) {
                float kf[8], uv[4];
                for (int r = 0; r < 8; ++r) kf[r] = __bfloat162float(sK[j * GDN_D + d0 + r]) * sF[j];
                for (int e = 0; e < 4; ++e) uv[e] = sU[j * GDN_VS + n0 + e];
                for (int r = 0; r < 8; ++r)
                    for (int e = 0; e < 4; ++e) acc[r][e] += kf[r] * uv[e];
            }
            for (int r = 0; r < 8; ++r)
                for (int e = 0; e < 4; ++e) sS[(d0 + r) * GDN_VS + n0 + e] = acc[r][e];
        }
        __syncthreads();
    }
    float* st = state + ((size_t)b * HV + hv) * GDN_D * GDN_D + v0;
    for (int idx = tid; idx < GDN_D * GDN_VS; idx += GDN_THREADS)
        st[(size_t)(idx / GDN_VS) * GDN_D + idx % GDN_VS] = sS[idx];
}

extern "C" cudaError_t gdn(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const float* g,
                           const float* beta, __nv_bfloat16* o, float* state, int B, int T, int H, int HV,
                           cudaStream_t stream) {
    if (B <= 0 || H <= 0 || HV <= 0 || HV % H != 0 || T < 0) return cudaErrorInvalidValue;
    if (B > 65535 || HV > 65535) return cudaErrorInvalidValue;
    cudaError_t err = cudaFuncSetAttribute(gdn_chunk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM_BYTES);
    if (err != cudaSuccess) return err;
    dim3 grid(GDN_D / GDN_VS, HV, B);
    gdn_chunk_kernel<<<grid, GDN_THREADS, SMEM_BYTES, stream>>>(q, k, v, g, beta, o, state, T, H, HV);
    return cudaGetLastError();
}
