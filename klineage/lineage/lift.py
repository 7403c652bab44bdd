"""Lift accepted transitions into skills.

Transitions are grouped by (mechanism, anchor signature); each group becomes one skill whose
fields follow shared/DESIGN.md. Read forward, a transition K_{i-1} -> K_i adds the mechanism: the
carrier's `before` is the simpler kernel's code and `after` the richer one's. Natural-language
fields are rendered from jinja2 templates (templates/*.j2, StrictUndefined), never written per
skill. `check_contract` enforces provides = features added, requires within features before,
conflicts disjoint from both.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import re
import statistics
from functools import lru_cache
from typing import Callable

import jinja2

from klineage.gate.compare import platform_of
from klineage.mechanisms import family_specs, registry
from klineage.records import to_plain
from klineage.records.skill_card import CATEGORIES
from klineage.records.skill_card import (Admission, AdmissionTrial, Anchor, Carrier, Effects, Probing, Rederivation,
                                         Risk, Scope, SkillCard)

LANGUAGE = "CUDA C++"
@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("klineage.lineage", "templates"),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                              trim_blocks=False, lstrip_blocks=False)


def _anchor_query(family) -> str:
    """The tree-sitter query a card's anchor shows: its family's (Family.anchor_query)."""
    return family.anchor_query if family is not None and family.anchor_query else "(declared by the version ladder)"


def render(template: str, **ctx) -> str:
    return _env().get_template(template).render(**ctx)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def shape_text(shape: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


def _diff(a: str, b: str, limit: int = 80) -> str:
    lines = list(difflib.unified_diff(a.splitlines(), b.splitlines(), "simpler", "richer", n=2, lineterm=""))
    return "\n".join(lines[:limit] + ([f"... ({len(lines) - limit} more diff lines)"] if len(lines) > limit else []))


ELIDED = "// ..."  # marks code left out of a carrier, so a snippet never reads as whole when it is not


def _changed_code(simpler: str, richer: str, limit: int = 40, context: int = 1) -> tuple[str, str]:
    """The code a ladder step removed and added, for the carrier's before/after of a step that no
    single rewrite describes: on each side the changed code lines with `context` unchanged lines
    around them (where nothing changed on one side, the lines around the place of the change), and
    a `// ...` line, indented as the code it stands for, wherever code is left out (comments and
    blank lines are not shown). Past `limit` lines a side ends with `// ... N more lines`."""
    from klineage.gate.guard import strip_comments

    def code_lines(src):  # original lines that hold code (comment-only and blank lines dropped)
        return [o for o, c in zip(src.splitlines(), strip_comments(src)[0].splitlines()) if c.strip()]
    a, b = code_lines(simpler), code_lines(richer)
    changed_a, changed_b, anchor_a, anchor_b = set(), set(), set(), set()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            changed_a.update(range(i1, i2))
        if tag in ("replace", "insert"):
            changed_b.update(range(j1, j2))
        if tag == "insert":
            anchor_a.update((i1 - 1, i1))
        if tag == "delete":
            anchor_b.update((j1 - 1, j1))
    return _elided(a, changed_a, anchor_a, limit, context), _elided(b, changed_b, anchor_b, limit, context)


def _elided(lines: list[str], changed: set[int], anchors: set[int], limit: int, context: int) -> str:
    shown = sorted({k for i in changed for k in range(i - context, i + context + 1)} | anchors)
    shown = [i for i in shown if 0 <= i < len(lines)]
    out: list[str] = []

    def mark(like: str) -> str:
        return like[:len(like) - len(like.lstrip())] + ELIDED

    prev = -1
    for i in shown:
        if i != prev + 1:
            out.append(mark(lines[i]))
        out.append(lines[i])
        prev = i
    if shown and shown[-1] != len(lines) - 1:
        out.append(mark(lines[shown[-1]]))
    if len(out) > limit:
        rest = sum(1 for x in out[limit:] if x.strip() != ELIDED)
        out = out[:limit] + [f"{ELIDED} {rest} more line{'s' if rest != 1 else ''}"]
    return "\n".join(out)


def _feature_pairs(features: list[dict]) -> set[tuple[str, str]]:
    return {(f["anchor"], f["mechanism"]) for f in features}


def check_contract(card: SkillCard | dict, transitions: list[dict]) -> None:
    """Raise ValueError when provides/requires/conflicts contradict the evidence (`card`: a
    SkillCard, or a stored card, validated as one first)."""
    if not isinstance(card, SkillCard):
        card = SkillCard.model_validate(card)
    prov = {tuple(p) for p in card.provides}
    req = {tuple(r) for r in card.requires}
    conf = {tuple(c) for c in card.conflicts}
    for t in transitions:
        before = _feature_pairs(t["features_simpler"])
        after = _feature_pairs(t["features_richer"])
        added = after - before
        if t["declared"] and not added:
            added = {(t["anchor"], t["mechanism"])}
        if not prov <= added | {(t["anchor"], t["mechanism"])}:
            raise ValueError(f"skill {card.name}: provides {sorted(prov)} not added by transition {t['transition_id']}")
        if not req <= before:
            raise ValueError(f"skill {card.name}: requires {sorted(req - before)} absent before {t['transition_id']}")
        if conf & (before | after):
            raise ValueError(f"skill {card.name}: conflicts {sorted(conf)} present in {t['transition_id']}")


def lift(transitions: list[dict], rejections: list[dict], source_of: Callable[[str], str | None],
         analysis=None) -> list[dict]:
    """Skills from accepted transitions (sorted by name); `source_of(kernel_hash)` gives a source.
    `analysis` (lineage/analyze.Analysis) adds repeat-round effects, probes, static and compile
    evidence per transition, and admission verdicts per skill."""
    per_t = analysis.per_transition if analysis is not None else {}
    mechs, specs = registry(), family_specs()
    groups: dict[tuple[str, str], list[dict]] = {}
    for t in transitions:
        groups.setdefault((t["mechanism"], t["anchor"]), []).append(t)
    skills = []
    for (mech_name, anchor), ts in sorted(groups.items()):
        mech = mechs.get(mech_name)
        description = mech.DESCRIPTION if mech else mech_name.replace("_", " ")
        ts = sorted(ts, key=lambda t: (t["workload_name"], t["lineage_id"], t["step"]))
        first = ts[0]
        per_case = []
        for t in ts:
            rounds = per_t.get(t["transition_id"], {}).get("rounds", [])
            for e in t["effects"]:
                later = [next((x for x in r["effects"] if x["shape"] == e["shape"]), None) for r in rounds]
                later = [x for x in later if x is not None]
                trials = list(e["trial_speedups"]) + [v for x in later for v in x["trial_speedups"]]
                med_t = statistics.median(trials)
                spread_t = (max(trials) - min(trials)) / med_t if med_t else 0.0
                per_case.append({"workload": t["workload_name"], "shape": e["shape"], "shape_text": shape_text(e["shape"]),
                                 "platform": platform_of(t["env"]), "speedup": e["speedup"],
                                 "trial_speedups": e["trial_speedups"], "spread": spread_t,
                                 "workers": 1 + len(later),
                                 "worker_speedups": [e["speedup"]] + [x["speedup"] for x in later],
                                 "label": effect_label(trials),
                                 "richer_us": e["richer_us"], "simpler_us": e["simpler_us"],
                                 "transition_id": t["transition_id"]})
        speedups = [c["speedup"] for c in per_case] or [1.0]
        med = statistics.median(speedups)
        # spread: the largest trial-to-trial spread of any case (how repeatable each figure is);
        # the range across cases (how much the gain depends on the case) is reported apart.
        spread = max((c["spread"] for c in per_case), default=0.0)
        case_range = [min(speedups), max(speedups)]
        platforms = sorted({c["platform"] for c in per_case})
        cases = sorted({f"{c['workload']} {c['shape_text']}" for c in per_case})
        examples = []
        for t in ts:
            cfg = dict(t.get("config") or {})
            rich = next((f for f in t["features_richer"] if f["mechanism"] == mech_name and f["locus"] == t["locus"]), None)
            if rich:
                cfg.update(rich.get("detail", {}))
            cfg = {k: v for k, v in cfg.items() if isinstance(v, (str, int, float)) and len(str(v)) < 120}
            if cfg and cfg not in examples:
                examples.append(cfg)
        measured_cfg = measured_configuration(ts, source_of)
        pre = {c: [] for c in CATEGORIES}
        rich = next((f for f in first["features_richer"] if f["mechanism"] == mech_name
                     and f["locus"] == first["locus"]), None)
        # a bundled ladder step ("a+b") carries the known preconditions of each of its families
        families = [mech] if mech else [mechs[n] for n in first.get("mechanisms", []) if n in mechs]
        for cat, items in ((c, i) for fam in families for c, i in fam.PRECONDITIONS.items()):
            for it in items:
                _add_pre(pre, cat, {"condition": it["condition"], "fails_without": it["fails_without"],
                                    "evidence": "the mechanism family's known precondition",
                                    "source": "declared", "lines": rich["lines"] if rich else None,
                                    "kernel": first["richer_hash"][:12]})
        probes_tried, probe_risks, compile_checked = [], [], {}
        for t in ts:
            for it in t.get("domain", []):  # the workload's declared DOMAIN (klineage.workload)
                _add_pre(pre, it["category"], {**{k: v for k, v in it.items() if k != "category"},
                                               "source": "domain", "lines": None, "kernel": t["richer_hash"][:12]})
            a = per_t.get(t["transition_id"], {})
            for it in a.get("static", []):
                _add_pre(pre, it["category"], {**{k: v for k, v in it.items() if k != "category"}, "source": "static"})
            pr = a.get("probe") or {}
            for it in pr.get("preconditions", []):
                _add_pre(pre, it["category"], {**{k: v for k, v in it.items() if k != "category"}, "source": "probe"})
            probe_risks += [dict(r, workload=t["workload_name"], transition_id=t["transition_id"])
                            for r in pr.get("risks", [])]
            probes_tried += [f"{t['workload_name']} {n}" for n in pr.get("tried", []) if f"{t['workload_name']} {n}" not in probes_tried]
            sc = a.get("scope") or {}
            for it in sc.get("preconditions", []):
                _add_pre(pre, "hardware", {**{k: v for k, v in it.items() if k != "category"}, "source": "compile"})
            for arch, v in (sc.get("compile_checked") or {}).items():
                compile_checked[arch] = compile_checked.get(arch, True) and bool(v.get("richer"))
        risks = [{"kind": r["kind"], "message": r["message"], "locus": r["locus"], "status": r.get("status"),
                  "eval_key": r.get("eval_key"), "lineage_id": r.get("lineage_id"),
                  "workload": r.get("workload_name", ""), "failing_shapes": r.get("failing_shapes", [])}
                 for r in rejections if r["mechanism"] == mech_name
                 and r["kind"] not in ("not_applicable", "replay_missing", "not_on_chain")] + probe_risks
        probed = any((per_t.get(t["transition_id"], {}).get("probe") or {}).get("probed") for t in ts)
        before_common = set.intersection(*[_feature_pairs(t["features_simpler"]) for t in ts])
        provides = sorted({(anchor, mech_name)})
        requires = sorted(p for p in before_common if p[1] in {f["mechanism"] for f in first["features_richer"]
                                                              if mechs.get(f["mechanism"]) and mechs[f["mechanism"]].STRUCTURAL})
        conflicts = sorted(tuple(c) for c in (specs[mech_name].conflicts if mech_name in specs else ()))
        prior = sorted({f["mechanism"] for t in ts for f in t["features_simpler"]})
        name = f"{mech_name}/{slug(anchor)}"
        skill_id = hashlib.sha256(json.dumps([mech_name, anchor, [t["transition_id"] for t in ts]]).encode()).hexdigest()[:16]
        simpler_src, richer_src = source_of(first["simpler_hash"]), source_of(first["richer_hash"])
        carrier_before, carrier_after = first["after"], first["before"]
        if first["declared"] and simpler_src is not None and richer_src is not None:
            carrier_before, carrier_after = _changed_code(simpler_src, richer_src)
        paths = sorted({f.get("path") or f["locus"] for t in ts for f in t["features_richer"]
                        if f["mechanism"] == mech_name and f["locus"] == t["locus"]}) or [
            f"{t['workload_name']}: {t['locus']}" for t in ts]
        example_text = ", ".join(f"{k}={v}" for k, v in list(examples[0].items())[:3]) if examples else ""
        intent = render("intent.j2", description=description[:1].upper() + description[1:], anchor=anchor,
                        examples=example_text, claim=effect_claim(med),
                        cases=", ".join(cases), median=med, n=len(ts), spread=spread, case_range=case_range,
                        platforms=", ".join(platforms) or "no measured platform").strip()
        card = SkillCard(
            skill_id=skill_id, name=name, mechanism=mech_name,
            anchor=Anchor(signature=anchor, query=_anchor_query(specs.get(mech_name)), paths=paths),
            carrier=Carrier(before=carrier_before, after=carrier_after,
                            forward_rewrite=(f"klineage.mechanisms.{mech_name}: reoptimize" if not first["declared"]
                                             else f"ladder step {first['config'].get('previous')} -> "
                                                  f"{first['config'].get('version')}"),
                            example_configuration=examples,
                            measured_configuration=measured_cfg,
                            diff=_diff(simpler_src, richer_src) if simpler_src and richer_src else ""),
            preconditions=pre,
            effects=Effects(median_speedup=med, spread=spread, case_range=case_range, per_case=per_case),
            evidence=[t["transition_id"] for t in ts],
            evaluations=sorted({k for t in ts for k in (t["eval_richer"], t["eval_simpler"], t["eval_rederived"])}),
            risks=risks,
            risks_empty_reason="" if risks else (
                f"no rejected attempt of this mechanism is on record and {probe_summary(probes_tried)}" if probed
                else "no rejected attempt of this mechanism is on record; its kernels were not probed"),
            probing=Probing(probed=probed, tried=probes_tried,
                            violating=sorted({r["probe"] for r in probe_risks}),
                            summary=(probe_summary(probes_tried) if probed and not probe_risks else
                                     f"{len({r['probe'] for r in probe_risks})} probe(s) violate it" if probe_risks
                                     else "not probed")),
            scope=Scope(cases=cases, languages=[LANGUAGE], platforms=platforms, prior_mechanisms=prior,
                        measured_platforms=platforms,
                        compile_checked={a: ("compiles" if ok else "fails") for a, ok in sorted(compile_checked.items())}),
            provides=[list(p) for p in provides], requires=[list(r) for r in requires],
            conflicts=[list(c) for c in conflicts],
            verification=[Rederivation(transition_id=t["transition_id"], identical=t["rederived_identical"],
                                       rederived_hash=t["rederived_hash"], eval_rederived=t["eval_rederived"],
                                       ratios=[r for tr in t["rederive_trials"] for r in tr["speed_ratios"]],
                                       ok=all(tr["ok"] for tr in t["rederive_trials"])) for t in ts],
            source_lineages=sorted({t["lineage_id"] for t in ts}),
            intent=intent,
            admission=Admission(status="not_run", trials=[], reason="admission was not run for this library"),
        )
        check_contract(card, ts)
        adm = (analysis.admission.get(skill_id) if analysis is not None else None)
        if adm is not None:
            apply_admission(card, adm)
        plain = to_plain(card)
        skills.append({"skill_id": skill_id, "name": name, "mechanism": mech_name, "card": plain,
                       "card_md": render("card.md.j2", card=plain)})
    return sorted(skills, key=lambda s: s["name"])


def measured_configuration(ts: list[dict], source_of: Callable[[str], str | None]) -> list[dict]:
    """The quantitative configuration (klineage.tuning.configuration: tile extents, threads, warps,
    stages, per-thread factors, occupancy) of each kernel a skill was measured in, read forward: the
    richer kernel of each transition. One entry per distinct (workload, configuration)."""
    from klineage.tuning import configuration
    out = []
    for t in ts:
        src = source_of(t["richer_hash"])
        values = configuration(src) if src else []
        entry = {"workload": t["workload_name"], "kernel": t["richer_hash"][:12], "values": values}
        if values and not any(e["workload"] == entry["workload"] and e["values"] == values for e in out):
            out.append(entry)
    return out


def apply_admission(card: SkillCard, verdict: dict) -> None:
    """Put an admission verdict into a card: its status, its trials in the verification log, the
    failures it met as risks."""
    admission = Admission(status=verdict["status"], reason=verdict["reason"], trials=verdict["trials"])
    if verdict.get("claim"):
        admission.claim = verdict["claim"]
    card.admission = admission
    card.verification = [v for v in card.verification if getattr(v, "kind", None) != "admission"] + [
        AdmissionTrial(**{**t, "kind": "admission"}) for t in verdict["trials"]]
    if verdict["risks"]:
        card.risks = [r for r in card.risks if r.kind != "roundtrip"] + [Risk(**r) for r in verdict["risks"]]
        card.risks_empty_reason = ""


CLAIM_FASTER, CLAIM_SLOWER = 1.005, 0.995


def effect_claim(median: float) -> str:
    """The effect a card states of itself, from its median measured speedup (what its intent says):
    faster at >= CLAIM_FASTER, slower at <= CLAIM_SLOWER, neutral (no measurable difference) between."""
    return "faster" if median >= CLAIM_FASTER else ("neutral" if median > CLAIM_SLOWER else "slower")


def effect_label(trial_speedups: list[float], floor: float = 0.01) -> str:
    """faster / slower when every trial (over every worker) is beyond 1 +- floor; else neutral."""
    if trial_speedups and min(trial_speedups) > 1 + floor:
        return "faster"
    if trial_speedups and max(trial_speedups) < 1 - floor:
        return "slower"
    return "neutral"


def probe_summary(tried: list[str]) -> str:
    return f"no violating probe found ({len(tried)} probes tried)"


def _add_pre(pre: dict, category: str, item: dict) -> None:
    if category not in pre:
        raise ValueError(f"precondition category {category!r} is not one of {CATEGORIES}")
    if not any(p["condition"] == item["condition"] and p.get("source") == item.get("source") for p in pre[category]):
        pre[category].append(item)
