"""The typed records against what the pipeline stores: the shipped library's cards and lineages
and the shipped evaluation records parse into their models and serialise back to the same bytes;
the checked-in skill-card JSON Schema is the one the model generates and admits every shipped card."""
import ast
import copy
import gzip
import json
import shutil
from pathlib import Path

import jsonschema
import pytest
from pydantic import ValidationError

from klineage.records import EvaluationRecord, LineageRecord, SkillCard, to_json
from klineage.records.schema import SCHEMA_PATH, main as schema_main, schema_text, skill_card_schema
from klineage.store import open_store

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "skills_db" / "skills.duckdb"


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    db = tmp_path_factory.mktemp("lib") / "skills.duckdb"
    shutil.copy(SHIPPED, db)  # a copy: the shipped file is never opened by a test that could write
    store = open_store(db, read_only=True)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture(scope="module")
def card_rows(library):
    rows = library._query("SELECT skill_id, card_json FROM skills ORDER BY skill_id")
    assert len(rows) >= 30
    return rows


def test_every_shipped_card_round_trips_byte_for_byte(card_rows):
    for sid, text in card_rows:
        card = SkillCard.model_validate_json(text)
        assert card.skill_id == sid
        assert to_json(card) == text


def test_the_store_reads_typed_cards_in_the_order_of_its_skills(library):
    cards = library.library.cards()
    assert [c.skill_id for c in cards] == [s["skill_id"] for s in library.skills()]
    assert [to_json(c) for c in cards] == [json.dumps(s["card"], sort_keys=True) for s in library.skills()]


def test_checked_in_schema_is_the_generated_one():
    assert SCHEMA_PATH.read_text() == schema_text()
    assert schema_main(["--check"]) == 0


def test_every_shipped_card_validates_against_the_checked_in_schema(card_rows):
    schema = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for sid, text in card_rows:
        errors = [e.message for e in validator.iter_errors(json.loads(text))]
        assert errors == [], (sid, errors[:3])


@pytest.mark.parametrize("break_it, what", [
    (lambda c: c.pop("anchor"), "anchor"),
    (lambda c: c["effects"].update(median_speedup="1.2"), "median_speedup"),
    (lambda c: c["effects"].update(median_speedup=True), "median_speedup"),
    (lambda c: c.update(surprise=1), "surprise"),
    (lambda c: c["preconditions"].update(weather=[]), "weather"),
    (lambda c: c["scope"]["compile_checked"].update(sm_80="maybe"), "compile_checked"),
    (lambda c: c["provides"].append(["only-one"]), "provides"),
    (lambda c: c["effects"]["per_case"][0].update(label="fast"), "label"),
])
def test_a_broken_card_is_refused_by_the_model_and_the_schema(card_rows, break_it, what):
    card = json.loads(card_rows[0][1])
    if what == "label" and not card["effects"]["per_case"]:
        pytest.fail("the first shipped card has no measured case")
    bad = copy.deepcopy(card)
    break_it(bad)
    with pytest.raises(ValidationError) as e:
        SkillCard.model_validate(bad)
    assert what in str(e.value)
    if what != "weather":  # the category list is the model's check (the schema admits any key)
        assert list(jsonschema.Draft202012Validator(skill_card_schema()).iter_errors(bad))


def test_an_optional_key_stays_absent_and_a_none_stays_none(card_rows):
    texts = [t for _, t in card_rows]
    with_claim = [t for t in texts if '"claim"' in json.dumps(json.loads(t)["admission"])]
    without = [t for t in texts if "claim" not in json.loads(t)["admission"]]
    assert with_claim and without  # the library holds both kinds
    for t in with_claim[:1] + without[:1]:
        assert to_json(SkillCard.model_validate_json(t)) == t


def test_every_shipped_lineage_round_trips(library):
    lineages = library.lineages()
    assert lineages
    for lin in lineages:
        rec = LineageRecord.model_validate(lin)
        assert to_json(rec) == json.dumps(lin, sort_keys=True)


def _shipped_records():
    for f in sorted((ROOT / "skills_db" / "evaluations").glob("*.jsonl*")):
        text = gzip.decompress(f.read_bytes()).decode() if f.suffix == ".gz" else f.read_text()
        yield from (json.loads(line) for line in text.splitlines() if line.strip())


