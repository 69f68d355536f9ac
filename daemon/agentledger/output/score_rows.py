"""The lines of a score sidecar's breakdown rows, looked up before they are formatted.

Every score a pass makes renders its rows; rows repeat a lot (a rubric's signals,
labels and weights; absent signals' details), and their fields more still. Kept in
memory, bounded, per process: a scoring worker's lookups last the pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..reference.fmt import format_float
from ..reference.yamlv3.emit import format_scalar
from ..scoring.breakdown import Row as BreakdownRow

# Breakdown rows' texts: rows repeat a lot (same signal, detail, weights). Keyed by a row's
# fields as a tuple (``rows_text``) or by its stored JSON text (``store.scores.render_stored``).
ROWS: dict[tuple | str, str] = {}
ROWS_KEPT = 32768


def remember(memo: dict, kept: int, key: object, text: str) -> str:
    """Keep ``text`` under ``key`` in ``memo``, emptied first when it holds ``kept``
    texts (every lookup of a pass's text in this package is bounded so); ``text``."""
    if len(memo) >= kept:
        memo.clear()
    memo[key] = text
    return text


def remember_row(key: tuple | str, text: str) -> str:
    """Keep ``text`` in ``ROWS``; ``text``."""
    return remember(ROWS, ROWS_KEPT, key, text)


def rows_text(breakdown: Sequence[BreakdownRow]) -> list[str]:
    """Each row's text (``row_text``), looked up by the row's fields as a plain tuple (a
    frozen dataclass hashes in Python, a tuple in C). -0.0 equals 0.0 as a key but prints
    as "-0": a row with a zero in it is checked for a negative one first."""
    out = []
    for r in breakdown:
        key = (r.signal, r.label, r.present, r.sub_score, r.detail, r.nominal_weight, r.effective_weight,
               r.contribution)
        if 0.0 in (r.sub_score, r.nominal_weight, r.effective_weight, r.contribution) and negative_zero(r):
            out.append(row_text(r))
            continue
        out.append(ROWS.get(key) or remember_row(key, row_text(r)))
    return out


def row_text(r: BreakdownRow) -> str:
    """One breakdown row's lines. Its fields repeat far more than whole rows do (a
    rubric's signals, labels and weights; sub-scores of 0, 1, 0.5): each field's text is
    looked up (``_field``, ``_number``) before it is formatted."""
    s, n = _field, _number
    text = (f"    - signal: {s(r.signal)}\n      label: {s(r.label)}\n"
            f"      present: {'true' if r.present else 'false'}\n      sub_score: {n(r.sub_score)}\n")
    if r.detail:
        text += f"      detail: {s(r.detail)}\n"
    return text + (f"      nominal_weight: {n(r.nominal_weight)}\n"
                   f"      effective_weight: {n(r.effective_weight)}\n"
                   f"      contribution: {n(r.contribution)}\n")


def negative_zero(r: BreakdownRow) -> bool:
    """-0.0 == 0.0, so a memoised row must not stand in for one that prints "-0"."""
    return any(x == 0 and math.copysign(1.0, x) < 0
               for x in (r.sub_score, r.nominal_weight, r.effective_weight, r.contribution))


_FIELDS: dict[object, str] = {}  # a row's string or number -> its text (emptied when full)
_FIELDS_KEPT = 16384


def _field(v: object) -> str:
    """A row's string field as ``format_scalar`` gives it at the row's indent."""
    if type(v) is not str:
        return format_scalar(v, 4)
    return _FIELDS.get(v) or remember(_FIELDS, _FIELDS_KEPT, v, format_scalar(v, 4))


def _number(x: float) -> str:
    # keyed by its float: never a zero (-0.0 equals 0.0 and prints "-0"); 1 and 1.0 print alike
    x = float(x)  # a weight the rubric gives as an integer prints as its float
    text = _FIELDS.get(x) if x else None
    if text is None:
        text = format_float(x)
        if text[-1] in "Nf":
            text = _YAML_NONFINITE.get(text, text)
        if x:
            remember(_FIELDS, _FIELDS_KEPT, x, text)
    return text


_YAML_NONFINITE = {"NaN": ".nan", "+Inf": ".inf", "-Inf": "-.inf"}
