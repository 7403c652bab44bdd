// KLineage CUDA prelude for libclang analysis (never compiled by nvcc).
// The PyPI libclang ships no clang resource headers and cannot read NVIDIA's headers, so this file
// declares what CUDA kernels use: attributes, index variables, vector and reduced-precision types,
// intrinsics and the runtime calls of host launch code. Declarations only; types must be right,
// bodies are never needed.
#pragma once
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __managed__ __attribute__((managed))
#define __forceinline__ __inline__ __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))
#define __align__(n) __attribute__((aligned(n)))
#define __cluster_dims__(...)
#define __grid_constant__
#define __maxnreg__(n)
#define CUDART_INF_F __builtin_huge_valf()
#define CUDART_INF __builtin_huge_val()
#define INFINITY __builtin_huge_valf()
#define NAN __builtin_nanf("")
#define FLT_MAX 3.402823466e+38F
#define CUDART_VERSION 13000

typedef unsigned long size_t;
typedef long ptrdiff_t;
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef unsigned long uintptr_t;
typedef long intptr_t;

struct __attribute__((aligned(2))) char2 { signed char x, y; };
struct __attribute__((aligned(4))) char4 { signed char x, y, z, w; };
struct __attribute__((aligned(4))) uchar4 { unsigned char x, y, z, w; };
struct __attribute__((aligned(4))) short2 { short x, y; };
struct __attribute__((aligned(8))) short4 { short x, y, z, w; };
struct __attribute__((aligned(8))) int2 { int x, y; };
struct int3 { int x, y, z; };
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
struct __attribute__((aligned(8))) uint2 { unsigned int x, y; };
struct uint3 { unsigned int x, y, z; };
struct __attribute__((aligned(16))) uint4 { unsigned int x, y, z, w; };
struct __attribute__((aligned(8))) float2 { float x, y; };
struct float3 { float x, y, z; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(16))) double2 { double x, y; };
struct __attribute__((aligned(16))) longlong2 { long long x, y; };
struct dim3 {
    unsigned int x, y, z;
    __host__ __device__ dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1);
    __host__ __device__ dim3(uint3 v);
};

struct __attribute__((aligned(2))) __half { unsigned short __x; };
struct __attribute__((aligned(4))) __half2 { __half x, y; };
typedef __half half;
typedef __half2 half2;
struct __attribute__((aligned(2))) __nv_bfloat16 { unsigned short __x; };
struct __attribute__((aligned(4))) __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;

extern const __device__ uint3 threadIdx;
extern const __device__ uint3 blockIdx;
extern const __device__ dim3 blockDim;
extern const __device__ dim3 gridDim;
extern const __device__ int warpSize;

// ---- runtime (host launch code) ----
enum cudaError { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2,
                 cudaErrorLaunchFailure = 719 };
typedef enum cudaError cudaError_t;
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;
enum cudaDeviceAttr { cudaDevAttrMaxThreadsPerBlock = 1, cudaDevAttrMaxSharedMemoryPerBlock = 8,
                      cudaDevAttrMultiProcessorCount = 16, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
                         cudaFuncAttributePreferredSharedMemoryCarveout = 9,
                         cudaFuncAttributeNonPortableClusterSizeAllowed = 14 };
enum cudaLaunchAttributeID { cudaLaunchAttributeClusterDimension = 4 };
struct cudaLaunchAttributeValue { struct { unsigned int x, y, z; } clusterDim; };
struct cudaLaunchAttribute { cudaLaunchAttributeID id; cudaLaunchAttributeValue val; };
struct cudaLaunchConfig_t {
    dim3 gridDim; dim3 blockDim; size_t dynamicSmemBytes; cudaStream_t stream;
    cudaLaunchAttribute* attrs; unsigned int numAttrs;
};
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
cudaError_t cudaGetDevice(int*);
cudaError_t cudaDeviceGetAttribute(int*, cudaDeviceAttr, int);
cudaError_t cudaMemsetAsync(void*, int, size_t, cudaStream_t = 0);
cudaError_t cudaMemcpyAsync(void*, const void*, size_t, int, cudaStream_t = 0);
template <class T> cudaError_t cudaFuncSetAttribute(T*, cudaFuncAttribute, int);
template <class... A, class... B> cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t*, void (*)(A...), B...);
template <class T> cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int*, T, int, size_t);
enum cudaDriverEntryPointQueryResult { cudaDriverEntryPointSuccess = 0, cudaDriverEntryPointSymbolNotFound = 1,
                                       cudaDriverEntryPointVersionNotSufficent = 2 };
