"""Parsing: the only room that imports tree-sitter (syntax.py) or libclang (semantics.py)."""
