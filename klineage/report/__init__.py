"""Rendering of results: plain text for the CLI (text), SKILL.md export (skill_md), and the static
HTML report (site; charts by matplotlib, highlighting by pygments, imported only when used)."""
from __future__ import annotations


def render_report(store, out_dir, progress=None):
    """Write the site; return {"index": path, "lineages": [paths], "skills": [paths], "heldout": path,
    "charts": [paths]} (see klineage.report.site)."""
    from klineage.report.site import render_report as _render
    return _render(store, out_dir, progress)
