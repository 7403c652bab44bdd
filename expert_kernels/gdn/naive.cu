// gdn naive: the gated delta rule token by token in fp32, one block per (batch, value head).
//
// Threads j and j + 128 of the 256-thread block own column j of the 128 x 128 state S (K x V) in
// registers, 64 rows each; for each token they decay the column, read S^T k (the two halves added
// through shared memory), apply the delta update and write o_t[j] = S^T q. Columns are independent
// given k_t and q_t, which the block stages in shared memory.
//   S_t = exp(g_t) S_{t-1} + k_t (beta_t (v_t - exp(g_t) S_{t-1}^T k_t))^T,  o_t = S_t^T (q_t / sqrt(128))
// Value head hv reads q/k head hv / (HV / H). Any alignment, any T.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#define GDN_D 128
#define GDN_HALF 64

__global__ void gdn_naive_kernel(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                 const float* g, const float* beta, __nv_bfloat16* o, float* state, int T, int H,
                                 int HV) {
    __shared__ float sk[GDN_D];
    __shared__ float sq[GDN_D];
    __shared__ float part[GDN_D];  // the upper half's partial dot products
    const int tid = threadIdx.x;
    const int j = tid % GDN_D;              // state column
    const int upper = tid / GDN_D;          // 0: rows 0..63, 1: rows 64..127
    const int r0 = upper * GDN_HALF;
    const int hv = blockIdx.x;
    const int b = blockIdx.y;
    const int h = hv / (HV / H);
    const float scale = 1.0f / sqrtf((float)GDN_D);
    float s[GDN_HALF];
    for (int i = 0; i < GDN_HALF; ++i) s[i] = 0.0f;

    for (int t = 0; t < T; ++t) {
        const long long qk_row = ((long long)b * T + t) * H + h;
        const long long v_row = ((long long)b * T + t) * HV + hv;
        if (upper == 0) sk[j] = __bfloat162float(k[qk_row * GDN_D + j]);
        else sq[j] = __bfloat162float(q[qk_row * GDN_D + j]) * scale;
        const float decay = expf(g[v_row]);
        const float bt = beta[v_row];
        const float vj = __bfloat162float(v[v_row * GDN_D + j]);
        __syncthreads();
        float kv = 0.0f;
        for (int i = 0; i < GDN_HALF; ++i) {
            s[i] *= decay;
            kv += s[i] * sk[r0 + i];
        }
        if (upper) part[j] = kv;
        __syncthreads();
        if (!upper) part[j] += kv;  // S^T k for column j
        __syncthreads();
        const float u = bt * (vj - part[j]);
        float acc = 0.0f;
        for (int i = 0; i < GDN_HALF; ++i) {
            s[i] += sk[r0 + i] * u;
            acc += s[i] * sq[r0 + i];
        }
        __syncthreads();  // every thread has read part[j]
        if (upper) part[j] = acc;
        __syncthreads();
        if (!upper) o[v_row * GDN_D + j] = __float2bfloat16(part[j] + acc);
        __syncthreads();  // sk, sq and part are rewritten by the next token
    }
    float* st = state + ((long long)b * HV + hv) * GDN_D * GDN_D;
    for (int i = 0; i < GDN_HALF; ++i) st[(r0 + i) * GDN_D + j] = s[i];
}

extern "C" cudaError_t gdn(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const float* g,
                           const float* beta, __nv_bfloat16* o, float* state, int B, int T, int H, int HV,
                           cudaStream_t stream) {
    if (B <= 0 || H <= 0 || HV <= 0 || HV % H != 0 || T < 0) return cudaErrorInvalidValue;
    if (B > 65535) return cudaErrorInvalidValue;
    dim3 grid(HV, B);
    gdn_naive_kernel<<<grid, 2 * GDN_D, 0, stream>>>(q, k, v, g, beta, o, state, T, H, HV);
    return cudaGetLastError();
}
