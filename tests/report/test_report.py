"""The static HTML report (klineage.report.render_report) rendered from a copy of the shipped library.

- every page exists; lineage pages carry their latency chart and one highlighted diff per step;
  skill pages carry every card section; every local link and image resolves (anchors included),
  and nothing points outside the folder;
- charts are SVG files written by matplotlib;
- the held-out page says plainly that no results exist, and shows the newest stored held-out report
  (charts per family with intervals, tables, verdict, audit) once one exists;
- in headless Chromium (skipped when no Chromium binary is found) the index, a lineage page and a
  skill page load without a console message, their DOM holds the charts, and their screenshots are
  PNGs (kept under $KLINEAGE_REPORT_SHOTS when that is set).
"""
from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markupsafe import escape

from klineage.report import render_report
from klineage.store import open_store
from tests.shipped import shipped_workload_dirs

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "skills_db" / "skills.duckdb"
SKILL_SECTIONS = ("intent", "anchor", "carrier", "preconditions", "effects", "risks", "scope", "admission",
                  "probing", "evidence")
CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome",
                                                        "google-chrome-stable")) if p), None)
# CI installs Debian's chromium and sets KLINEAGE_REQUIRE_BROWSER=1: there a missing browser fails the run
if CHROMIUM is None and os.environ.get("KLINEAGE_REQUIRE_BROWSER") == "1":
    raise RuntimeError("KLINEAGE_REQUIRE_BROWSER=1 but no chromium on PATH: apt-get install chromium")
requires_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium / chromium-browser / google-chrome on PATH")


class Page(HTMLParser):
    """What the tests need of one HTML file: links, image sources, ids, and elements by class."""

    def __init__(self, path: Path):
        super().__init__()
        self.path = path
        self.links: list[str] = []
        self.ids: set[str] = set()
        self.classes: dict[str, int] = {}
        self.imgs: list[str] = []
        self.inline_svgs = 0
        self.feed(path.read_text(encoding="utf-8"))

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        for c in (a.get("class") or "").split():
            self.classes[c] = self.classes.get(c, 0) + 1
        if tag in ("a", "link") and a.get("href"):
            self.links.append(a["href"])
        if tag in ("img", "script", "iframe", "source") and a.get("src"):
            self.links.append(a["src"])
            if tag == "img":
                self.imgs.append(a["src"])
        if tag == "svg":
            self.inline_svgs += 1


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    db = tmp / "skills.duckdb"
    shutil.copyfile(SHIPPED, db)  # opening may migrate the file: never the shipped one
    store = open_store(db)
    try:
        result = render_report(store, tmp / "site")
        expect = {"lineages": store.lineages(), "skills": store.skills()}
    finally:
        store.close()
    return {"result": result, "out": tmp / "site", **expect}


def _is_matplotlib_svg(path: Path) -> bool:
    """Well-formed SVG whose generator is matplotlib: its RDF creator ("Matplotlib vX.Y.Z,
    https://matplotlib.org/"), or the "Created with matplotlib" comment of older releases."""
    text = path.read_text(encoding="utf-8")
    root = ET.fromstring(text.encode("utf-8"))  # raises on anything that is not well-formed XML
    creator = root.find(".//{http://purl.org/dc/elements/1.1/}creator")
    made_by = "".join(creator.itertext()).strip() if creator is not None else ""
    return (root.tag == "{http://www.w3.org/2000/svg}svg"
            and (made_by.startswith("Matplotlib v") or "Created with matplotlib" in text))


