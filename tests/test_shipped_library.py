"""The shipped skill library (skills_db/skills.duckdb) against the records it is built from.

- replaying pipelines/mine.toml from skills_db/evaluations/ on this CPU-only machine rebuilds the
  shipped library exactly (canonical dump: no timestamps, no file paths of this checkout);
- its lineages and skills are the ones the H200 corpus run stored in its own database
  (benchmarks/results/mine_corpus_h200_dump.json.gz, the call that completed the run);
- the library answers the questions a user asks of it (skills list/show/export, lineage list/show).
"""
import gzip
import json
import re
import shutil
from pathlib import Path

import pytest

from tests.shipped import shipped_workload_dirs
from click.testing import CliRunner

from klineage.cli import main
from klineage.store import open_store

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "skills_db" / "skills.duckdb"
DEVICE_DUMP = ROOT / "benchmarks" / "results" / "mine_corpus_h200_dump.json.gz"
BENCH = ROOT / "benchmarks" / "results" / "mine_h200.json"
TERMINATIONS = {"complete", "no_proposal", "step_limit", "rejection_limit", "start_failed"}


def _dump(db: Path) -> dict:
    store = open_store(db, read_only=True)  # the shipped library is never written by a test
    try:
        return json.loads(json.dumps(store.canonical_dump(), sort_keys=True, default=str))
    finally:
        store.close()


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    """`klineage run pipelines/mine.toml --replay` into a fresh database (the pipeline runner over
    the same configuration `klineage mine --config` reads)."""
    db = tmp_path_factory.mktemp("replay") / "lib.duckdb"
    r = CliRunner().invoke(main, ["run", str(ROOT / "pipelines" / "mine.toml"), "--db", str(db), "--replay", "--json"])
    assert r.exit_code == 0, r.output[-3000:]
    out = json.loads(r.output)
    assert out["kind"] == "mine" and out["outcome"] == "ok"
    store = open_store(db)
    try:  # the run is recorded with its configuration
        (rec,) = store.pipeline_runs()
        assert rec["run_id"] == out["pipeline_run"] and rec["name"] == "corpus" and rec["replay"]
        text = store._query("SELECT config_text FROM pipeline_runs")[0][0]
        assert text == (ROOT / "pipelines" / "mine.toml").read_text() and rec["ended_at"] >= rec["started_at"]
    finally:
        store.close()
    return db, out["result"]


