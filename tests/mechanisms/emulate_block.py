"""Run a workload's kernel file on the CPU with each block's threads as real threads, for semantic checks
of rewrites that share work between threads (the row-wise rewriter's warp / block / line forms).

Built on emulate.py's stand-in for the CUDA built-ins (host C++ under g++, AddressSanitizer and
UndefinedBehaviorSanitizer on), with what cooperating threads need: a launch starts every thread of a
block as a std::thread (blocks one after another, 2-D grids included); __syncthreads is a barrier of
the block's threads and __syncwarp one of the warp's; __shared__ variables are statics, shared by
the block's threads; __shfl_xor_sync exchanges through a per-warp table between two warp barriers.
A thread that returns before a barrier its block still reaches never lets the others pass it (CUDA
leaves that undefined): the run hangs and `run` fails on its timeout, so a rewrite that lets part of
a block leave early is caught as well as one that reads past a buffer.

The harness is written from the workload's ARGS: each pointer argument is a buffer of its shape's
bytes (a probe shape's `offset` moves every base that many elements past a 256-byte boundary; outputs
start as NaN), each scalar the workload's value, the entry called once on a null stream. A test
instrument for small shapes, not a CUDA emulator.
"""
from __future__ import annotations

import math
import os
import subprocess
import tempfile
from pathlib import Path

import emulate
import torch

from klineage.workload_schema import DTYPE_C, SCALAR_C

GXX = emulate.GXX

_THREADED = r"""
#include <algorithm>
#include <barrier>
#include <memory>
#include <thread>
#include <vector>
using std::max;
using std::min;
#define __shared__ static
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned long long a = 1, unsigned long long b = 1, unsigned long long c = 1)
        : x((unsigned)a), y((unsigned)b), z((unsigned)c) {}
};
static thread_local kl_dim3 threadIdx, blockIdx;
static kl_dim3 blockDim, gridDim;
static std::barrier<>* kl_block_bar = nullptr;
static std::vector<std::barrier<>*> kl_warp_bar;
alignas(16) static unsigned char kl_xchg[32][32][16];
inline void __syncthreads() { kl_block_bar->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { kl_warp_bar[threadIdx.x / 32]->arrive_and_wait(); }
template <class T> T __shfl_xor_sync(unsigned, T v, int o) {
    const unsigned w = threadIdx.x / 32, l = threadIdx.x % 32;
    std::memcpy(kl_xchg[w][l], &v, sizeof(T));
    __syncwarp();
    T r;
    std::memcpy(&r, kl_xchg[w][l ^ (unsigned)o], sizeof(T));
    __syncwarp();
    return r;
}
template <class F> void kl_launch(dim3 grid, dim3 block, F f) {
    if (grid.x == 0 || grid.y == 0 || block.x == 0 || block.x > 1024 || block.y != 1 || block.z != 1) {
        kl_error = cudaErrorInvalidConfiguration;
        return;
    }
    gridDim = {grid.x, grid.y, 1};
    blockDim = {block.x, 1, 1};
    const unsigned warps = (block.x + 31) / 32;
    for (unsigned gy = 0; gy < grid.y; ++gy)
        for (unsigned gx = 0; gx < grid.x; ++gx) {
            std::barrier<> bb(block.x);
            kl_block_bar = &bb;
            std::vector<std::unique_ptr<std::barrier<>>> wb;
            kl_warp_bar.clear();
            for (unsigned w = 0; w < warps; ++w) {
                wb.emplace_back(new std::barrier<>(std::min(32u, block.x - 32 * w)));
                kl_warp_bar.push_back(wb.back().get());
            }
            std::vector<std::thread> ts;
            for (unsigned t = 0; t < block.x; ++t)
                ts.emplace_back([&, t] { threadIdx = {t, 0, 0}; blockIdx = {gx, gy, 0}; f(); });
            for (auto& th : ts) th.join();
        }
}
"""


def _shim() -> str:
    s = emulate.SHIM
    s = s.replace("static kl_dim3 threadIdx, blockIdx, blockDim, gridDim;\n", "")
    launch = s.index("template <class F> void kl_launch")
    return s[:launch] + _THREADED


def host_source(cu: str) -> str:
    src = emulate._INCLUDE.sub("", cu)

    def launch(m):
        conf = emulate._split_top(m.group(2))
        return f"{{ auto kl_f = [&] {{ {m.group(1)}({m.group(3)}); }}; kl_launch({conf[0]}, {conf[1]}, kl_f); }}"
    return _shim() + emulate._LAUNCH.sub(launch, src)


