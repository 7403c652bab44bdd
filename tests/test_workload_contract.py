"""The workload contract's thin wrappers pass what they are given: make_inputs its shape, seed and
device; check its inputs, outputs and shape, its problems as text. Fast: the mutation run of
klineage/workload.py runs these on every mutant (benchmarks/mutation.py)."""
from pathlib import Path

from klineage.workload import load_workload

ROOT = Path(__file__).resolve().parents[1]
GOOD = (ROOT / "expert_kernels" / "row_sum" / "workload.py").read_text()
SPY = '''

_make_inputs = make_inputs


def make_inputs(shape, seed, device="cpu"):
    out = _make_inputs(shape, seed)
    out["seen"] = (dict(shape), seed, device)
    return out


class Problem:
    def __str__(self):
        return "a problem object"


def check(inputs, outputs, shape):
    return [("inputs", sorted(inputs)), ("outputs", sorted(outputs)), ("shape", shape), Problem()]
'''


def spy(tmp_path):
    d = tmp_path / "wl"
    d.mkdir()
    (d / "workload.py").write_text(GOOD + SPY)
    return load_workload(d)


def test_make_inputs_gets_the_shape_the_seed_and_the_device(tmp_path):
    wl = spy(tmp_path)
    shape = {"rows": 2, "cols": 3}
    assert wl.make_inputs(shape, 7)["seen"] == (shape, 7, "cpu")
    assert wl.make_inputs(shape, 8, device="meta")["seen"] == (shape, 8, "meta")
    assert wl.make_inputs(shape, 8, "cuda:1")["seen"] == (shape, 8, "cuda:1")
    a, b = wl.make_inputs(shape, 1)["x"], wl.make_inputs(shape, 2)["x"]
    assert not bool((a == b).all()) and bool((a == wl.make_inputs(shape, 1)["x"]).all())


def test_check_gets_inputs_outputs_and_shape_and_gives_text(tmp_path):
    wl = spy(tmp_path)
    got = wl.check({"x": 1}, {"out": 2, "aux": 3}, {"rows": 4})
    assert got == ["('inputs', ['x'])", "('outputs', ['aux', 'out'])", "('shape', {'rows': 4})", "a problem object"]
    assert all(isinstance(p, str) for p in got)
    assert load_workload(ROOT / "expert_kernels" / "row_sum").check({"x": 1}, {"out": 2}, {"rows": 4}) == []