@pytest.fixture(scope="module")
def shipped_skills():
    r = CliRunner().invoke(main, ["skills", "list", "--db", str(SHIPPED), "--json", "--full"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


@pytest.mark.nvcc
def test_a_replay_runs_no_nvcc(replayed):
    """The corpus records the compiler evidence of every kernel the main job audits
    (skills_db/compiler/) and the compile scope's verdicts (skills_db/compile_checks.jsonl): a replay
    starts no nvcc or ptxas, and counts what it read instead."""
    _, summary = replayed
    calls = summary["nvcc"]
    assert calls["total"]["runs"] == 0, (
        f"the replay ran nvcc or ptxas {calls['total']['runs']} times ({calls}): a change made kernels the records do "
        "not hold; regenerate them: python benchmarks/main_job.py record-ptx (and the compile checks), then "
        "python benchmarks/main_job.py measure")
    assert calls["ptx"]["recorded"] > 300 and calls["compile_check"]["recorded"] > 0


@pytest.mark.nvcc
def test_replay_rebuilds_the_shipped_library_exactly(replayed):
    db, summary = replayed
    assert summary["missing"] == []
    assert summary["evaluations"]["by_source"] == {"replayed": summary["evaluations"]["total"]}
    assert _dump(db) == _dump(SHIPPED)


@pytest.mark.nvcc
def test_replayed_library_is_the_one_the_h200_run_stored(replayed):
    db, _ = replayed
    device = json.loads(gzip.decompress(DEVICE_DUMP.read_bytes()))
    mine = _dump(db)
    assert [(l["workload_name"], l["proposer"]) for l in mine["lineages"]] == \
        [(l["workload_name"], l["proposer"]) for l in device["lineages"]]
    # Two ladder rungs are labelled with what the evidence says they add (klineage.mechanisms.audit):
    # each also adds a grid-stride loop, a form of coarsening the compiler's evidence reads (row_sum's
    # row loop, swiglu's scalar fallback), so the step is lifted as coarsening+X where the H200 run
    # lifted X. Same kernels, evaluations and verdict; the label, its audit record and the skills
    # lifted from the step differ (below), and nothing else
    relabelled = {}
    for got, want in zip(mine["lineages"], device["lineages"]):
        for a, b in zip(got["transitions"], want["transitions"]):
            if (got["workload_name"], a["locus"]) in RELABELLED:
                assert a["mechanism"] == "coarsening+" + b["mechanism"] and a["mechanisms"] == ["coarsening", b["mechanism"]]
                assert a["audit"]["ok"] and b["audit"]["ok"] and a["audit"]["mechanisms"] == a["mechanisms"]
                keys = ("eval_simpler", "eval_richer", "eval_rederived", "simpler_hash", "richer_hash", "transition_id")
                assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
                relabelled[a["transition_id"]] = (b["mechanism"], a["mechanism"], a["eval_simpler"], a["eval_richer"])
                a.update(mechanism=b["mechanism"], audit=b["audit"])
                if "mechanisms" not in b:  # a one-mechanism step names none
                    del a["mechanisms"]
    assert len(relabelled) == len(RELABELLED)
    assert mine["lineages"] == device["lineages"]
    mine["skills"] = _skills_as_lifted_before(mine["skills"], device["skills"], relabelled)
    # the cards' measured configuration and the carriers' rendering (`// ...` where code is left out)
    # came after that run (both read the kernel sources, measure nothing), and so did the admission
    # rule (the effect a card states, reproduced on another workload): its verdicts are read again
    # from the same recorded trials. Everything else is what the H200 stored
    assert [_without_carrier_code(_without_admission_verdict(_before_measured_configuration(s)))
            for s in mine["skills"]] == [_without_carrier_code(_without_admission_verdict(s)) for s in device["skills"]]
    assert all("measured_configuration" not in s["card"]["carrier"] for s in device["skills"])
    measured = ("workload", "base_hash", "kernel_hash", "base_origin", "status", "eval_key")
    for got, want in zip(mine["skills"], device["skills"]):
        g, w = got["card"]["admission"]["trials"], want["card"]["admission"]["trials"]
        assert [{k: t.get(k) for k in measured} for t in g] == [{k: t.get(k) for k in measured} for t in w], got["name"]
        assert [[(c["shape"], c["trial_speedups"]) for c in t.get("cases", [])] for t in g] == \
            [[(c["shape"], c["trial_speedups"]) for c in t.get("cases", [])] for t in w], got["name"]


RELABELLED = {("row_sum", "version:04_warp_per_row"), ("swiglu", "version:04_vector_access")}


def _skills_as_lifted_before(mine: list[dict], device: list[dict], relabelled: dict) -> list[dict]:
    """`mine` with the skills of the relabelled steps as the H200 run lifted them: each compound skill
    (coarsening+X) is lifted from that one step alone, and the skill X the run lifted holds the step's
    evidence and evaluations besides this library's; those are swapped for the device's, checked first."""
    by_name = {s["name"]: s for s in device}
    out = []
    for s in mine:
        card = s["card"]
        hit = [(tid, r) for tid, r in relabelled.items() if r[1] == s["mechanism"]]
        if hit:  # a compound skill: that step's evidence and evaluations only
            (tid, (_, _, simpler, richer)), = hit
            assert card["evidence"] == [tid] and set(card["evaluations"]) <= {simpler, richer}, s["name"]
            continue
        was = by_name[s["name"]]
        steps = [(tid, r) for tid, r in relabelled.items() if r[0] == s["mechanism"] and tid in was["card"]["evidence"]]
        if steps:
            gone = {tid for tid, _ in steps}
            assert [e for e in was["card"]["evidence"] if e not in gone] == card["evidence"], s["name"]
            assert set(card["evaluations"]) <= set(was["card"]["evaluations"]), s["name"]
            s = was
        out.append(s)
    assert [s["name"] for s in out] == [s["name"] for s in device]
    return out


MEASURED_MD = re.compile(r"Measured at \(the tuning constants[^\n]*\n(?:- [^\n]*\n)*")
CARRIER_MD = re.compile(r"Before \(simpler kernel\):\n```cuda\n.*?\n```\nAfter \(with the mechanism\):\n```cuda\n.*?\n```\n",
                        flags=re.S)


ADMISSION_MD = re.compile(r"- admission roundtrip on [^\n]*\n|## Admission\n[^\n]*\n")


def _without_admission_verdict(skill: dict) -> dict:
    """A skill without its admission verdict (status, reason, trials and their lines in the text),
    which admission reads from the recorded trials by the rule of klineage.lineage.admit."""
    out = json.loads(json.dumps(skill))
    out["card"].pop("admission", None)
    out["card"]["verification"] = [v for v in out["card"]["verification"] if v.get("kind") != "admission"]
    out["card_md"] = ADMISSION_MD.sub("", out["card_md"])
    return out


def _before_measured_configuration(skill: dict) -> dict:
    """A skill as the lift wrote it before cards carried carrier.measured_configuration."""
    out = json.loads(json.dumps(skill))
    out["card"]["carrier"].pop("measured_configuration", None)
    out["card_md"] = MEASURED_MD.sub("", out["card_md"])
    return out


def _without_carrier_code(skill: dict) -> dict:
    """A skill without its carrier's before/after code (text and card), which the lift renders from
    the lineage's kernels (test_ladder_carriers_are_rendered_from_the_stored_kernels)."""
    out = json.loads(json.dumps(skill))
    out["card"]["carrier"].pop("before")
    out["card"]["carrier"].pop("after")
    out["card_md"], n = CARRIER_MD.subn("", out["card_md"])
    assert n == 1, skill["name"]
    return out


def test_ladder_carriers_are_rendered_from_the_stored_kernels(tmp_path):
    """Each ladder skill's carrier is the changed code of its first evidence step, with `// ...` where
    code is left out (klineage.lineage.lift._changed_code), in the card and in its text."""
    from klineage.lineage.lift import ELIDED, _changed_code
    db = tmp_path / "lib.duckdb"
    shutil.copy(SHIPPED, db)
    dump = _dump(db)
    steps = {t["transition_id"]: t for l in dump["lineages"] for t in l["transitions"]}
    store = open_store(db)
    try:
        checked = 0
        for s in dump["skills"]:
            card = s["card"]
            if not card["carrier"]["forward_rewrite"].startswith("ladder step"):
                continue
            t = steps[card["evidence"][0]]
            simpler, richer = (store.get_kernel(t[k])["source"] for k in ("simpler_hash", "richer_hash"))
            assert (card["carrier"]["before"], card["carrier"]["after"]) == _changed_code(simpler, richer), s["name"]
            assert f"```cuda\n{card['carrier']['after']}\n```" in s["card_md"]
            checked += 1
    finally:
        store.close()
    assert checked >= 25
    assert any(ELIDED in s["card"]["carrier"]["after"] for s in dump["skills"])


def test_cards_carry_the_configuration_of_the_kernels_they_were_measured_in(shipped_skills):
    """carrier.measured_configuration is klineage.tuning.configuration of each evidence kernel: the
    gemm ladder's wgmma step was measured in a kernel with 128 x 256 x 64 tiles and 4 stages, the
    fmha one with 128 x 128 tiles and 2 stages; memory-bound skills carry block sizes and factors."""
    by_name = {s["name"]: s for s in shipped_skills}
    wgmma = {m["workload"]: {v["name"]: v["value"] for v in m["values"]}
             for m in by_name["wgmma/warpgroup-mma"]["carrier"]["measured_configuration"]}
    assert {"GEMM_BM": 128, "GEMM_BN": 256, "GEMM_BK": 64, "GEMM_STAGES": 4}.items() <= wgmma["gemm"].items()
    assert {"FMHA_BM": 128, "FMHA_BN": 128, "FMHA_STAGES": 2}.items() <= wgmma["fmha"].items()
    for m in by_name["wgmma/warpgroup-mma"]["carrier"]["measured_configuration"]:
        for v in m["values"]:
            assert v["role"] in ("tile", "stages", "block", "warps", "occupancy", "factor")
            assert (v.get("axis") in ("M", "N", "K")) == (v["role"] == "tile" and v.get("axis") is not None)
    roles = {v["role"] for m in by_name["coarsening/per-thread-count"]["carrier"]["measured_configuration"]
             for v in m["values"]}
    assert {"block", "factor"} <= roles and "tile" not in roles
    r = CliRunner().invoke(main, ["skills", "show", "wgmma/warpgroup-mma", "--db", str(SHIPPED)])
    assert r.exit_code == 0 and "Measured at" in r.output and "GEMM_BN=256" in r.output


def test_every_corpus_lineage_ends_with_a_stated_reason():
    dump = _dump(SHIPPED)
    walked = {(l["workload_name"], l["proposer"]) for l in dump["lineages"]}
    experts = {d.name for d in shipped_workload_dirs()}
    ladders = {d.name for d in shipped_workload_dirs() if (d / "versions" / "ladder.toml").is_file()}
    assert walked == {(w, "rules") for w in experts} | {(w, "versions") for w in ladders}
    for l in dump["lineages"]:
        assert l["termination"] in TERMINATIONS
        if l["termination"] == "no_proposal":
            assert l["remaining"], "no_proposal must name what is left"
        assert l["states"][0]["status"] == "PASSED"


def test_at_least_eight_full_skills(shipped_skills):
    names = {s["name"] for s in shipped_skills}
    assert len(names) == len(shipped_skills) >= 8
    for s in shipped_skills:
        assert s["intent"].strip() and s["anchor"]["signature"] and s["anchor"]["paths"]
        assert s["carrier"]["after"].strip() and s["carrier"]["forward_rewrite"]
        assert set(s["preconditions"]) == {"data_types", "layout", "storage", "pipeline", "hardware"}
        eff = s["effects"]
        assert eff["per_case"] and eff["median_speedup"] > 0 and eff["spread"] >= 0
        assert all(c["platform"] == "NVIDIA H200 (sm_90)" and len(c["trial_speedups"]) == 3
                   for c in eff["per_case"])
        assert s["risks"] or s["risks_empty_reason"]
        assert s["scope"]["platforms"] == ["NVIDIA H200 (sm_90)"] and s["scope"]["cases"]
        assert s["provides"] and s["evidence"] and s["verification"]
        # every walk roundtrip re-derived the richer kernel; admission trials keep their verdict
        walk = [v for v in s["verification"] if v.get("kind") != "admission"]
        assert walk and all(v["ok"] for v in walk)
        for v in s["verification"]:
            if v.get("kind") != "admission":
                continue
            assert "ok" in v and v["status"] != "NOT_REPLAYED"
            if v["status"] == "PASSED" and v["base_status"] == "PASSED":  # both timed: the trial ratios
                assert v["cases"] and all(c["trial_speedups"] for c in v["cases"])
            else:  # a rewrite (or its base) that failed the gate on the H200: the gate's word is kept
                assert not v["ok"] and v["message"] and v["eval_new"] and v["eval_base"]


def test_the_row_sum_ladder_gives_its_structural_steps_as_skills(shipped_skills):
    lin = next(l for l in _dump(SHIPPED)["lineages"]
               if l["workload_name"] == "row_sum" and l["proposer"] == "versions")
    assert lin["termination"] == "complete" and len(lin["transitions"]) >= 4
    structural = {"warp_per_row", "block_per_row", "thread_block_cluster"}
    # a step the evidence labels with two mechanisms (coarsening+warp_per_row) holds each of them
    assert structural <= {m for t in lin["transitions"] for m in t["mechanism"].split("+")}

    def lifted(m: str) -> list[dict]:
        return [s for s in shipped_skills
                if m in s["mechanism"].split("+") and lin["lineage_id"] in s["source_lineages"]]
    for m in structural:
        assert lifted(m), m
    # one warp per row instead of one thread: the step that matters most on the H200
    assert max(s["effects"]["median_speedup"] for s in lifted("warp_per_row")) > 5


# What each tensor-core expert's ladder must give as a step of its own (issue 7: the structural
# mechanisms enter the lineages from the ladders, which the rules cannot remove).
TENSOR_CORE_LADDERS = {
    "gemm": {"smem_tiling", "register_tiling", "tensor_core_mma", "smem_swizzle", "async_copy", "wgmma", "tma",
             "warp_specialization"},
    "conv2d": {"smem_tiling", "register_tiling", "tensor_core_mma", "smem_swizzle", "async_copy", "wgmma"},
    "fmha": {"smem_tiling", "online_softmax", "tensor_core_mma", "smem_swizzle", "async_copy", "wgmma", "tma",
             "warp_specialization"},
    "gdn": {"chunked_form", "register_tiling", "tensor_core_mma", "async_copy"},
}


def test_the_tensor_core_ladders_give_their_structural_steps_as_skills(shipped_skills):
    lineages = {(l["workload_name"], l["proposer"]): l for l in _dump(SHIPPED)["lineages"]}
    by_mech = {}
    for s in shipped_skills:
        by_mech.setdefault(s["mechanism"], []).append(s)
    for workload, structural in TENSOR_CORE_LADDERS.items():
        lin = lineages[(workload, "versions")]
        assert lin["termination"] == "complete" and lin["rejections"] == []
        steps = {t["mechanism"]: t for t in lin["transitions"]}
        assert structural <= set(steps), (workload, structural - set(steps))
        for m in structural:
            # the step was timed on the H200 and its skill cites the ladder walk
            assert steps[m]["effects"] and all(e["speedup"] > 0 for e in steps[m]["effects"])
            assert any(lin["lineage_id"] in s["source_lineages"] for s in by_mech[m]), (workload, m)
        # the rules walk stops where only a ladder goes on, and says which mechanisms are left
        rules = lineages[(workload, "rules")]
        assert rules["termination"] == "no_proposal" and {"tensor_core_mma", "register_tiling"} & set(rules["remaining"])
    # moving onto the tensor cores is among the largest steps of all of them
    assert min(c["speedup"] for s in by_mech["tensor_core_mma"] for c in s["effects"]["per_case"]) > 2


def test_recorded_mining_benchmark():
    b = json.loads(BENCH.read_text())
    assert b["env"]["gpu"] == "NVIDIA H200" and b["env"]["nvcc"] and b["env"]["torch"] and b["env"]["driver"]
    first, second = b["runs"]
    p1, p2 = first["phases"], second["phases"]
    assert p1["live_evaluations"] == first["evaluations"]["by_source"]["live"] > 0
    assert p1["compile_s"] > 0 and p1["correctness_s"] > 0 and p1["timing_s"] > 0
    assert p1["compile_s"] + p1["gate_wall_s"] <= p1["wall_s"] * 1.01
    assert p2["compile_cache_hit_rate"] == 1.0 and p2["live_evaluations"] == 0
    assert p2["wall_s"] < p1["wall_s"] / 5
    assert [(l["workload"], l["proposer"], l["termination"]) for l in first["lineages"]] == \
        [(l["workload"], l["proposer"], l["termination"]) for l in second["lineages"]]


def test_skills_cli_show_and_export(shipped_skills, tmp_path):
    runner = CliRunner()
    sid = shipped_skills[0]["skill_id"]
    r = runner.invoke(main, ["skills", "show", sid[:6], "--db", str(SHIPPED)])
    assert r.exit_code == 0 and shipped_skills[0]["name"] in r.output and "## Preconditions" in r.output
    r = runner.invoke(main, ["skills", "show", "zzzz", "--db", str(SHIPPED)])
    assert r.exit_code != 0 and "skills list" in r.output
    out = tmp_path / "skills"
    r = runner.invoke(main, ["skills", "export", "--db", str(SHIPPED), "--format", "skill-md", "--out", str(out)])
    assert r.exit_code == 0, r.output
    folders = sorted(p for p in out.iterdir() if p.is_dir())
    assert len(folders) == len(shipped_skills)
    for f in folders:
        text = (f / "SKILL.md").read_text()
        assert text.startswith("---\n")
        front, body = text[4:].split("\n---\n", 1)
        top = dict(l.split(": ", 1) for l in front.splitlines() if not l.startswith(" ") and ": " in l)
        assert top["name"] == f.name and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", f.name) and len(f.name) <= 64
        assert json.loads(top["description"]) and len(json.loads(top["description"])) <= 1024
        assert "## When to use it" in body and "## What it gave" in body  # the rules: tests/report/test_skill_md.py
        assert "## Intent" in (f / "references" / "card.md").read_text()
    jl = tmp_path / "skills.jsonl"
    r = runner.invoke(main, ["skills", "export", "--db", str(SHIPPED), "--format", "jsonl", "--out", str(jl)])
    assert r.exit_code == 0
    rows = [json.loads(l) for l in jl.read_text().splitlines()]
    assert [r["skill_id"] for r in rows] == [s["skill_id"] for s in shipped_skills]


def test_lineage_cli(tmp_path):
    runner = CliRunner()
    r = runner.invoke(main, ["lineage", "list", "--db", str(SHIPPED), "--json"])
    assert r.exit_code == 0
    rows = json.loads(r.output)
    assert {(x["workload_name"], x["proposer"]) for x in rows} >= {("row_sum", "rules"), ("row_sum", "versions")}
    r = runner.invoke(main, ["lineage", "show", "row_sum/versions", "--db", str(SHIPPED)])
    assert r.exit_code == 0 and "warp_per_row" in r.output and "forward" in r.output
    r = runner.invoke(main, ["lineage", "show", "nope/rules", "--db", str(SHIPPED)])
    assert r.exit_code != 0 and "lineage list" in r.output


def test_skills_why_and_stats():
    runner = CliRunner()
    shipped = json.loads(runner.invoke(main, ["skills", "list", "--db", str(SHIPPED), "--json", "--full"]).output)
    sid = shipped[0]["skill_id"]
    r = runner.invoke(main, ["skills", "why", sid, "--db", str(SHIPPED), "--json"])
    assert r.exit_code == 0, r.output
    why = json.loads(r.output)
    n_pre = sum(len(v) for v in shipped[0]["preconditions"].values())
    assert len(why["preconditions"]) == n_pre and len(why["risks"]) == len(shipped[0]["risks"])
    assert all(p["source"] in ("declared", "static", "probe", "compile") and p["where"] for p in why["preconditions"])
    r = runner.invoke(main, ["skills", "why", sid, "--db", str(SHIPPED)])
    assert r.exit_code == 0 and "preconditions:" in r.output and "risks:" in r.output
    r = runner.invoke(main, ["skills", "stats", "--db", str(SHIPPED), "--json"])
    st = json.loads(r.output)
    assert st["skills"] == len(shipped) and sum(st["admission"].values()) == len(shipped)
    admitted = [s for s in shipped if s["admission"]["status"] == "admitted"]
    assert st["admitted"] == len(admitted)
    if st["candidates"]:
        assert st["admission_rate"] == pytest.approx(st["admitted"] / st["candidates"])
    for s in admitted:  # every admitted skill has a stored roundtrip on another workload
        sources = {c["workload"] for c in s["effects"]["per_case"]}
        ok = [t for t in s["admission"]["trials"] if t.get("ok")]
        assert ok and all(t["workload"] not in sources and t["eval_new"] for t in ok)
    # the analysis ran on the H200 records: the whole library probed, an admission verdict for each
    assert st["probed"] == len(shipped) and st["admitted"] >= 1 and st["admission"].get("pending", 0) < len(shipped)
    for s in shipped:  # every skill has evidence behind a precondition, or says no probe violated it
        pre = [p for v in s["preconditions"].values() for p in v if p.get("source") in ("static", "probe", "compile")]
        assert pre or (s["probing"]["tried"] and not s["probing"]["violating"]
                       and s["probing"]["summary"].startswith("no violating probe found")), s["name"]


def test_the_library_names_no_path_of_a_checkout():
    """Nothing in the canonical dump depends on where the repository sits (a clean clone replays it)."""
    text = json.dumps(_dump(SHIPPED), sort_keys=True, default=str)
    assert str(ROOT) not in text and "/work/" not in text and "/tmp/" not in text


def test_the_shipped_library_has_every_migration():
    """Its schema is the newest one, so the commands that read it (read-only, no migration) can."""
    import duckdb

    from klineage.store.migrations import MIGRATIONS
    con = duckdb.connect(str(SHIPPED), read_only=True)
    done = {r[0] for r in con.execute("SELECT name FROM schema_migrations").fetchall()}
    con.close()
    assert [n for n, _ in MIGRATIONS if n not in done] == []
