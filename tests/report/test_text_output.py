"""Text output people read: the held-out report says once what it did not run; an apply run's step table
keeps its columns, cuts long values at a word, and counts every kept step; long lines wrap."""
from __future__ import annotations

from klineage.cli.apply import _ApplyProgress, format_apply_run
from klineage.report.text import WIDTH, not_run_lines, shorten, wrap_markdown, wrapped

KEY = "not run: ANTHROPIC_API_KEY is not set (the llm condition runs only with a key)"


def test_not_run_is_one_line_per_condition_and_reason():
    rep = {"not_run": [{"instance": f"i{k}", "condition": "llm", "reason": KEY} for k in range(22)]
           + [{"instance": "mm", "condition": "skills", "reason": "not run: the library is empty"}],
           "missing": [{"instance": "a", "condition": "idiom", "reason": "no record of kernel 12ab"}]}
    assert not_run_lines(rep) == [
        "not run: llm on 22 instances: ANTHROPIC_API_KEY is not set (the llm condition runs only with a key)",
        "not run: skills on mm: the library is empty",
        "not replayed (no record): idiom on a: no record of kernel 12ab"]


def _step(seq, backend, status, accepted=False, skill=None, config=None, note=""):
    return {"seq": seq, "kind": "start" if seq == 0 else "candidate", "backend": backend, "status": status,
            "accepted": accepted, "skill": skill, "config": config, "note": note}


def test_the_step_table_keeps_its_columns_and_cuts_at_words():
    long_note = "vector_access rewrite at " + "gelu_naive_kernel:load:reinterpret_cast<const uint4*>(x + e) " * 3
    run = {"run_id": "r1", "workload": "gelu", "stop_reason": "budget_steps",
           "summary": {"kept": ["vector_access/global-load", "sweep {'GELU_BLOCK': 256}"]},
           "steps": [_step(0, "start", "PASSED", True, note="the start kernel"),
                     _step(1, "rules", "PASSED", True, "vector_access/global-load", note=long_note),
                     _step(2, "sweep", "INCORRECT", config={"GELU_BLOCK": 64}),
                     _step(3, "sweep", "PASSED", True, config={"GELU_BLOCK": 256})]}
    lines = format_apply_run(run).splitlines()
    assert lines[0] == ("apply run r1 on gelu: stop budget_steps; kept 2: vector_access/global-load, "
                        "sweep {'GELU_BLOCK': 256}")
    head = next(i for i, l in enumerate(lines) if l.lstrip().startswith("step"))
    rows = lines[head + 2:head + 6]
    col = lines[head].index("verdict")
    assert all(r[col:].split()[0] in ("PASSED", "INCORRECT") for r in rows)  # the same column on every row
    assert rows[1][lines[head].index("kept"):].startswith("kept") and "kept" not in rows[2]
    assert "sweep GELU_BLOCK=64" in rows[2] and all(len(l) <= WIDTH for l in lines)
    note = rows[1][lines[head].index("note"):]
    assert note.endswith(" ...") and long_note.startswith(note[:-4].rstrip())  # cut between words


def test_progress_counts_a_step_kept_after_it_was_recorded():
    p = _ApplyProgress(True, "apply", 4)
    first = _step(1, "rules", "PASSED", skill="a")
    p(first)
    first["accepted"] = True  # its re-measurement kept it after the step was recorded
    p(_step(2, "sweep", "PASSED", config={"B": 1}))
    assert p.kept == 1


def test_shorten_and_wrap_never_cut_a_word():
    assert shorten("alpha beta gamma delta", 14) == "alpha beta ..."
    assert wrapped("word " * 50, "  ", "    ", 40)[1].startswith("      word")
    md = "- **layout**: " + "condition " * 40 + "\n```\n" + "x" * 200 + "\n```"
    out = wrap_markdown(md, 80).splitlines()
    assert out[0].startswith("- **layout**:") and out[1].startswith("  condition") and "x" * 200 in out
