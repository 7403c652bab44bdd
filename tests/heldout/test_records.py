"""What a recorded held-out run carries (klineage.heldout.records): the library record, the replay
check's reasons, and the held-out page's table (docs/heldout.md) against the committed report."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from klineage.errors import InputError
from klineage.heldout.records import (LIBRARY_SUFFIX, adopt_library, find_library_record, read_library_record,
                                      replay_check, write_library_record)
from klineage.report.text import heldout_markdown
from klineage.store import open_store

ROOT = Path(__file__).resolve().parents[2]
H200 = ROOT / "benchmarks" / "results" / "heldout_h200"


@pytest.fixture()
def small_library(tmp_path):
    """A copy of the shipped library cut to three skills (a library of its own, with its own hash)."""
    db = tmp_path / "small.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    store = open_store(db)
    store.put_skills(store.skills()[:3])
    yield store
    store.close()


def test_a_library_record_round_trips_and_is_checked(small_library, tmp_path):
    corpus = {"root": "expert_kernels", "files": {"expert_kernels/a/expert.cu": "__global__ void k() {}\n"}}
    rec_path = tmp_path / f"r{LIBRARY_SUFFIX}"
    got = write_library_record(small_library, rec_path, corpus)
    assert got == {"hash": small_library.library_hash(), "skills": 3, "lineages": len(small_library.lineages()),
                   "corpus_files": 1}
    rec = read_library_record(rec_path)
    assert rec["dump"] == small_library.canonical_dump() and rec["corpus"] == corpus
    assert find_library_record([tmp_path]) == rec_path
    # a record whose dump was edited no longer matches its hash
    bad = json.loads(gzip.decompress(rec_path.read_bytes()))
    bad["dump"]["skills"][0]["name"] = "edited"
    (tmp_path / "bad").mkdir()
    bad_path = tmp_path / "bad" / f"b{LIBRARY_SUFFIX}"
    bad_path.write_bytes(gzip.compress(json.dumps(bad).encode()))
    with pytest.raises(InputError, match="does not match its hash"):
        read_library_record(bad_path)
    # two records of different libraries in the records: which one the run measured is not guessed
    other = open_store(tmp_path / "other.duckdb")
    try:
        write_library_record(other, tmp_path / f"o{LIBRARY_SUFFIX}", corpus)
    finally:
        other.close()
    with pytest.raises(InputError, match="different libraries"):
        find_library_record([tmp_path])
    assert find_library_record([tmp_path / "none"]) is None


def test_adopting_a_library_keeps_the_databases_own(small_library, tmp_path):
    src = tmp_path / "shipped.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", src)
    store = open_store(src)
    try:
        write_library_record(store, tmp_path / f"s{LIBRARY_SUFFIX}", {"root": "x", "files": {}})
    finally:
        store.close()
    rec = read_library_record(tmp_path / f"s{LIBRARY_SUFFIX}")
    own = small_library.library_hash()
    said = adopt_library(small_library, rec)
    n = len(rec["dump"]["skills"])  # the shipped library's
    assert said.startswith(f"library: the replay uses the recorded library {rec['hash'][:16]} ({n} skills")
    backup = Path(str(small_library.path)).with_name(f"small.duckdb.library-{own[:16]}.json.gz")
    assert str(backup) in said
    assert json.loads(gzip.decompress(backup.read_bytes()))["hash"] == own
    assert small_library.library_hash() == rec["hash"]
    assert adopt_library(small_library, rec) is None  # already the recorded library: nothing to say
    # an empty database takes the library with nothing to save
    empty = open_store(tmp_path / "empty.duckdb")
    try:
        said = adopt_library(empty, rec)
        assert "saved" not in said and empty.library_hash() == rec["hash"]
    finally:
        empty.close()


def _report(rows: dict) -> dict:
    return {"run_id": "r", "instances": [{"instance": i, "conditions": conds} for i, conds in rows.items()]}


def test_replay_check_names_what_differs():
    steps = [{"backend": "sweep", "config": {"T": 128}, "status": "PASSED"},
             {"backend": "sweep", "config": {"T": 256}, "status": "PASSED"}]
    row = {"status": "PASSED", "speedup": 1.0, "produced_hash": "a", "flags": [], "final_eval_keys": ["k"],
           "arms": [{"arm": "sweep", "apply_run": "x", "steps": steps}]}
    want = _report({"i": {"skills": row, "idiom": row}})
    assert replay_check(want, json.loads(json.dumps(want)))["same"]
    close = json.loads(json.dumps(want))
    close["instances"][0]["conditions"]["skills"]["speedup"] = 1.0 + 1e-12  # a sum's last bit
    assert replay_check(want, close)["same"]
    got = json.loads(json.dumps(want))
    g = got["instances"][0]["conditions"]["skills"]
    g["arms"][0]["steps"][1]["config"] = {"T": 512}
    g["produced_hash"], g["flags"] = "b", ["-DT=512"]
    chk = replay_check(want, got)
    assert not chk["same"] and [d["condition"] for d in chk["diverged"]] == ["skills"]
    why = chk["diverged"][0]["why"]
    assert why[0] == ('the search first differs at sweep step 2 (config): recorded {"config": {"T": 256}}, '
                      'replayed {"config": {"T": 512}}')
    assert why[1] == "final kernel: recorded flags [], replayed ['-DT=512']"
    miss = json.loads(json.dumps(want))
    miss["instances"][0]["conditions"]["idiom"] = {"status": "MISSING", "reason": "no recorded evaluation of ..."}
    why = replay_check(want, miss)["diverged"][0]["why"]
    assert why[0] == "status PASSED recorded, MISSING replayed (no recorded evaluation of ...)"
    fewer = _report({"i": {"skills": row}})
    assert replay_check(want, fewer)["diverged"] == [{"instance": "i", "condition": "idiom",
                                                      "why": ["recorded, not replayed"]}]


def test_the_readme_states_the_recorded_held_out_results():
    """The held-out page's table (docs/heldout.md, linked from the README) is the one the committed
    report gives, verbatim, and no figure of an earlier run stands beside it."""
    report = json.loads((H200 / "report" / "heldout.json").read_text())
    readme = (ROOT / "docs" / "heldout.md").read_text()
    assert heldout_markdown(report) in readme
    assert "| overall (22) | 0.685x | 0.754x | 0.751x | 0.757x | 4 of 22 |" in heldout_markdown(report)
    assert "one_round" not in readme and not (H200 / "report_one_round").exists()
