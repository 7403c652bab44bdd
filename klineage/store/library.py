"""Lineages, their states, transitions and rejections, and the skills lifted from them.

A lineage is written whole, in one transaction that first deletes any earlier run with the same
id (a lineage id is the content hash of its inputs, so re-mining replaces it and never duplicates).
Skills are recomputed from every stored transition and replace the skill tables in one transaction.
Every transition row names the three evaluations behind it (richer kernel, simpler kernel,
re-derived kernel), every rejection the evaluation that rejected it where one exists.
"""
from __future__ import annotations

import json

from klineage.records import ApplyStep, SkillCard, to_json, to_plain
from klineage.store.base import Repository, checked, dumps as _dumps, now as _now


class LibraryRepository(Repository):
    """The mining tables: lineages (with states, transitions, rejections) and the skills lifted
    from them. A skill's card is written as ``klineage.records.to_json(card)`` (a SkillCard or its
    plain form) and read back as the plain card; ``cards()`` reads them as SkillCard records."""

    PUBLIC = ("put_lineage", "lineages", "get_lineage", "transitions", "rejections", "put_skills", "skills",
              "get_skill", "canonical_dump", "library_hash", "replace_library")

    def put_lineage(self, lin: dict) -> None:
        lid = lin["lineage_id"]

        def go(con):
            for table in ("states", "transitions", "rejections", "lineages"):
                con.execute(f"DELETE FROM {table} WHERE lineage_id = ?", [lid])
            _insert_lineage(con, lin)
        self._write(go)

    def lineages(self) -> list[dict]:
        """Every lineage with its states, transitions and rejections, ordered by workload then id."""
        rows = self._query("SELECT lineage_id, workload_name, workload_hash, proposer, start_hash, termination, "
                           "remaining_json, config_json, missing_json FROM lineages "
                           "ORDER BY workload_name, proposer, lineage_id")
        out = []
        for lid, wname, whash, prop, start, term, rem, cfg, miss in rows:
            states = [json.loads(r[0]) for r in
                      self._query("SELECT record_json FROM states WHERE lineage_id = ? ORDER BY idx", [lid])]
            trans = [json.loads(r[0]) for r in self._query(
                "SELECT record_json FROM transitions WHERE lineage_id = ? ORDER BY step", [lid])]
            rej = [json.loads(r[0]) for r in self._query(
                "SELECT record_json FROM rejections WHERE lineage_id = ? ORDER BY seq", [lid])]
            out.append({"lineage_id": lid, "workload_name": wname, "workload_hash": whash, "proposer": prop,
                        "start_hash": start, "termination": term, "remaining": json.loads(rem),
                        "config": json.loads(cfg), "missing": json.loads(miss), "states": states,
                        "transitions": trans, "rejections": rej})
        return out

    def get_lineage(self, ident: str) -> dict | None:
        """The lineage whose id starts with `ident`, or whose workload/proposer is `ident`."""
        hits = [l for l in self.lineages() if l["lineage_id"].startswith(ident)
                or f"{l['workload_name']}/{l['proposer']}" == ident]
        return hits[0] if len(hits) == 1 else None

    def transitions(self) -> list[dict]:
        return [json.loads(r[0]) for r in self._query(
            "SELECT t.record_json FROM transitions t JOIN lineages l USING (lineage_id) "
            "ORDER BY l.workload_name, l.proposer, t.lineage_id, t.step")]

    def rejections(self) -> list[dict]:
        return [dict(json.loads(r[1]), lineage_id=r[0]) for r in self._query(
            "SELECT lineage_id, record_json FROM rejections ORDER BY lineage_id, seq")]

    def put_skills(self, skills: list[dict]) -> None:
        """Replace the whole skill library with `skills` (each with skill_id, name, mechanism,
        card, card_md, evidence = transition ids)."""
        def go(con):
            con.execute("DELETE FROM skill_evidence")
            con.execute("DELETE FROM skills")
            _insert_skills(con, skills)
        self._write(go)

    def cards(self) -> list[SkillCard]:
        """Every skill card as a validated record, in the order of skills()."""
        return [SkillCard.model_validate_json(c) for (c,) in self._query(
            "SELECT card_json FROM skills ORDER BY name, skill_id")]

    def skills(self) -> list[dict]:
        return [{"skill_id": i, "name": n, "mechanism": m, "card": json.loads(c), "card_md": md}
                for i, n, m, c, md in self._query(
                    "SELECT skill_id, name, mechanism, card_json, card_md FROM skills ORDER BY name, skill_id")]

    def get_skill(self, ident: str) -> dict | None:
        """The skill whose id starts with `ident` or whose name is `ident`."""
        hits = [s for s in self.skills() if s["name"] == ident or s["skill_id"].startswith(ident)]
        return hits[0] if len(hits) == 1 else None

    def canonical_dump(self) -> dict:
        """Lineages and skills with no timestamps, in a stable order: equal libraries dump equal."""
        return {"lineages": self.lineages(), "skills": [{k: v for k, v in s.items()} for s in self.skills()]}

    def library_hash(self) -> str:
        """The content hash of the library (its canonical dump): what a record names it by."""
        return dump_hash(self.canonical_dump())

    def replace_library(self, dump: dict) -> None:
        """Make the library exactly `dump` (a canonical dump: lineages with their states, transitions
        and rejections, and skills), in one transaction; evaluations and kernels are kept."""
        def go(con):
            for table in ("skill_evidence", "skills", "states", "transitions", "rejections", "lineages"):
                con.execute(f"DELETE FROM {table}")
            for lin in dump["lineages"]:
                _insert_lineage(con, lin)
            _insert_skills(con, dump["skills"])
        self._write(go)


