#!/usr/bin/env bash
# Build the packages the H200 image lacks into three ignored folders to carry on a device call:
#   .whlx/site.tar.xz  duckdb, tree-sitter(+cuda), libclang, anthropic and its dependencies, pygments
#                      (one xz tarball of an installed site dir: ~38 MiB instead of ~60 MiB of wheels)
#   .whlg/             flag-gems and what it imports (sqlalchemy, greenlet, PyYAML, packaging)
#   .whlf/             fla-core and einops (the gdn vendor reference)
#   .whlh/site.tar.xz  .whlx without anthropic and its dependencies but pydantic (~34 MiB): the held-out run
#                      needs no SDK without a key, and .whlx + .whlg + the repository pass the 64 MiB carry
#                      limit; pydantic (with pydantic_core, annotated_types, typing_inspection) stays:
#                      klineage.records, which the store and the gate import, is built on it
# On the device:
#   python3 -c "import tarfile; tarfile.open('.whlx/site.tar.xz').extractall('/tmp')"
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whlg/*.whl .whlf/*.whl
#   export PYTHONPATH=/tmp/site:$PWD
# (the held-out run extracts .whlh/site.tar.xz the same way). Usage, from the repository root:
#   benchmarks/device_site.sh [x] [g] [f] [h]   (default: x g f; h repacks .whlx, built first if missing)
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
exclude=$(git rev-parse --git-path info/exclude)  # a worktree's own, where .git is a file
mkdir -p "$(dirname "$exclude")"
for d in /.whlx/ /.whlg/ /.whlf/ /.whlh/; do  # .gitignore has /.whl?/; a checkout without it gets an exclude line
  git check-ignore -q "${d#/}site.tar.xz" || echo "$d" >> "$exclude"
done
want=("$@"); [ ${#want[@]} -eq 0 ] && want=(x g f)
plat=(--only-binary=:all: --python-version 3.12 --implementation cp
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
      --platform any)
for w in "${want[@]}"; do
  case "$w" in
    x)
      rm -rf /tmp/site_build && mkdir -p .whlx
      python3 -m pip install -q --no-compile --target /tmp/site_build/site "${plat[@]}" \
        duckdb==2.0.1 tree-sitter==0.26.1 tree-sitter-cuda==0.21.2 libclang==18.1.1 anthropic pygments rich \
        2>&1 | grep -v '^WARNING' || true
      # the image has these already; dropping them keeps the tarball small and the image's versions
      rm -rf /tmp/site_build/site/{numpy*,typing_extensions*,bin}
      (cd /tmp/site_build && tar -cJf - site) > .whlx/site.tar.xz
      ;;
    g)
      mkdir -p .whlg
      python3 -m pip download -q --no-deps "${plat[@]}" -d .whlg \
        flag-gems==5.0.2 sqlalchemy==2.0.48 greenlet PyYAML==6.0.3 packaging==26.0 2>&1 | grep -v '^WARNING' || true
      ;;
    h)
      [ -f .whlx/site.tar.xz ] || "$0" x
      rm -rf /tmp/site_slim && mkdir -p /tmp/site_slim .whlh
      tar -xJf .whlx/site.tar.xz -C /tmp/site_slim
      (cd /tmp/site_slim/site && rm -rf anthropic* anyio* httpx* httpcore* h11* jiter* opentelemetry* \
        docstring_parser* truststore* idna* sniffio* pygments* distro* certifi*)
      (cd /tmp/site_slim && tar -cJf - site) > .whlh/site.tar.xz
      ;;
    f)
      mkdir -p .whlf
      python3 -m pip download -q --no-deps "${plat[@]}" -d .whlf fla-core==0.6.0 einops 2>&1 | grep -v '^WARNING' || true
      ;;
  esac
done
du -sh .whlx .whlg .whlf .whlh 2>/dev/null || true
