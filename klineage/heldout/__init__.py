"""The held-out check: do the mined skills transfer to operators no lineage was mined from, or were
they memorized? `klineage heldout` runs every instance of a held-out folder under the conditions
idiom / skills / control-random / control-foreign / llm (klineage.heldout.run), and writes a report
with 95% intervals, failure-counting geomeans and a memorization audit (klineage.heldout.report).

  instances.py   the instance convention (STARTS, VENDOR_FALLBACK) and loading
  run.py         the conditions, built on the apply loop; resumable run; outputs
  stats.py       speedups, intervals, geomeans, comparisons
  similarity.py  winnowed token fingerprints
  report.py      the report and the audit
"""
from klineage.heldout.instances import HeldoutError, Instance, load_instances
from klineage.heldout.run import CONDITIONS, HeldoutConfig, run_heldout, write_outputs

__all__ = ["CONDITIONS", "HeldoutConfig", "HeldoutError", "Instance", "load_instances", "run_heldout", "write_outputs"]
