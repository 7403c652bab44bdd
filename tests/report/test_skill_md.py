"""Every skill of the shipped library exported as an Agent Skills folder, validated against the rules
agents load them by: the name (lowercase letters, digits and single hyphens, <= 64 characters, equal
to its folder), the description (<= 1024 characters; what the skill does, when to use it in one
sentence, what it gave), compatibility (<= 500 characters, naming the measured platforms), metadata
of strings, a body of at most 500 lines whose links resolve, and the whole card and carrier in
references/."""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from klineage.cli import main
from klineage.report.skill_md import folder_name, what_it_does
from klineage.store import open_store

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "skills_db" / "skills.duckdb"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("skills")
    db = tmp / "lib.duckdb"
    shutil.copy(SHIPPED, db)
    store = open_store(db)
    skills = {folder_name(s["name"]): s for s in store.skills()}
    store.close()
    r = CliRunner().invoke(main, ["skills", "export", "--db", str(db), "--format", "skill-md", "--out", str(tmp / "out")])
    assert r.exit_code == 0, r.output
    return tmp / "out", skills


def _split(text: str) -> tuple[dict, str]:
    assert text.startswith("---\n")
    front, body = text[4:].split("\n---\n", 1)
    return yaml.safe_load(front), body


def test_one_folder_per_skill(exported):
    out, skills = exported
    assert sorted(p.name for p in out.iterdir()) == sorted(skills)


def test_every_exported_skill_follows_the_rules(exported):
    out, skills = exported
    for folder in sorted(out.iterdir()):
        front, body = _split((folder / "SKILL.md").read_text())
        card = skills[folder.name]["card"]
        name = front["name"]
        assert name == folder.name and 1 <= len(name) <= 64, name
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name), name
        assert set(front) <= {"name", "description", "license", "compatibility", "metadata", "allowed-tools"}
        desc = front["description"]
        assert isinstance(desc, str) and 0 < len(desc) <= 1024, (name, len(desc))
        # what it does, when to use it (one sentence), what it gave
        assert desc.startswith(what_it_does(card)[:60])
        when = re.search(r"Use it on a CUDA kernel [^\n]*?\.(?= Measured:)", desc)
        assert when, desc
        assert "Measured: median" in desc and "x" in desc.split("Measured: median")[1]
        assert "previous=" not in desc and "version=" not in desc  # no ladder jargon
        comp = front["compatibility"]
        assert isinstance(comp, str) and len(comp) <= 500
        for platform in card["scope"]["platforms"]:
            assert platform in comp
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in front["metadata"].items())
        assert front["metadata"]["skill_id"] == card["skill_id"]
        assert len(body.splitlines()) <= 500, (name, len(body.splitlines()))
        prose = re.sub(r"```.*?```", "", body, flags=re.S)
        links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", prose)
        assert "references/card.md" in links and "references/carrier.md" in links
        for link in links:
            assert (folder / link).is_file(), (name, link)
        assert (folder / "references" / "card.md").read_text() == skills[folder.name]["card_md"]
        full = (folder / "references" / "carrier.md").read_text()
        assert card["carrier"]["before"] in full and card["carrier"]["after"] in full


def test_bodies_stay_small(exported):
    out, _ = exported
    sizes = [len((f / "SKILL.md").read_text()) for f in out.iterdir()]
    assert max(sizes) < 20_000  # about 5000 tokens: what an agent loads on activation


def test_folder_names_are_unique_or_refused():
    from klineage.report.skill_md import export_skill_md
    s = {"name": "a/b", "skill_id": "1", "mechanism": "a", "card": {}, "card_md": ""}
    with pytest.raises(ValueError, match="share the folder name 'a-b'"):
        export_skill_md([s, {**s, "name": "a_b"}], Path("/nonexistent"))
    assert folder_name("--Vector__Access/Global--Load--") == "vector-access-global-load"
    assert len(folder_name("x" * 100)) == 64
