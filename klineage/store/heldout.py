"""The held-out check's tables and the queries its memorization audit runs against the library.

One `heldout_runs` row per run (its id is the hash of its inputs, so the same command resumes into
the same run), with the finished report as JSON; one `heldout_results` row per (instance,
condition), written when that condition is decided, so a run cut off keeps every decided row.
The audit's queries live here (only this package touches DuckDB); each comes back with its SQL text
and parameters, so the report can show the query as the proof, not only its verdict.
"""
from __future__ import annotations

import json

from klineage.records import HeldoutRow, to_json
from klineage.store.base import Repository, checked, dumps as _dumps, now as _now

_RESULT_COLUMNS = ("run_id", "instance", "condition", "family", "status", "speedup", "ci_low", "ci_high",
                   "latency_us", "reference_us", "kernel_hash", "record_json")


def _in(values: list) -> str:
    return "(" + ", ".join("?" * len(values)) + ")"


class HeldoutRepository(Repository):
    """Held-out runs and their rows, and the memorization audit's queries."""

    PUBLIC = ("put_heldout_run", "heldout_runs", "get_heldout_run", "latest_heldout_report", "put_heldout_result",
              "heldout_results", "library_overlap", "lineage_cases", "skill_source_workloads")

    # -- runs and results ----------------------------------------------------------------------------

    def put_heldout_run(self, run: dict) -> None:
        """Insert or rewrite a run row ({run_id, root, config, status, report?}); the first start
        time is kept across rewrites (a resumed run is the same run)."""
        def go(con):
            old = con.execute("SELECT started_at FROM heldout_runs WHERE run_id = ?", [run["run_id"]]).fetchone()
            con.execute("DELETE FROM heldout_runs WHERE run_id = ?", [run["run_id"]])
            done = run["status"] != "running"
            con.execute("INSERT INTO heldout_runs VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [run["run_id"], run["root"], _dumps(run["config"]), run["status"],
                         _dumps(run["report"]) if run.get("report") is not None else None,
                         old[0] if old else _now(), _now() if done else None])
        self._write(go)

    def heldout_runs(self) -> list[dict]:
        """Every run without its report, oldest first."""
        rows = self._query("SELECT run_id, root, config_json, status, started_at, ended_at FROM heldout_runs "
                           "ORDER BY started_at, run_id")
        return [{"run_id": r, "root": root, "config": json.loads(c), "status": st,
                 "started_at": str(t0) if t0 else None, "ended_at": str(t1) if t1 else None}
                for r, root, c, st, t0, t1 in rows]

    def get_heldout_run(self, run_id: str) -> dict | None:
        """The run (full id) with its report (None until it finished), or None."""
        rows = self._query("SELECT run_id, root, config_json, status, report_json FROM heldout_runs WHERE run_id = ?",
                           [run_id])
        if not rows:
            return None
        r, root, c, st, rep = rows[0]
        return {"run_id": r, "root": root, "config": json.loads(c), "status": st,
                "report": json.loads(rep) if rep else None}

    def latest_heldout_report(self) -> dict | None:
        """The report of the newest run that wrote one (ended last), or None."""
        rows = self._query("SELECT report_json FROM heldout_runs WHERE report_json IS NOT NULL "
                           "ORDER BY ended_at DESC NULLS LAST, run_id LIMIT 1")
        return json.loads(rows[0][0]) if rows else None

    def put_heldout_result(self, run_id: str, row: dict) -> None:
        """Insert or rewrite one (instance, condition) row; `row` is the record kept as JSON, its
        headline fields (klineage.records.HeldoutRow) copied into columns."""
        rec = checked(HeldoutRow, row, f"held-out run {run_id} row")

        def go(con):
            con.execute("DELETE FROM heldout_results WHERE run_id = ? AND instance = ? AND condition = ?",
                        [run_id, rec.instance, rec.condition])
            ci = rec.ci95 or [None, None]
            con.execute(f"INSERT INTO heldout_results VALUES ({', '.join('?' * len(_RESULT_COLUMNS))})",
                        [run_id, rec.instance, rec.condition, rec.family, rec.status, rec.speedup,
                         ci[0], ci[1], rec.latency_us, rec.reference_us, rec.kernel_hash, to_json(row)])
        self._write(go)

    def heldout_results(self, run_id: str) -> list[dict]:
        """The run's rows (the stored records), by family, instance and condition."""
        return [json.loads(j) for (j,) in self._query(
            "SELECT record_json FROM heldout_results WHERE run_id = ? ORDER BY family, instance, condition", [run_id])]

    # -- the memorization audit's queries ------------------------------------------------------------

    def library_overlap(self, names: list[str], workload_hashes: list[str], kernel_hashes: list[str],
                        path_prefixes: list[str]) -> list[dict]:
        """Every place the library's lineages could hold a held-out case: lineages of a held-out
        workload (by name or content hash), lineage states or transitions with a held-out kernel (by
        hash), lineage kernels stored from a held-out path, skills whose evidence comes from a
        held-out workload. Returns [{check, sql, params, rows}]; rows empty means none."""
        checks = [
            ("lineages of a held-out workload, by name",
             f"SELECT lineage_id, workload_name, proposer FROM lineages WHERE workload_name IN {_in(names)} "
             "ORDER BY lineage_id", list(names)),
            ("lineages of a held-out workload, by content hash",
             f"SELECT lineage_id, workload_name, workload_hash FROM lineages WHERE workload_hash IN "
             f"{_in(workload_hashes)} ORDER BY lineage_id", list(workload_hashes)),
            ("lineage states holding a held-out kernel (start or produced), by source hash",
             f"SELECT lineage_id, idx, kernel_hash FROM states WHERE kernel_hash IN {_in(kernel_hashes)} "
             "ORDER BY lineage_id, idx", list(kernel_hashes)),
            ("transitions whose richer, simpler or re-derived kernel is a held-out kernel",
             f"SELECT transition_id, lineage_id, step FROM transitions WHERE richer_hash IN {_in(kernel_hashes)} "
             f"OR simpler_hash IN {_in(kernel_hashes)} OR json_extract_string(record_json, '$.rederived_hash') IN "
             f"{_in(kernel_hashes)} ORDER BY transition_id", list(kernel_hashes) * 3),
            ("lineage kernels first stored from a held-out path",
             "SELECT s.lineage_id, s.idx, k.origin_path FROM states s JOIN kernels k USING (kernel_hash) WHERE "
             + " OR ".join(["k.origin_path LIKE ?"] * len(path_prefixes)) + " ORDER BY s.lineage_id, s.idx",
             [p + "%" for p in path_prefixes]),
            ("skills with evidence from a held-out workload",
             "SELECT DISTINCT se.skill_id, l.workload_name FROM skill_evidence se JOIN transitions t USING "
             f"(transition_id) JOIN lineages l USING (lineage_id) WHERE l.workload_name IN {_in(names)} "
             "ORDER BY se.skill_id", list(names)),
        ]
        out = []
        for what, sql, params in checks:
            rows = self._query(sql, params) if params else []
            out.append({"check": what, "sql": sql, "params": params, "rows": [list(map(str, r)) for r in rows]})
        return out

    def lineage_cases(self) -> list[dict]:
        """{workload, shape} of every case a lineage measured (its transitions' effects), distinct,
        sorted: the library's lineage contexts at the level of a case."""
        seen = {}
        for wname, rec in self._query("SELECT l.workload_name, t.record_json FROM transitions t JOIN lineages l "
                                      "USING (lineage_id) ORDER BY l.workload_name, t.transition_id"):
            for e in json.loads(rec).get("effects") or []:
                shape = e.get("shape")
                if isinstance(shape, dict):
                    seen[(wname, _dumps(shape))] = {"workload": wname, "shape": shape}
        return [seen[k] for k in sorted(seen)]

    def skill_source_workloads(self) -> dict[str, list[str]]:
        """{skill_id: sorted workload names} of the lineages each skill's evidence comes from."""
        out: dict[str, set[str]] = {}
        for sid, wname in self._query("SELECT DISTINCT se.skill_id, l.workload_name FROM skill_evidence se "
                                      "JOIN transitions t USING (transition_id) JOIN lineages l USING (lineage_id)"):
            out.setdefault(sid, set()).add(wname)
        return {k: sorted(v) for k, v in sorted(out.items())}
