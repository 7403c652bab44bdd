"""How far the versions walk gets on the style-gallery ladders, and whether the steps it accepts carry
their true labels: replayed on the CPU from the GPU mining record of the gallery.

    python benchmarks/gallery_walk_labels.py [--records benchmarks/results/mine_gallery_CARD] [--write] [--check]

Every ladder of style_gallery/ladders has a truth.toml beside it: what each rung truly adds over
the rung it was written from (and drops, if anything). Nothing in klineage reads it. The script walks
each ladder with the versions proposer, exactly as pipelines/mine_gallery.toml configures the
gate, answering every gate call from the recorded evaluations (no GPU); a walk that asks for an
evaluation the record lacks is reported as such and no figure is given for it.

Scoring. A rung is reached when the walk stands on it. The walk's accepted steps fall into segments,
each from one rung to the next rung it stands on (a compound step peeled into several steps is one
segment); the segment's truth is what the richer rung holds and the simpler one does not, from
truth.toml. A step carries its true label when its mechanisms are among the segment's truth, the
segment's steps together name all of it, and the simpler rung holds nothing the richer lacks.
Targets (issue 39): the walk reaches >= 80% of all rungs; >= 95% of accepted steps carry the true
label. --check exits 1 unless both hold. --write records the result beside the mining record's card:
benchmarks/results/gallery_walk_labels_CARD.json (and .txt).

Beside the walk, the record holds what needs no gate: for every rung and the rung it was written
from, the mechanisms the united evidence (source detectors and compiler, klineage.mechanisms.evidence)
sees added, against the truth. It says where a missed step comes from: evidence that does not see a
true addition, or the walk's own logic.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))
from record_names import card_of, find  # noqa: E402

GALLERY = ROOT / "style_gallery" / "ladders"
CONFIG = ROOT / "pipelines" / "mine_gallery.toml"
RESULTS = ROOT / "benchmarks" / "results"
MINED = "mine_gallery_{card}"          # the GPU mining record it replays (a folder)
STEM = "gallery_walk_labels_{card}"    # its own record, named by the same card
MIN_REACHED, MIN_TRUE = 0.80, 0.95


def mining_record() -> Path:
    """The one GPU mining record of the gallery in benchmarks/results; SystemExit naming the fix."""
    hits = find(RESULTS, MINED)
    if len(hits) != 1:
        raise SystemExit(f"expected one {MINED.format(card='<card>')} folder in {RESULTS}, found "
                         f"{[p.name for p in hits]}: mine the gallery on the GPU (benchmarks/mine_gallery_h200.py)")
    return hits[0]


class Truth:
    """A ladder's truth.toml over its rungs (klineage.lineage.ladder.Version list)."""

    def __init__(self, ladder_dir: Path, ladder: list):
        from klineage.lineage.ladder import parent_index
        raw = tomllib.loads((ladder_dir / "truth.toml").read_text())
        files = {Path(v.origin).name: i for i, v in enumerate(ladder)}
        for table in ("adds", "drops"):
            stray = sorted(set(raw.get(table, {})) - set(files))
            if stray:
                raise SystemExit(f"{ladder_dir / 'truth.toml'}: [{table}] names {stray[0]!r}, not a rung")
        missing = sorted(f for f, i in files.items() if i > 0 and f not in raw.get("adds", {}))
        if missing:
            raise SystemExit(f"{ladder_dir / 'truth.toml'}: no [adds] entry for {missing}")
        self.adds = [frozenset(raw.get("adds", {}).get(Path(v.origin).name, ())) for v in ladder]
        self.drops = [frozenset(raw.get("drops", {}).get(Path(v.origin).name, ())) for v in ladder]
        self.parent = [parent_index(ladder, i) for i in range(len(ladder))]
        self.held: list[frozenset[str]] = []
        for i in range(len(ladder)):
            base = self.held[self.parent[i]] if self.parent[i] is not None else frozenset()
            self.held.append((base | self.adds[i]) - self.drops[i])


def ladders() -> list[Path]:
    return sorted(p for p in GALLERY.iterdir() if (p / "truth.toml").is_file())


