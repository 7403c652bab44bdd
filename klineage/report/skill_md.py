"""Export skills as Agent Skills folders, as agents load them:

    <out>/<name>/SKILL.md               front matter (name, description, compatibility, metadata) and a
                                        short body: what it does, when to use it, what it gave, how to
                                        apply it (the carrier in brief), its risks in brief
    <out>/<name>/references/card.md     the whole card: every precondition, the per-case evidence
                                        table, the risks, the verification log
    <out>/<name>/references/carrier.md  the carrier in full: before, after, and the step's diff

The name is lowercase letters, digits and single hyphens, at most 64 characters, and equal to its
folder; the description (at most 1024 characters) says what the skill does, when to use it (its
preconditions in one sentence) and what it gave; the body stays under 500 lines; `compatibility`
names the platforms it was measured on and the targets it builds for."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

NAME_MAX, DESCRIPTION_MAX, COMPATIBILITY_MAX, BODY_MAX_LINES = 64, 1024, 500, 500
NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
CARRIER_LINES = 40  # of each side of the carrier shown in SKILL.md; references/carrier.md has it whole


def folder_name(name: str) -> str:
    """The skill's Agent Skills name: lowercase letters, digits and single hyphens, <= 64 characters."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:NAME_MAX].rstrip("-")


def _yaml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid YAML double-quoted scalar


def _clip(text: str, n: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n - 3].rstrip() + "..."


def what_it_does(card: dict) -> str:
    """The mechanism's own description, without the anchor and the measurements the intent adds."""
    what = card["intent"].split(", applied at the ")[0].strip()
    return what[:1].upper() + what[1:]


def _declared(card: dict) -> list[str]:
    return [it["condition"] for items in card["preconditions"].values() for it in items
            if it.get("source", "declared") == "declared"]


def _builds_for(card: dict) -> tuple[list[str], list[str]]:
    """(targets the skill's kernels build for, targets they do not), oldest first."""
    from klineage.gate.compile import ARCHS
    checked = (card.get("scope") or {}).get("compile_checked") or {}
    order = sorted(checked, key=lambda a: (ARCHS.index(a) if a in ARCHS else len(ARCHS), a))
    return [a for a in order if checked[a] == "compiles"], [a for a in order if checked[a] != "compiles"]


def when_to_use(card: dict, limit: int = 600) -> str:
    """One sentence: the kernel it fits (what it must already have) and its declared preconditions."""
    needs = sorted({r[-1] if isinstance(r, list) else r for r in card.get("requires") or []})
    has = f"that already has {', '.join(needs)}, " if needs else ""
    conds = _declared(card)
    builds, fails = _builds_for(card)
    if fails and builds:
        conds.append(f"the target is {' or '.join(builds)}")
    body = "; ".join(c.rstrip(".") for c in conds) or f"it lacks {card['mechanism']} (no precondition was found to fail)"
    return _clip(f"Use it on a CUDA kernel {has}when: {body}.", limit)


def what_it_gave(card: dict) -> str:
    e = card["effects"]
    lo, hi = e["case_range"]
    cases = sorted({c["workload"] for c in e.get("per_case", [])})
    platforms = ", ".join((card.get("scope") or {}).get("platforms") or ["no platform"])
    slower = " (slower in some cases: read the cases before using it)" if lo < 0.95 <= hi or hi < 0.995 else ""
    return (f"Measured: median {e['median_speedup']:.2f}x, {lo:.2f}x to {hi:.2f}x over {len(e.get('per_case', []))} "
            f"cases ({', '.join(cases)}) on {platforms}{slower}.")


def description(card: dict) -> str:
    """What it does, when to use it, what it gave: at most 1024 characters."""
    what, gave = _clip(what_it_does(card), 300).rstrip(".") + ".", what_it_gave(card)
    room = DESCRIPTION_MAX - len(what) - len(gave) - 2
    return f"{what} {when_to_use(card, room)} {gave}"


def compatibility(card: dict) -> str:
    platforms = ", ".join((card.get("scope") or {}).get("platforms") or []) or "no platform"
    builds, fails = _builds_for(card)
    text = f"CUDA C++ kernels built with nvcc. Measured on {platforms}."
    if builds:
        text += f" Builds for {', '.join(builds)}" + (f"; not for {', '.join(fails)}" if fails else "") + "."
    return _clip(text, COMPATIBILITY_MAX)


