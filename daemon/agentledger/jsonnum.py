"""Numbers as the ledger's JSON holds them: floats JSON cannot (NaN, ±Inf, which a
``.nan`` in a YAML file can bring) as tagged strings, so event payloads stay valid
JSON (``json_valid``), and the integers a 64-bit column can hold.

Apart from ``model.py`` (which re-exports them) because the store, the scorer and
the parsers all need these few functions, and ``model.py``'s dataclasses cost ~11 ms
to import: a command that reads no record (a re-ingest with nothing changed) does
not pay for them."""

from __future__ import annotations

import math
from typing import Any

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def is_int64(value: Any) -> bool:
    """An exact integer a 64-bit column (SQLite, Go's int64) can hold; bools are not."""
    return type(value) is int and INT64_MIN <= value <= INT64_MAX


_NONFINITE = {"NaN": math.nan, "+Inf": math.inf, "-Inf": -math.inf}


def encode_float(x: float) -> float | str:
    if math.isfinite(x):
        return x
    return "NaN" if math.isnan(x) else ("+Inf" if x > 0 else "-Inf")


def decode_float(x: float | int | str) -> float:
    if isinstance(x, str):
        return _NONFINITE[x]
    return float(x)