enum { cudaEnableDefault = 0, cudaEnableLegacyStream = 1, cudaEnablePerThreadDefaultStream = 2 };
cudaError_t cudaGetDriverEntryPoint(const char*, void**, unsigned long long,
                                    cudaDriverEntryPointQueryResult* = 0);
cudaError_t cudaGetDriverEntryPointByVersion(const char*, void**, unsigned int, unsigned long long,
                                             cudaDriverEntryPointQueryResult* = 0);

// ---- synchronisation, warp intrinsics ----
__device__ void __syncthreads(void);
__device__ int __syncthreads_or(int);
__device__ int __syncthreads_and(int);
__device__ int __syncthreads_count(int);
__device__ void __syncwarp(unsigned int mask = 0xffffffffu);
__device__ void __threadfence(void);
__device__ void __threadfence_block(void);
template <class T> __device__ T __shfl_sync(unsigned int, T, int, int = 32);
template <class T> __device__ T __shfl_xor_sync(unsigned int, T, int, int = 32);
template <class T> __device__ T __shfl_down_sync(unsigned int, T, unsigned int, int = 32);
template <class T> __device__ T __shfl_up_sync(unsigned int, T, unsigned int, int = 32);
__device__ unsigned int __ballot_sync(unsigned int, int);
__device__ int __any_sync(unsigned int, int);
__device__ int __all_sync(unsigned int, int);
__device__ unsigned int __activemask(void);
template <class T> __device__ T __reduce_add_sync(unsigned int, T);
template <class T> __device__ T __reduce_max_sync(unsigned int, T);
__device__ int __popc(unsigned int);
__device__ int __clz(int);
__device__ int __ffs(int);
__device__ unsigned int __brev(unsigned int);
__device__ unsigned int __funnelshift_l(unsigned int, unsigned int, unsigned int);
__device__ long long clock64(void);

// ---- cache-hinted loads and stores ----
template <class T> __device__ T __ldg(const T*);
template <class T> __device__ T __ldcg(const T*);
template <class T> __device__ T __ldca(const T*);
template <class T> __device__ T __ldcs(const T*);
template <class T> __device__ T __ldlu(const T*);
template <class T> __device__ T __ldcv(const T*);
template <class T> __device__ void __stwb(T*, T);
template <class T> __device__ void __stcg(T*, T);
template <class T> __device__ void __stcs(T*, T);
template <class T> __device__ void __stwt(T*, T);

// ---- atomics ----
template <class T> __device__ T atomicAdd(T*, T);
template <class T> __device__ T atomicMax(T*, T);
template <class T> __device__ T atomicMin(T*, T);
template <class T> __device__ T atomicExch(T*, T);
template <class T> __device__ T atomicCAS(T*, T, T);

// ---- math: precise and fast-math ----
__host__ __device__ float expf(float); __host__ __device__ float exp2f(float);
__host__ __device__ float logf(float); __host__ __device__ float log2f(float);
__host__ __device__ float sqrtf(float); __host__ __device__ float rsqrtf(float);
__host__ __device__ float sinf(float); __host__ __device__ float cosf(float);
__host__ __device__ float tanhf(float); __host__ __device__ float powf(float, float);
__host__ __device__ float fabsf(float); __host__ __device__ float fmaxf(float, float);
__host__ __device__ float fminf(float, float); __host__ __device__ float fmaf(float, float, float);
__host__ __device__ float erff(float); __host__ __device__ float log1pf(float);
__host__ __device__ float expm1f(float); __host__ __device__ float floorf(float);
__host__ __device__ float ceilf(float); __host__ __device__ float truncf(float);
__host__ __device__ double exp(double); __host__ __device__ double log(double);
__host__ __device__ double sqrt(double); __host__ __device__ double fabs(double);
__device__ float __expf(float); __device__ float __exp10f(float); __device__ float __logf(float);
__device__ float __log2f(float); __device__ float __sinf(float); __device__ float __cosf(float);
__device__ float __tanf(float); __device__ float __powf(float, float);
__device__ void __sincosf(float, float*, float*); __host__ __device__ void sincosf(float, float*, float*);
__device__ int __dp4a(int, int, int); __device__ unsigned int __dp4a(unsigned int, unsigned int, unsigned int);
__device__ int __dp2a_lo(int, int, int); __device__ int __dp2a_hi(int, int, int);
__device__ float __fdividef(float, float); __device__ float __frcp_rn(float);
__device__ float __fsqrt_rn(float); __device__ float __frsqrt_rn(float);
__device__ float __fmaf_rn(float, float, float); __device__ float __fadd_rn(float, float);
__device__ float __fmul_rn(float, float); __device__ float __saturatef(float);
__device__ float __int_as_float(int); __device__ int __float_as_int(float);
__device__ float __uint_as_float(unsigned int); __device__ unsigned int __float_as_uint(float);
__device__ int __float2int_rn(float); __device__ float __int2float_rn(int);
__device__ int __mul24(int, int); __device__ int __umulhi(unsigned int, unsigned int);
template <class T> __host__ __device__ T min(T, T);
template <class T> __host__ __device__ T max(T, T);

