"""Ladder-only families as data: each `declared.toml` on the families package's path (the shipped one
is klineage/mechanisms/families/declared.toml) holds one table per family that only a version ladder
(or an LLM proposer) names. Each becomes a Family whose Mechanism has no detector (DETECTABLE False):
audits see the family only through what a ladder declares; skills carry its known preconditions.
"""
from __future__ import annotations

import tomllib
from functools import lru_cache
from pathlib import Path

from klineage.errors import InputError
from klineage.mechanisms.base import BOTTLENECKS, Family, Feature, Kernel, Mechanism

FILE = "declared.toml"
KEYS = ("description", "addresses", "rules", "hardware", "written_with", "preconditions")
CATEGORIES = ("data_types", "layout", "storage", "pipeline", "hardware")


class Declared(Mechanism):
    """A mechanism only a version ladder (or an LLM proposer) names: no detector signature."""
    STRUCTURAL = True
    DETECTABLE = False

    def detect(self, k: Kernel) -> list[Feature]:
        return []


def _names(value, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{where} = {value!r}: expected a list of names")
    return tuple(value)


def _preconditions(value, where: str) -> dict[str, list[dict]]:
    if not isinstance(value, dict):
        raise InputError(f"{where}: expected [[NAME.preconditions.CATEGORY]] tables")
    out = {}
    for cat, items in value.items():
        if cat not in CATEGORIES:
            raise InputError(f"{where}.{cat}: unknown category (one of {', '.join(CATEGORIES)})")
        if not isinstance(items, list) or not all(isinstance(it, dict) and set(it) == {"condition", "fails_without"}
                                                  for it in items):
            raise InputError(f"{where}.{cat}: each entry needs condition and fails_without, nothing else")
        out[cat] = [dict(it) for it in items]
    return out


@lru_cache(maxsize=8)
def _read(path: str, mtime: float, first: int) -> tuple[Family, ...]:
    try:
        raw = tomllib.loads(Path(path).read_text())
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{path} is not valid TOML ({e}): fix it") from e
    out = []
    for i, (name, t) in enumerate(raw.items()):
        where = f"{path}: [{name}]"
        if not name.isidentifier() or not isinstance(t, dict):
            raise InputError(f"{where}: a family is a table named by an identifier")
        unknown = sorted(set(t) - set(KEYS))
        if unknown or "description" not in t:
            raise InputError(f"{where}: " + (f"unknown key {unknown[0]!r} (allowed: {', '.join(KEYS)})" if unknown
                                             else "description is missing"))
        addresses = _names(t.get("addresses", []), f"{where} addresses")
        if not set(addresses) <= set(BOTTLENECKS):
            raise InputError(f"{where} addresses = {list(addresses)}: use {', '.join(BOTTLENECKS)}")
        cls = type("".join(p.title() for p in name.split("_")), (Declared,), {
            "NAME": name, "DESCRIPTION": str(t["description"]), "__module__": __name__,
            "PRECONDITIONS": _preconditions(t.get("preconditions", {}), f"{where} preconditions")})
        out.append(Family(cls, rank=first + 10 * i, addresses=frozenset(addresses),
                          rules=_names(t.get("rules", []), f"{where} rules"),
                          hardware=_names(t.get("hardware", []), f"{where} hardware"),
                          written_with=_names(t.get("written_with", []), f"{where} written_with")))
    return tuple(out)


def declared_families(folders, first_rank: int) -> list[Family]:
    """The families of each folder's declared.toml, ranked from `first_rank` on in folder then file
    order (after every family module)."""
    out: list[Family] = []
    for folder in folders:
        p = Path(folder) / FILE
        if p.is_file():
            out.extend(_read(str(p), p.stat().st_mtime, first_rank + 10 * len(out)))
    return out
