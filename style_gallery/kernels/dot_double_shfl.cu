// Double-precision dot product: 8-byte shuffles down the warp in a do/while-free recursive-halving
// loop written with a width argument, and the block's warps combined by lane 0 atomics.
__device__ double warpSum(double v, int width = warpSize)
{
    for (int delta = width >> 1; delta > 0; delta = delta >> 1)
        v = v + __shfl_down_sync(0xffffffff, v, delta, width);
    return v;
}

__global__ void ddot(int n, const double *x, const double *y, double *result)
{
    double sum = 0.0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
        sum += x[i] * y[i];
    sum = warpSum(sum);
    if ((threadIdx.x % warpSize) == 0)
        atomicAdd(result, sum);
}
