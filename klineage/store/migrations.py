"""The database schema as named, ordered migrations.

Each entry of ``MIGRATIONS`` is ``(name, sql)``; names sort in application order and are never
renamed or edited once released: a schema change is a new entry appended at the end.
``migrate(con)`` applies the ones a database lacks, each inside its own transaction, and records
them in ``schema_migrations``.
"""
from __future__ import annotations

from datetime import datetime, timezone

import duckdb

from klineage.errors import StoreError

MIGRATIONS: list[tuple[str, str]] = [
    ("0001_core", """
CREATE TABLE kernels (
    kernel_hash TEXT PRIMARY KEY,
    source      TEXT NOT NULL,
    origin_path TEXT,
    first_seen  TIMESTAMP
);
CREATE TABLE workloads (
    workload_hash TEXT PRIMARY KEY,
    name          TEXT NOT NULL,
    spec_json     TEXT NOT NULL,
    first_seen    TIMESTAMP
);
CREATE TABLE evaluations (
    eval_key       TEXT PRIMARY KEY,
    kernel_hash    TEXT NOT NULL,
    workload_hash  TEXT NOT NULL,
    workload_name  TEXT NOT NULL,
    request_json   TEXT NOT NULL,
    status         TEXT NOT NULL,
    result_json    TEXT NOT NULL,
    env_json       TEXT NOT NULL,
    gpu            TEXT,
    toolchain_json TEXT,
    recorded_at    TIMESTAMP NOT NULL
);
CREATE INDEX evaluations_kernel_workload ON evaluations (kernel_hash, workload_hash);
"""),
    ("0002_lineage", """
CREATE TABLE lineages (
    lineage_id     TEXT PRIMARY KEY,
    workload_name  TEXT NOT NULL,
    workload_hash  TEXT NOT NULL,
    proposer       TEXT NOT NULL,
    start_hash     TEXT NOT NULL,
    termination    TEXT NOT NULL,
    remaining_json TEXT NOT NULL,
    config_json    TEXT NOT NULL,
    missing_json   TEXT NOT NULL,
    created_at     TIMESTAMP NOT NULL
);
CREATE TABLE states (
    lineage_id    TEXT NOT NULL,
    idx           INTEGER NOT NULL,
    kernel_hash   TEXT NOT NULL,
    eval_key      TEXT,
    record_json   TEXT NOT NULL,
    PRIMARY KEY (lineage_id, idx)
);
CREATE TABLE transitions (
    transition_id  TEXT PRIMARY KEY,
    lineage_id     TEXT NOT NULL,
    step           INTEGER NOT NULL,
    richer_hash    TEXT NOT NULL,
    simpler_hash   TEXT NOT NULL,
    mechanism      TEXT NOT NULL,
    locus          TEXT NOT NULL,
    eval_richer    TEXT NOT NULL,
    eval_simpler   TEXT NOT NULL,
    eval_rederived TEXT NOT NULL,
    record_json    TEXT NOT NULL
);
CREATE TABLE rejections (
    lineage_id  TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    step        INTEGER NOT NULL,
    mechanism   TEXT NOT NULL,
    locus       TEXT NOT NULL,
    kind        TEXT NOT NULL,
    message     TEXT NOT NULL,
    kernel_hash TEXT,
    eval_key    TEXT,
    record_json TEXT NOT NULL,
    PRIMARY KEY (lineage_id, seq)
);
CREATE TABLE skills (
    skill_id   TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    mechanism  TEXT NOT NULL,
    card_json  TEXT NOT NULL,
    card_md    TEXT NOT NULL
);
CREATE TABLE skill_evidence (
    skill_id      TEXT NOT NULL,
    transition_id TEXT NOT NULL,
    PRIMARY KEY (skill_id, transition_id)
);
"""),
    ("0003_apply_runs", """
CREATE TABLE apply_runs (
    run_id      TEXT PRIMARY KEY,
    workload    TEXT NOT NULL,
    start_hash  TEXT NOT NULL,
    best_hash   TEXT,
    stop_reason TEXT,
    config_json TEXT NOT NULL,
    summary_json TEXT,
    started_at  TIMESTAMP,
    ended_at    TIMESTAMP
);
CREATE TABLE apply_steps (
    run_id      TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    skill_id    TEXT,
    backend     TEXT NOT NULL,
    kernel_hash TEXT,
    eval_key    TEXT,
    status      TEXT NOT NULL,
    accepted    BOOLEAN NOT NULL,
    record_json TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
"""),
    ("0004_pipeline_runs", """
CREATE TABLE pipeline_runs (
    run_id       TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    kind         TEXT NOT NULL,
    path         TEXT NOT NULL,
    config_hash  TEXT NOT NULL,
    config_text  TEXT NOT NULL,
    replay       BOOLEAN NOT NULL,
    started_at   TIMESTAMP,
    ended_at     TIMESTAMP,
    outcome      TEXT,
    summary_json TEXT
);
"""),
    ("0005_heldout", """
CREATE TABLE heldout_runs (
    run_id      TEXT PRIMARY KEY,
    root        TEXT NOT NULL,
    config_json TEXT NOT NULL,
    status      TEXT NOT NULL,
    report_json TEXT,
    started_at  TIMESTAMP,
    ended_at    TIMESTAMP
);
CREATE TABLE heldout_results (
    run_id       TEXT NOT NULL,
    instance     TEXT NOT NULL,
    condition    TEXT NOT NULL,
    family       TEXT NOT NULL,
    status       TEXT NOT NULL,
    speedup      DOUBLE,
    ci_low       DOUBLE,
    ci_high      DOUBLE,
    latency_us   DOUBLE,
    reference_us DOUBLE,
    kernel_hash  TEXT,
    record_json  TEXT NOT NULL,
    PRIMARY KEY (run_id, instance, condition)
);
"""),
]

