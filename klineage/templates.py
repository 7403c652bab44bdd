"""One loader for the jinja2 prompt templates (strict: an undefined name is an error)."""
from __future__ import annotations

from pathlib import Path

import jinja2


def template_module(folder: Path, name: str, trim: bool = False):
    """The template `name` of `folder` as a module (its macros are attributes); `trim` strips the
    newline after a block tag and the indentation before it."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(folder)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=trim, lstrip_blocks=trim, autoescape=False)
    return env.get_template(name).module
