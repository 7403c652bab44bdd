// 1-D box filter of radius R over integers: a block copies its BLOCK_SIZE inputs and R neighbours
// on each side into shared memory (threads below R fetch the two halos), then each output adds the
// 2R + 1 staged values around it.
#define RADIUS 3
#define BLOCK_SIZE 256

__global__ void box_filter_1d(const int* src, int* dst, int len)
{
    __shared__ int window[BLOCK_SIZE + 2 * RADIUS];
    const int g = blockIdx.x * BLOCK_SIZE + threadIdx.x;
    const int w = threadIdx.x + RADIUS;

    window[w] = g < len ? src[g] : 0;
    if (threadIdx.x < RADIUS) {
        const int left = g - RADIUS, right = g + BLOCK_SIZE;
        window[threadIdx.x] = left >= 0 ? src[left] : 0;
        window[w + BLOCK_SIZE] = right < len ? src[right] : 0;
    }
    __syncthreads();

    if (g < len) {
        int total = 0;
        for (int k = -RADIUS; k <= RADIUS; ++k) total += window[w + k];
        dst[g] = total;
    }
}