def test_every_shipped_evaluation_record_validates_and_round_trips():
    n = 0
    statuses = set()
    for rec in _shipped_records():
        r = EvaluationRecord.model_validate(rec)
        assert to_json(r) == json.dumps(rec, sort_keys=True)
        statuses.add(r.status.value)
        n += 1
    assert n > 1000 and {"PASSED", "INCORRECT", "COMPILE_ERROR", "GUARD_REJECTED"} <= statuses


def _one(status: str) -> dict:
    return next(r for r in _shipped_records() if r["status"] == status and r["request"]["timing"])


@pytest.mark.parametrize("status, change, message", [
    ("COMPILE_ERROR", lambda r: r["result"].update(timing=[{"us": 1.0}]), "cannot carry timing"),
    ("COMPILE_ERROR", lambda r: r["result"].update(correctness=[{"ok": True}]), "cannot carry correctness"),
    ("INCORRECT", lambda r: r["result"].update(timing=[{"us": 1.0}]), "cannot carry timing"),
    ("PASSED", lambda r: r["result"].update(timing=[]), "carries its timing"),
    ("PASSED", lambda r: r["result"].update(error_kind="nvcc_error"), "has no error_kind"),
    ("INCORRECT", lambda r: r["result"].update(error_kind=None), "names its error_kind"),
    ("PASSED", lambda r: r.update(status="DONE"), "status"),
])
def test_a_result_holds_only_the_metrics_its_status_allows(status, change, message):
    rec = _one(status)
    EvaluationRecord.model_validate(rec)
    change(rec)
    with pytest.raises(ValidationError) as e:
        EvaluationRecord.model_validate(rec)
    assert message in str(e.value)


def test_the_store_modules_form_no_import_circle():
    """store/db composes the repositories; no repository module imports store/db. Only the package and
    doctor (which opens a Store to check it) sit above it, and db does not import doctor."""
    store_dir = ROOT / "klineage" / "store"
    above = {"__init__.py", "doctor.py"}

    def imported(f: Path) -> set:
        return {n.module for n in ast.walk(ast.parse(f.read_text())) if isinstance(n, ast.ImportFrom) and n.module}
    for f in sorted(store_dir.glob("*.py")):
        if f.name == "db.py":
            assert "klineage.store.doctor" not in imported(f)
            continue
        assert "klineage.store.db" not in imported(f) or f.name in above, f.name


def test_put_skills_takes_typed_cards(card_rows, tmp_path):
    card = SkillCard.model_validate_json(card_rows[0][1])
    store = open_store(tmp_path / "lib.duckdb")
    try:
        store.put_skills([{"skill_id": card.skill_id, "name": card.name, "mechanism": card.mechanism,
                           "card": card, "card_md": "# x\n"}])
        assert store._query("SELECT card_json FROM skills")[0][0] == card_rows[0][1]
        assert store.library.cards() == [card]
        assert store._query("SELECT transition_id FROM skill_evidence ORDER BY transition_id") == \
            [(t,) for t in sorted(card.evidence)]
    finally:
        store.close()


def test_a_malformed_apply_step_or_heldout_row_is_one_clear_line_and_nothing_written(tmp_path):
    from klineage.errors import StoreError
    store = open_store(tmp_path / "runs.duckdb")
    try:
        store.put_apply_step("r1", {"seq": 0, "kind": "start", "backend": "start", "status": "PASSED",
                                    "accepted": True, "extra": [1, 2]})
        assert store.apply_steps("r1") == [{"seq": 0, "kind": "start", "backend": "start", "status": "PASSED",
                                            "accepted": True, "extra": [1, 2]}]
        with pytest.raises(StoreError, match=r"apply run r1 step 1: backend: Field required: fix the record"):
            store.put_apply_step("r1", {"seq": 1, "kind": "candidate", "status": "PASSED", "accepted": False})
        row = {"instance": "a", "condition": "skills", "family": "gemm", "status": "PASSED", "speedup": 1.5,
               "ci95": [1.25, 1.75], "note": "kept as given"}
        store.put_heldout_result("h1", row)
        assert store.heldout_results("h1") == [row]
        assert store._query("SELECT speedup, ci_low, ci_high FROM heldout_results") == [(1.5, 1.25, 1.75)]
        with pytest.raises(StoreError, match=r"held-out run h1 row: ci95: "):
            store.put_heldout_result("h1", dict(row, instance="b", ci95=[1.0]))
        assert store._query("SELECT count(*) FROM apply_steps")[0][0] == 1
        assert store._query("SELECT count(*) FROM heldout_results")[0][0] == 1
    finally:
        store.close()
