"""The static HTML report: index, one page per lineage and per skill, the held-out page, the apply runs.

Everything is read through the Store; pages are jinja2 templates (``templates/*.j2``), charts are
matplotlib SVG files under ``charts/``, code and diffs are highlighted by pygments. No script, no
external URL: the folder works offline, opened straight from disk.

Layout of ``out_dir``::

    index.html  heldout.html  apply.html  style.css
    lineage/<lineage_id>.html   skill/<skill_id>.html   charts/*.svg
"""
from __future__ import annotations

import difflib
import re
from collections import Counter, defaultdict
from pathlib import Path
from statistics import median

import jinja2
from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import CudaLexer, DiffLexer

from klineage.report import charts
from klineage.report.text import skill_why
from klineage.workload import shape_key

CATEGORIES = ("data_types", "layout", "storage", "pipeline", "hardware")
_FORMATTER = HtmlFormatter(cssclass="hl")


# -- small helpers ---------------------------------------------------------------------------------

def _code(text: str, lexer) -> Markup:
    return Markup(highlight(text, lexer, _FORMATTER))


def _diff(before: str | None, after: str | None, before_name: str, after_name: str) -> Markup | None:
    """The unified diff from `before` to `after`, highlighted; None when a source is not stored."""
    if before is None or after is None:
        return None
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), before_name, after_name, lineterm="", n=3)
    text = "\n".join(lines)
    return _code(text + "\n" if text else "(no textual difference)\n", DiffLexer())


def _short(h: str | None, n: int = 12) -> str:
    return (h or "")[:n]


def admission_legend() -> list[tuple[str, str]]:
    """(status, what it means) for every admission status a card can carry, and not_run."""
    from klineage.lineage.admit import MEANING, STATUSES
    return [(st, MEANING[st]) for st in STATUSES] + [("not_run", "the mining run that made the card had no "
                                                                 "admission pass")]


class _Site:
    """One rendering: the jinja2 environment and the output folder; `page` writes every page."""

    def __init__(self, out_dir: Path):
        self.out = Path(out_dir)
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
            autoescape=jinja2.select_autoescape(["j2"], default_for_string=True, default=True),
            trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
        self.env.filters["short"] = _short
        self.env.filters["us"] = lambda x: "-" if x is None else f"{x:,.1f}"
        self.env.filters["x"] = lambda x: "-" if x is None else f"{x:.3f}x"
        self.env.filters["pct"] = lambda x: "-" if x is None else f"{100 * x:.1f}%"
        self.env.filters["shape"] = lambda s: shape_key(s) if isinstance(s, dict) else str(s)
        self.env.globals["admission_legend"] = admission_legend()

    def page(self, template: str, rel: str, **ctx) -> Path:
        """Render `template` to out_dir/rel; `root` is the relative way back to out_dir."""
        path = self.out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        root = "../" * rel.count("/")
        path.write_text(self.env.get_template(template).render(root=root, **ctx), encoding="utf-8")
        return path

    def chart_rel(self, name: str) -> tuple[Path, str]:
        """(absolute path, path relative to out_dir) of a chart file."""
        return self.out / "charts" / name, f"charts/{name}"


# -- data gathered once ----------------------------------------------------------------------------

def _case_labels(lin: dict) -> list[str]:
    """Benchmark case labels of a lineage, in the order of its states' latency lists."""
    for t in lin["transitions"]:
        if t.get("effects"):
            return [shape_key(e["shape"]) for e in t["effects"]]
    n = max((len(s.get("latency_us", [])) for s in lin["states"]), default=0)
    return [f"case {i + 1}" for i in range(n)]


_LOOP_RE = re.compile(r"for\s*\(\s*(?:[\w:<>]+\s+)?(\w+)\s*=[^;]*;\s*([^;]*?)\s*(?:;|$)")


def step_label(t: dict, where: bool) -> str:
    """A chart's label for a step read forward: `+MECHANISM [STEP]`, and when the walk adds the
    mechanism more than once (`where`), the place it acts, shortened, with its first line in the
    richer kernel: a loop by its variable and condition (`+unroll nt<8 L120 [51]`), a load or store by
    its operand (`+vector_access store p L88 [54]`), anything else by its locus past the function."""
    mech, step = t["mechanism"], t["step"]
    if not where:
        return f"+{mech} [{step}]"
    locus = str(t.get("locus") or "")
    parts = locus.split(":", 2)
    what = re.sub(r"#\d+$", "", parts[-1] if len(parts) > 1 else locus)
    kind = parts[1] if len(parts) == 3 else ""
    loop = _LOOP_RE.search(what)
    if loop:
        cond = "".join(loop.group(2).split())
        what = cond if cond.startswith(loop.group(1)) else f"{loop.group(1)}:{cond}" if cond else loop.group(1)
    elif kind in ("load", "store"):
        inner = re.search(r"\(([^()]*)\)\s*$", what)  # a cast's operand: reinterpret_cast<float2*>(p) -> p
        what = f"{kind} {inner.group(1) if inner else what}"
    what = " ".join(what.split())
    if what == mech:
        what = ""
    if len(what) > 16:
        what = what[:14] + ".."
    feat = next((f for f in t.get("features_richer", []) if f.get("mechanism") == mech and f.get("locus") == locus), None)
    line = f" L{feat['lines'][0]}" if feat and feat.get("lines") else ""
    return " ".join(filter(None, [f"+{mech}", what, line.strip(), f"[{step}]"]))


