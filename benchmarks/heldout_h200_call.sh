#!/usr/bin/env bash
# One device call of the held-out run, carried with [".whlh", ".whlg"] (benchmarks/device_site.sh h g):
#   bash benchmarks/heldout_h200_call.sh TAG [heldout_h200.py options ...]
#   bash benchmarks/heldout_h200_call.sh gemm --families gemm --time-limit 520
#   bash benchmarks/heldout_h200_call.sh attention --families attention --time-limit 520 \
#        --seed-recorded benchmarks/results/heldout_h200/heldout_h200_gemm.jsonl.gz
#   ... and last, without --families, seeded with every family's file: `all`, which writes report/ for the
#   22 instances and exports all their records (heldout_h200_all.jsonl.gz replaces the family files).
# Unpacks the carried site, runs benchmarks/heldout_h200.py --prebuild --out $OUT/h --tag TAG with the
# options given, logs to $OUT/h/heldout_h200_TAG.log (rc last) and prints the log's tail. Copy $OUT/h into
# benchmarks/results/heldout_h200/ afterwards (records, environment.json, the call's json and log, report/).
set -u
tag=${1:?usage: heldout_h200_call.sh TAG [heldout_h200.py options]}
shift
out=${OUT:?set OUT to the output folder of the device call}/h
mkdir -p "$out"
log="$out/heldout_h200_$tag.log"
{
  python3 -c "import tarfile; tarfile.open('.whlh/site.tar.xz').extractall('/tmp')" &&
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whlg/*.whl
} > "$log" 2>&1 || { echo "site unpack failed"; tail -20 "$log"; exit 2; }
export PYTHONPATH=/tmp/site:$PWD
python3 benchmarks/heldout_h200.py --prebuild --out "$out" --tag "$tag" "$@" >> "$log" 2>&1
rc=$?
echo "rc=$rc" >> "$log"
tail -45 "$log"
exit $rc
