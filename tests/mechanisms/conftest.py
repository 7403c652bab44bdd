"""Mechanism tests import their helpers from mechtest.py (this folder is on sys.path)."""
import pytest

from mechtest import assert_compiles, dedent, keys  # noqa: F401  (re-exported for the test modules)


@pytest.fixture
def compiles():
    return assert_compiles