def _forward_walk(lin: dict, sources: dict[str, str | None], skill_of: dict[str, list[dict]]) -> dict:
    """The lineage read forward: states simplest first, and each step as the mechanism it adds."""
    states = list(reversed(lin["states"]))
    cases = _case_labels(lin)
    steps = []
    for t in sorted(lin["transitions"], key=lambda t: -t["step"]):
        steps.append({
            "t": t, "anchor": f"step-{t['step']}",
            "effects": t.get("effects", []),
            "skills": skill_of.get(t["transition_id"], []),
            "diff": _diff(sources.get(t["simpler_hash"]), sources.get(t["richer_hash"]),
                          f"simpler {_short(t['simpler_hash'])}", f"richer {_short(t['richer_hash'])}"),
        })
    first = states[0] if states else {}
    start_label = Path(first["origin"]).stem if first.get("origin") else "simplest"
    repeated = Counter(s["t"]["mechanism"] for s in steps)
    labels = [start_label] + [step_label(s["t"], repeated[s["t"]["mechanism"]] > 1) for s in steps]
    series = []
    for k, case in enumerate(cases):
        lat = [s["latency_us"][k] if k < len(s.get("latency_us", [])) else float("nan") for s in states]
        sp = [s["effects"][k]["speedup"] if k < len(s["effects"]) else float("nan") for s in steps]
        series.append({"label": case, "latency_us": lat, "speedups": sp})
    ends = []
    for s in series:
        lo, hi = s["latency_us"][0], s["latency_us"][-1]
        ends.append({"case": s["label"], "simplest_us": lo, "expert_us": hi, "speedup": lo / hi if hi else None})
    return {"states": states, "steps": steps, "labels": labels, "series": series, "cases": cases, "ends": ends}


def _heldout(store) -> dict | None:
    """The newest held-out report (klineage.heldout.report) with its rows by family, or None."""
    report = store.latest_heldout_report()
    if report is None:
        return None
    conds = report["config"]["conditions"]
    fams: dict[str, list[dict]] = defaultdict(list)
    for inst in report["instances"]:
        cells = [inst["conditions"].get(c) for c in conds]
        fams[inst["family"]].append({"instance": inst["instance"],
                                     "reference": inst.get("reference") or {"used": "-", "name": "-"},
                                     "cells": cells})
    return {"report": report, "conditions": conds, "families": dict(fams)}


# -- the report ------------------------------------------------------------------------------------

