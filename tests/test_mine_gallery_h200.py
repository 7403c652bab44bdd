"""The style gallery mined live on an H200 (benchmarks/mine_gallery_h200.py), replayed here.

Once the device run's records are committed (benchmarks/results/mine_gallery_h200/), replaying
pipelines/mine_gallery.toml from them on this CPU-only machine must give the lineages and skills the
H200 run stored, with no evaluation missing. Until then, the test checks the script's dry plan: the
same configuration walked with the real proposers and audit and the gate scripted to pass."""
import gzip
import json
import sys
from pathlib import Path

from click.testing import CliRunner

from klineage.cli import main
from klineage.store import open_store

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "benchmarks" / "results" / "mine_gallery_h200"
DUMP = RECORDS / "mine_gallery_h200_dump.json.gz"
CONFIG = ROOT / "pipelines" / "mine_gallery.toml"
sys.path.insert(0, str(ROOT / "benchmarks"))
import mine_gallery_h200  # noqa: E402


def _canonical(obj) -> dict:
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def _replay(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KLINEAGE_RECORDED", str(RECORDS))
    db = tmp_path / "gallery.duckdb"
    r = CliRunner().invoke(main, ["mine", "--config", str(CONFIG), "--replay", "--db", str(db), "--json", "--quiet"])
    assert r.exit_code == 0, r.output[-3000:]
    summary = json.loads(r.output)
    assert summary["missing"] == []
    assert summary["evaluations"]["by_source"] == {"replayed": summary["evaluations"]["total"]}
    store = open_store(db)
    try:
        mine = _canonical(store.canonical_dump())
    finally:
        store.close()
    device = _canonical(json.loads(gzip.decompress(DUMP.read_bytes())))
    assert mine["lineages"] == device["lineages"]
    assert mine["skills"] == device["skills"]
    recorded = json.loads((RECORDS / "mine_gallery_h200.json").read_text())
    assert not recorded.get("interrupted") and (recorded.get("env") or {}).get("gpu", "").startswith(("NVIDIA H200", "NVIDIA H100"))


def _plan(tmp_path) -> None:
    assert mine_gallery_h200.main(["--dry-plan", "--out", str(tmp_path)]) == 0
    p = json.loads((tmp_path / "mine_gallery_h200_plan.json").read_text())
    assert [(t["workload"], t["proposer"]) for t in p["targets"]] == [
        ("layernorm_cg", "versions"), ("reduce_blocks", "versions"), ("softmax_online", "rules")]
    for t in p["targets"]:
        assert t["mechanisms"] and t["termination"] in ("complete", "no_proposal")
        if t["proposer"] == "versions":
            assert t["rungs"]["fraction"] >= 0.8
    ln = p["targets"][0]
    assert ln["domain"] == {"multiple_of": {"C": 4}, "aligned_bytes": 16} and ln["shapes_gated"] == 7
    assert p["targets"][1]["launch"] == {"threads": [256, 128, 512, 1024]}
    assert p["kernels_to_build"] >= sum(len(t["mechanisms"]) for t in p["targets"])


def test_the_gallery_run_replays_to_the_recorded_library_or_its_plan_is_sound(tmp_path, monkeypatch):
    if DUMP.is_file():
        _replay(tmp_path, monkeypatch)
    else:  # no device run recorded yet: what the run will do, computed without a GPU
        _plan(tmp_path)
