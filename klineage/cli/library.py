"""Commands on the stored library: report, lineage list|show, skills list|show|why|stats|export."""
from __future__ import annotations

import json
from pathlib import Path

import click

from klineage.cli.common import bad_input, clip, db_option, json_option, library_errors, main, reads_library, open_db
from klineage.report.text import format_lineage, format_lineages_table, format_skills_table


@main.command("report")
@db_option
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for the static site (index.html, lineage/, skill/, heldout.html).")
@click.option("-q", "--quiet", is_flag=True, help="No progress on stderr.")
@json_option
@library_errors
def report_cmd(db_path, out_dir, quiet, as_json):
    """Write a static HTML report of the library: workloads and skills, a latency chart and diffs per
    lineage, the full card per skill, the held-out results. No server needed; works offline."""
    from klineage.report import render_report
    with open_db(db_path) as store:
        if not store.lineages() and not store.skills():
            raise bad_input(f"{store.path} holds no lineages or skills: mine first, or pass --db "
                                       "skills_db/skills.duckdb")
        from klineage.progress import Progress
        with Progress(quiet or as_json) as progress:
            progress.task("report", f"report to {out_dir}")
            paths = render_report(store, out_dir, progress=lambda done, total: progress.set("report", done, total))
    if as_json:
        click.echo(json.dumps({k: [str(x) for x in v] if isinstance(v, list) else str(v) for k, v in paths.items()},
                              indent=1))
    else:
        click.echo(f"wrote {out_dir / 'index.html'}: {len(paths['lineages'])} lineage pages, "
                   f"{len(paths['skills'])} skill pages, {len(paths['charts'])} charts")


@main.group("lineage")
def lineage_group():
    """Inspect stored lineages."""


@lineage_group.command("list")
@reads_library
def lineage_list(db_path, as_json):
    """List lineages: workload, proposer, steps, rejections, termination."""
    with open_db(db_path) as store:
        lins = store.lineages()
    if as_json:
        click.echo(json.dumps([{k: l[k] for k in ("lineage_id", "workload_name", "proposer", "termination",
                                                   "remaining")} | {"steps": len(l["transitions"]),
                                                                    "rejections": len(l["rejections"])}
                               for l in lins], indent=1))
    elif not lins:
        click.echo(f"no lineages in {store.path}: mine first (klineage mine --config pipelines/mine.toml --replay)")
    else:
        click.echo(format_lineages_table(lins))


@lineage_group.command("show")
@click.argument("ident")
@reads_library
def lineage_show(ident, db_path, as_json):
    """Show one lineage (id prefix, or WORKLOAD/PROPOSER): states, steps, rejections."""
    with open_db(db_path) as store:
        lin = store.get_lineage(ident)
        if lin is None:
            lins = store.lineages()
            hits = [l for l in lins if l["lineage_id"].startswith(ident) or
                    f"{l['workload_name']}/{l['proposer']}".startswith(ident)] or lins
            names = "\n".join(f"  {l['workload_name']}/{l['proposer']}  ({l['lineage_id'][:16]})" for l in hits[:20])
            raise bad_input(f"no single lineage matches {ident!r} in {store.path}; name one of these "
                            f"(WORKLOAD/PROPOSER or an id prefix; `klineage lineage list` shows them all):\n"
                            f"{names or '  none stored'}")
    click.echo(json.dumps(lin, indent=1) if as_json else format_lineage(lin))


@main.group("skills")
def skills_group():
    """Inspect and export the skill library."""


@skills_group.command("list")
@click.option("--full", is_flag=True, help="With --json: every skill's whole card, not its summary.")
@reads_library
def skills_list(full, db_path, as_json):
    """List skills with their median measured speedup. --json gives one summary per skill (id, name,
    mechanism, median speedup, steps of evidence, admission, platforms); --json --full the whole cards."""
    from klineage.report.text import skill_summary
    with open_db(db_path) as store:
        skills = store.skills()
    if as_json:
        click.echo(json.dumps([s["card"] if full else skill_summary(s) for s in skills], indent=1))
    elif not skills:
        click.echo(f"no skills in {store.path}: mine first (klineage mine --config pipelines/mine.toml --replay)")
    else:
        click.echo(format_skills_table(skills))


@skills_group.command("show")
@click.argument("ident")
@reads_library
def skills_show(ident, db_path, as_json):
    """Show one skill card. IDENT: a name (wgmma/warpgroup-mma), an id or its prefix, or a name or
    mechanism prefix (wgmma) that only one skill has; an ambiguous IDENT lists the candidates."""
    with open_db(db_path) as store:
        s = _find_skill(store, ident)
    from klineage.report.text import wrap_markdown
    click.echo(json.dumps(s["card"], indent=1) if as_json else wrap_markdown(s["card_md"]))


def _find_skill(store, ident: str) -> dict:
    """The one skill IDENT names (exact name or id, else an id, name or mechanism prefix); exit 2
    naming the candidates when none or several match."""
    skills = store.skills()
    key = ident.lower()
    for pick in (lambda s: key in (s["name"].lower(), s["skill_id"].lower()),
                 lambda s: s["skill_id"].lower().startswith(key) or s["name"].lower().startswith(key)
                 or s["mechanism"].lower().startswith(key)):
        hits = [s for s in skills if pick(s)]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            names = "\n".join(f"  {s['name']}  ({s['skill_id']})" for s in hits)
            raise bad_input(f"{ident!r} matches {len(hits)} skills; name one of them:\n{names}")
    raise bad_input(f"no skill matches {ident!r} in {store.path}: see `klineage skills list` (a name such as "
                     "wgmma/warpgroup-mma, an id prefix, or a mechanism such as wgmma)")