def render_report(store, out_dir: Path, progress=None) -> dict:
    """Write the site; return {"index": path, "lineages": [paths], "skills": [paths], "heldout": path,
    "charts": [paths]}. `progress(done, total)` is called as each page is written."""
    site = _Site(out_dir)
    site.out.mkdir(parents=True, exist_ok=True)
    lineages = store.lineages()
    skills = store.skills()
    total, done = len(lineages) + len(skills) + 3, [0]

    def page_done() -> None:
        done[0] += 1
        if progress is not None:
            progress(done[0], total)
    by_tid = {t["transition_id"]: t for lin in lineages for t in lin["transitions"]}
    lin_by_id = {lin["lineage_id"]: lin for lin in lineages}
    skill_of: dict[str, list[dict]] = defaultdict(list)
    for s in skills:
        for tid in s["card"].get("evidence", []):
            skill_of[tid].append(s)
    hashes = {h for t in by_tid.values() for h in (t["richer_hash"], t["simpler_hash"])}
    sources = {h: (k["source"] if (k := store.get_kernel(h)) else None) for h in sorted(hashes)}

    def step_link(tid: str) -> dict | None:
        t = by_tid.get(tid)
        if t is None:
            return None
        lin = lin_by_id[t["lineage_id"]]
        return {"href": f"lineage/{lin['lineage_id']}.html#step-{t['step']}", "t": t,
                "text": f"{lin['workload_name']}/{lin['proposer']} step {t['step']}"}

    out = {"lineages": [], "skills": [], "charts": []}
    site.page("style.css.j2", "style.css", pygments_css=Markup(_FORMATTER.get_style_defs(".hl")))

    walks = {}
    for lin in lineages:
        walk = _forward_walk(lin, sources, skill_of)
        walks[lin["lineage_id"]] = walk
        chart = None
        if walk["series"] and walk["states"]:
            path, chart = site.chart_rel(f"lineage-{lin['lineage_id'][:16]}.svg")
            out["charts"].append(charts.walk_chart(
                path, walk["labels"], walk["series"],
                f"{lin['workload_name']} / {lin['proposer']}: simplest -> expert"))
        out["lineages"].append(site.page("lineage.j2", f"lineage/{lin['lineage_id']}.html", lin=lin, walk=walk,
                                         chart=chart, tall=len(walk["labels"]) > charts.LONG_WALK,
                                         title=f"{lin['workload_name']} / {lin['proposer']}"))
        page_done()

    rows = []
    for s in skills:
        card = s["card"]
        why = skill_why(card)
        pre = {c: [] for c in CATEGORIES}
        for p in why["preconditions"]:
            pre.setdefault(p["category"], []).append(p)
        per_case = card["effects"].get("per_case", [])
        chart = None
        if per_case:
            path, chart = site.chart_rel(f"skill-{s['skill_id']}.svg")
            out["charts"].append(charts.speedup_bars(
                path, [f"{e['workload']} {e['shape_text']}" for e in per_case], [e["speedup"] for e in per_case],
                f"{card['name']}: speedup per case"))
        carrier = card.get("carrier", {})
        out["skills"].append(site.page(
            "skill.j2", f"skill/{s['skill_id']}.html", s=s, card=card, why=why, pre=pre, chart=chart,
            title=card["name"], step_link=step_link,
            before=_code(carrier.get("before") or "", CudaLexer()), after=_code(carrier.get("after") or "", CudaLexer()),
            carrier_diff=_diff(carrier.get("before"), carrier.get("after"), "before", "after")))
        page_done()
        rows.append({"s": s, "card": card, "admission": why["admission"], "risks": len(card.get("risks", [])),
                     "median": card["effects"].get("median_speedup")})

    heldout = _heldout(store)
    families = []
    for fam, items in (heldout or {"families": {}})["families"].items():
        conds = heldout["conditions"]
        inst = [r["instance"] for r in items]
        vals, ivals = {}, {}
        for r in items:
            for c, cell in zip(conds, r["cells"]):
                if cell and cell["status"] == "PASSED":
                    vals[(r["instance"], c)] = cell["speedup"]
                    if cell.get("ci95") and None not in cell["ci95"]:
                        ivals[(r["instance"], c)] = tuple(cell["ci95"])
        slug = ''.join(c if c.isalnum() else '_' for c in fam)
        path, chart = site.chart_rel(f"heldout-{slug}.svg")
        out["charts"].append(charts.grouped_bars(path, inst, conds, vals, f"held-out: {fam}",
                                                 "speedup over the reference (x), 95% interval", intervals=ivals))
        summary = heldout["report"]["summary"]
        curve, curve_chart = (summary.get("budget_curves") or {}).get(fam), None
        if curve:
            idiom = (summary["families"].get(fam) or {}).get("idiom") or {}
            path, curve_chart = site.chart_rel(f"heldout-{slug}-budget.svg")
            out["charts"].append(charts.curves(
                path, curve, f"held-out: {fam}, best speedup after n gated candidates", "gated candidates",
                "geomean speedup over the reference (x), search measurement",
                baseline=("idiom (final measurement)", idiom["geomean"]) if idiom.get("geomean") else None))
        families.append({"family": fam, "rows": items, "chart": chart, "curve_chart": curve_chart,
                         "summary": summary["families"].get(fam, {})})
    out["heldout"] = site.page("heldout.j2", "heldout.html", present=heldout is not None,
                               report=(heldout or {}).get("report"), conditions=(heldout or {}).get("conditions", []),
                               families=families, title="Held-out evaluation")
    page_done()

    runs = []
    for r in store.apply_runs():
        summ = r["summary"] or {}
        kind = f"baseline {r['config']['method']}" if "method" in r["config"] else "apply"
        runs.append({"run_id": r["run_id"], "workload": r["workload"], "kind": kind, "stop_reason": r["stop_reason"],
                     "kept": summ.get("kept") or [], "spent_usd": summ.get("spent_usd"),
                     "speedups": summ.get("speedup_vs_start") or [], "steps": store.apply_steps(r["run_id"])})
    out["apply"] = site.page("apply.j2", "apply.html", runs=runs, title="Apply and baseline runs")
    page_done()

    workloads = defaultdict(list)
    for lin in lineages:
        workloads[lin["workload_name"]].append({"lin": lin, "walk": walks[lin["lineage_id"]]})
    median_all = median([r["median"] for r in rows if r["median"] is not None]) if rows else None
    out["index"] = site.page("index.j2", "index.html", workloads=dict(workloads), skills=rows,
                             n_steps=len(by_tid), median_all=median_all, title="KLineage report")
    page_done()
    return {"index": out["index"], "lineages": out["lineages"], "skills": out["skills"],
            "heldout": out["heldout"], "apply": out["apply"], "charts": out["charts"]}
