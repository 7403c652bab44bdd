"""`klineage run PIPELINE.toml`: strict validation of mine, apply and heldout pipelines (an unknown key is an
error naming the key), the apply kind end to end with recorded evaluations, the run recorded with its
configuration. The corpus replay through `run` is tests/test_shipped_library.py's fixture."""
from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from klineage.cli import main
from klineage.lineage.mine import load_config
from klineage.pipelines import load_pipeline

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
from record_names import card, card_of  # noqa: E402

# the records `--replay` of pipelines/apply_gelu.toml imports, named by the card they were made on
APPLY_GELU_PATTERN = "apply_gelu_pipeline_{card}.jsonl.gz"
APPLY_GELU_RECORD = load_pipeline(ROOT / "pipelines" / "apply_gelu.toml").run.records[0]


def _write(tmp_path: Path, text: str) -> Path:
    d = tmp_path / "pipelines"
    d.mkdir(exist_ok=True)
    p = d / "p.toml"
    p.write_text(text)
    return p


def test_mine_pipeline_is_the_mine_configuration():
    pl = load_pipeline(ROOT / "pipelines" / "mine.toml")
    run, _ = load_config(ROOT / "pipelines" / "mine.toml")
    assert pl.kind == "mine" and pl.name == "corpus"
    assert [(t.workload_dir, t.proposer) for t in pl.run.targets] == [(t.workload_dir, t.proposer) for t in run.targets]
    assert pl.run.analysis == run.analysis and pl.run.timing == run.timing


@pytest.mark.parametrize("text,needle", [
    ('kind = "mine"\nbogus = 1\n[[target]]\npaths = ["expert_kernels"]\n', "unknown key 'bogus'"),
    ('kind = "heldout"\nbogus = 1\n', "unknown key 'bogus'"),
    ('kind = "held-out"\n', "kind = 'held-out'"),
    ('kind = "heldout"\n[heldout]\nbudget = "many"\n', "heldout.budget = 'many'"),
    ('kind = "heldout"\n[heldout]\nconditions = ["skills", "magic"]\n', "'magic' is not one of"),
    ('kind = "heldout"\n[gate]\ntrials = 1\n', "gate.trials = 1"),
    ('kind = "apply"\n[apply]\nworkload = "apply_workloads/gelu"\nstart = "apply_workloads/gelu/naive.cu"\nspeed = 2\n',
     "unknown key apply.speed"),
    ('kind = "apply"\nextra = 1\n[apply]\nworkload = "x"\nstart = "y"\n', "unknown key 'extra'"),
    ('kind = "apply"\n', "needs an [apply] table"),
    ('kind = "apply"\n[apply]\nworkload = "apply_workloads/gelu"\n', "apply.start is required"),
    ('kind = "apply"\n[apply]\nworkload = "nowhere"\nstart = "apply_workloads/gelu/naive.cu"\n', "no workload.py there"),
    ('kind = "apply"\n[apply]\nworkload = "apply_workloads/gelu"\nstart = "apply_workloads/gelu/naive.cu"\n'
     'materializers = ["magic"]\n', "'magic' is not one of"),
    ('kind = "apply"\n[apply]\nworkload = "apply_workloads/gelu"\nstart = "apply_workloads/gelu/naive.cu"\n'
     'budget_steps = "many"\n', "apply.budget_steps = 'many'"),
    ('kind = "apply"\n[gate]\nwarm = 1\n[apply]\nworkload = "apply_workloads/gelu"\n'
     'start = "apply_workloads/gelu/naive.cu"\n', "unknown key gate.warm"),
    ("kind = [\n", "not valid TOML"),
])
def test_bad_pipelines_name_the_key(tmp_path, text, needle):
    p = _write(tmp_path, text)
    # relative paths resolve from the folder above pipelines/: point it at the repository
    for name in ("apply_workloads", "expert_kernels"):
        (tmp_path / name).symlink_to(ROOT / name)
    with pytest.raises(Exception) as e:
        load_pipeline(p)
    assert needle in str(e.value)
    r = CliRunner().invoke(main, ["run", str(p), "--db", str(tmp_path / "x.duckdb")])
    assert r.exit_code != 0 and needle in r.output


def test_apply_pipeline_loads_its_configuration():
    pl = load_pipeline(ROOT / "pipelines" / "apply_gelu.toml")
    assert pl.kind == "apply" and pl.run.workload == ROOT / "apply_workloads" / "gelu"
    assert pl.run.config.materializers == ("rules", "sweep") and pl.run.config.budget_steps == 8
    assert not pl.run.config.admission
    assert pl.run.records == [APPLY_GELU_RECORD] and APPLY_GELU_RECORD.parent == ROOT / "benchmarks" / "results"
    card_of(APPLY_GELU_RECORD, APPLY_GELU_PATTERN)  # named by its card
    assert pl.run.gate == {"warmup": 5, "reps": 25, "trials": 3} and pl.run.out == ROOT / "out" / "apply_gelu"


def test_apply_pipeline_without_a_gpu_stops_with_the_reason_and_records_the_run(tmp_path):
    db = tmp_path / "lib.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    p = _write(tmp_path, 'kind = "apply"\nname = "t"\n[apply]\nworkload = "apply_workloads/gelu"\n'
                         'start = "apply_workloads/gelu/naive.cu"\n')
    (tmp_path / "apply_workloads").symlink_to(ROOT / "apply_workloads")
    r = CliRunner().invoke(main, ["run", str(p), "--db", str(db), "--replay"])
    # nothing of gelu is recorded yet: the replay says which evaluation is missing
    assert r.exit_code != 0 and "recorded" in r.output.lower()
    from klineage.store import open_store
    store = open_store(db)
    try:
        (rec,) = [r for r in store.pipeline_runs() if r["name"] == "t"]  # the shipped copy holds its own build run
        assert rec["kind"] == "apply" and rec["outcome"] == "failed"
    finally:
        store.close()


@pytest.mark.nvcc
def test_the_apply_pipeline_replays_from_its_records(tmp_path):
    """The CPU demo of apply: `klineage run pipelines/apply_gelu.toml --replay` on a copy of the library,
    from the records benchmarks/apply_gelu_h200.sh made (named by the card they were made on)."""
    assert APPLY_GELU_RECORD.is_file() and APPLY_GELU_RECORD.stat().st_size > 0, (
        f"{APPLY_GELU_RECORD.name} is missing: record it with `bash benchmarks/apply_gelu_h200.sh $OUT` (one "
        "device call, carry .whlx) and point apply.records of pipelines/apply_gelu.toml at it")
    gpus = {json.loads(line).get("gpu") for line in gzip.decompress(APPLY_GELU_RECORD.read_bytes()).splitlines()}
    live = sorted(g for g in gpus if g)
    assert len(live) == 1 and card(live[0]) == card_of(APPLY_GELU_RECORD, APPLY_GELU_PATTERN), (
        f"{APPLY_GELU_RECORD.name} holds evaluations made on {live}: name it by that card")
    db = tmp_path / "lib.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    r = CliRunner().invoke(main, ["run", str(ROOT / "pipelines" / "apply_gelu.toml"), "--db", str(db), "--replay",
                                  "--json"])
    assert r.exit_code == 0, r.output[-3000:]
    out = json.loads(r.output)
    assert out["outcome"] == "ok" and out["result"]["stop_reason"] in ("budget_steps", "no_candidates")
    assert out["result"]["summary"]["kept"]
