#!/usr/bin/env bash
# One device call of the held-out run with one process per family at once on the machine's one GPU,
# carried with [".whlh", ".whlg"] (benchmarks/device_site.sh h g):
#   bash benchmarks/heldout_h200_split.sh TAG FAMILY[/N][,FAMILY[/N]...] [heldout_h200.py options ...]
# e.g. the structural check's attention and reductions, seeded with the calls before:
#   bash benchmarks/heldout_h200_split.sh call3 attention,reduction --config pipelines/heldout_structural.toml \
#        --seed-recorded benchmarks/results/heldout_structural_h100 --time-limit 470
# Each family F runs `benchmarks/heldout_h200.py --prebuild --families F --tag TAG_F` with a database and
# an output folder of its own and an equal share of the cores heldout_h200.py gives its background
# builds; F/N runs N processes, `--shard K/N` (every N-th instance by name, tag TAG_F-KofN), for the
# family whose instances take longest. The processes share the GPU's lock (KLINEAGE_GPU_LOCK,
# klineage.gate.worker.GpuLock: a gate worker times only while no other process's kernel is on the
# card; correctness calls may overlap) and FlagGems' cache folder (the seeded tuned configurations
# unpacked once before them, packed once after them). A later call takes the rows these decided
# whichever way it is split (heldout_h200.py run_key: the configuration and library; the code too).
# Writes $OUT/h/TAG.tar.gz (every family's files as heldout_h200_call.sh writes them, their logs,
# environment.json and the reference's tuned configurations) and $OUT/h/<prefix>_TAG.log (each
# family's exit status, then each log's tail). Afterwards:
#   tar -xzf $FILES/h/TAG.tar.gz -C benchmarks/results/heldout_structural_h100
# Exit status: 1 when a family failed, else 3 when a time limit cut one, else 0.
set -u
tag=${1:?usage: heldout_h200_split.sh TAG FAMILY[/N][,FAMILY[/N]...] [heldout_h200.py options]}
fams=${2:?usage: heldout_h200_split.sh TAG FAMILY[/N][,FAMILY[/N]...] [heldout_h200.py options]}
shift 2
out=${OUT:?set OUT to the output folder of the device call}/h
mkdir -p "$out"
case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)" in
  *H100*) prefix=heldout_h100 ;;
  *) prefix=heldout_h200 ;;
esac
log="$out/${prefix}_$tag.log"
{
  python3 -c "import tarfile; tarfile.open('.whlh/site.tar.xz').extractall('/tmp')" &&
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whlg/*.whl
} > "$log" 2>&1 || { echo "site unpack failed"; tail -20 "$log"; exit 2; }
export PYTHONPATH=/tmp/site:$PWD
work=$(mktemp -d /tmp/klineage-split-XXXXXX)
export KLINEAGE_GPU_LOCK="$work/gpu.lock"
export FLAGGEMS_CACHE_DIR="$work/flaggems"
mkdir -p "$FLAGGEMS_CACHE_DIR"
# the seeded tuned configurations, once, before any process reads the folder
python3 - "$@" >> "$log" 2>&1 <<'EOF'
import sys
sys.path.insert(0, "benchmarks")
from pathlib import Path
from heldout_h200 import load_reference_cache
args, seeds = sys.argv[1:], []
if "--seed-recorded" in args:
    for a in args[args.index("--seed-recorded") + 1:]:
        if a.startswith("--"):
            break
        seeds.append(a)
load_reference_cache(seeds)
EOF
# one process per name: FAMILY, or FAMILY-KofN for part K of N of a family
names=() fam=() part=()
IFS=, read -ra entries <<< "$fams"
for e in "${entries[@]}"; do
  case $e in
    */*) f=${e%/*} n=${e#*/}
         [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "heldout_h200_split.sh: $e: write FAMILY/N with N a count" >&2; exit 2; }
         for k in $(seq 1 "$n"); do names+=("$f-${k}of$n"); fam+=("$f"); part+=("$k/$n"); done ;;
    *) names+=("$e"); fam+=("$e"); part+=("") ;;
  esac
done
jobs=$(( ($(nproc) - 4) / ${#names[@]} )); [ "$jobs" -lt 1 ] && jobs=1
pids=()
for i in "${!names[@]}"; do
  name=${names[$i]} shard=()
  [ -n "${part[$i]}" ] && shard=(--shard "${part[$i]}")
  mkdir -p "$work/out_$name"
  python3 benchmarks/heldout_h200.py --prebuild --out "$work/out_$name" --tag "${tag}_$name" --families "${fam[$i]}" \
    "${shard[@]}" --db "$work/$name.duckdb" --build-jobs "$jobs" "$@" > "$work/out_$name/${prefix}_${tag}_$name.log" 2>&1 &
  pids+=($!)
done
failed=0 cut=0
for i in "${!names[@]}"; do
  wait "${pids[$i]}"
  rc=$?
  echo "${names[$i]}: rc=$rc" >> "$log"
  case $rc in 0) ;; 3) cut=1 ;; *) failed=1 ;; esac
done
# one copy of what every process wrote alike: the environment (the first family's), the tuned
# configurations (the shared folder, as the last process left it)
first=${names[0]}
mkdir -p "$work/pack"
for f in "${names[@]}"; do
  rm -rf "$work/out_$f/flaggems_config_cache.tar.gz" "$work/out_$f/report"  # a family's report: the replay writes the run's
  [ "$f" = "$first" ] || rm -f "$work/out_$f/environment.json"
  cp -r "$work/out_$f/." "$work/pack/"
done
python3 -c "import sys; sys.path.insert(0, 'benchmarks'); from pathlib import Path; \
from heldout_h200 import save_reference_cache; save_reference_cache(Path('$FLAGGEMS_CACHE_DIR'), Path('$work/pack'))" >> "$log" 2>&1
(cd "$work/pack" && tar -czf "$out/$tag.tar.gz" .)
for f in "${names[@]}"; do
  echo "== $f" >> "$log"
  tail -25 "$work/out_$f/${prefix}_${tag}_$f.log" >> "$log"
done
tail -70 "$log"
[ $failed -eq 1 ] && exit 1
[ $cut -eq 1 ] && exit 3
exit 0
