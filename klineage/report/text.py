"""Plain-text rendering of gate results and workloads for the CLI."""
from __future__ import annotations

import io

from klineage.workload import shape_key


def table(headers: list[str], rows: list[list], right: tuple[str, ...] = ()) -> str:
    """A plain-text table: a header row, a rule, one line per row (no colour, no wrapping; columns
    named in `right` are right-aligned)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="", safe_box=True)
    for h in headers:
        t.add_column(h, no_wrap=True, justify="right" if h in right else "left")
    for r in rows:
        t.add_row(*("-" if v is None else str(v) for v in r))
    buf = io.StringIO()
    Console(file=buf, width=100_000, color_system=None, force_terminal=False, legacy_windows=False).print(t)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines() if line.strip() or False)


def shorten(text: str, width: int) -> str:
    """`text` on one line, at most `width` characters, cut at a word (never inside one) with " ..."."""
    import textwrap
    text = " ".join(str(text).split())
    if len(text) <= width:
        return text
    return textwrap.shorten(text, width, placeholder=" ...") if " " in text[:width] else text[:width - 4] + " ..."


WIDTH = 160  # the widest line of text output people read


def wrapped(text: str, indent: str = "", hanging: str = "    ", width: int = WIDTH) -> list[str]:
    """`text` as lines of at most `width` characters, broken at spaces: the first line starts with
    `indent`, the next with `indent + hanging`. A word longer than a line stays whole."""
    import textwrap
    text = str(text)
    if len(indent) + len(text) <= width and "\n" not in text:
        return [indent + text]  # as it is: its own spacing kept (aligned columns)
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + hanging,
                         break_long_words=False, break_on_hyphens=False) or [indent]


def wrap_markdown(md: str, width: int = WIDTH) -> str:
    """Markdown for a terminal: each line longer than `width` outside code blocks broken at spaces,
    a list item's continuation indented under its text (the markdown stays the same document)."""
    import re
    import textwrap
    out, fence = [], False
    for line in md.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        if fence or len(line) <= width or line.lstrip().startswith("|"):
            out.append(line)
            continue
        lead = re.match(r"\s*(?:(?:[-*+]|\d+\.|>)\s+)?", line).group(0)
        out += textwrap.wrap(line[len(lead):], width, initial_indent=lead, subsequent_indent=" " * len(lead),
                             break_long_words=False, break_on_hyphens=False)
    return "\n".join(out)


