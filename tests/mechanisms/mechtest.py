"""Helpers for mechanism tests: every snippet is a whole translation unit that nvcc must build."""
import textwrap

from klineage.gate.compile import compile_kernel
from klineage.mechanisms.base import Kernel


def dedent(s: str) -> str:
    return textwrap.dedent(s).lstrip("\n")


def assert_compiles(source: str) -> None:
    res = compile_kernel(source)
    assert res.ok, f"nvcc rejected the snippet:\n{res.log[-3000:]}\n--- source ---\n{source}"


def keys(mech, source: str) -> set:
    return {f.key for f in mech.detect(Kernel(source))}
