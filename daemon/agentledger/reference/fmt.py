"""Go's number and string formatting, as far as score details and sidecars need it.

Detail strings and YAML floats are part of the byte-level contract with the
reference, and Python's defaults differ from Go's in the corners (``nan`` vs
``NaN``, ``1e-05`` vs ``1e-05`` but ``1e+16`` vs ``1e+16`` …). Every such
rendering goes through here.
"""

from __future__ import annotations

import math
from decimal import Decimal


def short(s: str) -> str:
    """The first 12 bytes of ``s`` (the reference cuts bytes, not characters)."""
    raw = s.encode("utf-8")
    if len(raw) <= 12:
        return s
    return raw[:12].decode("utf-8", "replace")


def fixed(x: float, places: int) -> str:
    """Go ``%.{places}f``: ties-to-even on the binary value; NaN/+Inf/-Inf spelled Go's way."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return format(x, f".{places}f")


def format_float(x: float) -> str:
    """strconv.FormatFloat(x, 'g', -1, 64): the shortest round-trip digits, Go layout."""
    r = repr(x)
    if "e" not in r and "n" not in r and (x == 0 or 1e-4 <= abs(x) < 1e6):
        # Plain range: Python's repr already has Go's digits; drop a trailing ".0".
        return r[:-2] if r.endswith(".0") else r
    return _format_float_slow(x)


def _format_float_slow(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    if x == 0:
        return "-0" if math.copysign(1.0, x) < 0 else "0"
    sign, digits, exp = Decimal(repr(x)).as_tuple()
    ds = "".join(map(str, digits)).rstrip("0") or "0"
    # repr may carry trailing zeros in the digit tuple (e.g. 100.0 -> 1000, exp -1).
    stripped = len(digits) - len(ds)
    exp += stripped
    point = len(ds) + exp  # position of the decimal point relative to the digits
    e = point - 1  # exponent of the first digit
    neg = "-" if sign else ""
    if e < -4 or e >= 6:  # shortest formatting uses precision 6 for the decision
        mant = ds[0] + ("." + ds[1:] if len(ds) > 1 else "")
        return f"{neg}{mant}e{'-' if e < 0 else '+'}{abs(e):02d}"
    if point <= 0:
        return f"{neg}0.{'0' * -point}{ds}"
    if point >= len(ds):
        return f"{neg}{ds}{'0' * (point - len(ds))}"
    return f"{neg}{ds[:point]}.{ds[point:]}"


_ESC = {7: r"\a", 8: r"\b", 12: r"\f", 10: r"\n", 13: r"\r", 9: r"\t", 11: r"\v"}


def go_quote(s: str) -> str:
    """strconv.Quote: double quotes, Go escapes, printable Unicode kept."""
    out = ['"']
    for ch in s:
        cp = ord(ch)
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif cp in _ESC:
            out.append(_ESC[cp])
        elif ch == " " or (ch.isprintable() and cp != 0x7F):
            out.append(ch)
        elif cp < 0x20 or cp == 0x7F:
            out.append(f"\\x{cp:02x}")
        elif 0xD800 <= cp <= 0xDFFF:  # a lone surrogate: Go sees invalid UTF-8
            out.append("\\ufffd")
        elif cp < 0x10000:
            out.append(f"\\u{cp:04x}")
        else:
            out.append(f"\\U{cp:08x}")
    out.append('"')
    return "".join(out)
