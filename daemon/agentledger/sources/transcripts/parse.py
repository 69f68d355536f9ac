"""Claude and Codex transcript lines → turn facts, exactly as the reference reads them.

The reference decodes each line with Go's ``encoding/json`` into typed
structs (``scoring-rubric.md`` §4.7), which differs from ``json.loads`` in
ways that change counts: keys match field names case-insensitively (the last
matching key wins), every decoded field must have its JSON type or be null
(else the whole line is skipped), ``NaN`` literals are invalid, a byte-order
mark is not stripped, and timestamps follow Go's RFC 3339 parser. A line
yields one ``Fact`` (its UTC time in nanoseconds and what it adds) or None.
"""

from __future__ import annotations

import calendar
import json
import re
from dataclasses import dataclass
from typing import Any

from ...jsonnum import is_int64

_TS = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{1,2}):(\d{2}):(\d{2})(?:[.,](\d+))?(Z|[+-]\d{2}:\d{2})\Z")


@dataclass(frozen=True)
class Fact:
    ts_ns: int
    kind: str  # claude | codex
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read: int = 0
    cache_creation: int = 0
    turns: int = 0
    tool_results: int = 0
    tool_errors: int = 0
    # for money only, read leniently (a value of the wrong type is None, and never changes
    # whether or what the line counts for the scorer): the model that answered, and how
    # many of the cache writes were 1-hour writes (Claude's usage.cache_creation)
    model: str | None = None
    cache_write_1h: int | None = None


class Skip(Exception):
    """The reference would skip this line (not an error worth reporting)."""


class Invalid(Exception):
    """Not JSON at all: worth a quarantine record."""


def parse_go_time(text: str) -> int | None:
    """Go ``time.Parse(time.RFC3339, text)`` → UTC nanoseconds since the epoch, or None."""
    m = _TS.match(text)
    if not m:
        return None
    y, mo, d, h, mi, s = (int(m.group(i)) for i in range(1, 7))
    if not (1 <= mo <= 12 and h <= 23 and mi <= 59 and s <= 59):
        return None
    if not 1 <= d <= calendar.monthrange(y, mo)[1]:
        return None
    frac = (m.group(7) or "")[:9].ljust(9, "0")
    zone = m.group(8)
    offset = 0
    if zone != "Z":
        offset = (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60) * (1 if zone[0] == "+" else -1)
    seconds = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) - offset
    return seconds * 1_000_000_000 + int(frac)


def _fold(a: str, b: str) -> bool:
    if len(a) != len(b):
        return False
    return all(x == y or x.lower() == y.lower() or x.upper() == y.upper() for x, y in zip(a, b))


def _fields(pairs: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """Go struct decoding of an object's pairs: case-insensitive names, last key wins."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        for name in names:
            if _fold(key, name):
                out[name] = value
    return out


def _str(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    raise Skip


def _int(value: Any) -> int:
    if value is None:
        return 0
    if is_int64(value):
        return value
    raise Skip


def _bool(value: Any) -> bool:
    if value is None:
        return False
    if type(value) is bool:
        return value
    raise Skip


def _arr(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, list) and not (value and all(isinstance(p, tuple) for p in value)):
        return value  # a JSON array (pairs lists are objects)
    raise Skip


def _no_constants(name: str) -> Any:
    raise ValueError(f"invalid JSON literal {name}")


def decode(data: bytes) -> Any:
    """JSON with objects as pair lists; raises Invalid for anything Go would not decode."""
    text = data.decode("utf-8", "replace")  # Go substitutes U+FFFD inside strings
    if text.startswith("\ufeff"):
        raise Invalid("byte-order mark before the JSON value")
    try:
        return json.loads(text, object_pairs_hook=lambda pairs: [tuple(p) for p in pairs] or _EMPTY,
                          parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        raise Invalid(str(exc)) from None


class _Empty(list):
    """An empty JSON object (distinct from an empty array)."""


_EMPTY = _Empty()


def _is_object(value: Any) -> bool:
    return isinstance(value, _Empty) or (isinstance(value, list) and bool(value)
                                         and all(isinstance(p, tuple) for p in value))


def fact(data: bytes) -> Fact | None:
    """What one transcript line adds, or None (skipped as the reference skips it).

    Raises ``Invalid`` for a line that is not JSON (the caller may quarantine it)."""
    value = decode(data)
    if value is None:
        return None  # `null` decodes as an empty record, which has no timestamp
    if not _is_object(value):
        return None
    try:
        top = _fields(value, ("type", "timestamp", "message", "payload"))
        kind = _str(top.get("type"))
        ts = parse_go_time(_str(top.get("timestamp")))
        if ts is None:
            return None
        if "payload" in top:  # a Codex line, whatever else it carries
            return _codex(ts, top["payload"])
        if kind in ("assistant", "user"):
            return _claude(ts, top.get("message"))
        return None
    except Skip:
        return None


def _object_pairs(value: Any) -> list | None:
    if value is None:
        return None
    if not _is_object(value):
        raise Skip
    return value


def _codex(ts: int, payload: Any) -> Fact | None:
    p = _object_pairs(payload)
    if p is None:
        return None
    pf = _fields(p, ("type", "info"))
    ptype = _str(pf.get("type"))
    info = _object_pairs(pf.get("info"))
    usage = None
    if info is not None:
        usage = _object_pairs(_fields(info, ("last_token_usage",)).get("last_token_usage"))
    counts = {}
    if usage is not None:
        u = _fields(usage, ("input_tokens", "cached_input_tokens", "output_tokens"))
        counts = {k: _int(u.get(k)) for k in ("input_tokens", "cached_input_tokens", "output_tokens")}
    if ptype != "token_count" or info is None or usage is None:
        return None
    inp, cached, out = counts["input_tokens"], counts["cached_input_tokens"], counts["output_tokens"]
    return Fact(ts, "codex", input_tokens=inp, output_tokens=out, cache_read=cached,
                cache_creation=max(inp - cached, 0), turns=1)


def _claude(ts: int, message: Any) -> Fact | None:
    m = _object_pairs(message)
    if m is None:
        return None
    mf = _fields(m, ("role", "usage", "content", "model"))
    _str(mf.get("role"))
    usage = _object_pairs(mf.get("usage"))
    content = _arr(mf.get("content"))
    results = errors = 0
    items = []
    for item in content:
        it = _object_pairs(item)
        if it is None:
            continue
        f = _fields(it, ("type", "is_error"))
        items.append((_str(f.get("type")), _bool(f.get("is_error"))))
    counts = (0, 0, 0, 0)
    turns = 0
    hour = None
    if usage is not None:
        u = _fields(usage, ("input_tokens", "output_tokens", "cache_read_input_tokens",
                            "cache_creation_input_tokens", "cache_creation"))
        split = u.get("cache_creation")
        if _is_object(split):
            h = _fields(split, ("ephemeral_1h_input_tokens",)).get("ephemeral_1h_input_tokens")
            hour = h if is_int64(h) and h >= 0 else None
        counts = (_int(u.get("input_tokens")), _int(u.get("output_tokens")),
                  _int(u.get("cache_read_input_tokens")), _int(u.get("cache_creation_input_tokens")))
        turns = 1
    for typ, is_error in items:
        if typ == "tool_result":
            results += 1
            errors += is_error
    if not turns and not results:
        return None
    model = mf.get("model")
    return Fact(ts, "claude", input_tokens=counts[0], output_tokens=counts[1], cache_read=counts[2],
                cache_creation=counts[3], turns=turns, tool_results=results, tool_errors=errors,
                model=model if isinstance(model, str) and turns else None, cache_write_1h=hour if turns else None)
