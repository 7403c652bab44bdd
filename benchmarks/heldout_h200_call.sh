#!/usr/bin/env bash
# One device call of the held-out run, carried with [".whlh", ".whlg"] (benchmarks/device_site.sh h g):
#   bash benchmarks/heldout_h200_call.sh TAG [heldout_h200.py options ...]
# The structural check (pipelines/heldout_structural.toml), every call the same command with its own
# TAG (call1, call2, ...), each seeded with the records of the calls before, on one GPU model:
#   bash benchmarks/heldout_h200_call.sh call1 --config pipelines/heldout_structural.toml \
#        --seed-recorded benchmarks/results/heldout_structural_h100 --time-limit 470
# The check without structural rewrites, family by family, then `all` seeded with every family's file:
#   bash benchmarks/heldout_h200_call.sh gemm --families gemm --time-limit 520
#   bash benchmarks/heldout_h200_call.sh attention --families attention --time-limit 520 \
#        --seed-recorded benchmarks/results/heldout_h200/heldout_h200_gemm.jsonl.gz
# Unpacks the carried site, runs benchmarks/heldout_h200.py --prebuild --out $OUT/h --tag TAG with the
# options given, logs to $OUT/h/<prefix>_TAG.log (rc last; <prefix> names the card, heldout_h100 on an
# H100) and prints the log's tail. Copy $OUT/h into the records folder afterwards (evaluations, front-end
# answers, rows, the reference's tuned configurations, environment.json, the call's json and log).
set -u
tag=${1:?usage: heldout_h200_call.sh TAG [heldout_h200.py options]}
shift
out=${OUT:?set OUT to the output folder of the device call}/h
mkdir -p "$out"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)" in
  *H100*) log="$out/heldout_h100_$tag.log" ;;
  *) log="$out/heldout_h200_$tag.log" ;;
esac
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
