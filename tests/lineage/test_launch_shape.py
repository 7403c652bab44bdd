"""A ladder rung that reshapes its launch (grid or block) without declaring what does it is read from the
detectors alone, so the step is warned about, naming the launches before and after and the fix; a rung
that declares its mechanism, or keeps its launch, is not. Walked with a scripted gate (no measurement)."""
from klineage.lineage.mine import step_warnings
from klineage.lineage.proposers import launch_change
from klineage.parse.source import launch_shapes
from tests.lineage.test_ladder import kernel, make_ladder, walk


def _reshaped(text: str) -> str:
    return text.replace("(n + 255) / 256, 256", "(n + 127) / 128, 128")


def test_launch_shapes_read_the_grid_and_block_a_kernel_is_launched_with():
    src = kernel() + "\nvoid other(int rows) {\n  dim3 grid(rows / 4);\n  int threads = 128;\n  k<<<grid, threads>>>();\n}\n"
    assert launch_shapes(src) == [("(n+255)/256", "256"), ("rows/4", "128")]
    assert launch_change(kernel(), kernel("unroll")) == ""
    assert launch_change(kernel(), _reshaped(kernel("unroll"))) == "<<<(n+255)/256, 256>>> -> <<<(n+127)/128, 128>>>"


def test_an_undeclared_rung_that_reshapes_its_launch_is_warned_about(tmp_path):
    d = make_ladder(tmp_path, {"v1.cu": _reshaped(kernel("unroll"))}, kernel(), _reshaped(kernel("unroll", "restrict")),
                    'expert_adds = "restrict"\n')
    lin, chain = walk(d)
    step = next(t for t in lin["transitions"] if t["config"].get("version") == "v1")
    (w,) = step["audit"]["warnings"]
    assert "<<<(n+255)/256, 256>>> -> <<<(n+127)/128, 128>>>" in w and "v1 declares no mechanism" in w
    assert "read as unroll" in w and "klineage-step: mechanism=NAME" in w
    assert [x for x in step_warnings(lin, "scale_exp/versions") if "v1 declares" in x]
    others = [t for t in lin["transitions"] if t is not step]
    assert others and not any(t["audit"].get("warnings") for t in others)  # expert: declared, same launch


def test_a_declared_rung_that_reshapes_its_launch_is_not_warned_about(tmp_path):
    d = make_ladder(tmp_path, {"v1.cu": _reshaped(kernel("unroll"))}, kernel(), _reshaped(kernel("unroll", "restrict")),
                    'expert_adds = "restrict"\n[steps]\n"v1.cu" = "unroll"\n')
    lin, _ = walk(d)
    assert lin["transitions"] and not step_warnings(lin, "x")
