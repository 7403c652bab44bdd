"""gate/compile.py's PTX compile: PTX with line info plus ptxas's resources, cached like builds,
failures returned (never raised)."""
import pytest

from klineage.gate import compile as gc

pytestmark = pytest.mark.nvcc

KERNEL = ("__global__ void scale(const float* __restrict__ x, float* __restrict__ y, float a) {\n"
          "    __shared__ float buf[128];\n"
          "    buf[threadIdx.x] = x[threadIdx.x];\n"
          "    __syncthreads();\n"
          "    y[threadIdx.x] = a * buf[127 - threadIdx.x];\n"
          "}\n")


def test_compiles_caches_and_reports_resources(tmp_path):
    first = gc.compile_ptx(KERNEL, cache_dir=tmp_path)
    assert first.ok and not first.cached and ".loc" in first.ptx and ".target sm_90a" in first.ptx
    (res,) = first.resources
    assert res.name.endswith("scale") or "scale" in res.name
    assert res.registers > 0 and res.shared_bytes == 512
    again = gc.compile_ptx(KERNEL, cache_dir=tmp_path)
    assert again.cached and again.ptx == first.ptx and again.resources == first.resources
    other = gc.compile_ptx(KERNEL, arch="sm_80", cache_dir=tmp_path)
    assert other.ok and other.key != first.key and ".target sm_80" in other.ptx


def test_a_bad_kernel_is_a_result(tmp_path):
    res = gc.compile_ptx("__global__ void broken( {", cache_dir=tmp_path)
    assert not res.ok and res.error_kind == "nvcc_error" and "error" in res.error_message and res.ptx == ""
    assert gc.compile_ptx("__global__ void broken( {", cache_dir=tmp_path).cached


def test_runs_under_the_compile_limits(tmp_path):
    res = gc.compile_ptx(KERNEL + "\n// fresh\n", cache_dir=tmp_path, timeout_s=0.01)
    assert not res.ok and res.error_kind == "timeout"
    assert not any(p.name.startswith("ptx-") for p in (tmp_path / "ptx").iterdir())  # nothing left half-written


def test_no_nvcc_is_a_result(tmp_path, monkeypatch):
    monkeypatch.setattr(gc, "nvcc_version", lambda nvcc="nvcc": "")
    res = gc.compile_ptx(KERNEL, cache_dir=tmp_path)
    assert not res.ok and res.error_kind == "no_nvcc" and "install the CUDA toolkit" in res.error_message
