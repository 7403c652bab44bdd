"""The workload contract for code with a valid domain (DOMAIN) and a launch configuration the entry
point takes (LAUNCH): checked on load, probes outside the domain not run (by the gate nor by the
stress probes), the domain a precondition of every skill mined there, the launch axis passed by the
gate and varied by Workload.with_launch."""
from pathlib import Path

import pytest

from klineage.errors import WorkloadError
from klineage.gate.gate import Gate, GateConfig
from klineage.lineage.probe import probe_set
from klineage.workload import load_workload
from klineage.workload_schema import domain_violations

ROOT = Path(__file__).resolve().parents[1]
LN = ROOT / "style_gallery" / "ladders" / "layernorm_cg"
RB = ROOT / "style_gallery" / "ladders" / "reduce_blocks"

BASE = '''
import torch
NAME = "vec_scale"
FAMILY = "elementwise"
DTYPES = ("float32",)
ENTRY = "vec_scale"
ARGS = [{"name": "x", "kind": "ptr", "dtype": "float32", "role": "in"},
        {"name": "y", "kind": "ptr", "dtype": "float32", "role": "out"},
        {"name": "rows", "kind": "int"}, {"name": "cols", "kind": "int"}, {"name": "block", "kind": "int"}]
BENCHMARK_CASES = [{"rows": 64, "cols": 256}]
PROBE_SHAPES = [{"rows": 3, "cols": 8}, {"rows": 3, "cols": 7}, {"rows": 1, "cols": 4, "offset": 1},
                {"rows": 2, "cols": 4, "offset": 4}]
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4, "min_matched": 0.999}
VENDOR_NAME = "torch"
def make_inputs(shape, seed, device="cpu"):
    return {"x": torch.rand(shape["rows"], shape["cols"], device=device)}
def outputs(shape): return {"y": ((shape["rows"], shape["cols"]), "float32")}
def scalars(shape): return {"rows": shape["rows"], "cols": shape["cols"]}
def reference(inputs, shape): return {"y": 2 * inputs["x"].double()}
def vendor(inputs, shape): return {"y": 2 * inputs["x"]}
def bytes_moved(shape): return 8 * shape["rows"] * shape["cols"]
def flops(shape): return shape["rows"] * shape["cols"]
'''
DOMAIN = 'DOMAIN = {"multiple_of": {"cols": 4, "rows*cols": 8}, "at_least": {"cols": 4}, "aligned_bytes": 16}\n'
LAUNCH = 'LAUNCH = {"block": [256, 128, 512]}\n'


def write(tmp_path: Path, *extra: str) -> Path:
    d = tmp_path / "wl"
    d.mkdir(exist_ok=True)
    (d / "workload.py").write_text(BASE + "".join(extra))
    return d


def test_probe_shapes_outside_the_domain_are_not_run(tmp_path):
    wl = load_workload(write(tmp_path, DOMAIN, LAUNCH))
    gated = [s for k, s in wl.all_shapes() if k == "probe"]
    assert gated == [{"rows": 3, "cols": 8}, {"rows": 2, "cols": 4, "offset": 4}]
    assert wl.outside_domain({"rows": 3, "cols": 7}) == ["cols = 7 is not a multiple of 4", "rows*cols = 21 is not "
                                                         "a multiple of 8"]
    assert wl.outside_domain({"rows": 1, "cols": 4, "offset": 1}) == [
        "rows*cols = 4 is not a multiple of 8", "x starts 4 bytes past a 16-byte boundary"]
    assert wl.describe()["probes_outside_domain"] == [{"rows": 3, "cols": 7}, {"rows": 1, "cols": 4, "offset": 1}]
    # the gate's request (and so the evaluation key) holds only the shapes inside the domain
    req = Gate(None, GateConfig()).request("k", wl)
    assert [s["shape"] for s in req["shapes"]] == [{"rows": 64, "cols": 256}] + gated
    # the stress probes: none outside the domain (misaligned bases are 4 bytes off: all dropped)
    names = [p.name for p in probe_set(wl)]
    assert names and not any(n.startswith("misaligned_base") for n in names)
    assert all(not wl.outside_domain(p.shape) for p in probe_set(wl))


def test_without_a_domain_nothing_changes(tmp_path):
    wl = load_workload(write(tmp_path, LAUNCH))
    assert wl.domain == {} and len(wl.all_shapes()) == 5
    assert "domain" not in wl.describe() and any(p.kind == "misaligned_base" for p in probe_set(wl))
    assert domain_violations({}, {"rows": 1}) == []


