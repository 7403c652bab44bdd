// Block-wide inclusive scan (Hillis-Steele) in one shared array of 2 * BLOCK floats used as two
// halves: each step reads one half and writes the other, the halves swapping every step.
#define BLOCK 512

__global__ void block_scan(const float* __restrict__ in, float* __restrict__ out)
{
    __shared__ float buf[2 * BLOCK];
    const int t = threadIdx.x;
    int pin = 0, pout = 1;
    buf[t] = in[blockIdx.x * BLOCK + t];
    __syncthreads();
    for (int off = 1; off < BLOCK; off *= 2) {
        pout = 1 - pout;
        pin = 1 - pout;
        float v = buf[pin * BLOCK + t];
        if (t >= off) v += buf[pin * BLOCK + t - off];
        buf[pout * BLOCK + t] = v;
        __syncthreads();
    }
    out[blockIdx.x * BLOCK + t] = buf[pout * BLOCK + t];
}
