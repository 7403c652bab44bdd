"""Retrieval ranks by what the start kernel computes: its operator class, read off the source by the
recognisers (a matmul, a row reduction, a strided reduction, an elementwise kernel), decides the
operator term, so a matmul, a softmax and a GELU get different lists from the shipped library."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from klineage.apply.retrieve import WEIGHTS, retrieve, target_facts, workload_operator
from klineage.mechanisms.shapes import operator_class, reachable_mechanisms
from klineage.store import open_store
from klineage.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]
TARGETS = {"gelu": ROOT / "apply_workloads" / "gelu", "softmax": ROOT / "apply_workloads" / "softmax_wrapped",
           "gemm": ROOT / "expert_kernels" / "gemm", "strided": ROOT / "apply_workloads" / "sum_dim1_strided"}


@pytest.fixture(scope="module")
def skills(tmp_path_factory):
    db = tmp_path_factory.mktemp("lib") / "lib.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    store = open_store(db)
    rows = store.skills()
    store.close()
    return rows


def _ranked(skills, name: str, admission: bool = False) -> tuple[object, list[dict]]:
    d = TARGETS[name]
    t = target_facts(load_workload(d), (d / "naive.cu").read_text())
    return t, retrieve(skills, t, admission=admission)["candidates"]


def test_the_operator_class_is_read_off_the_kernel():
    assert {n: operator_class((d / "naive.cu").read_text()) for n, d in TARGETS.items()} == {
        "gelu": "elementwise", "softmax": "row_reduction", "gemm": "matmul", "strided": "strided_reduction"}
    # a corpus workload no recogniser reads takes its declared family
    assert workload_operator("cumsum") == "scan" and workload_operator("row_sum") == "row_reduction"


def test_a_matmul_a_softmax_and_a_gelu_get_different_lists(skills):
    tops = {}
    for name in ("gelu", "softmax", "gemm"):
        _, cands = _ranked(skills, name)
        tops[name] = [c["mechanism"] for c in cands[:3]]
    assert len({tuple(v) for v in tops.values()}) == 3, tops
    assert tops["softmax"][0] in {"block_per_row", "warp_per_row"}
    assert tops["gemm"][0] in {"smem_tiling", "tensor_core_mma", "register_tiling", "wgmma"}
    row_or_tile = {"block_per_row", "warp_per_row", "smem_tiling", "tensor_core_mma", "radix_select", "reduce_then_scan"}
    assert not row_or_tile & set(tops["gelu"]), tops["gelu"]


def test_the_operator_term_decides_over_a_larger_measured_effect(skills):
    """radix_select was measured at tens of times on top-k; on a GELU it ranks below every skill
    measured on an elementwise kernel, whatever their effects."""
    t, cands = _ranked(skills, "gelu")
    assert t.operator == "elementwise"
    by = {c["name"]: c["terms"] for c in cands}
    radix = by["radix_select/kernel-structure"]
    assert radix["effect"] == 3.0 and radix["operator"] == 0.0
    fitting = [c for c in cands if c["terms"]["operator"] == 1.0]
    assert fitting and all(c["terms"]["score"] > radix["score"] for c in fitting)
    span = 4.0 * WEIGHTS["effect"] + WEIGHTS["family"] + WEIGHTS["shape"] + WEIGHTS["bottleneck"]
    assert WEIGHTS["operator"] > span  # the other terms together never outweigh a fit


def test_a_strided_reduction_takes_the_block_split_not_a_warp_per_row(skills):
    d = TARGETS["strided"]
    src = (d / "naive.cu").read_text()
    reach = reachable_mechanisms(src)
    assert "block_per_row" in reach and not {"warp_per_row", "online_softmax", "register_cache"} & reach
    # a softmax's row takes the fusion of its passes, a one-pass sum does not
    assert "online_softmax" in reachable_mechanisms((TARGETS["softmax"] / "naive.cu").read_text())
    _, cands = _ranked(skills, "strided")
    terms = {c["mechanism"]: c["terms"]["operator"] for c in cands}
    assert terms["block_per_row"] == 1.0 and terms["warp_per_row"] == 0.0
    assert cands[0]["mechanism"] == "block_per_row"


def test_an_unread_kernel_of_no_family_is_half_way(skills, tmp_path):
    """A target no recogniser reads and whose workload declares no family: every skill gets 0.5."""
    d = tmp_path / "odd"
    shutil.copytree(ROOT / "apply_workloads" / "rope", d)
    text = (d / "workload.py").read_text().replace('FAMILY = "positional"', 'FAMILY = ""')
    (d / "workload.py").write_text(text)
    t = target_facts(load_workload(d), (d / "naive.cu").read_text())
    assert t.operator == ""
    cands = retrieve(skills, t, admission=False)["candidates"]
    assert cands and {c["terms"]["operator"] for c in cands} == {0.5}
