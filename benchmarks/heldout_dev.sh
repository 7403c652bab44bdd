#!/usr/bin/env bash
# Every held-out instance's start kernels through benchmarks/kernel_dev.py (build, check on every
# benchmark and probe shape with the gate's correctness rule, time against the instance's FlagGems
# reference), one process per kernel, on a GPU machine:
#   bash benchmarks/heldout_dev.sh OUTDIR [INSTANCE_GLOB] [extra kernel_dev args]
set -uo pipefail
out=$1; glob=${2:-*}; shift $(( $# >= 2 ? 2 : 1 ))
mkdir -p "$out"
for d in heldout/$glob/; do
  d=${d%/}
  [ -f "$d/workload.py" ] || continue
  starts=$(python3 -c "from klineage.workload import load_workload; m=load_workload('$d').module; print(' '.join(getattr(m, 'STARTS', {}).values()))")
  for k in $starts; do
    echo "== $(basename "$d") $(basename "$k")"
    timeout 150 python3 benchmarks/kernel_dev.py "$d" "heldout/$k" --reps 10 --out "$out/$(basename "$d")" "$@" 2>&1 | grep -v "^\s*$"
  done
done
