"""Where things are: the data files of ``schema/`` (installed or in a checkout), the default ledger."""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path


def default_store_path() -> Path:
    """The ledger when no configuration names one: ``$XDG_STATE_HOME/agentledger/ledger.sqlite``."""
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(state) / "agentledger" / "ledger.sqlite"


@cache
def schema_dir() -> Path:
    """``agentledger/schema`` inside a wheel, else the checkout's top-level ``schema/``."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "schema", here.parent.parent / "schema"):
        if (candidate / "rubrics").is_dir():
            return candidate
    raise FileNotFoundError("agentledger: cannot find the schema/ directory (rubrics, migrations)")
