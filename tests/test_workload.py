from pathlib import Path

import pytest

from klineage.errors import WorkloadError
from klineage.workload import find_workload_for, load_workload

ROOT = Path(__file__).resolve().parents[1]
GOOD = (ROOT / "expert_kernels" / "row_sum" / "workload.py").read_text()


@pytest.mark.parametrize("name", ["row_sum", "swiglu"])
def test_expert_workloads_load(name):
    wl = load_workload(ROOT / "expert_kernels" / name)
    assert wl.name == name
    assert wl.c_signature.startswith(f'extern "C" cudaError_t {name}(')
    assert wl.c_signature.endswith("cudaStream_t stream)")
    assert wl.benchmark_cases and wl.probe_shapes
    assert wl.output_names == ("out",)
    for _, shape in wl.all_shapes():
        assert wl.bytes_moved(shape) > 0


def test_make_inputs_deterministic_and_seed_dependent():
    wl = load_workload(ROOT / "expert_kernels" / "swiglu")
    shape = {"rows": 4, "cols": 9}
    a1, a2, b = wl.make_inputs(shape, 1), wl.make_inputs(shape, 1), wl.make_inputs(shape, 2)
    assert (a1["a"] == a2["a"]).all()
    assert not (a1["a"] == b["a"]).all()
    assert a1["a"].dtype.__str__() == "torch.bfloat16"


def _write(tmp_path, text):
    d = tmp_path / "wl"
    d.mkdir()
    (d / "workload.py").write_text(text)
    return d


@pytest.mark.parametrize("edit, field", [
    (lambda s: s.replace('NAME = "row_sum"\n', ""), "NAME"),
    (lambda s: s.replace('"kind": "int"}', '"kind": "integer"}', 1), "ARGS[2]"),
    (lambda s: s.replace('"role": "out"', '"role": "output"'), "ARGS[1]"),
    (lambda s: s.replace('"min_matched": 0.999', '"matched": 0.999'), "TOLERANCE"),
    (lambda s: s.replace('"rtol": 1e-4', '"rtol": 5'), "TOLERANCE"),
    (lambda s: s.replace("def make_inputs(shape, seed, device=\"cpu\"):", "def make_inputs(shape, seed):"), "make_inputs"),
    (lambda s: s.replace('return {"out": ((shape["rows"],), "float32")}', 'return {"y": ((shape["rows"],), "float32")}'), "outputs"),
    (lambda s: s.replace("def vendor(inputs, shape):", "def _vendor(inputs, shape):"), "vendor"),
    (lambda s: s.replace('BENCHMARK_CASES = [{"rows": 16384, "cols": 4096}', 'BENCHMARK_CASES = [{"rows": -1, "cols": 4096}'), "BENCHMARK_CASES[0]"),
    (lambda s: s.replace("return 4 * shape[\"rows\"] * shape[\"cols\"] + 4 * shape[\"rows\"]", "return 1.5"), "bytes_moved"),
    (lambda s: s.replace('ENTRY = "row_sum"', 'ENTRY = "row sum"'), "ENTRY"),
    (lambda s: s.replace('BENCHMARK_CASES = [{"rows": 16384, "cols": 4096}',
                         'BENCHMARK_CASES = [{"rows": 16384, "cols": 4096, "offset": 1000}'), "BENCHMARK_CASES[0]"),
    (lambda s: s + "\ncheck = 5\n", "check"),
    (lambda s: s + "\ndef check(inputs, outputs):\n    return []\n", "check"),
])
def test_bad_workload_names_file_and_field(tmp_path, edit, field):
    d = _write(tmp_path, edit(GOOD))
    with pytest.raises(WorkloadError) as exc:
        load_workload(d)
    msg = str(exc.value)
    assert str(d / "workload.py") in msg
    assert f"field {field}" in msg


def test_import_error_is_a_workload_error(tmp_path):
    d = _write(tmp_path, "import does_not_exist_anywhere\n")
    with pytest.raises(WorkloadError, match="failed to import: ModuleNotFoundError"):
        load_workload(d)


def test_missing_file(tmp_path):
    with pytest.raises(WorkloadError, match="must hold workload.py"):
        load_workload(tmp_path)


def test_find_workload_for_kernel():
    assert find_workload_for(ROOT / "expert_kernels" / "row_sum" / "expert.cu") == ROOT / "expert_kernels" / "row_sum"


def test_offset_shapes_place_every_pointer_past_alignment():
    torch = pytest.importorskip("torch")
    from klineage.gate.worker import _empty_at, place_inputs
    wl = load_workload(ROOT / "expert_kernels" / "row_sum")
    assert wl.pointer_offset({"rows": 3, "cols": 5}) == 0
    shape = {"rows": 3, "cols": 5, "offset": 1}
    assert wl.pointer_offset(shape) == 1
    x = torch.arange(15, dtype=torch.float32).reshape(3, 5)
    placed = place_inputs(wl, shape, {"x": x})["x"]
    assert torch.equal(placed, x) and placed.is_contiguous()
    assert placed.data_ptr() % 16 == 4  # one fp32 element past a 16-byte boundary
    out = _empty_at((3,), torch.float32, 1, "cpu")
    assert out.shape == (3,) and out.data_ptr() % 16 == 4
    plain = place_inputs(wl, {"rows": 3, "cols": 5}, {"x": x})["x"]
    assert plain.data_ptr() % 16 == 0 and plain.data_ptr() != x.data_ptr()


def test_optional_check_hook(tmp_path):
    """A workload may define check(inputs, outputs, shape) -> problems; without one there are none."""
    torch = pytest.importorskip("torch")
    plain = load_workload(ROOT / "expert_kernels" / "row_sum")
    assert plain.check({}, {}, {"rows": 1, "cols": 1}) == []
    hooked = load_workload(_write(tmp_path, GOOD + (
        "\ndef check(inputs, outputs, shape):\n"
        "    bad = int((outputs['out'] < 0).sum())\n"
        "    return [f'{bad} negative sums'] if bad else []\n")))
    shape = {"rows": 3, "cols": 2}
    assert hooked.check({}, {"out": torch.tensor([1.0, 2.0, 3.0])}, shape) == []
    assert hooked.check({}, {"out": torch.tensor([1.0, -2.0, -3.0])}, shape) == ["2 negative sums"]
    topk = load_workload(ROOT / "expert_kernels" / "topk")
    assert set(topk.reference(topk.make_inputs({"batch": 1, "length": 4, "k": 2}, 1),
                              {"batch": 1, "length": 4, "k": 2})) == {"values"}  # indices go through check
