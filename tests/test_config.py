"""klineage.config: the one typed layer every run configuration goes through. Each bad value is one
line naming the file, the key and what it expects; each shipped configuration validates."""
from __future__ import annotations

from pathlib import Path

import pytest

from klineage.config import ApplyFile, HeldoutFile, MineFile, validate
from klineage.errors import read_toml

ROOT = Path(__file__).resolve().parents[1]


class Bad(Exception):
    pass


@pytest.mark.parametrize("model,data,message", [
    (MineFile, {"bogus": 1}, "unknown key 'bogus' (allowed: analysis, description, gate, kind, limits, name, target, walk)"),
    (MineFile, {"gate": {"warm": 1}}, "unknown key gate.warm (allowed: warmup, reps, trials, backlog_us, arch)"),
    (MineFile, {"gate": {"trials": 1}}, "gate.trials = 1: expected an int from 2 to 10"),
    (MineFile, {"gate": {"reps": True}}, "gate.reps = True: expected an int from 5 to 500"),
    (MineFile, {"gate": 3}, "[gate] must be a table of warmup, reps, trials, backlog_us, arch"),
    (MineFile, {"gate": {"arch": "sm_99"}}, "gate.arch = 'sm_99': expected one of sm_80"),
    (MineFile, {"target": [{"proposer": "rules"}]}, "target[0] needs paths = [...]"),
    (MineFile, {"target": 3}, "target must be an array of tables ([[target]] with paths and proposer)"),
    (MineFile, {"target": [{"paths": ["x"], "proposer": "y"}]}, "target[0].proposer = 'y': expected rules, versions or llm"),
    (MineFile, {"target": [{"paths": ["x"]}, {"paths": ["y"], "speed": 1}]},
     "unknown key target[1].speed (allowed: paths, proposer)"),
    (MineFile, {"limits": {"max_steps": "x"}}, "limits.max_steps = 'x': expected a number"),
    (MineFile, {"analysis": {"rounds": 9}}, "analysis.rounds = 9: expected an int from 1 to 5"),
    (MineFile, {"analysis": {"probes": 1}}, "analysis.probes = 1: expected true or false"),
    (MineFile, {"analysis": {"admission_rewrites": "x"}},
     "analysis.admission_rewrites = 'x': expected one of \"structural\", \"mechanical\""),
    (ApplyFile, {}, "an apply pipeline needs an [apply] table with workload and start"),
    (ApplyFile, {"apply": {"workload": "x"}}, "apply.start is required"),
    (ApplyFile, {"apply": {"workload": "x", "start": "y", "materializers": ["rules", "magic"]}},
     "apply.materializers: 'magic' is not one of rules, sweep, llm"),
    (ApplyFile, {"apply": {"workload": "x", "start": "y", "budget_usd": "x"}}, "apply.budget_usd = 'x': expected a number"),
    (HeldoutFile, {"gate": {"arch": "sm_90a"}}, "unknown key gate.arch (allowed: warmup, reps, trials, backlog_us)"),
    (HeldoutFile, {"heldout": {"budget": "many"}}, "heldout.budget = 'many': expected int"),
    (HeldoutFile, {"heldout": {"foreign": {"norm": [3]}}}, "heldout.foreign.norm[0] = 3: expected family = [unrelated"),
    # a misspelt key is named before a bad value elsewhere in the file
    (HeldoutFile, {"heldout": {"budget": "many"}, "bogus": 1}, "unknown key 'bogus'"),
])
def test_bad_values_name_the_key_and_what_it_expects(model, data, message):
    with pytest.raises(Bad) as e:
        validate(model, data, "P.toml", Bad)
    assert str(e.value).startswith(f"P.toml: {message}")
    assert "\n" not in str(e.value)


def test_numbers_stay_as_written_and_every_shipped_configuration_validates():
    ok = validate(MineFile, {"limits": {"max_steps": 3, "min_rederive_ratio": 0.9}}, "P", Bad)
    assert ok.limits.max_steps == 3 and type(ok.limits.max_steps) is int
    models = {"mine": MineFile, "apply": ApplyFile, "heldout": HeldoutFile}
    files = sorted((ROOT / "pipelines").glob("*.toml"))
    assert len(files) >= 3
    for p in files:
        raw = read_toml(p, Bad)[1]
        validate(models[raw.get("kind", "mine")], raw, p, Bad)