def test_site_pages_charts_and_links(site):
    res, out = site["result"], site["out"]
    lineages, skills = site["lineages"], site["skills"]
    # a rules walk and a ladder walk of every shipped workload; every skill of the library has a page
    assert len(lineages) == 2 * len(shipped_workload_dirs()) and len(skills) >= 8
    assert res["index"] == out / "index.html" and res["heldout"] == out / "heldout.html"
    assert sorted(res["lineages"]) == sorted(out / "lineage" / f"{l['lineage_id']}.html" for l in lineages)
    assert sorted(res["skills"]) == sorted(out / "skill" / f"{s['skill_id']}.html" for s in skills)
    for p in [res["index"], res["heldout"], out / "style.css", *res["lineages"], *res["skills"], *res["charts"]]:
        assert p.is_file() and p.stat().st_size > 0, p

    # charts: one per lineage and per skill with effects, every one an SVG written by matplotlib
    assert len(res["charts"]) == len(lineages) + sum(bool(s["card"]["effects"]["per_case"]) for s in skills)
    for c in res["charts"]:
        assert c.suffix == ".svg" and _is_matplotlib_svg(c), c

    pages = {p: Page(p) for p in [res["index"], res["heldout"], *res["lineages"], *res["skills"]]}

    # lineage pages: the chart, and one highlighted diff and one anchor per step
    for lin in lineages:
        pg = pages[out / "lineage" / f"{lin['lineage_id']}.html"]
        charts = [s for s in pg.imgs if s.endswith(".svg")]
        assert charts or pg.inline_svgs, pg.path
        assert pg.classes.get("diff-block", 0) == len(lin["transitions"]) > 0, pg.path
        assert pg.classes.get("hl", 0) >= len(lin["transitions"])  # pygments output
        assert {f"step-{t['step']}" for t in lin["transitions"]} <= pg.ids
        text = pg.path.read_text()
        assert all(t["mechanism"] in text and f"{t['effects'][0]['speedup']:.3f}x" in text for t in lin["transitions"])

    # skill pages: every section of the card, the effects chart, links to the evidence steps
    for s in skills:
        pg = pages[out / "skill" / f"{s['skill_id']}.html"]
        assert set(SKILL_SECTIONS) <= pg.ids, (pg.path, set(SKILL_SECTIONS) - pg.ids)
        assert any(src.endswith(".svg") for src in pg.imgs), pg.path
        steps = {h for h in pg.links if "lineage/" in h and "#step-" in h}
        assert len(steps) == len(s["card"]["evidence"]), pg.path  # one step per evidence transition
        assert str(escape(s["card"]["intent"][:40])) in pg.path.read_text()

    # the index links every lineage and every skill page; the held-out page says none exist
    idx = pages[res["index"]]
    linked = {(res["index"].parent / urlsplit(h).path).resolve() for h in idx.links}
    assert {p.resolve() for p in res["lineages"] + res["skills"] + [res["heldout"]]} <= linked
    assert "no-heldout" in pages[res["heldout"]].ids
    assert "No held-out results are stored yet" in res["heldout"].read_text()

    # every link and image resolves to a file of the site (and its anchor to an id there); none leaves it
    ids_of = {p.resolve(): pg.ids for p, pg in pages.items()}
    for p, pg in pages.items():
        for href in pg.links:
            u = urlsplit(href)
            assert not u.scheme and not u.netloc, f"{p}: external link {href}"
            target = (p.parent / unquote(u.path)).resolve() if u.path else p.resolve()
            assert target.is_file(), f"{p}: broken link {href}"
            assert out.resolve() in target.parents, f"{p}: link outside the site {href}"
            if u.fragment and target.suffix == ".html":
                assert u.fragment in ids_of[target], f"{p}: missing anchor {href}"
    assert "http" not in (out / "style.css").read_text()


