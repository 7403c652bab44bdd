"""What a recorded held-out run carries besides its evaluations, and how a replay is checked against it.

A records folder (benchmarks/results/heldout_h200/) holds, next to the evaluations (*.jsonl.gz) and
nvcc's front-end answers (*.front_end.json.gz):

  *.library.json.gz   the library the run measured: its content hash, its canonical dump (lineages
                      and skills, klineage.store.library) and the expert corpus the memorization
                      audit compared against ({path: source});
  report/heldout.json the report of the run, as recorded (a run recorded in parts: report_<part>/ each).

A replay adopts the recorded library (the database's own, when it differs, is first saved beside the
database), so the replay stands when the shipped library or the corpus changes later; `replay_check`
then says, row by row, where the replay took other decisions than the record and why.
"""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

from klineage import settings
from klineage.errors import InputError
from klineage.store.library import dump_hash

LIBRARY_SUFFIX = ".library.json.gz"
SCHEMA = 1
REL_TOL = 1e-9  # floats of two machines' replays agree to this (a sum's last bit may differ)


def expert_corpus(root: Path | None = None) -> dict:
    """{"root": display path, "files": {display path: source}} of every .cu file of the expert corpus."""
    root = Path(root or settings.expert_dir())
    return {"root": settings.display_path(root),
            "files": {settings.display_path(p): p.read_text(errors="replace") for p in sorted(root.rglob("*.cu"))}}


def write_library_record(store, path: Path, corpus: dict | None = None) -> dict:
    """Write the store's library (hash, canonical dump) and the expert corpus to `path`
    (*.library.json.gz); returns the record's summary (hash, skills, lineages, corpus files)."""
    dump = store.canonical_dump()
    rec = {"schema": SCHEMA, "hash": dump_hash(dump), "skills": len(dump["skills"]),
           "lineages": len(dump["lineages"]), "dump": dump, "corpus": corpus or expert_corpus()}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(rec, f, sort_keys=True)
    return summary(rec)


def summary(rec: dict) -> dict:
    return {"hash": rec["hash"], "skills": rec["skills"], "lineages": rec["lineages"],
            "corpus_files": len(rec["corpus"]["files"])}


def find_library_record(paths) -> Path | None:
    """The one library record among `paths` (files, or the folders' *.library.json.gz); None when
    there is none; an error when several name different libraries."""
    found = []
    for p in map(Path, paths):
        found += sorted(p.glob("*" + LIBRARY_SUFFIX)) if p.is_dir() else [p] if p.name.endswith(LIBRARY_SUFFIX) else []
    if not found:
        return None
    hashes = {read_library_record(f)["hash"] for f in found}
    if len(hashes) > 1:
        raise InputError(f"the records hold {len(found)} library records of different libraries "
                            f"({', '.join(str(f) for f in found)}): keep the one the run measured")
    return found[0]


def read_library_record(path: Path) -> dict:
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            rec = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: not a readable library record ({e})") from None
    if rec.get("schema") != SCHEMA or dump_hash(rec.get("dump") or {}) != rec.get("hash"):
        raise InputError(f"{path}: its library does not match its hash, or its schema is not {SCHEMA}: "
                            "write it again with benchmarks/heldout_h200.py")
    return rec


def adopt_library(store, rec: dict) -> str | None:
    """Make the store's library the recorded one; None when it already is. Otherwise the store's own
    library (when it has one) is first written beside the database, so nothing stored is lost; returns
    the line that says what happened."""
    have = store.library_hash()
    if have == rec["hash"]:
        return None
    saved = ""
    if store.skills() or store.lineages():
        db = Path(str(store.path))
        backup = db.with_name(f"{db.name}.library-{have[:16]}.json.gz")
        dump = store.canonical_dump()
        with gzip.open(backup, "wt", encoding="utf-8") as f:
            json.dump({"schema": SCHEMA, "hash": have, "skills": len(dump["skills"]), "lineages": len(dump["lineages"]),
                       "dump": dump, "corpus": {"root": None, "files": {}}}, f, sort_keys=True)
        saved = f"; the database's own library {have[:16]} was saved to {backup}"
    store.replace_library(rec["dump"])
    return (f"library: the replay uses the recorded library {rec['hash'][:16]} ({rec['skills']} skills, "
            f"{rec['lineages']} lineages){saved}")


# -- replay against record ---------------------------------------------------------------------------

