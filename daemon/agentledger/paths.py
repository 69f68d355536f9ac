"""Where the data files of ``schema/`` are, installed or in a checkout."""

from __future__ import annotations

from functools import cache
from pathlib import Path


@cache
def schema_dir() -> Path:
    """``agentledger/schema`` inside a wheel, else the checkout's top-level ``schema/``."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "schema", here.parent.parent / "schema"):
        if (candidate / "rubrics").is_dir():
            return candidate
    raise FileNotFoundError("agentledger: cannot find the schema/ directory (rubrics, migrations)")
