"""docs/results.md, generated from the records: the shipped library (skills_db/skills.duckdb, read
from a temporary copy) and the recorded benchmark outputs under benchmarks/results/. No figure is
typed by hand; CI regenerates the page and compares it with the committed one.

    python -m klineage.report.results > docs/results.md
    python -m klineage.report.results --check          (exit 1 when docs/results.md is out of date)
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from klineage.settings import repo_root

RESULTS = Path("benchmarks") / "results"


def _load(root: Path, rel: str):
    return json.loads((root / RESULTS / rel).read_text())


def _env_line(env: dict) -> str:
    return (f"{env.get('gpu')} (sm_{str(env.get('capability', '')).replace('.', '')}), driver {env.get('driver')}, "
            f"nvcc {env.get('nvcc')}, torch {env.get('torch')}, triton {env.get('triton')}")


def _x(v) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _library(root: Path) -> list[str]:
    from klineage.report.text import skill_stats
    from klineage.store import open_store
    with tempfile.TemporaryDirectory() as tmp:  # opening may migrate a file: never the shipped one
        db = Path(tmp) / "lib.duckdb"
        shutil.copyfile(root / "skills_db" / "skills.duckdb", db)
        store = open_store(db)
        try:
            lins, skills = store.lineages(), store.skills()
            n_evals = len(store.evaluation_keys())
        finally:
            store.close()
    cards = [s["card"] for s in skills]
    st = skill_stats(cards)
    out = ["## The shipped library", "",
           f"`skills_db/skills.duckdb`: {len(lins)} lineages, {sum(len(l['transitions']) for l in lins)} accepted "
           f"steps, {sum(len(l['rejections']) for l in lins)} rejected proposals, {n_evals} stored evaluations, "
           f"{len(skills)} skills; admission: " + ", ".join(f"{k} {v}" for k, v in sorted(st["admission"].items()))
           + ". `klineage mine --config pipelines/mine.toml --replay` rebuilds it from the records.", "",
           "| workload | proposer | steps | rejections | termination |", "|---|---|---|---|---|"]
    for l in sorted(lins, key=lambda l: (l["workload_name"], l["proposer"])):
        left = f" (left: {', '.join(l['remaining'])})" if l["remaining"] else ""
        out.append(f"| {l['workload_name']} | {l['proposer']} | {len(l['transitions'])} | {len(l['rejections'])} | "
                   f"{l['termination']}{left} |")
    out += ["", "Each skill, read forward: its median speedup over the steps that carry it, the range across "
            "cases, and where it was measured.", "",
            "| skill | median | range | steps | cases | admission |", "|---|---|---|---|---|---|"]
    for c in sorted(cards, key=lambda c: c["name"]):
        e = c["effects"]
        out.append(f"| {c['name']} | {_x(e['median_speedup'])} | {_x(e['case_range'][0])} to {_x(e['case_range'][1])} | "
                   f"{len(c['evidence'])} | {', '.join(sorted({p['workload'] for p in e.get('per_case', [])}))} | "
                   f"{(c.get('admission') or {}).get('status', 'not_run')} |")
    return out


def _corpus(root: Path) -> list[str]:
    rows = _load(root, "corpus_all_h200.json")
    out = ["## The expert corpus against the vendor references", "",
           "Each expert's gate evaluation in the corpus run (`benchmarks/corpus_table.py` reads them from the "
           "records into `benchmarks/results/corpus_all_h200.json`; tests/test_corpus_record.py checks it): the "
           "vendor reference timed in the same worker, call by call; bandwidth against the copy bandwidth and "
           "FLOP/s against the bf16 peak that worker measured.", "",
           "| workload | case | expert (us) | vendor (us) | speedup | TB/s | of copy | TFLOP/s | of peak | shapes |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        case = ",".join(f"{k}={v}" for k, v in r["case"].items())
        peak = f"{100 * r['fraction_of_peak']:.0f}%" if r.get("fraction_of_peak") else "-"
        out.append(f"| {r['workload']} | {case} | {r['expert_us']:.1f} | {r['vendor_us']:.1f} | "
                   f"{_x(r['speedup_vs_vendor'])} | {r['achieved_TBps']:.2f} | {100 * r['fraction_of_copy']:.0f}% | "
                   f"{r['achieved_TFLOPs']:.1f} | {peak} | {r['shapes_passed']}/{r['shapes_checked']} |")
    vendors = sorted({(r["workload"], r["vendor"]) for r in rows})
    out += ["", "Vendor references: " + "; ".join(f"{w}: {v}" for w, v in vendors) + "."]
    return out


def _mining_cost(root: Path) -> list[str]:
    d = _load(root, "mine_h200.json")
    out = ["## What mining costs", "", f"`benchmarks/mine_h200.py` on row_sum and swiglu (`{d['config']}`), run "
           "twice into one database: the second run reuses every stored evaluation and cached build.", "",
           "| run | wall (s) | compile (s) | builds | cache hit rate | correctness (s) | timing (s) | evaluations |",
           "|---|---|---|---|---|---|---|---|"]
    for r in d["runs"]:
        ph, ev = r["phases"], r["evaluations"]
        rate = ph.get("compile_cache_hit_rate")
        out.append(f"| {r['run']} | {ph['wall_s']:.1f} | {ph['compile_s']:.1f} | {ph['compile_requests']} | "
                   f"{'-' if rate is None else f'{100 * rate:.0f}%'} | {ph['correctness_s']:.1f} | {ph['timing_s']:.1f} | "
                   + ", ".join(f"{k} {v}" for k, v in sorted(ev["by_source"].items())) + " |")
    return out


def _apply(root: Path) -> list[str]:
    d = _load(root, "apply_h200/apply_h200_admission_off.json")
    cfg = d["config"]
    out = ["## Apply on workloads nobody mined", "",
           f"`benchmarks/apply_h200.py` from each naive kernel with the shipped library: materializers "
           f"{', '.join(cfg['materializers'])}, budget {cfg['budget_steps']} gated candidates, admission "
           f"{'on' if cfg['admission'] else 'off'}; the final kernel gated again on every shape in a fresh worker.", "",
           "| workload | kept, in order | start (us) | best (us) | speedup | final gate |", "|---|---|---|---|---|---|"]
    for name, w in d["workloads"].items():
        for c in w.get("speedup_vs_start") or []:
            fin = w.get("final_gate") or {}
            out.append(f"| {name} {','.join(f'{k}={v}' for k, v in c['shape'].items())} | {', '.join(w['kept']) or '-'} | "
                       f"{c['start_us']:.1f} | {c['best_us']:.1f} | {_x(c['speedup'])} | {fin.get('status', '-')} "
                       f"{fin.get('shapes_passed', '-')}/{fin.get('shapes_checked', '-')} shapes |")
    return out


def _heldout(root: Path) -> list[str]:
    from klineage.report.text import heldout_markdown
    report = _load(root, "heldout_h200/report/heldout.json")
    return ["## The held-out check", "", "Geomean speedup over the reference of each condition's final kernel "
            "(`benchmarks/results/heldout_h200/report/heldout.json`; how it is measured and what it shows: "
            "[heldout.md](heldout.md)).", "", heldout_markdown(report)]


def _gate(root: Path) -> list[str]:
    s = _load(root, "soak_h200.json")
    counts = ", ".join(f"{k} {v}" for k, v in sorted(s["status_counts"].items(), key=lambda kv: -kv[1]))
    return ["## The gate under load", "",
            f"`benchmarks/soak_h200.py`: {s['candidates_submitted']} valid, invalid and hostile candidates through one "
            f"gate and store: {s['records_stored']} records stored ({counts}); harness errors: "
            f"{len(s['harness_errors'])}; records missing: {len(s['records_missing'])}."]


def render(root: Path | None = None) -> str:
    """The page, from the records under `root` (default: this source tree)."""
    root = Path(root or repo_root())
    env = _load(root, "mine_h200.json")["env"]
    parts = [["# Results", "",
              "Generated by `python -m klineage.report.results > docs/results.md` from the shipped library and the "
              "recorded benchmark outputs in `benchmarks/results/`; tests/test_results_doc.py fails when this page "
              "and the records disagree. Every GPU figure was measured on " + _env_line(env) + "."],
             _library(root), _corpus(root), _mining_cost(root), _apply(root), _heldout(root), _gate(root)]
    return "\n\n".join("\n".join(p) for p in parts) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if argv == ["--check"]:
        have = (repo_root() / "docs" / "results.md").read_text()
        if have != text:
            print("docs/results.md is out of date: run `python -m klineage.report.results > docs/results.md`",
                  file=sys.stderr)
            return 1
        return 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