def recorded_report(paths, instances=None) -> dict | None:
    """The recorded report of the first records folder among `paths` holding one: report/heldout.json,
    or with `instances` (names) the report among report/ and report_*/ that holds exactly those
    instances (a run recorded in parts keeps one report per part)."""
    for p in map(Path, paths):
        if not p.is_dir():
            continue
        for f in [p / "report" / "heldout.json", *sorted(p.glob("report_*/heldout.json"))]:
            if not f.is_file():
                continue
            rep = json.loads(f.read_text())
            if instances is None or {i["instance"] for i in rep["instances"]} == set(instances):
                return rep
    return None


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, rel_tol=REL_TOL)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _steps(row: dict) -> list[tuple[str, int, dict]]:
    return [(a["arm"], i, st) for a in row.get("arms") or [] for i, st in enumerate(a.get("steps") or [], 1)]


def _why(want: dict, got: dict) -> list[str]:
    """Why one row of the replay differs from the record, most telling first."""
    why = []
    if got.get("status") != want.get("status"):
        why.append(f"status {want.get('status')} recorded, {got.get('status')} replayed"
                   + (f" ({got['reason']})" if got.get("reason") else ""))
    ws, gs = _steps(want), _steps(got)
    for (warm, i, w), (_, _, g) in zip(ws, gs):
        if not _same(w, g):
            keys = sorted(k for k in set(w) | set(g) if not _same(w.get(k), g.get(k)))
            why.append(f"the search first differs at {warm} step {i} ({', '.join(keys)}): recorded "
                       f"{json.dumps({k: w.get(k) for k in keys}, sort_keys=True)}, replayed "
                       f"{json.dumps({k: g.get(k) for k in keys}, sort_keys=True)}")
            break
    else:
        if len(ws) != len(gs):
            why.append(f"the search gated {len(ws)} steps recorded, {len(gs)} replayed")
    for wa, ga in zip(want.get("arms") or [], got.get("arms") or []):
        keys = sorted(k for k in set(wa) | set(ga) if k != "steps" and not _same(wa.get(k), ga.get(k)))
        if keys:
            why.append(f"arm {wa.get('arm')}: {', '.join(keys)} differ")
    if got.get("produced_hash") != want.get("produced_hash"):
        why.append(f"final kernel: recorded flags {want.get('flags')}, replayed {got.get('flags')}")
    elif got.get("final_eval_keys") != want.get("final_eval_keys"):
        why.append("the same final kernel, other final evaluations (a timing or correctness setting changed)")
    rest = sorted(k for k in set(want) | set(got)
                  if k not in ("status", "reason", "arms", "produced_hash", "kernel_hash", "flags", "final_eval_keys")
                  and not _same(want.get(k), got.get(k)))
    if rest:
        why.append("other fields differ: " + ", ".join(rest))
    return why


def replay_check(recorded: dict, replayed: dict) -> dict:
    """Row by row (instance x condition), whether the replay gave the recorded row, and why not:
    {"recorded_run", "replayed_run", "rows", "same", "diverged": [{instance, condition, why}],
    "report_fields": top-level report fields that differ besides the rows}."""
    def rows(rep):
        return {(i["instance"], c): r for i in rep["instances"] for c, r in i["conditions"].items()}
    want, got = rows(recorded), rows(replayed)
    diverged = []
    for key in sorted(set(want) | set(got)):
        if key not in got:
            diverged.append({"instance": key[0], "condition": key[1], "why": ["recorded, not replayed"]})
        elif key not in want:
            diverged.append({"instance": key[0], "condition": key[1], "why": ["replayed, not in the record"]})
        elif not _same(want[key], got[key]):
            diverged.append({"instance": key[0], "condition": key[1], "why": _why(want[key], got[key])})
    fields = sorted(k for k in set(recorded) | set(replayed)
                    if k != "instances" and not _same(recorded.get(k), replayed.get(k)))
    return {"recorded_run": recorded.get("run_id"), "replayed_run": replayed.get("run_id"), "rows": len(want),
            "same": not diverged and not fields, "diverged": diverged, "report_fields": fields}


def format_replay_check(chk: dict) -> str:
    if chk["same"]:
        return f"replay check: the replay gives the recorded report ({chk['rows']} rows, run {chk['recorded_run']})"
    out = [f"replay check: the replay differs from the recorded report (run {chk['recorded_run']}, "
           f"replayed {chk['replayed_run']}): {len(chk['diverged'])} of {chk['rows']} rows"
           + (f"; report fields {', '.join(chk['report_fields'])}" if chk["report_fields"] else "")]
    for d in chk["diverged"]:
        out.append(f"  {d['instance']} {d['condition']}: " + "; ".join(d["why"]))
    out.append("the recorded report stays the record of what was measured")
    return "\n".join(out)
