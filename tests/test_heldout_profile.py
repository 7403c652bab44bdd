"""benchmarks/heldout_profile.py on the CPU: which held-out rows it profiles, and how an ncu report is
summarised per kernel (the profiling itself needs a GPU; its records are checked where they exist)."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from heldout_profile import NCU_METRICS, select  # noqa: E402
from profile_shortfalls import ncu_summary  # noqa: E402


def _report():
    def row(status, speedup):
        return {"status": status, "speedup": speedup}
    return {"instances": [
        {"instance": "mm_4096", "conditions": {"skills": row("PASSED", 0.71), "idiom": row("PASSED", 0.64)}},
        {"instance": "rmsnorm_a", "conditions": {"skills": row("PASSED", 1.08), "idiom": row("PASSED", 0.97)}},
        {"instance": "bmm_x", "conditions": {"skills": row("FAILED", None), "idiom": row("PASSED", 0.5)}},
        {"instance": "attn_y", "conditions": {"skills": row("MISSING", None)}},
    ]}


def test_select_takes_passed_rows_below_the_threshold_or_the_named_instances():
    rep = _report()
    assert select(rep, None, ["skills"], 1.0) == [("mm_4096", "skills")]
    assert select(rep, None, ["skills", "idiom"], 1.0) == [("mm_4096", "skills"), ("mm_4096", "idiom"),
                                                          ("rmsnorm_a", "idiom"), ("bmm_x", "idiom")]
    assert select(rep, None, ["skills"], 1.1) == [("mm_4096", "skills"), ("rmsnorm_a", "skills")]
    # named: every selected condition that PASSED, whatever its speedup; failed rows have no kernel to profile
    assert select(rep, ["rmsnorm_a", "bmm_x"], ["skills"], 1.0) == [("rmsnorm_a", "skills")]


def test_ncu_summary_keeps_every_kernel_and_takes_medians():
    csv = "\n".join([
        "==PROF== Connected to process 1",
        '"ID","Process ID","Kernel Name","Metric Name","Metric Unit","Metric Value"',
        '"0","1","mm(const bf16*, int)","gpu__time_duration.sum","usecond","410.5"',
        '"1","1","mm(const bf16*, int)","gpu__time_duration.sum","usecond","420.5"',
        '"2","1","mm(const bf16*, int)","gpu__time_duration.sum","usecond","1,000.5"',
        '"3","1","mm_kernel_0d1d2d","gpu__time_duration.sum","usecond","280"',
        '"3","1","mm_kernel_0d1d2d","sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed","%","71.5"',
    ])
    k = ncu_summary(csv, None)
    assert set(k) == {"mm", "mm_kernel_0d1d2d"}
    assert k["mm"]["gpu__time_duration.sum"] == {"median": 420.5, "n": 3}
    assert k["mm_kernel_0d1d2d"]["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed"]["median"] == 71.5
    assert ncu_summary(csv) == {}  # profile_shortfalls' own filter keeps only its cases' kernels


def test_cli_prints_the_ncu_metrics_and_merges_a_report(tmp_path):
    script = ROOT / "benchmarks" / "heldout_profile.py"
    out = subprocess.run([sys.executable, str(script), "--ncu-metrics"], capture_output=True, text=True, check=True)
    assert out.stdout.strip().split(",") == list(NCU_METRICS)
    rec = tmp_path / "heldout_profile.json"
    rec.write_text(json.dumps({"benchmark": "heldout_profile", "cases": []}))
    csv = tmp_path / "ncu.csv"
    csv.write_text('"ID","Kernel Name","Metric Name","Metric Value"\n"0","mm(int)","gpu__time_duration.sum","5"\n')
    subprocess.run([sys.executable, str(script), "--merge-ncu", str(csv), str(rec)], check=True)
    merged = json.loads(rec.read_text())
    assert merged["ncu"]["kernels"] == {"mm": {"gpu__time_duration.sum": {"median": 5.0, "n": 1}}}
    assert merged["ncu"]["metrics"] == list(NCU_METRICS)


def test_the_reference_is_the_one_the_report_used(tmp_path, monkeypatch):
    from heldout_profile import _workload
    monkeypatch.setenv("KLINEAGE_HOME", str(tmp_path))
    entry = {"instance": "rmsnorm_16384x4096", "reference": {"used": "fallback", "name": "x"}, "conditions": {}}
    wl, ref = _workload(entry, ROOT / "heldout")
    assert ref["used"] == "fallback" and wl.vendor_name == wl.module.VENDOR_FALLBACK
    entry["reference"]["used"] = "primary"
    wl, _ = _workload(entry, ROOT / "heldout")
    assert wl.vendor_name != wl.module.VENDOR_FALLBACK and "FlagGems" in wl.vendor_name
