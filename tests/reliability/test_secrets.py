"""Secrets: with a fake API key in the environment, an apply run through the llm backend (the real
SDK against a local scripted server) leaves the key in none of its outputs: the database file, the
trajectory and best kernel it writes, the report rendered from that database, the exported skills,
and everything printed."""
from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner

from klineage.apply.llm import LLMMaterializer
from klineage.llm import AnthropicBackend
from klineage.apply.loop import ApplyConfig, apply, write_outputs
from klineage.cli import main
from klineage.store import open_store
from klineage.workload import load_workload

from tests.apply.test_apply_loop import FlagAwareGate
from tests.apply.test_llm import GOOD, Server, anthropic_reply

ROOT = Path(__file__).resolve().parents[2]
FAKE_KEY = "sk-ant-api03-FAKEKEY-never-store-me-0123456789abcdef"


def test_a_fake_key_reaches_no_output(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    server = Server()
    try:
        for _ in range(6):
            server.script.append(anthropic_reply(GOOD))
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        db = tmp_path / "lib.duckdb"
        shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
        store = open_store(db)
        wl = load_workload(ROOT / "expert_kernels" / "swiglu")
        llm = LLMMaterializer(AnthropicBackend(), budget_usd=5.0)
        run = apply(store, FlagAwareGate(store=store), wl, (ROOT / "expert_kernels" / "swiglu" / "naive.cu").read_text(),
                    "naive.cu", ApplyConfig(materializers=("llm",), admission=False, budget_steps=3), llm=llm)
        assert any(s["backend"] == "llm" and s.get("exchange") for s in run["steps"]), run["steps"]
        write_outputs(run, tmp_path / "out")
        store.close()
        # the key was sent to the server (it is a real client) ...
        assert any(FAKE_KEY in str(r["headers"]) for r in server.requests)
    finally:
        server.close()
    runner = CliRunner()
    r1 = runner.invoke(main, ["report", "--db", str(db), "--out", str(tmp_path / "site")])
    r2 = runner.invoke(main, ["skills", "export", "--db", str(db), "--format", "jsonl", "--out", str(tmp_path / "s.jsonl")])
    r3 = runner.invoke(main, ["apply", "show", run["run_id"], "--db", str(db), "--json"])
    assert r1.exit_code == r2.exit_code == r3.exit_code == 0, (r1.output, r2.output, r3.output)
    # ... and is nowhere else
    printed = capsys.readouterr()
    for text in (printed.out, printed.err, r1.output, r2.output, r3.output):
        assert FAKE_KEY not in text
    for f in [db, *tmp_path.rglob("*")]:
        if f.is_file():
            assert FAKE_KEY.encode() not in f.read_bytes(), f