def score_lineage(lin: dict, prop, truth: Truth) -> dict:
    """Rungs reached and, per accepted step, its label against the truth of its segment."""
    labels = [v.label for v in prop.ladder]
    on = [prop.rung_of_hash(s["kernel_hash"]) for s in lin["states"]]
    reached = list(dict.fromkeys(i for i in on if i is not None))
    steps, segment = [], []

    def close(a: int | None, b: int | None) -> None:
        if not segment:
            return
        if a is None or b is None:
            want, loses = None, None
        else:
            want, loses = truth.held[a] - truth.held[b], sorted(truth.held[b] - truth.held[a])
        named = frozenset().union(*(s["label"] for s in segment))
        for s in segment:
            ok = want is not None and not loses and s["label"] <= want and named == want
            steps.append({**s, "label": sorted(s["label"]), "from": labels[a] if a is not None else None,
                          "to": labels[b] if b is not None else None,
                          "truth": sorted(want) if want is not None else None, "true_label": ok,
                          **({"simpler_holds_more": loses} if loses else {})})
        segment.clear()

    start = on[0]
    for k, t in enumerate(lin["transitions"]):
        names = t.get("mechanisms") or t["mechanism"].split("+")
        segment.append({"step": k + 1, "mechanism": t["mechanism"], "label": frozenset(names), "locus": t["locus"]})
        if on[k + 1] is not None:
            close(start, on[k + 1])
            start = on[k + 1]
    close(start, None)  # a walk that ends between rungs: its last steps have no truth to meet
    not_reached = [{"rung": labels[i], "reason": next((r["message"] for r in lin["rejections"]
                                                       if r.get("rung") == labels[i]), "never proposed")}
                   for i in range(len(labels)) if i not in reached]
    refused = [{"step": r["step"] + 1, "rung": r.get("rung"), "mechanism": r["mechanism"], "kind": r["kind"],
                "reason": r["message"]} for r in lin["rejections"] if r["kind"] != "not_on_chain"]
    return {"rungs": len(labels), "reached": len(reached), "chain": [labels[i] for i in reached],
            "not_reached": not_reached, "accepted": len(steps), "true_label": sum(s["true_label"] for s in steps),
            "steps": steps, "refused": refused, "termination": lin["termination"], "remaining": lin["remaining"]}


def evidence_pairs(prop, truth: Truth) -> list[dict]:
    """Per rung and the rung it was written from: what the united evidence sees added, against the truth."""
    from klineage.mechanisms import registry
    from klineage.mechanisms.evidence import evidence
    detectable = {n for n, m in registry().items() if m.DETECTABLE}
    kinds = []
    for v in prop.ladder:
        ev = evidence(v.source)
        kinds.append({f.feature.mechanism for f in ev.found})
    out = []
    for i, v in enumerate(prop.ladder):
        p = truth.parent[i]
        if p is None:
            continue
        seen = sorted(kinds[i] - kinds[p])
        lost = sorted(kinds[p] - kinds[i])
        true_seeable = truth.adds[i] & detectable
        out.append({"rung": v.label, "from": prop.ladder[p].label, "truth": sorted(truth.adds[i]),
                    "evidence_adds": seen, "evidence_loses": lost,
                    "unseen": sorted(true_seeable - set(seen)),
                    "extra": sorted(set(seen) - truth.adds[i]),
                    "agrees": set(seen) == set(true_seeable) and set(lost) <= truth.drops[i]})
    return out


def run(records: Path | None = None, config: Path = CONFIG) -> dict:
    from klineage.gate.gate import Gate
    from klineage.lineage.mine import load_config
    from klineage.lineage.proposers import make_proposer
    from klineage.lineage.walk import Walker
    from klineage.store import open_store
    from klineage.store.recorded import import_paths, load_front_end
    from klineage.workload import load_workload

    records = records or mining_record()
    run_cfg, _ = load_config(config)
    out: dict = {"records": str(records.relative_to(ROOT)) if records.is_relative_to(ROOT) else str(records),
                 "config": str(config.relative_to(ROOT)), "ladders": {}}
    env = records / f"{records.name}.json"
    if env.is_file():
        out["recorded_on"] = (json.loads(env.read_text()).get("env") or {}).get("gpu")
    with tempfile.TemporaryDirectory(prefix="gallery-labels-") as tmp:
        store = open_store(Path(tmp) / "replay.duckdb")
        load_front_end([records], replay=True)
        out["imported"] = list(import_paths(store, [records]))
        gate = Gate(store, run_cfg.gate_config())
        try:
            for d in ladders():
                wl = load_workload(d)
                prop = make_proposer("versions", d)
                truth = Truth(d, prop.ladder)
                walker = Walker(gate, wl, [prop], run_cfg.limits, replay=True)
                lin = walker.run(prop.top.source, origin=str((d / "expert.cu").relative_to(ROOT)))
                entry = {"evidence": evidence_pairs(prop, truth)}
                if walker.missing:
                    entry["missing_evaluations"] = len(walker.missing)
                else:
                    entry.update(score_lineage(lin, prop, truth))
                out["ladders"][d.name] = entry
        finally:
            gate.close()
            store.close()
    out["totals"] = totals(out)
    return out


