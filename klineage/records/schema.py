"""The skill card's JSON Schema, generated from klineage.records.skill_card.SkillCard.

    python -m klineage.records.schema           # rewrite klineage/records/skill_card.schema.json
    python -m klineage.records.schema --check   # exit 1 when the checked-in file is stale
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from klineage.records.skill_card import SkillCard

SCHEMA_PATH = Path(__file__).with_name("skill_card.schema.json")


def skill_card_schema() -> dict:
    schema = SkillCard.model_json_schema(mode="serialization")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def schema_text() -> str:
    return json.dumps(skill_card_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = schema_text()
    if argv == ["--check"]:
        if not SCHEMA_PATH.exists() or SCHEMA_PATH.read_text() != text:
            print(f"{SCHEMA_PATH} is stale: run python -m klineage.records.schema", file=sys.stderr)
            return 1
        return 0
    if argv:
        print("usage: python -m klineage.records.schema [--check]", file=sys.stderr)
        return 2
    SCHEMA_PATH.write_text(text)
    print(SCHEMA_PATH)
    return 0


if __name__ == "__main__":
    sys.exit(main())
