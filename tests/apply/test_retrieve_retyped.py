"""Retrieval and the matmul generator's element types: the shipped tensor-core skill was mined on bf16 and
fp16 kernels, and its cards say so; on an fp32 product the matmul generator writes the mechanism for fp32
(as TF32, under the workload's tolerance), so that statement holds there, with the reason, while a
kernel no shape rewriter re-writes at its own element type keeps the carrier's precondition."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from klineage.apply.retrieve import retrieve, target_facts
from klineage.store import open_store
from klineage.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def skills(tmp_path_factory):
    db = tmp_path_factory.mktemp("lib") / "skills.duckdb"
    shutil.copy(ROOT / "skills_db" / "skills.duckdb", db)
    store = open_store(db)
    try:
        yield store.skills()
    finally:
        store.close()


def _facts(folder: Path):
    wl = load_workload(folder)
    return target_facts(wl, (folder / "naive.cu").read_text())


def test_an_fp32_product_retrieves_tensor_cores(skills):
    t = _facts(ROOT / "apply_workloads" / "matmul_rect_ijk")
    assert t.retyped == {"smem_tiling", "register_tiling", "tensor_core_mma", "smem_swizzle", "async_copy"}
    got = retrieve(skills, t, admission=False)
    mma = next(c for c in got["candidates"] if c["mechanism"] == "tensor_core_mma")
    held = [c for c in mma["checks"] if c["category"] == "data_types" and "operands are" in c["condition"]]
    assert held and all(c["verdict"] == "holds" and "writes tensor_core_mma for the workload's float32" in c["reason"]
                        for c in held)
    # wgmma is not written for fp32 here: its cards' bf16 / fp16 statements still exclude it
    wg = next(e for e in got["excluded"] if e["name"].startswith("wgmma/"))
    assert any("precondition (data_types) fails" in r for r in wg["reasons"])


def test_a_kernel_no_generator_retypes_keeps_the_carriers_dtype(skills):
    t = _facts(ROOT / "apply_workloads" / "axpby")
    assert t.retyped == set()
    got = retrieve(skills, t, admission=False)
    assert not any(c["mechanism"] == "tensor_core_mma" for c in got["candidates"])
