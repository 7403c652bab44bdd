#!/usr/bin/env bash
# Every rung of one workload's ladder through benchmarks/kernel_dev.py, one process per kernel (a
# crashing kernel cannot take the others down), on a GPU machine:
#   bash benchmarks/dev_ladder.sh expert_kernels/WORKLOAD OUTDIR [extra kernel_dev args for the expert]
set -uo pipefail
wl=$1; out=$2; shift 2
mkdir -p "$out"
for f in "$wl"/naive.cu "$wl"/versions/*.cu "$wl"/expert.cu; do
  extra=()
  [ "$f" = "$wl/expert.cu" ] && extra=("$@")
  timeout 120 python3 benchmarks/kernel_dev.py "$wl" "$f" --reps 10 --out "$out" "${extra[@]}" 2>&1 | grep -v "^\s*$"
done