@skills_group.command("why")
@click.argument("ident")
@reads_library
def skills_why(ident, db_path, as_json):
    """Every precondition and risk of one skill, with the probe, source line or record behind it."""
    from klineage.report.text import format_skill_why, skill_why
    with open_db(db_path) as store:
        s = _find_skill(store, ident)
    why = skill_why(s["card"])
    click.echo(json.dumps(why, indent=1) if as_json else format_skill_why(why))


@skills_group.command("stats")
@reads_library
def skills_stats(db_path, as_json):
    """Library counts: skills by admission status, the admission rate, evidence kinds."""
    from klineage.report.text import format_skill_stats, skill_stats
    with open_db(db_path) as store:
        st = skill_stats([s["card"] for s in store.skills()])
    click.echo(json.dumps(st, indent=1) if as_json else format_skill_stats(st))


@skills_group.command("export")
@db_option
@click.option("--format", "fmt", type=click.Choice(["skill-md", "jsonl", "parquet"]), default="skill-md", show_default=True,
              help="skill-md: a SKILL.md folder per skill; jsonl: one card per line; parquet: one row per skill.")
@click.option("-o", "--out", "out", type=click.Path(path_type=Path), required=True,
              help="Output folder (skill-md) or file (jsonl, parquet).")
@click.option("--force", is_flag=True, help="Replace what is already at --out (skill-md: the skills' folders).")
@library_errors
def skills_export(db_path, fmt, out, force):
    """Export the library: one SKILL.md folder per skill (Agent Skills layout), JSON lines (one card
    per line), or Parquet (one row per skill: id, name, mechanism, median speedup, admission status,
    risks, the card as JSON and as markdown)."""
    folder = fmt == "skill-md"
    if out.exists() and out.is_dir() != folder:
        raise bad_input(f"--out {out} is a {'file' if folder else 'folder'}: {fmt} writes a "
                         f"{'folder' if folder else 'file'}; pass another path")
    if out.exists() and not force and (not folder or any(out.iterdir())):
        raise bad_input(f"--out {out} already exists: pass --force to replace it, or another path")
    with open_db(db_path) as store:
        skills = store.skills()
    if fmt == "skill-md":
        from klineage.report.skill_md import export_skill_md
        paths = export_skill_md(skills, out)
        click.echo(f"wrote {len(paths)} skills under {out}")
    elif fmt == "parquet":
        from klineage.store.export import write_parquet
        click.echo(f"wrote {write_parquet(skills, out)} skills to {out}")
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "w") as f:
            for s in skills:
                f.write(json.dumps(s["card"], sort_keys=True) + "\n")
        click.echo(f"wrote {len(skills)} skills to {out}")



@main.command("doctor")
@db_option
@click.option("--records", "record_paths", multiple=True, type=click.Path(exists=True, path_type=Path),
              help="Record files or folders (*.jsonl, *.jsonl.gz) to compare the stored evaluations with "
                   "(repeatable; default: the shipped records, skills_db/evaluations/).")
@json_option
@library_errors
def doctor_cmd(db_path, record_paths, as_json):
    """Check a database: it opens and its schema is current; every stored block reads (DuckDB's
    checksums, every column of every table); kernels hash to their keys, skill cards read and name
    stored transitions, transitions name stored kernels and evaluations; and each stored evaluation a
    record file also holds equals the record. Reads only. Exits 0 when the database is whole, 1 when
    something is wrong (each problem is named)."""
    import sys

    from klineage import settings
    from klineage.store.doctor import doctor
    from klineage.store.recorded import recorded_files
    path = db_path.path or settings.default_db()
    files = [f for p in (record_paths or [settings.recorded_dir()]) for f in
             (recorded_files(Path(p)) if Path(p).is_dir() else [Path(p)])]
    rep = doctor(path, files)
    click.echo(json.dumps(rep, indent=1) if as_json else _format_doctor(rep))
    sys.exit(0 if rep["ok"] else 1)


def _format_doctor(rep: dict) -> str:
    lines = [f"{rep['path']}: opens {rep['opens']}" + (f"; schema {rep['schema']}" if rep["schema"] else "")]
    bad = {t: why for t, why in rep["blocks"].items() if why != "ok"}
    if rep["blocks"]:
        lines.append(f"blocks: {len(rep['blocks']) - len(bad)} of {len(rep['blocks'])} tables read whole")
    for t, why in bad.items():
        lines.append(f"  {t}: {clip(why, 140)}")
    for c in rep["content"]:
        lines.append(f"  {'ok' if c['ok'] else 'FAILED':<7} {c['check']} ({c['checked']} checked"
                     + (f", {c['failed']} wrong)" if c["failed"] else ")"))
        lines += [f"          {clip(p, 140)}" for p in c["problems"][:5]]
    r = rep["records"]
    if r is not None:
        lines.append(f"records: {r['compared']} stored evaluations compared with {len(r['files'])} record files, "
                     f"{r['differing']} differ")
        lines += [f"  {clip(d, 150)}" for d in r["differ"][:5]]
    if rep["ok"]:
        lines.append("whole: every check passed")
    elif bad or rep["opens"] != "ok":
        lines.append("damaged: restore it from a copy, or rebuild it (klineage run pipelines/mine.toml --replay --db NEW.duckdb)")
    else:
        lines.append("not whole: the checks above name what is wrong")
    return "\n".join(lines)