@pytest.mark.nvcc
def test_heldout_report_charted_per_family(tmp_path, monkeypatch):
    """The page shows the newest stored held-out report: per family a chart with intervals, the budget
    curves and the instance x condition table, the comparisons and verdict, the audit's queries, what was not run."""
    from klineage.gate.gate import Gate
    from klineage.heldout import HeldoutConfig, load_instances, run_heldout
    from tests.heldout.support import FIXTURES, make_library, script_gpu

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    script_gpu(monkeypatch)
    store = open_store(make_library(tmp_path / "lib.duckdb"))
    gate = Gate(store)
    try:
        report = run_heldout(store, gate, load_instances(FIXTURES),
                             HeldoutConfig(budget=4, conditions=("idiom", "skills", "control-random", "llm")), FIXTURES,
                             llm_reason="not run: no key in this test")
    finally:
        gate.close()
        store.close()
    store = open_store(tmp_path / "h.duckdb")  # no lineages or skills: only the held-out page has content
    try:
        store.put_heldout_run({"run_id": report["run_id"], "root": report["root"], "config": report["config"],
                               "status": "complete", "report": report})
        res = render_report(store, tmp_path / "site")
    finally:
        store.close()
    assert res["lineages"] == [] and res["skills"] == []
    # per family the speedups and the budget curves of the searching conditions
    assert len(res["charts"]) == 6 and all(_is_matplotlib_svg(c) for c in res["charts"])
    assert sorted(c.name for c in res["charts"] if c.name.endswith("-budget.svg")) == [
        "heldout-attention-budget.svg", "heldout-gemm-budget.svg", "heldout-reduction-budget.svg"]
    pg = Page(res["heldout"])
    assert "no-heldout" not in pg.ids and len(pg.imgs) == 6
    assert {"verdict", "comparisons", "audit", "not-run", "definitions"} <= pg.ids
    text = res["heldout"].read_text()
    rms = next(i for i in report["instances"] if i["instance"] == "rms_tiny")["conditions"]["skills"]
    assert "rms_tiny" in text and f"{rms['speedup']:.3f}x" in text and f"{rms['ci95'][0]:.3f}" in text
    assert "SELECT lineage_id, workload_name, proposer FROM lineages" in text and "not run: no key in this test" in text


def test_apply_and_baseline_runs_have_a_page(tmp_path):
    store = open_store(tmp_path / "a.duckdb")
    try:
        store.put_apply_run({"run_id": "r1", "workload": "gelu", "start_hash": "s" * 64, "config": {"budget_steps": 4}})
        store.put_apply_step("r1", {"seq": 0, "kind": "start", "backend": "start", "status": "PASSED", "accepted": True})
        store.put_apply_step("r1", {"seq": 1, "kind": "candidate", "backend": "rules", "skill": "vector_access/global-store",
                                    "status": "PASSED", "accepted": True})
        store.put_apply_step("r1", {"seq": 2, "kind": "candidate", "backend": "sweep", "note": "sweep point {'B': 64}",
                                    "status": "COMPILE_ERROR", "accepted": False})
        store.put_apply_run({"run_id": "r1", "workload": "gelu", "start_hash": "s" * 64, "config": {"budget_steps": 4},
                             "stop_reason": "budget_steps", "best_hash": "b" * 64,
                             "summary": {"kept": ["vector_access/global-store"], "spent_usd": 0.0,
                                         "speedup_vs_start": [{"shape": {"rows": 8}, "start_us": 600.0, "best_us": 150.0,
                                                               "speedup": 4.0}]}})
        store.put_apply_run({"run_id": "r2", "workload": "swiglu", "start_hash": "t" * 64,
                             "config": {"method": "adaexplore"}, "stop_reason": "budget_usd"})
        res = render_report(store, tmp_path / "site")
    finally:
        store.close()
    pg = Page(res["apply"])
    assert {"run-r1", "run-r2"} <= pg.ids and "no-apply" not in pg.ids
    text = res["apply"].read_text()
    assert "vector_access/global-store" in text and "COMPILE_ERROR" in text and "4.000x" in text
    assert "baseline adaexplore" in text and "budget_usd" in text
    assert "apply.html" in res["index"].read_text()  # reachable from the navigation


# -- in a browser ------------------------------------------------------------------------------------

def _chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           "--no-first-run", "--hide-scrollbars", f"--user-data-dir={profile}",
                           "--enable-logging=stderr", "--v=0", *args],
                          capture_output=True, text=True, timeout=180)


def _console_lines(stderr: str) -> list[str]:
    """Console messages (any level: these pages run no script, so any is a fault) and uncaught errors."""
    return [ln for ln in stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]


