// Neighbour exchange inside a thread-block cluster written with raw PTX: a block reads its
// neighbour's halo through mapa / ld.shared::cluster after barrier.cluster; the host picks the
// cluster size at launch (cudaLaunchAttributeClusterDimension).
#include <cuda_runtime.h>

__device__ __forceinline__ unsigned cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ __forceinline__ float ld_remote(const float* local, unsigned rank)
{
    unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(local)), remote;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote));
    return v;
}

__global__ void halo_exchange(const float* in, float* out, int n)
{
    __shared__ float edge[2];
    const int base = blockIdx.x * blockDim.x;
    const int i = base + threadIdx.x;
    float v = i < n ? in[i] : 0.f;
    if (threadIdx.x == 0) edge[0] = v;
    if (threadIdx.x == blockDim.x - 1) edge[1] = v;

    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    const unsigned me = cluster_rank();
    float left = 0.f;
    if (threadIdx.x == 0 && me > 0) left = ld_remote(&edge[1], me - 1);
    if (i < n) out[i] = v + left;
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

cudaError_t launch_halo(const float* in, float* out, int n, cudaStream_t stream)
{
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3((n + 255) / 256);
    config.blockDim = dim3(256);
    config.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 2;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    config.attrs = attr;
    config.numAttrs = 1;
    return cudaLaunchKernelEx(&config, halo_exchange, in, out, n);
}
