#!/usr/bin/env bash
# One device call of the admission roundtrips the records lack, carried with [".whlh", ".whlg"]
# (benchmarks/device_site.sh h g; flag-gems is the held-out targets' reference):
#   bash benchmarks/admission_h200.sh [PLAN] [SECONDS]
# PLAN defaults to benchmarks/results/admission_h200/admission_h200_plan.json.gz (made on a CPU machine
# by `python benchmarks/admission_h200.py --plan`); SECONDS (default 540) keeps the call inside its
# limit: a cut run exports what it measured. Writes $OUT/a (records, the call's json and log).
# Back here: cp $OUT/a/admission_h200.jsonl.gz skills_db/evaluations/ and replay the corpus run.
set -u
plan=${1:-benchmarks/results/admission_h200/admission_h200_plan.json.gz}
limit=${2:-540}
out=${OUT:?set OUT to the output folder of the device call}/a
mkdir -p "$out"
log="$out/admission_h200.log"
{
  python3 -c "import tarfile; tarfile.open('.whlh/site.tar.xz').extractall('/tmp')" &&
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whlg/*.whl
} > "$log" 2>&1 || { echo "site unpack failed"; tail -20 "$log"; exit 2; }
export PYTHONPATH=/tmp/site:$PWD
python3 benchmarks/admission_h200.py --run "$plan" --out "$out" --time-limit "$limit" >> "$log" 2>&1
rc=$?
echo "rc=$rc" >> "$log"
tail -40 "$log"
exit $rc