def _si(x: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M")):
        if x >= scale:
            return f"{x / scale:.2f} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def _ptxas_lines(comp: dict) -> list[str]:
    return [f"  ptxas {r['name'][:60]}: {r['registers']} regs, {r['shared_bytes']} B smem, "
            f"{r['stack_bytes']} B stack, spills {r['spill_store_bytes']}/{r['spill_load_bytes']} B"
            for r in comp.get("resources", [])]


def format_gate_stop(name: str, row: dict) -> str:
    """A gate that stopped before a verdict (no GPU, no record to replay, bad input): what it did
    first (guard, build with its ptxas resources), then why it stopped."""
    lines = [f"{name}: no verdict"]
    guard = row.get("guard")
    if guard is not None:
        vs = guard.get("violations") or []
        lines.append("  guard: passed" if guard.get("ok") else
                     f"  guard: {len(vs)} finding(s), first line {vs[0]['line']}: {vs[0]['reason']}")
    comp = row.get("compile")
    if comp is not None:
        took = "cached" if comp.get("cached") else f"{comp.get('seconds', 0):.1f} s"
        lines.append(f"  compile: {'ok' if comp.get('ok') else 'FAILED'} for {comp.get('arch')} with nvcc "
                     f"{comp.get('nvcc_version') or '?'} ({took})")
        lines += _ptxas_lines(comp)
    lines.append(f"  stopped: {row['error']}")
    return "\n".join(lines)


def format_gate_result(name: str, res) -> str:
    from klineage.gate.compile import compiler_messages, named
    lines = [f"{name}: {res.status.value} ({res.source})"]
    said = compiler_messages((res.compile or {}).get("log", "")) if res.status.value == "COMPILE_ERROR" else []
    if said:
        lines.append("  nvcc says:")
        lines += [f"    {named(m, name)}" for m in said]
    elif res.error_message:
        lines.append(f"  reason: {named(res.error_message, name)}")
    lines += _ptxas_lines(res.compile or {})
    for c in res.correctness:
        seeds = c["seeds"]
        worst = min((o["matched_fraction"] for s in seeds for o in s["outputs"].values()), default=1.0)
        err = max((o["max_abs_err"] for s in seeds for o in s["outputs"].values()), default=0.0)
        lines.append(f"  {c['kind']:<9} {shape_key(c['shape']):<28} {'ok ' if c['ok'] else 'BAD'} "
                     f"{len(seeds)} seeds, min matched {worst:.6f}, max abs err {err:.3g}")
    for t in res.timing:
        frac = t.get("bandwidth_fraction")
        lines.append(
            f"  time {shape_key(t['shape'])}: {t['latency_us']:.2f} us median "
            f"(trials {', '.join(f'{x:.2f}' for x in t['trial_medians_us'])}; spread {100 * t['spread']:.2f}%), "
            f"vendor {t['vendor_latency_us']:.2f} us, speedup {t['speedup_vs_vendor']:.3f}x")
        rate = f"  rate {_si(t['achieved_bytes_per_s'], 'B/s')}"
        if frac is not None:
            rate += f" = {100 * frac:.1f}% of measured copy {_si(t['copy_bandwidth_bytes_per_s'], 'B/s')}"
        if t.get("flops_fraction"):
            rate += f"; {_si(t['achieved_flops_per_s'], 'FLOP/s')} = {100 * t['flops_fraction']:.1f}% of peak"
        lines.append(rate)
    if res.env and res.env.get("gpu"):
        e = res.env
        lines.append(f"  on {e.get('gpu')} driver {e.get('driver')} nvcc {e.get('nvcc')} torch {e.get('torch')}")
    return "\n".join(lines)


def format_workload(wl) -> str:
    t = wl.tolerance
    lines = [f"{wl.name} ({wl.family}, {', '.join(wl.dtypes)})", f"  {wl.c_signature}",
             f"  tolerance rtol {t.rtol} atol {t.atol} (scaled by rms of reference), min matched {t.min_matched}",
             f"  vendor reference: {wl.vendor_name}"]
    for kind, s in wl.all_shapes():
        lines.append(f"  {kind:<9} {shape_key(s):<28} {wl.bytes_moved(s):>14,} bytes {wl.flops(s):>16,} FLOP")
    return "\n".join(lines)


def format_mine_summary(summary: dict) -> str:
    lines = []
    for l in summary["lineages"]:
        if not l.get("stored", True):
            lines.append(f"{l['workload']}/{l['proposer']}: not walked and not stored: the start kernel's evaluation has "
                         "no record (listed below)")
            continue
        lines.append(f"{l['workload']}/{l['proposer']} [{l['lineage_id'][:12]}]: {l['steps']} steps, "
                     f"{l['rejections']} rejections, {l['termination']}"
                     + (f" (left: {', '.join(l['remaining'])})" if l["remaining"] else ""))
        if l["mechanisms"]:
            lines.append("  removed: " + " -> ".join(l["mechanisms"]))
    ev = summary["evaluations"]
    lines.append(f"evaluations: {ev['total']} " + ", ".join(f"{k} {v}" for k, v in sorted(ev["by_source"].items())))
    ph = summary["phases"]
    rate = ph["compile_cache_hit_rate"]
    lines.append(f"wall {ph['wall_s']:.1f} s; gate builds {ph['compile_s']:.1f} s over {ph['compile_requests']} requests "
                 f"(cache hit rate {'-' if rate is None else f'{100 * rate:.0f}%'}); correctness "
                 f"{ph['correctness_s']:.1f} s; timing {ph['timing_s']:.1f} s")
    if summary.get("nvcc"):
        lines.append(format_nvcc_calls(summary["nvcc"]))
    lines.append(f"skills in the library: {len(summary['skills'])}")
    for w in summary.get("warnings", []):
        lines += wrapped(f"warning: {w}")
    if summary["missing"]:
        lines.append(f"NOT REPLAYED ({len(summary['missing'])} evaluations had no record):")
        for m in summary["missing"]:
            lines.append(f"  {m['workload']} kernel {m['kernel_hash'][:12]} "
                         f"({m.get('what') or m.get('origin') or 'derived'})")
    return "\n".join(lines)


NVCC_PURPOSE = {"ptx": "compiler evidence", "build": "gate builds", "front_end": "sweep front end",
                "compile_check": "compile scope"}


def format_nvcc_calls(calls: dict) -> str:
    """One line: every nvcc and ptxas process a run started, by purpose, their wall time, and the
    answers that needed none (klineage.gate.compile.calls_since)."""
    t = calls["total"]
    parts = [f"{NVCC_PURPOSE.get(p, p)} {int(c['runs'])}" for p, c in calls.items() if p != "total" and c["runs"]]
    saved = int(t["cached"] + t["recorded"])
    return (f"nvcc and ptxas: {int(t['runs'])} runs, {t['seconds']:.1f} s" + (f" ({', '.join(parts)})" if parts else "")
            + f"; {saved} answers without a run ({int(t['recorded'])} from shipped records, {int(t['cached'])} from "
            "the build cache)")


def format_lineage_row(l: dict) -> str:
    return (f"{l['lineage_id'][:12]}  {l['workload_name']:<14} {l['proposer']:<9} {len(l['transitions']):>3} steps "
            f"{len(l['rejections']):>3} rejections  {l['termination']}"
            + (f" (left: {', '.join(l['remaining'])})" if l["remaining"] else ""))


def format_lineage(l: dict) -> str:
    lines = [*wrapped(format_lineage_row(l)), "states (0 = the starting kernel; each next state has one mechanism fewer):"]
    for st in l["states"]:
        lat = ", ".join(f"{x:.1f}" for x in st.get("latency_us", []))
        lines.append(f"  [{st['idx']}] {st['kernel_hash'][:12]} {st.get('status', '')} {lat and lat + ' us'}")
    lines.append("transitions (forward speedup = simpler / richer latency):")
    for t in l["transitions"]:
        sp = ", ".join(f"{e['speedup']:.3f}x" for e in t["effects"])
        lines += wrapped(f"step {t['step']}: -{t['mechanism']} @ {t['locus']}  forward {sp}", "  ")
    if l["rejections"]:
        lines.append("rejections:")
        for r in l["rejections"]:
            lines += wrapped(f"step {r['step']}: {r['mechanism']} @ {r['locus']}: {r['kind']}: {shorten(r['message'], 300)}",
                             "  ")
    return "\n".join(lines)


def skill_summary(s: dict) -> dict:
    """One skill (a store.skills() row) in brief: what `skills list` shows, as JSON."""
    card = s["card"]
    return {"skill_id": s["skill_id"], "name": s["name"], "mechanism": s["mechanism"],
            "median_speedup": card["effects"]["median_speedup"], "steps": len(card["evidence"]),
            "admission": (card.get("admission") or {}).get("status", "not_run"),
            "platforms": list(card["scope"]["platforms"])}


def format_skills_table(skills: list[dict]) -> str:
    """`skills list`: id, name, median speedup, steps of evidence, admission, platforms."""
    rows = [[b["skill_id"], b["name"], f"{b['median_speedup']:.3f}x", b["steps"], b["admission"], ", ".join(b["platforms"])]
            for b in map(skill_summary, skills)]
    return table(["id", "name", "median speedup", "steps", "admission", "platforms"], rows,
                 right=("median speedup", "steps"))


def format_lineages_table(lins: list[dict]) -> str:
    """`lineage list`: id, workload, proposer, steps, rejections, termination (and what was left)."""
    rows = [[l["lineage_id"][:12], l["workload_name"], l["proposer"], len(l["transitions"]), len(l["rejections"]),
             shorten(l["termination"] + (f" (left: {', '.join(l['remaining'])})" if l["remaining"] else ""), 80)]
            for l in lins]
    return table(["id", "workload", "proposer", "steps", "rejections", "termination"], rows,
                 right=("steps", "rejections"))


def skill_why(card: dict) -> dict:
    """The evidence behind each precondition and risk of a card, one row each."""
    pre = []
    for cat, items in card["preconditions"].items():
        for it in items:
            src = it.get("source") or ("static" if str(it.get("evidence", "")).startswith("static") else "declared")
            where = (f"lines {it['lines'][0]}-{it['lines'][1]} of kernel {it.get('kernel')}" if it.get("lines")
                     else it.get("probe") or it.get("eval_key") or f"kernel {it.get('kernel')}")
            pre.append({"category": cat, "condition": it["condition"], "source": src, "evidence": it.get("evidence", ""),
                        "where": where, "probe": it.get("probe"), "fails_without": it.get("fails_without", "")})
    risks = [{"kind": r.get("kind"), "workload": r.get("workload"), "status": r.get("status"),
              "message": r.get("message"), "probe": r.get("probe"), "eval_key": r.get("eval_key")}
             for r in card.get("risks", [])]
    probing = card.get("probing") or {}
    return {"skill_id": card["skill_id"], "name": card["name"], "preconditions": pre, "risks": risks,
            "risks_empty_reason": card.get("risks_empty_reason", ""),
            "probing": probing.get("summary", "not probed"), "probes_tried": probing.get("tried", []),
            "admission": (card.get("admission") or {}).get("status", "not_run")}


def format_skill_why(w: dict) -> str:
    lines = [f"{w['skill_id']}  {w['name']}  (admission: {w['admission']}; probing: {w['probing']})",
             "preconditions:"]
    for p in w["preconditions"] or []:
        lines += wrapped(f"[{p['category']}] {p['condition']}", "  ")
        evidence = str(p["evidence"])
        if evidence.startswith(f"{p['source']}: "):  # the evidence text names its kind already
            evidence = evidence[len(p["source"]) + 2:]
        lines += wrapped(f"{p['source']}: {evidence} ({p['where']})", "      ")
    if not w["preconditions"]:
        lines.append("  none")
    lines.append("risks:")
    for r in w["risks"]:
        lines += wrapped(f"[{r['kind']}] {r.get('workload') or ''} {r.get('status') or ''}: {shorten(r.get('message') or '', 200)}"
                         + (f" (probe {r['probe']})" if r.get("probe") else "")
                         + (f" [{r['eval_key'][:12]}]" if r.get("eval_key") else ""), "  ")
    if not w["risks"]:
        lines.append(f"  none: {w['risks_empty_reason']}")
    return "\n".join(lines)


def skill_stats(cards: list[dict]) -> dict:
    by_status: dict[str, int] = {}
    for c in cards:
        st = (c.get("admission") or {}).get("status", "not_run")
        by_status[st] = by_status.get(st, 0) + 1
    candidates = sum(v for k, v in by_status.items() if k != "not_run")
    admitted = by_status.get("admitted", 0)
    sources = {}
    for c in cards:
        for items in c["preconditions"].values():
            for it in items:
                k = it.get("source", "declared")
                sources[k] = sources.get(k, 0) + 1
    return {"skills": len(cards), "admission": by_status, "admitted": admitted, "candidates": candidates,
            "admission_rate": (admitted / candidates) if candidates else None,
            "with_risks": sum(bool(c.get("risks")) for c in cards),
            "with_evidence_preconditions": sum(any(it.get("source") in ("static", "probe", "compile")
                                                    for items in c["preconditions"].values() for it in items)
                                                for c in cards),
            "probed": sum(bool((c.get("probing") or {}).get("probed")) for c in cards),
            "precondition_sources": sources,
            "mechanisms": sorted({c["mechanism"] for c in cards})}


def format_skill_stats(st: dict) -> str:
    rate = "n/a" if st["admission_rate"] is None else f"{100 * st['admission_rate']:.0f}%"
    return "\n".join([f"skills: {st['skills']} ({len(st['mechanisms'])} mechanisms)",
                      f"admission: {st['admitted']} admitted of {st['candidates']} candidates ({rate}); "
                      + ", ".join(f"{k} {v}" for k, v in sorted(st["admission"].items())),
                      f"with a recorded risk: {st['with_risks']}; with static/probe/compile preconditions: "
                      f"{st['with_evidence_preconditions']}; probed: {st['probed']}"])


# -- the held-out report -------------------------------------------------------------------------------

def _cell(row: dict | None, failure_speedup: float) -> str:
    if row is None:
        return "-"
    if row["status"] == "PASSED":
        lo, hi = row.get("ci95") or (None, None)
        ci = f" [{lo:.2f},{hi:.2f}]" if lo is not None and hi is not None else ""
        return f"{row['speedup']:.3f}x{ci}"
    if row["status"] == "FAILED":
        return f"FAIL ({failure_speedup:g}x)"
    return row["status"]


def _x(v) -> str:
    return "-" if v is None else f"{v:.3f}x"


HELDOUT_TABLE_CONDITIONS = ("idiom", "skills", "control-random", "control-foreign", "control-structural")


def heldout_markdown(report: dict) -> str:
    """The held-out results as Markdown, for the documentation (regenerated from a recorded report by
    `python -m klineage.report.text heldout REPORT.json`): per family and overall the geomean speedup of
    each searching condition over the reference and the instances where skills reached it; the
    published check beside them where the report sets it; then skills against each other condition."""
    summ = report["summary"]
    conds = [c for c in HELDOUT_TABLE_CONDITIONS if c in report["config"]["conditions"]]
    head = ["scope", *conds, "skills at or above the reference"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows = [(f"{fam} ({agg['skills']['instances']})", agg) for fam, agg in summ["families"].items()]
    rows.append((f"overall ({summ['overall']['skills']['instances']})", summ["overall"]))
    for label, agg in rows:
        lines.append(f"| {label} | " + " | ".join(_x(agg[c]["geomean"]) for c in conds)
                     + f" | {agg['skills']['at_or_above_reference']} of {agg['skills']['instances']} |")
    pub = (summ.get("published") or {}).get("published")
    if pub:
        lines.append(f"| published check ({pub['instances']}) | "
                     + " | ".join(f"{pub['geomean'][c]:.2f}x" if c in pub["geomean"] else "-" for c in conds)
                     + f" | {pub['at_or_above_reference']['skills']} of {pub['instances']} |")
    lines.append("")
    for c in summ["comparisons"]:
        lo, hi = c["ci95"]
        lines.append(f"- {c['scope']}: skills / {c['b']} = {c['ratio']:.3f}x [{lo:.3f}, {hi:.3f}], {c['verdict']}")
    return "\n".join(lines)


def _curve(values) -> str:
    return " ".join(f"{'-' if v is None else f'{v:.3f}':>6}" for v in values)


def _curves_in_order(report: dict) -> dict:
    """summary.budget_curves with its scopes in the report's family order (overall last) and its
    conditions in the configuration's order, whatever order a JSON reader gave them."""
    curves = report["summary"].get("budget_curves") or {}
    scopes = [f for f in report["summary"]["families"] if f in curves] + [s for s in ("overall",) if s in curves]
    conds = report["config"]["conditions"]
    return {sc: {c: curves[sc][c] for c in conds if c in curves[sc]} for sc in scopes}


def _budget_curves(report: dict) -> list[str]:
    """The budget curves (summary.budget_curves, each row's budget_curve) as text lines; none without."""
    curves = _curves_in_order(report)
    if not curves:
        return []
    n = max(len(v) for per in curves.values() for v in per.values())
    width = max([len(i["instance"]) for i in report["instances"]] + [len(s) for s in curves])
    head = f"{'':<{width}}  {'condition':<18}  " + " ".join(f"{f'n={k}' if k == 0 else k:>6}" for k in range(n))
    out = ["", "== budget curves: the best speedup the search measured after n gated candidates (geomean over "
               f"instances; none passed yet: {report['config']['failure_speedup']:g}x)", head]
    for scope, per in curves.items():
        for c, vals in per.items():
            out.append(f"{scope:<{width}}  {c:<18}  {_curve(vals)}")
    out.append("per instance (- : no kernel passed yet)")
    for inst in report["instances"]:
        for c in report["config"]["conditions"]:
            row = inst["conditions"].get(c) or {}
            if row.get("budget_curve") is not None:
                out.append(f"{inst['instance']:<{width}}  {c:<18}  {_curve(row['budget_curve'])}")
    return out


def budget_curves_markdown(report: dict) -> str:
    """The budget curves per family and overall as Markdown, for the documentation (regenerated from a
    recorded report by `python -m klineage.report.text curves REPORT.json`): one row per scope and
    searching condition, one column per number of gated candidates."""
    curves = _curves_in_order(report)
    n = max((len(v) for per in curves.values() for v in per.values()), default=0)
    lines = ["| scope | condition | " + " | ".join(str(k) for k in range(n)) + " |", "|" + "---|" * (n + 2)]
    for scope, per in curves.items():
        for c, vals in per.items():
            lines.append(f"| {scope} | {c} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in vals) + " |")
    return "\n".join(lines)


def format_heldout(report: dict) -> str:
    """The held-out report as plain text: per family a table of instances x conditions (speedup over
    the reference [95% interval]), geomeans with failures counted, the comparisons and their verdict,
    the audit in brief, what was not run or not replayed."""
    cfg = report["config"]
    conds = cfg["conditions"]
    fail = cfg["failure_speedup"]
    out = [f"held-out check {report['run_id']} ({report['root']}): {len(report['instances'])} instances, "
           f"budget {cfg['budget']} candidates per instance and condition, {cfg['final_rounds']} final rounds, "
           f"reference vendor mode {cfg['vendor']}"]
    for env in report["environment"]:
        out.append("environment: " + ", ".join(f"{k} {v}" for k, v in env.items()))
    lib = report["library"]
    if lib.get("hash"):
        out.append(f"library: {lib['hash'][:16]} ({lib['skills']} skills, {lib['lineages']} lineages)")
    for note in lib.get("notes", []):
        out.append("library: " + note)
    out.append("speedup = reference time / kernel time, geomean of paired trial ratios; [95% interval over the final "
               f"rounds' timing trials]; FAIL counts as {fail:g}x in geomeans")
    width = max([len(i["instance"]) for i in report["instances"]] + [len("geomean (passed only)")])
    summ = report["summary"]
    for fam, agg in summ["families"].items():
        out.append("")
        out.append(f"== {fam}")
        out.append(f"{'instance':<{width}}  " + "  ".join(f"{c:<22}" for c in conds) + "  reference")
        for inst in report["instances"]:
            if inst["family"] != fam:
                continue
            ref = inst.get("reference") or {}
            out.append(f"{inst['instance']:<{width}}  "
                       + "  ".join(f"{_cell(inst['conditions'].get(c), fail):<22}" for c in conds)
                       + f"  {ref.get('used', '-')}: {ref.get('name', '-')}")
        for label, key in (("geomean", "geomean"), ("geomean (passed only)", "geomean_success_only")):
            out.append(f"{label:<{width}}  " + "  ".join(f"{_x(agg[c][key]):<22}" for c in conds))
        out.append(f"{'passed/failed':<{width}}  " + "  ".join(f"{agg[c]['passed']}/{agg[c]['failed']:<20}" for c in conds))
        out.append(f"{'>= reference':<{width}}  " + "  ".join(
            f"{agg[c]['at_or_above_reference']} ({agg[c]['above_reference_beyond_noise']} beyond noise){'':<6}" for c in conds))
    out.append("")
    out.append("== overall")
    for c in conds:
        a = summ["overall"][c]
        out.append(f"{c:<16} geomean {_x(a['geomean'])} (passed only {_x(a['geomean_success_only'])}), "
                   f"{a['passed']} passed, {a['failed']} failed, {a['at_or_above_reference']} at or above the reference"
                   + (f"; not counted: {', '.join(a['not_counted'])}" if a["not_counted"] else ""))
    out.append("")
    out.append("== skills against the others (geomean ratio [95% interval, timing noise only])")
    for c in summ["comparisons"]:
        lo, hi = c["ci95"]
        out.append(f"{c['scope']:<10} skills / {c['b']:<16} {c['ratio']:.3f}x [{lo:.3f},{hi:.3f}] over "
                   f"{c['instances']} instances: {c['verdict']}")
    out.append("verdict: " + summ["verdict"])
    for fam, e in (summ.get("retrieval") or {}).items():
        out.append(f"retrieval, {fam}: skills and control-foreign ended on the same kernel in {e['same_final_kernel']} of "
                   f"{e['instances']} instances; {e['not_in_foreign']} of the {e['points']} sweep points skills gated were "
                   f"not also gated by control-foreign ({e['steered']} carry a value a retrieved card names)")
    for fam, e in (summ.get("random_coverage") or {}).items():
        if e["whole_space"]:
            out.append(f"control-random, {fam}: gated its kernel's whole sweep space (every configuration built and "
                       f"timed, or refused by nvcc) before its budget ran out on {len(e['whole_space'])} of "
                       f"{e['instances']} instances ({', '.join(e['whole_space'])}): there it found the space's best "
                       "configuration, and no steering of the same space can beat it")
    out += _budget_curves(report)
    pub = summ.get("published")
    if pub:
        out.append("")
        out.append(f"== against the published check ({pub['published']['source']})")
        for c, o in pub["ours"].items():
            out.append(f"{c:<8} this run {_x(o['geomean'])} (passed only {_x(o['geomean_success_only'])}), "
                       f"{o['at_or_above_reference']} of {o['instances']} at or above the reference; published "
                       f"{_x(pub['published']['geomean'][c])}, {pub['published']['at_or_above_reference'][c]} of "
                       f"{pub['published']['instances']}")
        out.append(f"comparable: yes (all {pub['published']['instances']} instances)" if pub["comparable"]
                   else f"comparable: no ({pub['why_not_comparable']})")
    win = summ.get("window_check")
    if win:
        out.append("")
        out.append(f"== timed windows: {win['shapes']} final measurements with host-side times; "
                   f"{len(win['suspect'])} where a side's dispatch outlasted the spin before its window on more "
                   f"than {win['threshold']:.0%} of the timed calls")
        for s in win["suspect"]:
            out.append(f"  {s['instance']}/{s['condition']} {s['side']}: {s['over_backlog']} of {s['timed_calls']} calls "
                       f"(host {s['host_median_us']:.0f} us median, spin {s['backlog_us']:.0f} us)")
    strict = summ.get("strict") or {}
    if strict.get("excluded"):
        out.append("")
        out.append(f"== strictly held out: without {', '.join(strict['excluded'])} (a library lineage measured "
                   "the same case: operator family, dtypes and sizes)")
        for c in conds:
            a = strict["overall"].get(c)
            if a:
                out.append(f"{c:<16} geomean {_x(a['geomean'])} (passed only {_x(a['geomean_success_only'])}), "
                           f"{a['passed']} passed, {a['failed']} failed")
        for c in strict["comparisons"]:
            if c["scope"] == "overall":
                lo, hi = c["ci95"]
                out.append(f"overall    skills / {c['b']:<16} {c['ratio']:.3f}x [{lo:.3f},{hi:.3f}] over "
                           f"{c['instances']} instances: {c['verdict']}")
        out.append("verdict: " + strict["verdict"])
    audit = report["audit"]
    ov = audit["library_overlap"]
    out.append("")
    out.append(f"== memorization audit: library overlap {'none' if ov['clean'] else 'FOUND'}")
    for q in ov["queries"]:
        out.append(f"  {len(q['rows'])} rows: {q['check']}")
    cs = ov["cases"]
    out.append(f"  {len(cs['same_case'])} same cases, {len(cs['same_sizes_other_operator'])} equal sizes of another "
               f"operator or dtype ({cs['heldout_cases']} held-out cases vs {cs['library_cases']} library cases)")
    for c in cs["same_case"]:
        out.append(f"  same case: {c['instance']} {c['shape']} ~ library {c['library_workload']} {c['library_shape']}")
    sim = audit["similarity"]
    out.append(f"  code similarity: {sim['kernels']} produced kernels x {sim['experts']} expert files "
               f"(winnowing k={sim['method']['k']}, window {sim['method']['window']}); highest pairs:")
    for p in sim["top_pairs"][:8]:
        out.append(f"    {p['kernel']} ({', '.join(p['used_by'])[:60]}) ~ {p['expert']}: jaccard {p['jaccard']:.3f}, "
                   f"containment {p['containment']:.3f}")
    for su in audit["skills_used"]:
        names = ", ".join(f"{s['skill']}{' (kept)' if s['kept'] else ''} <- {'/'.join(s['mined_from']) or '?'}"
                          for s in su["skills"])
        out.append(f"  skills used {su['instance']}/{su['condition']}: {names[:300]}")
    out += not_run_lines(report)
    return "\n".join(out)


def not_run_lines(report: dict) -> list[str]:
    """What a held-out run did not run or replay: one line per condition and reason, counting the
    instances it holds for (22 instances without a key are one line, not 22)."""
    out = []
    for key, label in (("not_run", "not run"), ("missing", "not replayed (no record)")):
        groups: dict[tuple[str, str], list[str]] = {}
        for m in report[key]:
            groups.setdefault((m["condition"], m["reason"]), []).append(m["instance"])
        for (cond, reason), names in groups.items():
            reason = reason.removeprefix("not run: ")
            where = f"{cond} on {names[0]}" if len(names) == 1 else f"{cond} on {len(names)} instances"
            out += wrapped(f"{label}: {where}: {shorten(reason, 200)}")
    return out


def format_features(path: str, rep: dict) -> str:
    """`klineage features` as text: one line per feature (family, locus, lines, which evidence found
    it, a helper's name), the compiler's instructions under it, then each compiled function's
    resources and instruction classes."""
    c = rep["compiler"]
    head = f"{path}: {len(rep['features'])} features"
    head += (f" (source {rep['counts']['source']}, compiler {rep['counts']['compiler']}, "
             f"both {rep['counts']['both']})")
    lines = [head]
    if c.get("messages"):
        lines.append(f"  compiler evidence: none: {path} does not compile for {c.get('arch') or 'its target'}; "
                     "nvcc says:")
        lines += [f"    {m}" for m in c["messages"]]
    else:
        lines.append(f"  compiler evidence: {'PTX ' + c.get('arch', '') + ', nvcc ' + c.get('nvcc', '') if c['ok'] else 'none: ' + c['error']}")
    for f in rep["features"]:
        a, b = f["lines"]
        where = f"L{a}" if a == b else f"L{a}-{b}"
        helper = f"  [in __device__ helper {f['helper']}" + (
            f", inlined into {', '.join(f['inlined_into'])}]" if f.get("inlined_into") else "]") if f.get("helper") else ""
        lines += wrapped(f"{f['mechanism']:<20} {f['evidence']:<8} {where:<10} {f['locus']}{helper}", "  ", " " * 42)
        seen = []
        for s in f["compiler"]:
            text = f"{s['what']} @L{s['lines'][0]}" if s["lines"] else s["what"]
            if text not in seen:
                seen.append(text)
        for text in seen[:3]:
            lines += wrapped(f"ptx: {text}", "      ")
        if len(seen) > 3:
            lines.append(f"      ptx: ... {len(seen) - 3} more")
    for fn in rep["functions"]:
        r = fn["resources"]
        res = (f"{r['registers']} registers, {r['shared_bytes']} B shared, spills {r['spill_store_bytes']}/"
               f"{r['spill_load_bytes']} B" if r else "no ptxas report")
        lines += wrapped(f"{fn['kind']} {fn['function']}: {res}"
                         + (f"; {', '.join(f'.{k} {v}' for k, v in fn['directives'].items())}" if fn["directives"] else ""),
                         "  ")
        classes = ", ".join(f"{k} x{v['count']}" for k, v in fn["classes"].items())
        if classes:
            lines += wrapped(classes, "      ", "")
    return "\n".join(lines)


if __name__ == "__main__":  # python -m klineage.report.text heldout|curves REPORT.json
    import json
    import sys
    if len(sys.argv) != 3 or sys.argv[1] not in ("heldout", "curves"):
        sys.exit("usage: python -m klineage.report.text heldout|curves REPORT.json")
    rep = json.loads(open(sys.argv[2]).read())
    print(heldout_markdown(rep) if sys.argv[1] == "heldout" else budget_curves_markdown(rep))