def dump_hash(dump: dict) -> str:
    """sha256 of a canonical library dump's JSON (keys sorted)."""
    import hashlib
    return hashlib.sha256(_dumps(dump).encode()).hexdigest()


def _insert_lineage(con, lin: dict) -> None:
    lid = lin["lineage_id"]
    con.execute("INSERT INTO lineages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [lid, lin["workload_name"], lin["workload_hash"], lin["proposer"], lin["start_hash"],
                 lin["termination"], _dumps(lin["remaining"]), _dumps(lin["config"]),
                 _dumps(lin.get("missing", [])), _now()])
    for st in lin["states"]:
        con.execute("INSERT INTO states VALUES (?, ?, ?, ?, ?)",
                    [lid, st["idx"], st["kernel_hash"], st.get("eval_key"), _dumps(st)])
    for t in lin["transitions"]:
        con.execute("INSERT INTO transitions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [t["transition_id"], lid, t["step"], t["richer_hash"], t["simpler_hash"],
                     t["mechanism"], t["locus"], t["eval_richer"], t["eval_simpler"],
                     t["eval_rederived"], _dumps(t)])
    for i, r in enumerate(lin["rejections"]):
        con.execute("INSERT INTO rejections VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [lid, i, r["step"], r["mechanism"], r["locus"], r["kind"], r["message"],
                     r.get("kernel_hash"), r.get("eval_key"), _dumps(r)])


def _insert_skills(con, skills: list[dict]) -> None:
    for s in skills:
        card = to_plain(s["card"])
        con.execute("INSERT INTO skills VALUES (?, ?, ?, ?, ?)",
                    [s["skill_id"], s["name"], s["mechanism"], to_json(card), s["card_md"]])
        for tid in card["evidence"]:
            con.execute("INSERT INTO skill_evidence VALUES (?, ?)", [s["skill_id"], tid])


