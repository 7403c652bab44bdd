// INT8 GEMV with dp4a: rows read as int4 (16 int8 values), the vector as int4 through the
// read-only path, integer partial sums reduced with __shfl_down_sync, then dequantised.
__global__ void gemv_int8(const int8_t* __restrict__ W, const int8_t* __restrict__ x, const float* __restrict__ scale,
                          float* __restrict__ y, int rows, int cols)
{
    const int warps = blockDim.x >> 5;
    const int row = blockIdx.x * warps + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const int4* wr = reinterpret_cast<const int4*>(W + (size_t)row * cols);
    const int4* xv = reinterpret_cast<const int4*>(x);
    int acc = 0;
    for (int i = lane; i < cols / 16; i += 32) {
        int4 a = wr[i];
        int4 b = __ldg(&xv[i]);
        acc = __dp4a(a.x, b.x, acc);
        acc = __dp4a(a.y, b.y, acc);
        acc = __dp4a(a.z, b.z, acc);
        acc = __dp4a(a.w, b.w, acc);
    }
    for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffff, acc, off);
    if (lane == 0) y[row] = acc * scale[row];
}
