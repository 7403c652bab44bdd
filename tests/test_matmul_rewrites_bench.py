"""benchmarks/matmul_rewrites_h200.py without a GPU: which variants it gates, its CPU step on one variant
(written, built for sm_90a, packed, listed in the manifest), and its GPU step's bookkeeping with a
scripted child process in place of the one that runs the kernels (a pass, a hang, a crash, a Python
error after a fault)."""
import argparse
import importlib.util
import json
import tarfile
from pathlib import Path

import pytest

from klineage.mechanisms.shapes.matmul import MatmulRewriter

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("matmul_rewrites_h200", ROOT / "benchmarks/matmul_rewrites_h200.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_variants_cover_the_hopper_skills_on_every_heldout_gemm_instance():
    vs = {v["name"]: v for v in bench.variants()}
    for prefix, instances in (("heldout_mm", bench.MM_INSTANCES), ("heldout_grouped", bench.GROUPED_INSTANCES)):
        for steps in ("idiom", "wgmma", "wgmma+tma", "wgmma+tma+warp_specialization", "tma"):
            v = vs[f"{prefix}+{steps}"]
            assert v["speed"] and v["instances"] == list(instances)
    heldout = {p.parent.name for p in (ROOT / "heldout").glob("*/workload.py")}
    gemm = {i for i in heldout if i.startswith(("mm_", "addmm_", "bmm_", "grouped_mm_"))}
    assert gemm == set(bench.MM_INSTANCES) | set(bench.GROUPED_INSTANCES)
    # every structural step of the chain is gated once per chain (correctness), the rules steps with the next
    for chain in ("naive_mm", "naive_grouped", "ladder"):
        steps = {v["steps"][-1] for v in vs.values() if v["name"].startswith(chain + "+") and v["steps"]}
        assert steps == set(MatmulRewriter.mechanisms)


@pytest.mark.nvcc
def test_prepare_writes_builds_and_packs(tmp_path):
    out = tmp_path / "prepared"
    rc = bench.main(["prepare", "--out", str(out), "--jobs", "2", "--only", "heldout_grouped+wgmma+tma"])
    assert rc == 0
    manifest = json.loads((out / "manifest.json").read_text())
    names = [v["name"] for v in manifest["variants"]]
    assert names == ["heldout_grouped+wgmma+tma", "heldout_grouped+wgmma+tma+warp_specialization"]
    v = manifest["variants"][1]
    assert [r["step"] for r in v["rewrites"]] == ["wgmma", "tma", "warp_specialization"]
    assert v["rewrites"][0]["values"]["GEMM_BLOCK_N"] == 256  # the shipped wgmma card's gemm configuration
    assert all(r["spill_bytes"] == 0 and r["stack_bytes"] == 0 for r in v["resources"])
    src = (out / v["source"]).read_text()
    assert "setmaxnreg" in src and 'extern "C" cudaError_t grouped_mm(' in src
    with tarfile.open(out / "kernels.tar.xz") as tar:
        assert sorted(tar.getnames()) == sorted(Path(x["so"]).name for x in manifest["variants"])
    assert not list((out / "kernels").glob("*.so"))  # carried packed only


def test_run_records_every_outcome(tmp_path):
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    variants = [{"name": n, "so": f"kernels/{n}.so", "steps": [], "resources": [], "speed": speed,
                 "instances": inst} for n, speed, inst in [
        ("heldout_mm+idiom", True, ["mm_2048"]), ("heldout_mm+wgmma", True, ["mm_2048"]),
        ("naive_mm+naive", False, ["mm_2048"]), ("naive_mm+smem_tiling", False, ["mm_2048"]),
        ("naive_mm+smem_tiling+register_tiling", False, ["mm_2048"])]]
    variants.append({"name": "naive_mm+broken", "steps": [], "resources": [], "speed": False, "instances": [],
                     "build_log": "error: boom"})
    (prepared / "manifest.json").write_text(json.dumps({"variants": variants}))
    ok = {"mm_2048": {"checks": [{"kind": "probe", "shape": {}, "ok": True, "why": ""}], "passed": True,
                      "timing": [{"case": {}, "median_us": 100.0, "tflops": 1.0}]}}
    calls = []

    def child(args, ns):  # a hang in the second chain rung, then the rest in a fresh process
        calls.append(args)
        if args[0] == "vendors":
            vendors = {"mm_2048": {"torch": {"median_us": 50.0}, "vendor": {"error": "no flag_gems"}}}
            return {"vendors": vendors}, "ok", ""
        if args[1:] == ["heldout_mm+wgmma"]:
            return {}, "crashed", "illegal memory access"
        if args[1] == "naive_mm+naive":
            return {"naive_mm+naive": {"results": ok}}, "timeout", "no result within 240 s"
        return {n: {"results": ok} for n in args[1:]}, "ok", ""

    ns = argparse.Namespace(prepared=prepared, out=tmp_path / "out", reps=3, only=[], variant_timeout=1.0,
                            time_limit=100.0)
    assert bench.run(ns, child=child, env=lambda: {"gpu": "scripted"}) == 0
    rec = json.loads((tmp_path / "out/matmul_rewrites_h200.json").read_text())
    st = {n: v["status"] for n, v in rec["variants"].items()}
    assert st == {"heldout_mm+idiom": "ok", "heldout_mm+wgmma": "crashed", "naive_mm+naive": "ok",
                  "naive_mm+smem_tiling": "timeout", "naive_mm+smem_tiling+register_tiling": "ok",
                  "naive_mm+broken": "build failed"}
    assert ["variant", "naive_mm+smem_tiling+register_tiling"] in calls  # resumed after the hang
    assert rec["vendors"]["mm_2048"]["torch"]["median_us"] == 50.0