@requires_chromium
def test_pages_in_headless_chromium(site, tmp_path):
    res = site["result"]
    shots = tmp_path / "screenshots"
    shots.mkdir()
    keep = os.environ.get("KLINEAGE_REPORT_SHOTS")
    longest = max(site["lineages"], key=lambda l: len(l["states"]))
    pages = {"index": (res["index"], ["lineage/", "skill/", 'id="admission-legend"']),
             "lineage": (res["lineages"][0], ['class="chart"', "diff-block"]),
             "lineage_long": (site["out"] / "lineage" / f"{longest['lineage_id']}.html", ['class="chart"']),
             "skill": (res["skills"][0], ['class="chart"', 'id="preconditions"', 'id="admission-legend"'])}
    for name, (page, must) in pages.items():
        url = page.resolve().as_uri()
        dom = _chromium(["--dump-dom", url], tmp_path / f"profile-{name}")
        assert dom.returncode == 0, dom.stderr[-2000:]
        assert not _console_lines(dom.stderr), _console_lines(dom.stderr)
        assert all(m in dom.stdout for m in must), (name, [m for m in must if m not in dom.stdout])
        png = shots / f"{name}.png"
        height = 2400 if name == "lineage_long" else 2000  # the whole chart of a 50-state walk
        shot = _chromium([f"--screenshot={png}", f"--window-size=1280,{height}", url], tmp_path / f"profile-{name}")
        assert shot.returncode == 0, shot.stderr[-2000:]
        assert not _console_lines(shot.stderr), _console_lines(shot.stderr)
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, (png, len(data))
        assert struct.unpack(">II", data[16:24]) == (1280, height)
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(png, Path(keep) / png.name)


def _pt(length: str) -> float:
    return float(length.removesuffix("pt"))


def test_a_walk_of_50_states_is_charted_legibly(site):
    """The longest shipped walk (gdn's rules walk, 56 states) is drawn top to bottom: every state has
    its own label, no two labels overlap, and the chart is no wider than the page (1000 px), so the
    browser shows it at its own size: 8 pt labels stay 8 pt."""
    longest = max(site["lineages"], key=lambda l: len(l["states"]))
    assert len(longest["states"]) >= 50
    page = (site["out"] / "lineage" / f"{longest['lineage_id']}.html").read_text()
    svg = site["out"] / re.search(r'src="\.\./(charts/[^"]+\.svg)"', page).group(1)
    root = ET.fromstring(svg.read_bytes())
    assert _pt(root.get("width")) * 4 / 3 <= 1000
    ns = "{http://www.w3.org/2000/svg}"
    ticks = []
    for g in root.iter(f"{ns}g"):
        if (g.get("id") or "").startswith("ytick_"):
            for t in g.iter(f"{ns}text"):
                size = float(re.search(r"font-size:\s*([\d.]+)px", t.get("style", "")).group(1))
                ticks.append((float(t.get("y")), size, "".join(t.itertext())))
    labels = [x[2] for x in ticks]
    assert len(ticks) == len(longest["states"]) and labels[0] == "simplest", labels[:3]
    ys = sorted(y for y, _, _ in ticks)
    # the SVG's user unit is the point: labels of 8 pt, rows further apart than a label is high
    assert min(b - a for a, b in zip(ys, ys[1:])) >= max(s for _, s, _ in ticks) and min(s for _, s, _ in ticks) >= 8
    assert "(top)" in page and "(bottom)" in page


def test_the_legend_names_every_admission_state(site):
    from klineage.lineage.admit import STATUSES
    for page in (site["result"]["index"], site["result"]["skills"][0]):
        text = page.read_text()
        legend = text[text.index('id="admission-legend"'):]
        legend = legend[:legend.index("</dl>")]
        for st in (*STATUSES, "not_run"):
            assert f'class="badge adm-{st}">{st}</span>' in legend, (page, st)
    css = (site["out"] / "style.css").read_text()
    assert all(f".adm-{st}" in css for st in (*STATUSES, "not_run"))
