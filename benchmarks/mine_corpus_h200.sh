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
# Nothing is prebuilt by default (the kernels are built as the run reaches them). PREBUILD=1 builds
# the not-yet-recorded kernels of the workloads in PREBUILD_ONLY (default fmha,gdn) in parallel first,
# as the first calls of the merged run did; PREBUILD=all builds their recorded ones too, for when
# their analysis runs again (a probe set that changed re-keys every probe evaluation of a workload).
only=${PREBUILD_ONLY:-fmha,gdn}
pre=()
case "${PREBUILD:-0}" in
  1) pre=(--prebuild --prebuild-only "$only") ;;
  all) pre=(--prebuild --prebuild-all --prebuild-only "$only") ;;
esac
timeout "$limit" python3 benchmarks/mine_h200.py --config pipelines/mine.toml --seed-recorded --runs 1 \
  "${pre[@]}" --out "$out" > "$out.log" 2>&1
echo "rc=$?" >> "$out.log"
tail -20 "$out.log"
rm -f "$out/mine_h200.duckdb"
gzip -f "$out"/*.jsonl
