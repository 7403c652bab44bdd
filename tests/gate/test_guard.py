"""Static guard: the gallery's statically checkable cheats are rejected, honest kernels are not."""
from pathlib import Path

import pytest

from klineage.gate.guard import check_source, file_scope_lines, strip_comments
from klineage.workload import load_workload
from tests.support.headers import header, statuses

ROOT = Path(__file__).resolve().parents[2]
ROW_SUM = load_workload(ROOT / "expert_kernels" / "row_sum")
SWIGLU = load_workload(ROOT / "expert_kernels" / "swiglu")
GALLERY = sorted((ROOT / "tests" / "gallery").glob("*.cu"))

def test_gallery_is_complete():
    assert len(GALLERY) >= 20  # one kernel per pitfall that applies to a CUDA-C entry point, at least
    for p in GALLERY:
        h = header(p)
        assert {"pitfall", "expect", "why"} <= set(h), p.name
        # the shipped gate's verdict is one outcome; only the guard-off one may name alternatives
        assert h["expect"] in {"GUARD_REJECTED", "INCORRECT", "RUNTIME_ERROR"}, p.name
        assert statuses(h.get("dynamic")) or h["expect"] != "GUARD_REJECTED", p.name  # what the guard-off gate gives


@pytest.mark.parametrize("path", GALLERY, ids=lambda p: p.name)
def test_gallery_static_verdict(path):
    h = header(path)
    res = check_source(path.read_text(), ROW_SUM)
    if h["expect"] == "GUARD_REJECTED":
        assert not res.ok, f"{path.name} should be rejected statically"
        # by a rule named for the pitfall the kernel demonstrates, not only by another one
        own = [v.rule_id for v in res.violations if str(v.pitfall) == h["pitfall"]]
        assert own, f"{path.name} (pitfall {h['pitfall']}) is caught only by {res.to_dict()['violations']}"
    else:  # the dynamic checks must catch it; the guard must not mask that with a false reason
        assert res.ok, f"{path.name}: {res.summary}"


@pytest.mark.parametrize("rel", ["row_sum/expert.cu", "row_sum/naive.cu", "swiglu/expert.cu", "swiglu/naive.cu"])
def test_expert_and_naive_kernels_pass(rel):
    wl = ROW_SUM if rel.startswith("row_sum") else SWIGLU
    res = check_source((ROOT / "expert_kernels" / rel).read_text(), wl)
    assert res.ok, res.summary


BASE = '''#include <cuda_runtime.h>
__global__ void k(const float* x, float* out, int rows, int cols) { %s }
extern "C" cudaError_t row_sum(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
  %s
  k<<<rows, 256, 0, stream>>>(x, out, rows, cols);
  return cudaGetLastError();
}
'''


@pytest.mark.parametrize("device, host, rule, pitfall", [
    ("", "cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);", "stream_create", 1),
    ("", "static int calls = 0; calls++;", "static_host_state", 5),
    ("", "cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 1 << 20);", "persisting_l2", 13),
    ("", "cudaDeviceReset();", "device_reset", 4),
    ("", "FILE* f = fopen(\"answers.bin\", \"rb\");", "file_io", 23),
    ("", "std::thread t([]{}); t.detach();", "thread", 2),
    ("", "cublasSgemv(h, CUBLAS_OP_T, cols, rows, &one, x, cols, ones, 1, &zero, out, 1);", "vendor_call", 11),
    ("", "auto t0 = std::chrono::steady_clock::now();", "host_clock", 15),
    ("", "cudaDeviceSynchronize();", "sync_device", 14),
    ("__half h = __float2half(x[0]); out[0] = __half2float(h);", "", "half_in_fp32", 10),
    ("", "float* tmp; cudaMalloc(&tmp, 4);", "device_malloc", 5),
    ("", "int fd = ::open(\"/proc/self/mem\", 0);", "process_memory", 7),
    ("", "char p[64]; snprintf(p, 64, \"/proc/%d/maps\", 1);", "process_memory", 7),
    ("", "struct iovec a, b; process_vm_readv(1, &a, 1, &b, 1, 0);", "process_memory_call", 7),
    ("", "static int calls = 0; ++calls;", "call_counter", 15),
    ("", "static unsigned long long seen; if (seen++ > 3) rows /= 2;", "call_counter", 15),
])
def test_rules(device, host, rule, pitfall):
    res = check_source(BASE % (device, host), ROW_SUM)
    assert not res.ok
    hits = [v for v in res.violations if v.rule_id == rule]
    assert hits, res.violations
    assert hits[0].pitfall == pitfall and hits[0].line in (2, 4)


def test_file_scope_state_is_rejected_but_locals_are_not():
    src = BASE % ("float acc = 0.f; int i = threadIdx.x; acc += x[i]; out[0] = acc;", "int blocks = rows;")
    assert check_source(src, ROW_SUM).ok
    bad = "float* g_cache = nullptr;\n" + src
    res = check_source(bad, ROW_SUM)
    assert [v.rule_id for v in res.violations] == ["global_host_state"] and res.violations[0].line == 1
    dev = "__device__ float d_last[1024];\n" + src
    assert [v.rule_id for v in check_source(dev, ROW_SUM).violations] == ["device_state"]
    const_ok = "__constant__ float kScale[4];\nstatic const int kThreads = 256;\nconstexpr int kV = 4;\n" + src
    assert check_source(const_ok, ROW_SUM).ok


def test_counters_and_paths_that_are_not_cheats_pass():
    # a loop counter, a static constant, a file named like /proc in a comment
    src = BASE % ("int n = 0; for (int i = 0; i < cols; ++i) n += i; out[0] = n;",
                  "static const int kBlocks = 4; int launched = 0; launched += kBlocks; // not /proc/self/mem")
    assert check_source(src, ROW_SUM).ok, check_source(src, ROW_SUM).summary


def test_comments_do_not_trigger_but_strings_keep_lines():
    src = "// do not call cudaStreamCreate or cublasSgemm here\n/* std::thread\n cudaDeviceReset() */\n" + BASE % ("", "")
    assert check_source(src, ROW_SUM).ok
    text, strings = strip_comments('a = "x\\"y"; // z\nb;')
    assert text.count("\n") == 1 and strings == [(1, 'x\\"y')]


def test_half_types_allowed_in_bf16_workload():
    src = (ROOT / "expert_kernels" / "swiglu" / "expert.cu").read_text()
    assert check_source(src, SWIGLU).ok
    assert not check_source(src, ROW_SUM).ok  # the same code in an fp32 workload is a downgrade


def test_stateful_workload_allows_state(monkeypatch):
    import dataclasses
    stateful = dataclasses.replace(ROW_SUM, stateful=True)
    src = BASE % ("", "static int calls = 0; calls++;")
    assert check_source(src, stateful).ok


def test_missing_entry_point():
    src = BASE.replace("row_sum(", "rowsum(") % ("", "")
    res = check_source(src, ROW_SUM)
    assert not res.ok and "entry point row_sum not defined" in res.violations[0].reason


def test_file_scope_lines():
    text = 'int a;\nnamespace n {\nint b;\nvoid f() {\nint c;\n}\n}\nextern "C" {\nint d;\n}\n'
    assert file_scope_lines(text) >= {1, 2, 3, 4, 7, 8, 9} and 5 not in file_scope_lines(text)
