"""The style gallery mined live on a GPU (benchmarks/mine_gallery_h200.py), replayed here.

The device run's records (benchmarks/results/mine_gallery_<card>/, named by the card it ran on: its
evaluations, its summary and the canonical dump of the library it stored) must be committed: replaying
pipelines/mine_gallery.toml from them on this CPU-only machine must give the lineages and skills the
GPU run stored, with no evaluation missing. A missing or empty record fails. The script's dry plan
(the same configuration walked with the real proposers and audit and the gate scripted to pass) is
checked apart."""
import gzip
import json
import sys
from pathlib import Path

from click.testing import CliRunner

from klineage.cli import main
from klineage.store import open_store

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "pipelines" / "mine_gallery.toml"
sys.path.insert(0, str(ROOT / "benchmarks"))
import mine_gallery_h200  # noqa: E402
from record_names import card, card_of, the_record  # noqa: E402

RECORD_IT = ("record it in one device call (carry .whlx): the command in benchmarks/mine_gallery_h200.py's "
             "docstring, then commit its --out folder as benchmarks/results/mine_gallery_<card>/")


def _canonical(obj) -> dict:
    return json.loads(json.dumps(obj, sort_keys=True, default=str))


def test_the_gallery_run_replays_to_the_recorded_library(tmp_path, monkeypatch):
    records = the_record(ROOT / "benchmarks" / "results", mine_gallery_h200.STEM, RECORD_IT)
    stem = records.name
    for suffix in (".json", ".jsonl.gz", "_dump.json.gz"):
        f = records / f"{stem}{suffix}"
        assert f.is_file() and f.stat().st_size > 0, f"{f.relative_to(ROOT)} is missing or empty: {RECORD_IT}"
    recorded = json.loads((records / f"{stem}.json").read_text())
    gpu = (recorded.get("env") or {}).get("gpu") or ""
    assert not recorded.get("interrupted") and gpu.startswith(("NVIDIA H200", "NVIDIA H100")), (gpu, RECORD_IT)
    assert card_of(records, mine_gallery_h200.STEM) == card(gpu), f"{stem} was recorded on {gpu}: name it by that card"
    monkeypatch.setenv("KLINEAGE_RECORDED", str(records))
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
    device = _canonical(json.loads(gzip.decompress((records / f"{stem}_dump.json.gz").read_bytes())))
    assert device["lineages"] and device["skills"]
    assert mine["lineages"] == device["lineages"]
    assert mine["skills"] == device["skills"]


def test_the_dry_plan_of_the_gallery_run_is_sound(tmp_path):
    """What the live run does, computed without a GPU."""
    assert mine_gallery_h200.main(["--dry-plan", "--out", str(tmp_path)]) == 0
    p = json.loads((tmp_path / "mine_gallery_plan.json").read_text())
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
