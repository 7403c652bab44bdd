#!/usr/bin/env bash
# One device call of benchmarks/apply_naive_gpu.py (`klineage apply`, budget 12, on every naive kernel of
# apply_workloads/'s matrix-product, reduction, softmax and normalisation classes, spread over the
# machine's GPUs), carried with [".whlh"] (benchmarks/device_site.sh h):
#   OUT=... bash benchmarks/apply_naive_gpu.sh [apply_naive_gpu.py options]
# Writes $OUT/apply_naive (the record apply_naive_<card>.json, evals/, runs.tar.gz) and logs to
# $OUT/apply_naive/apply_naive_gpu.log (rc last), whose tail it prints. Copy $OUT/apply_naive into
# benchmarks/results/apply_naive/ afterwards and unpack runs.tar.gz there (the runs' trajectories);
# tests/check_apply_naive_record.py replays it.
set -u
out=${OUT:?set OUT to the output folder of the device call}/apply_naive
mkdir -p "$out"
log="$out/apply_naive_gpu.log"
python3 -c "import tarfile; tarfile.open('.whlh/site.tar.xz').extractall('/tmp')" > "$log" 2>&1 \
  || { echo "site unpack failed"; tail -20 "$log"; exit 2; }
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi -L >> "$log" 2>&1
python3 benchmarks/apply_naive_gpu.py --out "$out" "$@" >> "$log" 2>&1
rc=$?
echo "rc=$rc" >> "$log"
tail -45 "$log"
exit $rc
