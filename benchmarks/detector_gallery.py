"""Recall and precision of mechanism detection on the style gallery (style_gallery/kernels), per family,
with each kind of evidence alone and both together. CPU only: the compiler evidence is PTX compiled
here with nvcc.

    python benchmarks/detector_gallery.py [--out benchmarks/results/detector_gallery.json] [--check]
                                          [--jobs N]

(--out also writes the printed table beside the record, as .txt.)

A family counts once per kernel (present or not, against labels.toml). "source" is the source
detectors (klineage.mechanisms.detect_all), "compiler" the families' compiler-evidence signatures
(a family without one has no compiler figures), "both" the union the audit uses
(klineage.mechanisms.evidence). The record lists, per family, the kernels each kind of evidence found
alone: what each adds. --check exits 1 unless every family has recall >= 95% and precision >= 98%
with both kinds together and at least 3 labelled idioms, and the gallery has at least 60 kernels.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GALLERY = ROOT / "style_gallery" / "kernels"
RECORD = ROOT / "benchmarks" / "results" / "detector_gallery.json"
MIN_RECALL, MIN_PRECISION, MIN_IDIOMS, MIN_KERNELS = 0.95, 0.98, 3, 60
KINDS = ("source", "compiler", "both")


def load_labels(gallery: Path = GALLERY) -> dict[str, dict]:
    """labels.toml's kernels; every labelled kernel has its .cu file and every .cu file a label."""
    labels = tomllib.loads((gallery / "labels.toml").read_text())["kernels"]
    files = {p.stem for p in gallery.glob("*.cu")}
    if set(labels) != files:
        raise SystemExit(f"labels.toml and the .cu files differ: unlabelled {sorted(files - set(labels))}, "
                         f"missing {sorted(set(labels) - files)}")
    return labels


def _found(source: str) -> dict[str, set[str]]:
    from klineage.mechanisms.evidence import BOTH, COMPILER, SOURCE, evidence
    ev = evidence(source)
    if ev.compiled is None or not ev.compiled.ok:
        raise SystemExit(f"a gallery kernel does not compile to PTX: {ev.compiler_error}")
    return {"source": {f.feature.mechanism for f in ev.found if f.by in (SOURCE, BOTH)},
            "compiler": {f.feature.mechanism for f in ev.found if f.by in (COMPILER, BOTH)}}


def run(gallery: Path = GALLERY, jobs: int = 2) -> dict:
    """The benchmark record: per family and kind of evidence, true and false positives and negatives,
    recall, precision, and the kernels behind each count."""
    from klineage.gate.compile import nvcc_version
    from klineage.mechanisms import registry
    labels = load_labels(gallery)
    names = sorted(labels)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:  # nvcc runs as a subprocess
        found = dict(zip(names, pool.map(lambda n: _found((gallery / f"{n}.cu").read_text()), names)))
    mechs = registry()
    families = [n for n, m in mechs.items() if m.DETECTABLE]
    unknown = sorted({m for lab in labels.values() for m in lab["mechanisms"]} - set(families))
    if unknown:
        raise SystemExit(f"labels.toml names families no detector knows: {unknown}")
    out = {}
    for fam in families:
        signature = type(mechs[fam]).compiled is not type(mechs[fam]).__mro__[-2].compiled
        row = {"kernels": sum(fam in lab["mechanisms"] for lab in labels.values()),
               "idioms": sorted({lab.get("idioms", {}).get(fam, "") for lab in labels.values()
                                 if fam in lab["mechanisms"]}),
               "compiler_signature": signature}
        for kind in KINDS:
            tp, fp, fn = [], [], []
            for name in names:
                got = found[name]["source"] | found[name]["compiler"] if kind == "both" else found[name][kind]
                want = fam in labels[name]["mechanisms"]
                (tp if want and fam in got else fp if fam in got else fn if want else []).append(name)
            row[kind] = {"tp": len(tp), "fp": len(fp), "fn": len(fn),
                         "recall": round(len(tp) / (len(tp) + len(fn)), 4) if tp or fn else None,
                         "precision": round(len(tp) / (len(tp) + len(fp)), 4) if tp or fp else None,
                         "false_positives": fp, "false_negatives": fn}
        src = {n for n in names if fam in found[n]["source"] and fam in labels[n]["mechanisms"]}
        comp = {n for n in names if fam in found[n]["compiler"] and fam in labels[n]["mechanisms"]}
        row["found_by_source_only"] = sorted(src - comp)
        row["found_by_compiler_only"] = sorted(comp - src)
        out[fam] = row
    return {"gallery": str(gallery.relative_to(ROOT)), "kernels": len(names), "families": out,
            "environment": {"nvcc": nvcc_version(), "python": platform.python_version()}}


def failures(rec: dict) -> list[str]:
    """Every way the record misses the done-when thresholds (empty when it meets them)."""
    out = [] if rec["kernels"] >= MIN_KERNELS else [f"{rec['kernels']} kernels, fewer than {MIN_KERNELS}"]
    for fam, row in rec["families"].items():
        both = row["both"]
        if len(row["idioms"]) < MIN_IDIOMS:
            out.append(f"{fam}: {len(row['idioms'])} idioms, fewer than {MIN_IDIOMS}")
        if both["recall"] is None or both["recall"] < MIN_RECALL:
            out.append(f"{fam}: recall {both['recall']} below {MIN_RECALL} (missed {both['false_negatives']})")
        if both["precision"] is None or both["precision"] < MIN_PRECISION:
            out.append(f"{fam}: precision {both['precision']} below {MIN_PRECISION} (false {both['false_positives']})")
    return out


def _pct(x) -> str:
    return "   -  " if x is None else f"{100 * x:5.1f}%"


def table(rec: dict) -> str:
    lines = [f"{rec['kernels']} kernels in {rec['gallery']}  (nvcc {rec['environment']['nvcc']})",
             f"{'family':<22}{'n':>3} {'idioms':>6}   {'source R/P':>15}   {'compiler R/P':>15}   {'both R/P':>15}"
             f"   adds: source / compiler"]
    for fam, row in rec["families"].items():
        cells = []
        for kind in KINDS:
            r = row[kind]
            if kind == "compiler" and not row["compiler_signature"]:
                cells.append(f"{'(no signature)':>15}")
            else:
                cells.append(f"{_pct(r['recall'])} / {_pct(r['precision'])}")
        lines.append(f"{fam:<22}{row['kernels']:>3} {len(row['idioms']):>6}   " + "   ".join(cells)
                     + f"   {len(row['found_by_source_only'])} / {len(row['found_by_compiler_only'])}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help=f"write the record here (e.g. {RECORD.relative_to(ROOT)})")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the thresholds hold")
    ap.add_argument("--jobs", type=int, default=2, help="PTX compiles in parallel")
    args = ap.parse_args(argv)
    rec = run(jobs=args.jobs)
    print(table(rec))
    if args.out:
        args.out.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
        args.out.with_suffix(".txt").write_text(table(rec) + "\n")
    bad = failures(rec)
    for b in bad:
        print("BELOW THRESHOLD:", b)
    return 1 if (args.check and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
