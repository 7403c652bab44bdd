#!/usr/bin/env bash
# One device call of the corpus run (pipelines/mine.toml), continued from the shipped records:
#   bash benchmarks/mine_corpus_h200.sh OUTDIR [SECONDS]        (on the GPU machine; carry .whlx and .whlf,
#                                                            built by benchmarks/device_site.sh x f)
# SECONDS (default 550) stays under the call's limit, so the run is cut by `timeout` and exports what
# it measured. Back here: python benchmarks/merge_records.py OUTDIR/mine_h200.jsonl.gz
#                          skills_db/evaluations/mine_part2_h200.jsonl.gz
set -uo pipefail
out=$1; limit=${2:-550}
python3 -c "import tarfile; tarfile.open('.whlx/site.tar.xz').extractall('/tmp')" || exit 1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whlf/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD FLA_FLASH_QLA=0
mkdir -p "$out"
# Every evaluation of the run is recorded by now (the call replays it all and measures nothing), so
# there is nothing to prebuild: set PREBUILD=1 to build not-yet-recorded kernels of fmha and gdn in
# parallel first, as the first calls of the merged run did.
pre=(); [ "${PREBUILD:-0}" = 1 ] && pre=(--prebuild --prebuild-only fmha,gdn)
timeout "$limit" python3 benchmarks/mine_h200.py --config pipelines/mine.toml --seed-recorded --runs 1 \
  "${pre[@]}" --out "$out" > "$out.log" 2>&1
echo "rc=$?" >> "$out.log"
tail -20 "$out.log"
rm -f "$out/mine_h200.duckdb"
gzip -f "$out"/*.jsonl
