// RMSNorm over each row of a bf16 [rows, dim] matrix with a bf16 gain, fp32 math, output first. One
// thread per row; the check is written `!(r < rows)`, the launch through dim3 variables.
#include <cuda_runtime.h>
#include <cuda_bf16.h>

__global__ void rmsnorm_bf16_kernel(__nv_bfloat16* out, const __nv_bfloat16* inp, const __nv_bfloat16* gain, int rows,
                                    int dim, float epsilon) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (!(r < rows)) return;
    const __nv_bfloat16* xr = inp + (size_t)r * dim;
    __nv_bfloat16* yr = out + (size_t)r * dim;
    float acc = 0.0f;
    for (int i = 0; i < dim; ++i) {
        const float v = __bfloat162float(xr[i]);
        acc = acc + v * v;
    }
    const float inv_rms = 1.0f / sqrtf(acc / (float)dim + epsilon);
    for (int i = 0; i < dim; ++i) {
        yr[i] = __float2bfloat16(__bfloat162float(xr[i]) * inv_rms * __bfloat162float(gain[i]));
    }
}

extern "C" cudaError_t rmsnorm_bf16(__nv_bfloat16* out, const __nv_bfloat16* inp, const __nv_bfloat16* gain, int rows,
                                    int dim, float epsilon, cudaStream_t stream) {
    dim3 block(128);
    dim3 grid((rows + block.x - 1) / block.x);
    rmsnorm_bf16_kernel<<<grid, block, 0, stream>>>(out, inp, gain, rows, dim, epsilon);
    return cudaGetLastError();
}
