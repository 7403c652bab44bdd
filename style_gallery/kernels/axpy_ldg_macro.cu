// AXPY with the read-only loads behind a portability macro (LDG falls back to a plain load before
// sm_35), four elements per thread from a #define'd count.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 350
#define LDG(ptr) __ldg(ptr)
#else
#define LDG(ptr) (*(ptr))
#endif

#define ELEMENTS_PER_THREAD 4

__global__ void saxpy_ldg(int n, float a, const float *x, float *y)
{
    int base = (blockIdx.x * blockDim.x) * ELEMENTS_PER_THREAD + threadIdx.x;
    #pragma unroll
    for (int k = 0; k < ELEMENTS_PER_THREAD; ++k) {
        int i = base + k * blockDim.x;
        if (i < n) y[i] = a * LDG(x + i) + y[i];
    }
}