def totals(rec: dict) -> dict:
    lads = rec["ladders"].values()
    missing = sorted(n for n, l in rec["ladders"].items() if "missing_evaluations" in l)
    scored = [l for l in lads if "missing_evaluations" not in l]
    rungs, reached = sum(l["rungs"] for l in scored), sum(l["reached"] for l in scored)
    acc, true = sum(l["accepted"] for l in scored), sum(l["true_label"] for l in scored)
    ev = [p for l in lads for p in l["evidence"]]
    return {"ladders": len(rec["ladders"]), "unscored_ladders": missing, "rungs": rungs, "reached": reached,
            "reached_fraction": round(reached / rungs, 4) if rungs else None, "accepted": acc, "true_label": true,
            "true_fraction": round(true / acc, 4) if acc else None,
            "evidence_pairs": len(ev), "evidence_agrees": sum(p["agrees"] for p in ev)}


def failures(rec: dict) -> list[str]:
    t = rec["totals"]
    out = []
    if t["unscored_ladders"]:
        out.append(f"the record lacks evaluations for {t['unscored_ladders']}: mine the gallery on the GPU "
                   "(benchmarks/mine_gallery_h200.py) and commit its records")
    if t["reached_fraction"] is None or t["reached_fraction"] < MIN_REACHED:
        out.append(f"rungs reached {t['reached']}/{t['rungs']}, below {MIN_REACHED:.0%}")
    if t["true_fraction"] is None or t["true_fraction"] < MIN_TRUE:
        out.append(f"accepted steps with their true label {t['true_label']}/{t['accepted']}, below {MIN_TRUE:.0%}")
    return out


def table(rec: dict) -> str:
    lines = [f"versions walk of {rec['totals']['ladders']} gallery ladders, replayed from {rec['records']}"
             + (f" (recorded on {rec['recorded_on']})" if rec.get("recorded_on") else "")]
    for name, l in rec["ladders"].items():
        ev = l["evidence"]
        tail = f"evidence agrees on {sum(p['agrees'] for p in ev)}/{len(ev)} rung steps"
        if "missing_evaluations" in l:
            lines.append(f"  {name:<16} not scored: {l['missing_evaluations']} evaluations missing from the record; {tail}")
            continue
        lines.append(f"  {name:<16} rungs {l['reached']}/{l['rungs']}, true labels {l['true_label']}/{l['accepted']} "
                     f"({l['termination']}); {tail}")
        for s in l["steps"]:
            if not s["true_label"]:
                lines.append(f"      step {s['step']} {s['from']} -> {s['to']}: labelled {'+'.join(s['label'])}, "
                             f"truth {'+'.join(s['truth'] or ['?'])}")
        for r in l["not_reached"]:
            lines.append(f"      not reached {r['rung']}: {r['reason'][:160]}")
    t = rec["totals"]
    lines.append(f"total: rungs reached {t['reached']}/{t['rungs']} ({_pct(t['reached_fraction'])}, target "
                 f">= {MIN_REACHED:.0%}); accepted steps with their true label {t['true_label']}/{t['accepted']} "
                 f"({_pct(t['true_fraction'])}, target >= {MIN_TRUE:.0%}); evidence agrees with the truth on "
                 f"{t['evidence_agrees']}/{t['evidence_pairs']} rung steps")
    return "\n".join(lines)


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=Path, default=None, help="the GPU mining record of the gallery (default: the "
                    "one benchmarks/results/mine_gallery_<card>/)")
    ap.add_argument("--write", action="store_true", help="record the result as benchmarks/results/"
                    "gallery_walk_labels_<card>.json and .txt, the card the mining record names")
    ap.add_argument("--check", action="store_true", help="exit 1 unless both targets hold")
    args = ap.parse_args(argv)
    records = (args.records or mining_record()).resolve()
    rec = run(records)
    print(table(rec))
    if args.write:
        out = RESULTS / f"{STEM.format(card=card_of(records, MINED))}.json"
        out.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
        out.with_suffix(".txt").write_text(table(rec) + "\n")
    bad = failures(rec)
    for b in bad:
        print("BELOW TARGET:", b)
    return 1 if (args.check and bad) else 0


if __name__ == "__main__":
    sys.exit(main())
