"""`klineage features KERNEL.cu [--json]`: every feature with its locus and which evidence found it."""
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from klineage.cli import main

GALLERY = Path(__file__).resolve().parents[2] / "style_gallery" / "kernels"


@pytest.mark.nvcc
def test_json_lists_every_feature_with_its_evidence_and_the_table():
    r = CliRunner().invoke(main, ["features", str(GALLERY / "kernel_macro_qualifiers.cu"), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["compiler"]["ok"] and out["compiler"]["arch"] == "sm_90a"
    by = {(f["mechanism"], f["evidence"]) for f in out["features"]}
    # the kernel's qualifiers come from a macro the source detectors cannot read: the compiler sees
    # its launch bounds, shuffles and vector accesses
    assert {("launch_bounds", "compiler"), ("warp_reduction", "compiler"), ("restrict", "source")} <= by
    assert all(f["evidence"] in ("source", "compiler", "both") for f in out["features"])
    assert out["counts"] == {k: sum(f["evidence"] == k for f in out["features"]) for k in ("source", "compiler", "both")}
    (fn,) = out["functions"]
    assert fn["function"] == "scaled_residual" and fn["directives"]["maxntid"].startswith("256")
    assert fn["resources"]["registers"] > 0 and fn["classes"]["shfl.bfly"]["count"] == 5


@pytest.mark.nvcc
def test_text_names_helpers_and_their_kernels():
    r = CliRunner().invoke(main, ["features", str(GALLERY / "rowmax_tile_shfl.cu")])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.strip().startswith("warp_reduction"))
    assert "both" in line and "[in __device__ helper tile_max, inlined into row_max]" in line
    assert "ptx: shfl.sync.down.b32" in r.output and "entry row_max:" in r.output


def test_source_only_and_bad_input(tmp_path):
    r = CliRunner().invoke(main, ["features", str(GALLERY / "rowsum_cg_reduce.cu"), "--source-only", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert not out["compiler"]["ok"] and out["functions"] == []
    assert {f["evidence"] for f in out["features"]} == {"source"}
    r = CliRunner().invoke(main, ["features", str(tmp_path / "missing.cu")])
    assert r.exit_code == 2 and "does not exist" in r.output
