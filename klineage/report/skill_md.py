"""Export skills as Agent Skills folders: <out>/<skill-name>/SKILL.md with YAML front matter."""
from __future__ import annotations

import json
import re
from pathlib import Path


def folder_name(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:64]


def _yaml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid YAML double-quoted scalar


def skill_md(skill: dict) -> str:
    card = skill["card"]
    desc = card["intent"].replace("\n", " ")
    if len(desc) > 1000:
        desc = desc[:997] + "..."
    front = ["---", f"name: {folder_name(skill['name'])}", f"description: {_yaml_str(desc)}",
             "metadata:", f"  skill_id: {_yaml_str(skill['skill_id'])}", f"  mechanism: {_yaml_str(skill['mechanism'])}",
             f"  median_speedup: {card['effects']['median_speedup']:.4f}", "---", ""]
    return "\n".join(front) + skill["card_md"]


def export_skill_md(skills: list[dict], out: Path) -> list[Path]:
    """Write one folder per skill; returns the SKILL.md paths (folders are replaced, not merged)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for s in skills:
        d = out / folder_name(s["name"])
        d.mkdir(parents=True, exist_ok=True)
        p = d / "SKILL.md"
        p.write_text(skill_md(s))
        written.append(p)
    return written
