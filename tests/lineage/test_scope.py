"""Hardware scope by compiling cubins with nvcc: small richer/simpler pairs whose richer kernel builds
only for some archs (wgmma: sm_90a; 64 KiB static shared memory: sm_90a; clusters: sm_90+)."""
from concurrent.futures import ThreadPoolExecutor

import pytest

from klineage.gate.compile import nvcc_version
from klineage.lineage import scope
from klineage.lineage.scope import ARCHS, UNSUPPORTED, compile_check, hardware_scope

pytestmark = pytest.mark.nvcc

SIMPLE = """\
__global__ void k(float* x) {
    x[threadIdx.x] = 1.f;
}
"""
WGMMA = """\
__global__ void k(float* x) {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    x[threadIdx.x] = 1.f;
}
"""
SMEM_16K = """\
__global__ void big_tile(float* x) {
    __shared__ float tile[4096];
    tile[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    x[threadIdx.x] = tile[threadIdx.x ^ 1];
}
"""
SMEM_64K = SMEM_16K.replace("4096", "16384")
CLUSTER = """\
__global__ void __cluster_dims__(2, 1, 1) k(float* x) {
    x[threadIdx.x] = 1.f;
}
"""


@pytest.fixture(autouse=True)
def _session_build_cache(monkeypatch):
    monkeypatch.delenv("KLINEAGE_BUILD_CACHE", raising=False)  # the cache lives in the session home


@pytest.fixture(scope="module")
def scopes(tmp_path_factory):
    """All pairs at once (the compiles overlap; each arch/source pair is compiled once and cached).
    Module-scoped fixtures run before conftest's per-test home, so it is set here too: the same
    session home, never the user's cache."""
    jobs = {"wgmma": (SIMPLE, WGMMA, ARCHS), "smem": (SMEM_16K, SMEM_64K, ("sm_89", "sm_90a")),
            "cluster": (SIMPLE, CLUSTER, ("sm_89", "sm_120"))}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KLINEAGE_HOME", str(tmp_path_factory.getbasetemp() / "klineage-home"))
        mp.delenv("KLINEAGE_BUILD_CACHE", raising=False)
        with ThreadPoolExecutor(len(jobs)) as pool:
            futs = {k: pool.submit(hardware_scope, *v) for k, v in jobs.items()}
            return {k: f.result() for k, f in futs.items()}


def test_wgmma_builds_for_sm90a_only(scopes):
    r = scopes["wgmma"]
    assert r["archs_ok"] == ["sm_90a"]
    assert set(r["compile_checked"]) == set(ARCHS)
    assert all(c["simpler"] for c in r["compile_checked"].values())
    failing = [a for a in ARCHS if a != "sm_90a"]
    assert [p["evidence"].split(" for ")[1].split(":")[0] for p in r["preconditions"]] == failing
    for p in r["preconditions"]:
        assert p["category"] == "hardware" and p["probe"] is None and p["lines"] == [2, 2]
        assert p["evidence"].startswith(f"compile: nvcc {nvcc_version()} for sm_")
        assert "wgmma.fence" in p["evidence"] and "/tmp" not in p["evidence"]
    assert "sm_90a" in r["preconditions"][0]["condition"]


def test_static_shared_over_48k_fails_except_on_sm90a(scopes):
    r = scopes["smem"]
    assert r["archs_ok"] == ["sm_90a"]
    (p,) = r["preconditions"]
    assert "sm_89" in p["evidence"] and "too much shared data" in p["evidence"]
    assert p["lines"] == [1, 6]  # the kernel ptxas names


def test_cluster_dims_need_sm90(scopes):
    r = scopes["cluster"]
    assert r["archs_ok"] == ["sm_120"]
    (p,) = r["preconditions"]
    assert "sm_89" in p["evidence"] and "__cluster_dims__" in p["evidence"] and p["lines"] == [1, 1]


def test_a_second_check_costs_nothing(scopes, monkeypatch):
    first = compile_check(SIMPLE, "sm_80")  # compiled by the fixture already
    assert first["cached"] and first["ok"] and first["message"] == ""

    def boom(*a, **k):
        raise AssertionError("nvcc ran again")
    monkeypatch.setattr(scope, "run_nvcc", boom)  # every nvcc run goes through gate.compile.run_nvcc
    again = compile_check(SIMPLE, "sm_80")
    assert again == first


def test_unsupported_arch_is_not_a_precondition(scopes):
    r = compile_check(SIMPLE, "sm_35")
    assert not r["ok"] and not r["supported"] and r["message"].startswith(UNSUPPORTED)
    s = hardware_scope(SIMPLE, WGMMA, archs=("sm_35", "sm_90a"))
    assert s["preconditions"] == [] and s["archs_ok"] == ["sm_90a"]
    assert s["compile_checked"]["sm_35"]["supported"] is False
    assert s["compile_checked"]["sm_35"]["message"].startswith(UNSUPPORTED)


def test_compile_error_message_is_the_first_error_line():
    r = compile_check("__global__ void k(float* x) { x[threadIdx.x] = undefined_name; }\n", "sm_80")
    assert not r["ok"] and r["supported"]
    assert r["message"].startswith("kernel.cu(1): error") and "undefined_name" in r["message"]