def test_the_domain_becomes_preconditions():
    wl = load_workload(LN)
    pre = wl.domain_preconditions()
    assert [p["condition"] for p in pre] == ["C is a multiple of 4", "every pointer argument is aligned to 16 bytes"]
    assert all(p["category"] == "layout" and "layernorm_cg" in p["evidence"] for p in pre)


@pytest.mark.parametrize("extra,match", [
    ('DOMAIN = {"multiple_of": {"depth": 4}}\n', r"'depth' is not a shape key"),
    ('DOMAIN = {"multiple_of": {"cols": 0}}\n', r"'cols': 0 is not a positive int"),
    ('DOMAIN = {"aligned_bytes": 12}\n', r"a power of two"),
    ('DOMAIN = {"divisible": {"cols": 4}}\n', r"unknown key 'divisible'"),
    ('DOMAIN = {"multiple_of": {"cols": 512}}\n', r"BENCHMARK_CASES\[0\].*outside DOMAIN.*change the case or the domain"),
    ('LAUNCH = {"threads": [128]}\n', r"'threads' is not an int argument of ARGS"),
    ('LAUNCH = {"block": [256, 256]}\n', r"distinct positive ints"),
])
def test_a_bad_domain_or_launch_is_one_line_naming_the_field(tmp_path, extra, match):
    with pytest.raises(WorkloadError, match=match) as e:
        load_workload(write(tmp_path, LAUNCH if "DOMAIN" in extra else "", extra))
    assert "\n" not in str(e.value) and e.value.exit_code == 2


def test_the_launch_axis_is_passed_and_varied(tmp_path, monkeypatch):
    monkeypatch.setenv("KLINEAGE_HOME", str(tmp_path / "home"))
    wl = load_workload(write(tmp_path, LAUNCH))
    assert wl.scalars({"rows": 2, "cols": 4}) == {"rows": 2, "cols": 4, "block": 256}
    other = wl.with_launch({"block": 128})
    assert other.launch == {"block": [128, 256, 512]} and other.scalars({"rows": 2, "cols": 4})["block"] == 128
    assert other.content_hash != wl.content_hash and other.name == wl.name
    assert wl.with_launch({"block": 128}).content_hash == other.content_hash  # named by its content
    assert wl.with_launch({"block": 256}) is wl
    with pytest.raises(WorkloadError, match="not a LAUNCH axis"):
        wl.with_launch({"warps": 4})
    # a LAUNCH argument needs no scalars() entry; without LAUNCH it does
    with pytest.raises(WorkloadError, match="scalars"):
        load_workload(write(tmp_path))


def test_the_gallery_reduction_takes_its_block_size_at_run_time():
    wl = load_workload(RB)
    assert wl.launch == {"threads": [256, 128, 512, 1024]}
    assert wl.scalars(wl.benchmark_cases[0]) == {"n": 1 << 25, "threads": 256}


# -- a scratch output, the launch axis swept, a domain per kernel -----------------------------------
SCRATCH = BASE.replace('{"name": "y", "kind": "ptr", "dtype": "float32", "role": "out"},',
                       '{"name": "y", "kind": "ptr", "dtype": "float32", "role": "out"},\n'
                       '        {"name": "partials", "kind": "ptr", "dtype": "float32", "role": "out"},').replace(
    'def outputs(shape): return {"y": ((shape["rows"], shape["cols"]), "float32")}',
    'def outputs(shape): return {"y": ((shape["rows"], shape["cols"]), "float32"), "partials": ((64,), "float32")}')


@pytest.mark.parametrize("who", ["reference", "vendor"])
def test_workload_check_passes_a_scratch_output_one_side_leaves_out(tmp_path, who):
    from klineage.gate.contract import check_contract
    text = SCRATCH + LAUNCH
    if who == "vendor":  # the oracle states the scratch buffer; the vendor does not produce one
        text = text.replace('def reference(inputs, shape): return {"y": 2 * inputs["x"].double()}',
                            'def reference(inputs, shape): return {"y": 2 * inputs["x"].double(), '
                            '"partials": torch.zeros(64, dtype=torch.float64)}')
    d = tmp_path / "wl"
    d.mkdir()
    (d / "workload.py").write_text(text)
    rep = check_contract(load_workload(d))
    assert rep["ok"], rep["checks"]
    vendor = next(c for c in rep["checks"] if c["function"] == "vendor")
    assert "within tolerance" in vendor["detail"]
    assert ("partials: returned by one of them only, not compared" in vendor["detail"]) == (who == "vendor")


