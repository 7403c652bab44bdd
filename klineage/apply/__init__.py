"""Apply: retrieve mined skills for a new kernel and materialize them one at a time behind the gate."""
