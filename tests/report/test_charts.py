"""The charts people read: the held-out chart gives every condition a colour of its own and a legend in
the page's text size, even for a condition with no result; a lineage chart's labels tell every step
apart, where a walk adds one mechanism many times."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from klineage.report import charts
from klineage.report.site import step_label
from klineage.store import open_store

ROOT = Path(__file__).resolve().parents[2]
NS = "{http://www.w3.org/2000/svg}"
CONDITIONS = ["idiom", "skills", "control-random", "control-foreign", "llm"]


def _legend(svg: Path) -> list[tuple[str, str, float]]:
    """(label, fill colour of its patch, font size in pt) of each legend entry."""
    root = ET.fromstring(svg.read_bytes())
    legend = next(g for g in root.iter(f"{NS}g") if (g.get("id") or "").startswith("legend_"))
    fills = [re.search(r"fill:\s*(#[0-9a-f]{6})", p.get("style", "")).group(1)
             for g in legend.iter(f"{NS}g") if (g.get("id") or "").startswith("patch_")
             for p in g.iter(f"{NS}path")]
    texts = [("".join(t.itertext()), float(re.search(r"font-size:\s*([\d.]+)px", t.get("style", "")).group(1)))
             for t in legend.iter(f"{NS}text")]
    return [(label, fill, size) for (label, size), fill in zip(texts, fills)]


def test_heldout_chart_colours_differ_and_its_legend_is_readable(tmp_path):
    groups = [f"instance_{i}" for i in range(22)]  # as many as the held-out check has
    values = {(g, c): 1.0 + 0.1 * i for i, g in enumerate(groups) for c in CONDITIONS[:4]}  # llm: no result
    svg = charts.grouped_bars(tmp_path / "h.svg", groups, CONDITIONS, values, "held-out", "speedup (x)")
    entries = _legend(svg)
    assert [e[0] for e in entries] == CONDITIONS[:4] + ["llm (no result)"]
    assert len({e[1] for e in entries}) == len(CONDITIONS), entries  # no two conditions share a colour
    assert min(e[2] for e in entries) >= 9
    width_pt = float(ET.fromstring(svg.read_bytes()).get("width").removesuffix("pt"))
    assert width_pt <= charts.GROUPED_MAX_WIDTH * 72 * 1.05  # never scaled down to fit the page


def test_distinct_colours_past_the_palette():
    cols = charts._distinct_colors(12)
    assert len(set(cols)) == 12


def test_every_lineage_chart_label_is_its_own():
    with open_store(ROOT / "skills_db" / "skills.duckdb", read_only=True) as s:
        lineages = s.lineages()
    repeated_somewhere = False
    for lin in lineages:
        seen = Counter(t["mechanism"] for t in lin["transitions"])
        repeated_somewhere |= any(n > 1 for n in seen.values())
        labels = [step_label(t, seen[t["mechanism"]] > 1) for t in lin["transitions"]]
        places = [label.rsplit(" [", 1)[0] for label in labels]  # without the step number
        assert len(set(places)) == len(places), (lin["workload_name"], [p for p in places if places.count(p) > 1])
        assert max(map(len, labels)) <= 44
    assert repeated_somewhere


def test_a_step_label_names_the_loop_and_its_line():
    t = {"mechanism": "unroll", "step": 51, "locus": "k:loop:for (int nt = 0; nt < 8; ++nt)#6",
         "features_richer": [{"mechanism": "unroll", "locus": "k:loop:for (int nt = 0; nt < 8; ++nt)#6",
                              "lines": [120, 124]}]}
    assert step_label(t, True) == "+unroll nt<8 L120 [51]"
    assert step_label(t, False) == "+unroll [51]"
