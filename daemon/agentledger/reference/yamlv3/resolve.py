"""How Go's yaml.v3 reads a *plain* scalar.

The files we ingest were written for, and are read by, Go programs using
gopkg.in/yaml.v3. PyYAML resolves plain scalars by YAML 1.1 rules (``yes`` is a
bool, ``0123`` is octal, dates become ``datetime``), which would make us
disagree with the reference on real files. So scalars are taken as text from
the composer and resolved here, by yaml.v3's table. The same resolver decides
quoting in the sidecar emitter, which is why it lives on its own.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta, timezone
from functools import lru_cache

from ...jsonnum import INT64_MAX, INT64_MIN  # noqa: F401 - decode.py reads them from here

STR, INT, FLOAT, BOOL, NULL, TIMESTAMP = "!!str", "!!int", "!!float", "!!bool", "!!null", "!!timestamp"

_MAP: dict[str, tuple[str, object]] = {}
for _words, _tag, _val in (
    (("true", "True", "TRUE"), BOOL, True),
    (("false", "False", "FALSE"), BOOL, False),
    (("", "~", "null", "Null", "NULL"), NULL, None),
    ((".nan", ".NaN", ".NAN"), FLOAT, math.nan),
    ((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), FLOAT, math.inf),
    (("-.inf", "-.Inf", "-.INF"), FLOAT, -math.inf),
):
    for _w in _words:
        _MAP[_w] = (_tag, _val)

# yaml.v3 only looks a plain scalar up when its first byte hints at a non-string.
_HINTED = frozenset("+-0123456789yYnNtTfFoO~.")
_YAML_STYLE_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")
_GO_FLOAT = re.compile(
    r"^[-+]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|inf|infinity|nan)$", re.I
)
_BASE60 = re.compile(r"^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$")
OLD_BOOL_TRUE = frozenset("y Y yes Yes YES on On ON".split())
OLD_BOOL_FALSE = frozenset("n N no No NO off Off OFF".split())
UINT64_MAX = 2**64 - 1

# Timestamp layouts yaml.v3 tries ("2006-1-2T15:4:5.999999999Z07:00", the same
# with a lower-case t, "2006-1-2 15:4:5.999999999", "2006-1-2").
_TS = re.compile(
    r"^(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:(?:([Tt])(\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2}))"
    r"|(?: (\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.(\d+))?))?$"
)


def go_parse_int(text: str) -> int | None:
    """strconv.ParseInt(s, 0, 64) / ParseUint fallback, after yaml.v3 drops '_'."""
    s = text
    sign = 1
    if s[:1] in "+-":
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if not s:
        return None
    base = 10
    low = s[:2].lower()
    if low in ("0x", "0o", "0b"):
        base = {"0x": 16, "0o": 8, "0b": 2}[low]
        s = s[2:]
    elif len(s) > 1 and s[0] == "0":
        base = 8
        s = s[1:]
    if not s:
        return None
    digits = "0123456789abcdef"[:base]
    if any(c not in digits for c in s.lower()):
        return None
    value = sign * int(s, base)
    if value < INT64_MIN or value > UINT64_MAX or (sign < 0 and value < INT64_MIN):
        return None
    return value


def parse_timestamp(text: str) -> datetime | None:
    """yaml.v3's parseTimestamp: the quick YYYY- check, then Go time.Parse layouts."""
    m = _TS.match(text)
    if not m:
        return None
    year, month, day = int(m.group(1)), int(m.group(2)), int(m.group(3))
    try:
        if m.group(4):
            hh, mm, ss = int(m.group(5)), int(m.group(6)), int(m.group(7))
            frac, zone = m.group(8), m.group(9)
        elif m.group(10):
            hh, mm, ss = int(m.group(10)), int(m.group(11)), int(m.group(12))
            frac, zone = m.group(13), "Z"
        else:
            hh = mm = ss = 0
            frac, zone = None, "Z"
        if hh > 23 or mm > 59 or ss > 59:
            return None
        micro = int((frac or "0")[:6].ljust(6, "0"))
        dt = datetime(year, month, day, hh, mm, ss, micro, tzinfo=timezone.utc)
    except ValueError:
        return None
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        dt -= sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
    return dt


@lru_cache(maxsize=16384)
def resolve_plain(text: str) -> tuple[str, object]:
    """The (tag, value) yaml.v3 gives an untagged plain scalar."""
    if not text:
        return NULL, None
    first = text[0]
    if first not in _HINTED:
        return STR, text
    hit = _MAP.get(text)
    if hit is not None:
        return hit
    if first == ".":
        if _GO_FLOAT.match(text):
            return FLOAT, float(text)
        return STR, text
    if first in "+-0123456789":
        ts = parse_timestamp(text)
        if ts is not None:
            return TIMESTAMP, ts
        plain = text.replace("_", "")
        iv = go_parse_int(plain)
        if iv is not None:
            return INT, iv
        if _YAML_STYLE_FLOAT.match(plain):
            try:
                return FLOAT, float(plain)
            except ValueError:  # pragma: no cover - regex guarantees a float
                pass
    return STR, text


def is_old_bool(text: str) -> bool:
    return text in OLD_BOOL_TRUE or text in OLD_BOOL_FALSE


def is_base60_float(text: str) -> bool:
    return bool(_BASE60.match(text))


def plain_is_string(text: str) -> bool:
    """True when yaml.v3 would write ``text`` unquoted as far as tags go."""
    return resolve_plain(text)[0] == STR and not (is_base60_float(text) or is_old_bool(text))
