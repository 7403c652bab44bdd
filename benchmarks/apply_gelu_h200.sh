#!/usr/bin/env bash
# One device call of pipelines/apply_gelu.toml (the CPU apply demo's records): the pipeline live on the
# GPU into a copy of the shipped library, then gelu's evaluations exported for `--replay`.
#   bash benchmarks/apply_gelu_h200.sh OUTDIR     (on the GPU machine; carry .whlx, built by
#                                                  benchmarks/device_site.sh x; about 3 minutes)
# It writes OUTDIR/apply_gelu_pipeline_CARD.jsonl.gz, CARD the card it ran on (h100, h200). Back here:
# copy it into benchmarks/results/ and name it in apply.records of pipelines/apply_gelu.toml (removing
# the record it replaces); then
#   klineage run pipelines/apply_gelu.toml --db COPY_OF_skills_db/skills.duckdb --replay
# replays it on any machine (tests/cli/test_readme.py checks it once the file is there).
set -uo pipefail
out=$1
python3 -c "import tarfile; tarfile.open('.whlx/site.tar.xz').extractall('/tmp')" || exit 1
export PYTHONPATH=/tmp/site:$PWD
mkdir -p "$out"
cp skills_db/skills.duckdb "$out/lib.duckdb"
python3 -m klineage.cli run pipelines/apply_gelu.toml --db "$out/lib.duckdb" --json > "$out/apply_gelu.json" 2> "$out/apply_gelu.log"
echo "rc=$?" >> "$out/apply_gelu.log"
python3 - "$out" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "benchmarks")
from klineage.store import open_store
from klineage.workload import load_workload
from record_names import named
out = Path(sys.argv[1])
store = open_store(out / "lib.duckdb")
wl = load_workload("apply_workloads/gelu").content_hash
gpus = sorted({r.get("gpu") for r in store.find_evaluations(workload_hash=wl) if r.get("gpu")})
if len(gpus) != 1:
    sys.exit(f"gelu's evaluations name the GPUs {gpus}: expected the one this run measured on")
name = named("apply_gelu_pipeline_{card}.jsonl.gz", gpus[0])
n = store.export_evaluations(out / name, workload_hash=wl)
store.close()
print(f"{n} gelu evaluations exported to {name}")
PY
rm -f "$out/lib.duckdb"
tail -5 "$out/apply_gelu.log"
