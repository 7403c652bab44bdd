#!/usr/bin/env bash
# Keep a device call's carried tree under its 64 MiB limit: the tracked tree (~28 MB, most of it
# recorded results) plus a carried site (.whlx ~38 MiB, .whlh + .whlg ~42 MiB) is over it, and a
# device call sends every tracked file. `on` takes the named paths out of git's index (the files stay
# on disk, untouched) and ignores them, so they do not travel; `off` puts the index back as HEAD has
# it and drops the ignore lines. Run `off` after the call, before any commit.
#   benchmarks/device_slim.sh on [PATH ...]   default: benchmarks/results skills_db/evaluations skills_db/compile_checks.jsonl
#   benchmarks/device_slim.sh off
#   benchmarks/device_slim.sh size            what would travel now, in MiB (tracked + untracked, not ignored)
# A call whose script reads one of these paths names it on the command line instead: on keep/this/path.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
exclude=$(git rev-parse --git-path info/exclude)
begin="# device_slim: begin" end="# device_slim: end"
size() {
  git ls-files -z --cached --others --exclude-standard | xargs -0 -r du -cb 2>/dev/null | tail -1 |
    awk '{printf "%.1f MiB in the tree that travels (carried folders not counted)\n", $1 / 1048576}'
}
case "${1:-}" in
  on)
    shift
    paths=("$@"); [ ${#paths[@]} -eq 0 ] && paths=(benchmarks/results skills_db/evaluations skills_db/compile_checks.jsonl)
    [ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "device_slim: commit or stash first (the index must be HEAD's)" >&2; exit 2; }
    mkdir -p "$(dirname "$exclude")"
    echo "$begin" >> "$exclude"
    for p in "${paths[@]}"; do
      git rm -r -q --cached -- "$p"
      echo "/$p" >> "$exclude"
    done
    echo "$end" >> "$exclude"
    size
    ;;
  off)
    git reset -q
    [ -f "$exclude" ] && sed -i "/^$begin\$/,/^$end\$/d" "$exclude"
    git status --short | head -5
    size
    ;;
  size) size ;;
  *) echo "usage: benchmarks/device_slim.sh on [PATH ...] | off | size" >&2; exit 2 ;;
esac