def harness(wl) -> str:
    """A main() that loads every pointer argument from DIR/<name>.bin (at DIR/offset elements past a
    256-byte boundary), reads the scalars from DIR/scalars.txt, calls the entry and writes the
    outputs to DIR/<name>.out."""
    lines = ["#include <fstream>", "#include <string>", "#include <iterator>",
             "static std::vector<char> kl_read(const std::string& p) {",
             "    std::ifstream f(p, std::ios::binary);",
             "    return std::vector<char>(std::istreambuf_iterator<char>(f), {});", "}",
             "int main(int argc, char** argv) {", "    const std::string d = argv[1];",
             "    long long off = 0;", "    { std::ifstream f(d + \"/offset.txt\"); f >> off; }",
             "    std::ifstream sc(d + \"/scalars.txt\");"]
    call = []
    for a in wl.args:
        if a.kind == "ptr":
            ct = DTYPE_C[a.dtype]
            lines += [f"    auto kl_h_{a.name} = kl_read(d + \"/{a.name}.bin\");",
                      f"    const size_t kl_o_{a.name} = off * sizeof({ct});",
                      f"    char* kl_m_{a.name} = (char*)std::aligned_alloc(256, ((kl_h_{a.name}.size() + kl_o_{a.name}) "
                      f"/ 256 + 1) * 256);",
                      f"    std::memcpy(kl_m_{a.name} + kl_o_{a.name}, kl_h_{a.name}.data(), kl_h_{a.name}.size());",
                      f"    {ct}* kl_p_{a.name} = ({ct}*)(kl_m_{a.name} + kl_o_{a.name});"]
            call.append(f"kl_p_{a.name}")
        else:
            ct = SCALAR_C[a.kind]
            lines.append(f"    {ct} kl_s_{a.name}; sc >> kl_s_{a.name};")
            call.append(f"kl_s_{a.name}")
    lines.append(f"    const int kl_rc = (int){wl.entry}({', '.join(call)}, nullptr);")
    lines.append("    if (kl_rc != 0) { std::fprintf(stderr, \"entry returned %d\\n\", kl_rc); return 3; }")
    for a in wl.args:
        if a.kind == "ptr" and a.role in ("out", "inout"):
            lines += [f"    {{ std::ofstream f(d + \"/{a.name}.out\", std::ios::binary);",
                      f"      f.write(kl_m_{a.name} + kl_o_{a.name}, kl_h_{a.name}.size()); }}"]
    lines += ["    return 0;", "}"]
    return "\n".join(lines) + "\n"


def build(cu: str, wl, workdir: Path | None = None) -> Path:
    """An executable of the kernel file `cu` driven by the workload's harness (cached by content)."""
    return emulate.compile_text(host_source(cu) + "\n" + harness(wl), workdir=workdir, std="c++20",
                                flags=("-pthread",), folder="kl_emulate_block")


def run(exe: Path, wl, shape: dict, seed: int = 0, timeout_s: float = 120) -> tuple[dict, dict]:
    """(inputs, outputs) of one call of the built kernel on `shape`: the workload's inputs, the
    outputs as tensors of its outputs() dtypes and dims. AssertionError on a sanitizer report, a
    non-zero entry status or a hang (a barrier some of the block's threads never reach)."""
    inputs = wl.module.make_inputs(shape, seed)
    outs = wl.module.outputs(shape)
    scalars = wl.module.scalars(shape)
    with tempfile.TemporaryDirectory() as d:
        for a in wl.args:
            if a.kind != "ptr":
                continue
            if a.name in inputs:
                data = inputs[a.name].contiguous().view(torch.uint8).numpy().tobytes()
            else:
                dims, dtype = outs[a.name]
                data = b"\xff" * (math.prod(dims) * torch.tensor([], dtype=getattr(torch, dtype)).element_size())
            Path(d, f"{a.name}.bin").write_bytes(data)
        Path(d, "offset.txt").write_text(str(shape.get("offset", 0)))
        Path(d, "scalars.txt").write_text(" ".join(repr(scalars[a.name]) for a in wl.args if a.kind != "ptr"))
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0", UBSAN_OPTIONS="print_stacktrace=1")
        try:
            r = subprocess.run([str(exe), d], capture_output=True, text=True, env=env, timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(f"{exe.name} on {shape} hung (a barrier that part of a block never reaches?)") from e
        if r.returncode != 0:
            raise AssertionError(f"{exe.name} on {shape} failed (rc {r.returncode}):\n{r.stderr[-4000:]}")
        got = {}
        for name, (dims, dtype) in outs.items():
            raw = Path(d, f"{name}.out").read_bytes()
            got[name] = torch.frombuffer(bytearray(raw), dtype=getattr(torch, dtype)).reshape(dims).clone()
    return inputs, got
