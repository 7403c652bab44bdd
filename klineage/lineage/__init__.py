"""Lineages: the backward walk (walk.py), its proposers (proposers.py), the audit (audit.py) and the
lift of accepted steps into skills (lift.py)."""