def test_every_launch_configuration_is_one_axis_value_at_a_time(tmp_path):
    wl = load_workload(write(tmp_path, LAUNCH))
    assert wl.launch_configs() == [{"block": 256}, {"block": 128}, {"block": 512}]
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "workload.py").write_text(BASE.replace(', {"name": "block", "kind": "int"}', ""))
    assert load_workload(plain).launch_configs() == []


def test_the_walk_checks_each_step_at_every_launch_configuration(tmp_path, monkeypatch):
    from klineage.gate.gate import Status, kernel_hash
    from klineage.lineage.proposers import RulesProposer
    from klineage.lineage.walk import Walker
    from tests.lineage.test_walk import ScriptedGate
    monkeypatch.setenv("KLINEAGE_HOME", str(tmp_path / "home"))
    wl = load_workload(write(tmp_path, LAUNCH))
    expert = ("#include <cuda_runtime.h>\n__global__ void __launch_bounds__(512) k(const float* __restrict__ x, "
              "float* __restrict__ y, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
              "    if (i < n) y[i] = 2.0f * x[i];\n}\n"
              'extern "C" cudaError_t vec_scale(const float* x, float* y, int rows, int cols, int block, '
              "cudaStream_t s) {\n    k<<<(rows * cols + block - 1) / block, block, 0, s>>>(x, y, rows * cols);\n"
              "    return cudaGetLastError();\n}\n")
    seen = []

    class AtLaunch(ScriptedGate):
        def evaluate(self, source, workload, origin=None, replay=False):
            block = workload.launch_values["block"]
            seen.append((kernel_hash(source), block))
            # without __launch_bounds__ the kernel is scripted to fail at block 512
            self.verdict = (lambda s: Status.INCORRECT if block == 512 and "__launch_bounds__" not in s
                            else Status.PASSED)
            return super().evaluate(source, workload, origin, replay)
    lin = Walker(AtLaunch(), wl, [RulesProposer()]).run(expert)
    assert lin["config"]["launch"] == {"checked": [{"block": 128}, {"block": 512}], "start_fails": []}
    refused = [r for r in lin["rejections"] if r.get("launch")]
    assert refused and refused[0]["mechanism"] == "launch_bounds" and refused[0]["launch"] == {"block": 512}
    assert refused[0]["kind"] == "incorrect" and "at launch {'block': 512}" in refused[0]["message"]
    assert all(t["launch"] == [{"launch": {"block": 128}, "eval_key": t["launch"][0]["eval_key"]},
                               {"launch": {"block": 512}, "eval_key": t["launch"][1]["eval_key"]}]
               for t in lin["transitions"])
    assert {b for _, b in seen} == {256, 128, 512}


def test_a_kernel_declares_its_own_domain_and_its_skills_carry_it(tmp_path, monkeypatch):
    from klineage.lineage.proposers import RulesProposer
    from klineage.lineage.walk import Walker
    from tests.lineage.test_walk import ScriptedGate
    monkeypatch.setenv("KLINEAGE_HOME", str(tmp_path / "home"))
    wl = load_workload(write(tmp_path, LAUNCH))
    header = '// klineage-domain: {"multiple_of": {"cols": 4}}\n'
    assert wl.for_kernel("// no declaration\n") is wl
    narrow = wl.for_kernel(header)
    assert narrow.domain == {"multiple_of": {"cols": 4}} and narrow.content_hash != wl.content_hash
    assert [s for k, s in narrow.all_shapes() if k == "probe"] == [{"rows": 3, "cols": 8}, {"rows": 1, "cols": 4, "offset": 1},
                                                                   {"rows": 2, "cols": 4, "offset": 4}]
    with pytest.raises(WorkloadError, match="klineage-domain is not JSON"):
        wl.for_kernel("// klineage-domain: {cols: 4}\n")
    with pytest.raises(WorkloadError, match="DOMAIN"):
        wl.for_kernel('// klineage-domain: {"multiple_of": {"depth": 4}}\n')
    # a step's skill carries the richer kernel's domain: here the expert's, none for the workload
    src = header + ("__global__ void __launch_bounds__(256) k(const float* __restrict__ x, float* y, int n) {\n"
                    "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = 2.0f * x[i];\n}\n")
    lin = Walker(ScriptedGate(), wl, [RulesProposer()]).run(src)
    assert lin["transitions"] and all(t["domain"] and "cols" in t["domain"][0]["condition"]
                                      for t in lin["transitions"])
    plain = src.replace(header, "")
    lin = Walker(ScriptedGate(), wl, [RulesProposer()]).run(plain)
    assert lin["transitions"] and not any("domain" in t for t in lin["transitions"])
