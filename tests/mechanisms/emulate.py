"""Run a CUDA kernel file on the CPU, for semantic checks of rewrites where no GPU is present.

The file is compiled as host C++ with g++ against a small stand-in for the CUDA built-ins it uses
(index variables, vector types, bf16 / fp16 bit conversions, cache-hint loads), with AddressSanitizer
and UndefinedBehaviorSanitizer: an access past a buffer (a wrong tail), or a 16-byte vector access
at an address that is not 16-byte aligned (a missing alignment fallback; the stand-in vector types
are alignas(16) like CUDA's), aborts the run. A launch `k<<<grid, block, ...>>>(args)` runs every
thread of every block one after another, in order or (KL_REVERSE=1) in reverse order; a kernel
without barriers whose threads touch disjoint elements gives the same result under any order.

Only the plain kernels of these tests are understood (1-D launches, no shared memory, no barriers,
no warp intrinsics); it is a test instrument, not a CUDA emulator.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

GXX = shutil.which("g++")

SHIM = r"""
#include <cstdint>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorInvalidConfiguration = 9 };
typedef void* cudaStream_t;
static int kl_error = 0;
inline cudaError_t cudaGetLastError() { int e = kl_error; kl_error = 0; return e; }
struct kl_dim3 { unsigned x, y, z; };
static kl_dim3 threadIdx, blockIdx, blockDim, gridDim;
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) float2 { float x, y; };
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
struct alignas(16) double2 { double x, y; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline int4 make_int4(int a, int b, int c, int d) { return {a, b, c, d}; }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline double2 make_double2(double a, double b) { return {a, b}; }
inline unsigned short kl_f2bf(float f) {
    uint32_t u; std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
struct alignas(2) __nv_bfloat16 {
    unsigned short bits;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : bits(kl_f2bf(f)) {}
    operator float() const { uint32_t u = (uint32_t)bits << 16; float f; std::memcpy(&f, &u, 4); return f; }
};
typedef __nv_bfloat16 nv_bfloat16;
inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short s) { __nv_bfloat16 h; h.bits = s; return h; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }
struct alignas(2) __half {
    unsigned short bits;
    __half() = default;
    __half(float f) { _Float16 h = (_Float16)f; std::memcpy(&bits, &h, 2); }
    operator float() const { _Float16 h; std::memcpy(&h, &bits, 2); return (float)h; }
};
typedef __half half;
inline float __half2float(__half h) { return (float)h; }
inline __half __float2half(float f) { return __half(f); }
inline __half __ushort_as_half(unsigned short s) { __half h; h.bits = s; return h; }
inline unsigned short __half_as_ushort(__half h) { return h.bits; }
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
inline float __expf(float x) { return expf(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
template <class F> void kl_launch(long long grid, long long block, F f) {
    if (grid <= 0 || grid > 2147483647LL || block <= 0 || block > 1024) { kl_error = cudaErrorInvalidConfiguration; return; }
    gridDim = {(unsigned)grid, 1, 1}; blockDim = {(unsigned)block, 1, 1};
    const bool rev = std::getenv("KL_REVERSE") != nullptr;
    for (long long b0 = 0; b0 < grid; ++b0) {
        const long long b = rev ? grid - 1 - b0 : b0;
        for (long long t0 = 0; t0 < block; ++t0) {
            const long long t = rev ? block - 1 - t0 : t0;
            blockIdx = {(unsigned)b, 0, 0}; threadIdx = {(unsigned)t, 0, 0};
            f();
        }
    }
}
"""

_INCLUDE = re.compile(r"^\s*#include\s*<(cuda_runtime|cuda_bf16|cuda_fp16|cuda)\.h>\s*$", re.M)
_LAUNCH = re.compile(r"(\w+)\s*<<<(.*?)>>>\s*\((.*?)\)\s*;", re.S)


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


def host_source(cu: str) -> str:
    """The kernel file as host C++: CUDA includes replaced by the stand-in, launches by loops."""
    src = _INCLUDE.sub("", cu)

    def launch(m):
        conf = _split_top(m.group(2))
        return f"{{ auto kl_f = [&] {{ {m.group(1)}({m.group(3)}); }}; kl_launch({conf[0]}, {conf[1]}, kl_f); }}"
    return SHIM + _LAUNCH.sub(launch, src)


def build(cu: str, harness: str, defines: tuple[str, ...] = (), workdir: Path | None = None) -> Path:
    """An executable of `cu` plus a `main` (harness), sanitizers on."""
    return compile_text(host_source(cu) + "\n" + harness, defines, workdir)


def compile_text(text: str, defines: tuple[str, ...] = (), workdir: Path | None = None, std: str = "c++17",
                 flags: tuple[str, ...] = (), folder: str = "kl_emulate") -> Path:
    """An executable of the host C++ `text` under the sanitizers (cached by content)."""
    key = hashlib.sha256((text + repr(defines) + std + repr(flags)).encode()).hexdigest()[:16]
    d = Path(workdir or tempfile.gettempdir()) / folder
    d.mkdir(parents=True, exist_ok=True)
    exe = d / f"k_{key}"
    if exe.is_file():
        return exe
    src = d / f"k_{key}.cpp"
    src.write_text(text)
    cmd = [GXX, f"-std={std}", "-O1", "-g", "-ffp-contract=off", "-fno-omit-frame-pointer", *flags,
           "-fsanitize=address,undefined", "-fno-sanitize-recover=all", *[f"-D{x}" for x in defines],
           str(src), "-o", str(exe) + ".tmp"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"g++ rejected the emulated kernel:\n{r.stderr[-4000:]}")
    os.replace(str(exe) + ".tmp", exe)
    return exe


def run(exe: Path, *args, reverse: bool = False) -> str:
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0", UBSAN_OPTIONS="print_stacktrace=1")
    env.pop("KL_REVERSE", None)
    if reverse:
        env["KL_REVERSE"] = "1"
    r = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != 0:
        raise AssertionError(f"{exe.name} {args} failed (rc {r.returncode}):\n{r.stderr[-4000:]}")
    return r.stdout
