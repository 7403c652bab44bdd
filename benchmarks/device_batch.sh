#!/usr/bin/env bash
# Several benchmark commands in one device call, the carried site unpacked once:
#   bash benchmarks/device_batch.sh NAME 'COMMAND' [NAME 'COMMAND' ...]
# Each COMMAND runs from the repository root with PYTHONPATH=/tmp/site:$PWD and W=$OUT/work/NAME (an
# empty folder for what it writes); its output goes to $W/log (exit status last). The site comes from
# whichever of .whlx/site.tar.xz or .whlh/site.tar.xz was carried, plus the wheels of .whlg/ and .whlf/
# (benchmarks/device_site.sh builds them). The device returns at most 8 files, so everything under
# $OUT/work is packed into $OUT/batch.tar.gz at the end (also when a command fails: the next one runs);
# unpack it here with `tar -xzf batch.tar.gz` and copy each record where its script says.
set -u
out=${OUT:?set OUT to the output folder of the device call}
mkdir -p "$out/work"
{
  for t in .whlx/site.tar.xz .whlh/site.tar.xz; do
    [ -f "$t" ] && { python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall('/tmp')" "$t"; break; }
  done
  ls .whlg/*.whl .whlf/*.whl >/dev/null 2>&1 &&
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whlg/*.whl .whlf/*.whl 2>/dev/null
  true
} > "$out/work/site.log" 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit \
  --format=csv,noheader > "$out/work/gpu.txt" 2>&1
status=0
while [ $# -ge 2 ]; do
  name=$1 cmd=$2
  shift 2
  W="$out/work/$name"
  mkdir -p "$W"
  export W
  t0=$(date +%s)
  bash -c "$cmd" > "$W/log" 2>&1
  rc=$?
  echo "rc=$rc wall_s=$(( $(date +%s) - t0 ))" >> "$W/log"
  echo "== $name: rc=$rc in $(( $(date +%s) - t0 )) s"
  tail -8 "$W/log"
  [ $rc -eq 0 ] || status=1
done
(cd "$out" && tar -czf batch.tar.gz work && rm -rf work)
exit $status
