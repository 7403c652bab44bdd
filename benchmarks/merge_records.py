"""Append the evaluation records of a device run that the shipped records do not hold yet.

    python benchmarks/merge_records.py RUN.jsonl[.gz] skills_db/evaluations/NAME.jsonl.gz

A run continued from the shipped records (`--seed-recorded`) exports every record of its database,
the seeded ones included; only the new ones (by eval_key, against every file of skills_db/evaluations)
are appended to the destination, so no record is shipped twice.
"""
from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _open(path: Path, mode: str):
    return gzip.open(path, mode) if path.suffix == ".gz" else open(path, mode)


def main(src: Path, dest: Path) -> int:
    have = set()
    for f in sorted((ROOT / "skills_db" / "evaluations").glob("*.jsonl*")) + ([dest] if dest.exists() else []):
        with _open(f, "rt") as fh:
            have |= {json.loads(line)["eval_key"] for line in fh if line.strip()}
    with _open(src, "rt") as fh:
        new = [line if line.endswith("\n") else line + "\n" for line in fh
               if line.strip() and json.loads(line)["eval_key"] not in have]
    with _open(dest, "at") as fh:
        fh.writelines(new)
    print(f"{len(new)} new records appended to {dest}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