_TABLE = "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TIMESTAMP)"


def applied(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Names recorded in ``schema_migrations``, in application order."""
    rows = con.execute("SELECT name FROM schema_migrations ORDER BY applied_at, name").fetchall()
    return [r[0] for r in rows]


def pending(con: duckdb.DuckDBPyConnection, path: str = ":memory:") -> list[str]:
    """Names of the migrations the database behind `con` lacks, in order; it reads only (a database
    without a schema_migrations table lacks them all). StoreError for a newer klineage's database."""
    known = [name for name, _ in MIGRATIONS]
    try:
        has = con.execute("SELECT count(*) FROM information_schema.tables "
                          "WHERE table_name = 'schema_migrations'").fetchone()[0]
        done = set(applied(con)) if has else set()
    except duckdb.Error as e:
        raise StoreError(f"database {path}: cannot read its schema_migrations table ({e}): "
                         "move the file away or pass another --db PATH") from e
    _refuse_unknown(done, known, path)
    return [n for n in known if n not in done]


def _refuse_unknown(done: set[str], known: list[str], path: str) -> None:
    unknown = sorted(done - set(known))
    if unknown:
        raise StoreError(f"database {path} was written by a newer klineage (unknown migration "
                         f"{unknown[0]}): upgrade klineage")


def migrate(con: duckdb.DuckDBPyConnection, path: str = ":memory:") -> list[str]:
    """Bring the database behind `con` to the newest schema; returns the names applied now.

    `path` only names the database in error messages."""
    known = [name for name, _ in MIGRATIONS]
    if len(set(known)) != len(known):  # a programming error, caught by the tests
        raise StoreError("MIGRATIONS holds a duplicate name: give every migration its own name")
    try:
        con.execute(_TABLE)
        done = set(applied(con))
    except duckdb.Error as e:
        raise StoreError(f"database {path}: cannot read its schema_migrations table ({e}): "
                         "move the file away or pass another --db PATH") from e
    _refuse_unknown(done, known, path)
    now_applied = []
    for name, sql in MIGRATIONS:
        if name in done:
            continue
        try:
            con.execute("BEGIN TRANSACTION")
            con.execute(sql)
            con.execute("INSERT INTO schema_migrations VALUES (?, ?)",
                        [name, datetime.now(timezone.utc).replace(tzinfo=None)])
            con.execute("COMMIT")
        except duckdb.Error as e:
            try:
                con.execute("ROLLBACK")
            except duckdb.Error:
                pass
            raise StoreError(f"database {path}: migration {name} failed ({e}): the database is unchanged "
                             "by it; move the file away or pass another --db PATH") from e
        now_applied.append(name)
    return now_applied