def _code(text: str, n: int) -> str:
    lines = (text or "").splitlines()
    if len(lines) > n:
        lines = lines[:n] + [f"// ... {len(lines) - n} more lines: references/carrier.md"]
    return "\n".join(lines)


def skill_body(skill: dict) -> str:
    card = skill["card"]
    car = card.get("carrier") or {}
    out = [f"# {card['name']}", "", what_it_does(card).rstrip(".") + ".", "", "## When to use it", "",
           when_to_use(card, 2000)]
    conflicts = [c[-1] if isinstance(c, list) else c for c in card.get("conflicts") or []]
    if conflicts:
        out.append(f"Not together with {', '.join(conflicts)}.")
    builds, fails = _builds_for(card)
    if fails:
        out.append(f"It builds for {', '.join(builds) or 'no checked target'} only (not {', '.join(fails)}).")
    out += ["", "## What it gave", "", what_it_gave(card),
            "Every case, with latencies and trial spread: [references/card.md](references/card.md#effects).", "",
            "## How to apply it", "", f"Forward rewrite: {car.get('forward_rewrite', '-')}."]
    for m in car.get("measured_configuration") or []:
        vals = ", ".join(f"{v['name']}={v['value']}" for v in m["values"])
        out.append(f"- measured in {m['workload']} with {vals}")
    out += ["", "Before (without it):", "```cuda", _code(car.get("before", ""), CARRIER_LINES), "```",
            "After (with it):", "```cuda", _code(car.get("after", ""), CARRIER_LINES), "```",
            "`// ...` marks code left out; the whole carrier and the step's diff: "
            "[references/carrier.md](references/carrier.md).", "", "## Risks", ""]
    risks = card.get("risks") or []
    for r in risks[:5]:
        out.append(f"- {r.get('kind')} ({r.get('workload') or '?'}): {_clip(r.get('message', ''), 200)}")
    if len(risks) > 5:
        out.append(f"- {len(risks) - 5} more: [references/card.md](references/card.md#risks)")
    if not risks:
        out.append(card.get("risks_empty_reason") or "none recorded")
    out += ["", f"Admission: {(card.get('admission') or {}).get('status', 'not run')}. Every precondition with "
            "its evidence, the verification log and the transitions behind this skill: "
            "[references/card.md](references/card.md).", ""]
    return "\n".join(out)


def skill_md(skill: dict) -> str:
    card = skill["card"]
    front = ["---", f"name: {folder_name(skill['name'])}", f"description: {_yaml_str(description(card))}",
             f"compatibility: {_yaml_str(compatibility(card))}", "metadata:",
             f"  skill_id: {_yaml_str(skill['skill_id'])}", f"  mechanism: {_yaml_str(skill['mechanism'])}",
             f"  median_speedup: {_yaml_str(format(card['effects']['median_speedup'], '.4f'))}",
             f"  admission: {_yaml_str((card.get('admission') or {}).get('status', 'not_run'))}",
             "---", ""]
    return "\n".join(front) + skill_body(skill)


def carrier_md(skill: dict) -> str:
    car = skill["card"].get("carrier") or {}
    return "\n".join([f"# {skill['name']}: the carrier", "", f"Forward rewrite: {car.get('forward_rewrite', '-')}", "",
                      "Before (without it):", "```cuda", car.get("before", ""), "```", "", "After (with it):",
                      "```cuda", car.get("after", ""), "```", "", "The step's diff (simpler -> richer kernel):",
                      "```diff", car.get("diff", "") or "(none recorded)", "```", ""])


def export_skill_md(skills: list[dict], out: Path) -> list[Path]:
    """Write one folder per skill (a folder already there is replaced); returns the SKILL.md paths.
    ValueError when two skills would get the same folder name."""
    names = [folder_name(s["name"]) for s in skills]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"skills share the folder name {dup[0]!r}: rename one")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for s, name in zip(skills, names):
        d = out / name
        if d.exists():
            shutil.rmtree(d)
        (d / "references").mkdir(parents=True)
        p = d / "SKILL.md"
        p.write_text(skill_md(s))
        (d / "references" / "card.md").write_text(s["card_md"])
        (d / "references" / "carrier.md").write_text(carrier_md(s))
        written.append(p)
    return written
