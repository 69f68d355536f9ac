"""The annotated-trajectory format's Markdown tables: the hypothesis log, the
delegation and resource tables, and "iter a-b" ranges in their cells."""

from __future__ import annotations

import re
from typing import Any

from .model import HYPOTHESIS_OUTCOMES, Hypothesis, Problem, Section, as_number

MAX_SPAN = 10_000  # a wider "iter a-b" range is not taken as iterations
_HID = re.compile(r"^H\d+[a-z]?$")
_SUPERSEDED = re.compile(r"superseded by \**(H\w+)", re.I)
_RANGE = re.compile(r"^~?(\d+)(?:\s*[-–]\s*~?(\d+))?$")


def _cells(row: str) -> list[str]:
    row = row.strip()
    if row.startswith("|"):
        row = row[1:]
    if row.endswith("|") and not row.endswith("\\|"):
        row = row[:-1]
    return [c.replace("\\|", "|").strip() for c in re.split(r"(?<!\\)\|", row)]


def _table(section: Section | None) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """(lower-cased header, [(line number, cells)]) of the section's first table."""
    if section is None:
        return [], []
    rows: list[tuple[int, str]] = []
    for i, line in enumerate(section.body.split("\n")):
        if line.lstrip().startswith("|"):
            rows.append((section.line_no + 1 + i, line))
        elif rows:
            break
    if len(rows) < 2:
        return [], []
    header = [c.lower() for c in _cells(rows[0][1])]
    data = [(n, _cells(r)) for n, r in rows[1:] if not re.fullmatch(r"[\s|:\-]*", r)]
    return header, data


def _col(header: list[str], cells: list[str], *names: str) -> str:
    for name in names:
        if name in header:
            i = header.index(name)
            return cells[i] if i < len(cells) else ""
    return ""


def parse_iters(raw: str) -> list[int] | None:
    """``3`` · ``8-10,15`` · ``~19-46`` → sorted iteration numbers; words → None."""
    out: set[int] = set()
    text = raw.replace("*", "").strip()
    if not text:
        return None
    for part in re.split(r"\s*[,;]\s*", text):
        m = _RANGE.match(part.strip())
        if not m:
            return None
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if hi < lo or hi - lo > MAX_SPAN:
            return None
        out.update(range(lo, hi + 1))
    return sorted(out)


def read_hypotheses(section: Section | None, problems: list[Problem]) -> tuple[list[Hypothesis], str | None]:
    header, rows = _table(section)
    out = []
    for line_no, cells in rows:
        hid = _col(header, cells, "id").replace("*", "").strip()
        if not _HID.match(hid):
            problems.append(Problem(line_no, "format", f"hypothesis id {hid!r} is not H<n>"))
        outcome_cell = _col(header, cells, "outcome")
        plain = outcome_cell.replace("*", "").strip()
        first = re.split(r"[\s:(—-]", plain.lower(), maxsplit=1)[0] if plain else ""
        note = plain[len(first):].lstrip(" :—-").strip() if first else plain
        evidence = _col(header, cells, "evidence")
        if "evidence" not in header and note and first in HYPOTHESIS_OUTCOMES:
            evidence = note  # the four-column form: "rejected: parse error"
        sup = _SUPERSEDED.search(plain)
        iters_raw = _col(header, cells, "iters", "iterations")
        iters = parse_iters(iters_raw)
        if iters is None and iters_raw.strip():
            problems.append(Problem(line_no, "format", f"{hid}: iterations {iters_raw!r} are not numbers or ranges"))
        if first and first not in HYPOTHESIS_OUTCOMES:
            problems.append(Problem(line_no, "format", f"{hid}: outcome {first!r} is not one of "
                                                       + "/".join(HYPOTHESIS_OUTCOMES)))
        out.append(Hypothesis(line_no, hid, _col(header, cells, "hypothesis"), iters_raw, iters, first, note,
                              sup.group(1) if sup else None, evidence))
    arc = None
    if section is not None:
        m = re.search(r"^\*\*Hypothesis arc:?\*\*:?\s*(.+)$", section.body, re.M | re.I)
        arc = m.group(1).strip() if m else None
    return out, arc


def read_delegations(section: Section | None) -> list[dict[str, Any]]:
    header, rows = _table(section)
    out = []
    for line_no, cells in rows:
        row = {h: (cells[i] if i < len(cells) else "") for i, h in enumerate(header)}
        used = as_number(row.get("iters used", "").replace("*", "").strip())
        row["line"] = line_no
        row["iters_used_n"] = int(used[0]) if used else None
        out.append(row)
    return out


def read_resources(section: Section | None) -> list[tuple[str, str, str]]:
    header, rows = _table(section)
    out = []
    for _, cells in rows:
        if not cells:
            continue
        for i in range(1, min(len(header), len(cells))):
            out.append((cells[0], header[i], cells[i]))
    return out