class ApplyRepository(Repository):
    """Apply runs: one row per run, one per step. A step is written when it is decided (its
    evaluation is already stored), so a run cut off mid-way keeps every decided step; the run row
    is rewritten with its stop reason at the end."""

    PUBLIC = ("put_apply_run", "put_apply_step", "apply_runs", "get_apply_run", "apply_steps")

    def put_apply_run(self, run: dict) -> None:
        def go(con):
            con.execute("DELETE FROM apply_runs WHERE run_id = ?", [run["run_id"]])
            con.execute("INSERT INTO apply_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [run["run_id"], run["workload"], run["start_hash"], run.get("best_hash"),
                         run.get("stop_reason"), _dumps(run["config"]), _dumps(run.get("summary")),
                         run.get("started_at") or _now(), _now() if run.get("stop_reason") else None])
        self._write(go)

    def put_apply_step(self, run_id: str, step: dict) -> None:
        """Insert or rewrite one step (klineage.records.ApplyStep) of a run."""
        rec = checked(ApplyStep, step, f"apply run {run_id} step {step.get('seq') if isinstance(step, dict) else ''}")

        def go(con):
            con.execute("DELETE FROM apply_steps WHERE run_id = ? AND seq = ?", [run_id, rec.seq])
            con.execute("INSERT INTO apply_steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [run_id, rec.seq, rec.skill_id, rec.backend, rec.kernel_hash,
                         rec.eval_key, rec.status, rec.accepted, to_json(step)])
        self._write(go)

    def apply_runs(self) -> list[dict]:
        rows = self._query("SELECT run_id, workload, start_hash, best_hash, stop_reason, config_json, summary_json, "
                           "started_at, ended_at FROM apply_runs ORDER BY started_at, run_id")
        return [{"run_id": r, "workload": w, "start_hash": s, "best_hash": b, "stop_reason": why,
                 "config": json.loads(c), "summary": json.loads(m) if m else None,
                 "started_at": str(t0) if t0 else None, "ended_at": str(t1) if t1 else None}
                for r, w, s, b, why, c, m, t0, t1 in rows]

    def get_apply_run(self, ident: str) -> dict | None:
        """The run whose id starts with `ident`, with its steps in order."""
        hits = [r for r in self.apply_runs() if r["run_id"].startswith(ident)]
        if len(hits) != 1:
            return None
        run = hits[0]
        run["steps"] = self.apply_steps(run["run_id"])
        return run

    def apply_steps(self, run_id: str) -> list[dict]:
        """The steps of one run (its full id), in order."""
        return [json.loads(j) for (j,) in self._query(
            "SELECT record_json FROM apply_steps WHERE run_id = ? ORDER BY seq", [run_id])]


class PipelineRunRepository(Repository):
    """`klineage run` records each pipeline run with its configuration (text and hash): started,
    then ended with an outcome (ok / missing / failed) and the run's summary."""

    PUBLIC = ("put_pipeline_run", "pipeline_runs")

    def put_pipeline_run(self, run: dict) -> None:
        def go(con):
            con.execute("DELETE FROM pipeline_runs WHERE run_id = ?", [run["run_id"]])
            con.execute("INSERT INTO pipeline_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [run["run_id"], run["name"], run["kind"], run["path"], run["config_hash"], run["config_text"],
                         bool(run["replay"]), run.get("started_at") or _now(),
                         _now() if run.get("outcome") else None, run.get("outcome"),
                         _dumps(run.get("summary")) if run.get("summary") is not None else None])
        self._write(go)

    def pipeline_runs(self) -> list[dict]:
        rows = self._query("SELECT run_id, name, kind, path, config_hash, replay, started_at, ended_at, outcome "
                           "FROM pipeline_runs ORDER BY started_at, run_id")
        return [{"run_id": r, "name": n, "kind": k, "path": p, "config_hash": h, "replay": bool(rp),
                 "started_at": str(t0) if t0 else None, "ended_at": str(t1) if t1 else None, "outcome": o}
                for r, n, k, p, h, rp, t0, t1, o in rows]