// ---- vector constructors ----
__host__ __device__ float2 make_float2(float, float);
__host__ __device__ float3 make_float3(float, float, float);
__host__ __device__ float4 make_float4(float, float, float, float);
__host__ __device__ int2 make_int2(int, int);
__host__ __device__ int4 make_int4(int, int, int, int);
__host__ __device__ uint2 make_uint2(unsigned int, unsigned int);
__host__ __device__ uint3 make_uint3(unsigned int, unsigned int, unsigned int);
__host__ __device__ uint4 make_uint4(unsigned int, unsigned int, unsigned int, unsigned int);
__host__ __device__ double2 make_double2(double, double);

// ---- half and bfloat16 ----
__host__ __device__ float __half2float(__half); __host__ __device__ __half __float2half(float);
__host__ __device__ __half __float2half_rn(float); __host__ __device__ float2 __half22float2(__half2);
__host__ __device__ __half2 __float22half2_rn(float2); __host__ __device__ __half2 __floats2half2_rn(float, float);
__host__ __device__ __half2 __halves2half2(__half, __half); __host__ __device__ __half2 __hmul2(__half2, __half2);
__host__ __device__ __half2 __hadd2(__half2, __half2); __host__ __device__ __half2 __hfma2(__half2, __half2, __half2);
__host__ __device__ __half __low2half(__half2); __host__ __device__ __half __high2half(__half2);
__host__ __device__ __half2 __float2half2_rn(float); __host__ __device__ __half2 __hmax2(__half2, __half2);
__host__ __device__ __half2 __hmin2(__half2, __half2); __host__ __device__ __half __hmax(__half, __half);
__host__ __device__ __half __hmin(__half, __half);
__host__ __device__ float __low2float(__half2); __host__ __device__ float __high2float(__half2);
__host__ __device__ float __bfloat162float(__nv_bfloat16); __host__ __device__ __nv_bfloat16 __float2bfloat16(float);
__host__ __device__ __nv_bfloat16 __float2bfloat16_rn(float);
__host__ __device__ float2 __bfloat1622float2(__nv_bfloat162);
__host__ __device__ __nv_bfloat162 __float22bfloat162_rn(float2);
__host__ __device__ __nv_bfloat162 __floats2bfloat162_rn(float, float);
__host__ __device__ __nv_bfloat162 __halves2bfloat162(__nv_bfloat16, __nv_bfloat16);
__host__ __device__ __nv_bfloat162 __hmul2(__nv_bfloat162, __nv_bfloat162);
__host__ __device__ __nv_bfloat162 __hadd2(__nv_bfloat162, __nv_bfloat162);
__host__ __device__ __nv_bfloat16 __low2bfloat16(__nv_bfloat162); __host__ __device__ __nv_bfloat16 __high2bfloat16(__nv_bfloat162);
__host__ __device__ float __low2float(__nv_bfloat162); __host__ __device__ float __high2float(__nv_bfloat162);

// ---- async copies and pipelines ----
__device__ void __pipeline_memcpy_async(void*, const void*, size_t, size_t = 0);
__device__ void __pipeline_commit(void);
__device__ void __pipeline_wait_prior(size_t);
__device__ unsigned int __cvta_generic_to_shared(const void*);

// ---- what clang's CUDA mode needs to accept <<<...>>> launches ----
extern "C" int __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem = 0,
                                           cudaStream_t stream = 0);
