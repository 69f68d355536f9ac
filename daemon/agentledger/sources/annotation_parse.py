"""Annotated trajectories (Markdown + YAML front matter) → a structured document.

The format (``shared/spec/annotated-trajectory.md``) is written by LLM analysts
from a loose template, so this parser is lenient by design: it keeps every raw
line and section, never trusts the self-reported ("declared") computed fields,
derives its own from the control flow and hypothesis log, and reports whatever
it could not read as a *problem* with a line number instead of failing. Only a
file that is not text, or whose front matter is not YAML, is rejected
(``BadAnnotation``); one without a front matter or ``taskId`` is ``off-format``.

Pure (text in, data out) and free of heavy imports: the source, the projector,
``lint`` and the benchmarks all call it.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from ..model import is_int64

PARSER_VERSION = 1
MAX_NODES = 100_000  # values in a front matter, aliases expanded
MAX_SPAN = 10_000  # a wider "iter a-b" range is not taken as iterations
CANONICAL_PHASES = ("EXPLORE", "PLAN", "FILTER", "EXTRACT", "DELEGATE", "VERIFY", "ERROR", "RETURN", "STALL")
COMPUTED_FIELDS = ("hypothesesTested", "hypothesesRejected", "breakthroughIter", "itersOnRejectedHypotheses",
                   "itersExplore", "itersExtract", "itersVerify", "itersWasted", "implementationAttempts")
V3_FIELDS = ("delegationCount", "delegationItersTotal")
REQUIRED_FIELDS = ("taskId", "score", "iterations", "wallTimeMs", "answerType", "taskGroup", "answer",
                   "expected", "error", "patterns", "failureMode", "verdict")
KNOWN_FIELDS = REQUIRED_FIELDS + COMPUTED_FIELDS + V3_FIELDS
HYPOTHESIS_OUTCOMES = ("rejected", "accepted", "abandoned", "superseded")

# Outcome markers: canonical ones, then the ASCII/other stand-ins seen in real files
# (not recognised in v1 files, where a description may start with "v" or "x").
CANONICAL_MARKERS = {"✓": "success", "✗": "failure", "~": "partial", "→": "neutral"}
ASCII_MARKERS = {"+": "success", "v": "success", "x": "failure", "->": "neutral", "**": "unknown"}
STRIP = {"success": "✓", "failure": "✗", "partial": "~", "neutral": "→", "unknown": "?"}

_HEAD = re.compile(r"^\s*(self-)?iter\s+(~)?(\d+)(?:\s*-\s*(~)?(\d+))?(?:\s+(.*))?$", re.I)
_PHASE = re.compile(r"(\([^)]*\)|\[[A-Z][A-Z ]*\]|[A-Z][A-Z0-9_+/-]*(?::[A-Za-z0-9][A-Za-z0-9_-]*)?)"
                    r"((?:\[[A-Za-z][A-Za-z0-9]*\])*)(?=\s|$)")
_TAG = re.compile(r"\[([A-Za-z][A-Za-z0-9]*)\]")
_CHILD = re.compile(r"^\s*[│|]\s*(D\d+)\s+child\s+(~)?(\d+)(?:\s*-\s*~?(\d+))?\s+(.*)$")
_ELLIPSIS = re.compile(r"^\s*(?:\.\.\.|…)\s*$")
_MARKER_LINE = re.compile(r"^\s*-{2,}\s*\S.*?-{2,}\s*$")
_SECTION = re.compile(r"^## (.+?)\s*$")
_H1 = re.compile(r"^# (.+?)\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_HID = re.compile(r"^H\d+[a-z]?$")
_SUPERSEDED = re.compile(r"superseded by \**(H\w+)", re.I)
_RANGE = re.compile(r"^~?(\d+)(?:\s*[-–]\s*~?(\d+))?$")
_INT = re.compile(r"^\s*(~)?\s*(-?\d+)")


class BadAnnotation(ValueError):
    def __init__(self, line: int, reason: str):
        super().__init__(reason)
        self.line = line
        self.reason = reason


@dataclass
class Problem:
    line: int | None
    kind: str  # "format" | "disagreement" | "verdict"
    message: str


@dataclass
class FlowLine:
    ordinal: int
    line_no: int
    kind: str  # iter | child | ellipsis | marker | unparsed
    raw: str
    iter_from: int | None = None
    iter_to: int | None = None
    iter_approx: bool = False
    self_iter: bool = False
    delegation_id: str | None = None
    parent_ordinal: int | None = None  # for child lines
    phase_raw: str | None = None
    phase: str | None = None
    subphase: str | None = None
    tags: list[str] = field(default_factory=list)
    hyp_ids: list[str] = field(default_factory=list)
    deleg_ids: list[str] = field(default_factory=list)
    marker_raw: str | None = None
    outcome: str | None = None
    description: str = ""
    pseudo: bool = False

    def iterations(self) -> range:
        if self.iter_from is None:
            return range(0)
        lo, hi = sorted((self.iter_from, self.iter_to if self.iter_to is not None else self.iter_from))
        return range(lo, hi + 1)

    def phases(self) -> set[str]:
        """The coarse phases this line counts under (a compound EXPLORE+EXTRACT counts under both)."""
        return set(re.split(r"[+/]", self.phase)) - {""} if self.phase else set()


@dataclass
class Hypothesis:
    line_no: int
    hid: str
    text: str
    iters_raw: str
    iters: list[int] | None
    outcome: str
    outcome_note: str
    superseded_by: str | None
    evidence: str


@dataclass
class Section:
    ordinal: int
    line_no: int
    heading: str
    body: str


@dataclass
class Annotation:
    format_version: str  # v1 | v2 | v3 | off-format
    task_id: str | None
    title_id: str | None
    frontmatter: dict[str, Any]
    frontmatter_raw: str | None
    sections: list[Section]
    flow: list[FlowLine]
    flow_notes: str
    hypotheses: list[Hypothesis]
    hypothesis_arc: str | None
    delegations: list[dict[str, Any]]
    resources: list[tuple[str, str, str]]  # (resource, column, raw value)
    declared: dict[str, Any]
    derived: dict[str, Any]
    problems: list[Problem]
    score: float | None
    score_norm: float | None
    field_lines: dict[str, int]

    @property
    def control_flow_lines(self) -> int:
        return len(self.flow)

    @property
    def control_flow_lines_parsed(self) -> int:
        return sum(1 for ln in self.flow if ln.kind != "unparsed")

    def outcome_strip(self) -> str:
        """One character per parent iteration line: ✓ ✗ ~ → ? (· when unmarked)."""
        return "".join(STRIP.get(ln.outcome or "", "·") for ln in self.flow if ln.kind == "iter" and not ln.pseudo)

    def agreement(self) -> dict[str, bool | None]:
        """Per computed field: declared == derived (None when either side is missing)."""
        out: dict[str, bool | None] = {}
        for name in COMPUTED_FIELDS + V3_FIELDS:
            if name not in self.declared and name not in self.derived:
                continue
            out[name] = _agrees(self.declared.get(name), self.derived.get(name), name in self.declared)
        return out

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["control_flow_lines"] = self.control_flow_lines
        d["control_flow_lines_parsed"] = self.control_flow_lines_parsed
        d["outcome_strip"] = self.outcome_strip()
        d["agreement"] = self.agreement()
        d["parser_version"] = PARSER_VERSION
        return d


def _agrees(declared: Any, derived: Any, has_declared: bool) -> bool | None:
    """None when nothing was declared; null agrees only with null; ``~10`` agrees with 10."""
    if not has_declared:
        return None
    if declared is None or derived is None:
        return declared is None and derived is None
    d = _number(declared)
    return d is not None and d[0] == derived


def _number(value: Any) -> tuple[float, bool] | None:
    """(value, approximate) of an int/float or a string such as ``~10``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return (value, False) if math.isfinite(value) else None
    if isinstance(value, str):
        m = _INT.match(value)
        if m and m.end() == len(value.rstrip()):
            return int(m.group(2)), bool(m.group(1))
    return None


def _jsonable(value: Any, budget: list[int]) -> Any:
    """YAML 1.1 values (dates, timestamps, non-finite floats) as JSON-safe ones.
    ``budget`` counts values visited: aliases make a small text a huge tree."""
    budget[0] -= 1
    if budget[0] < 0:
        raise OverflowError
    if isinstance(value, dict):
        return {str(k): _jsonable(v, budget) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, budget) for v in value]
    if isinstance(value, (_dt.date, _dt.datetime)):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if type(value) is int and not is_int64(value):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


# -- front matter ---------------------------------------------------------------------------
def _front_matter(lines: list[str]) -> tuple[dict[str, Any] | None, str | None, int, dict[str, int]]:
    """(mapping, raw text, index of the first body line, key -> line number)."""
    if not lines or lines[0].rstrip("\r") != "---":
        return None, None, 0, {}
    for end in range(1, len(lines)):
        if lines[end].rstrip("\r") in ("---", "..."):
            break
    else:
        raise BadAnnotation(1, "front matter opened on line 1 is never closed with '---'")
    raw = "\n".join(lines[1:end])
    import yaml

    from ..golang.yamlv3.decode import YamlError, check_nesting

    try:
        check_nesting(raw)  # libyaml recurses per level: refuse what would exhaust the C stack
        data = yaml.load(raw, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if raw.strip() else {}
    except YamlError as exc:
        raise BadAnnotation((exc.line or 0) + 1, "front matter: " + re.sub(r"^yaml: line \d+: ", "", str(exc))) from None
    except yaml.YAMLError as exc:
        # File line numbers (the front matter starts on line 2). The construct that
        # was left open (context) is where to look; the problem is where it broke.
        mark, ctx = getattr(exc, "problem_mark", None), getattr(exc, "context_mark", None)
        line = (ctx or mark).line + 2 if (ctx or mark) is not None else 1
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        context = getattr(exc, "context", None)
        where = f" on line {mark.line + 2}" if mark is not None and ctx is not None else ""
        raise BadAnnotation(line, "front matter is not valid YAML: "
                            + (f"{context}, {problem}{where}" if context else problem)) from None
    except RecursionError:
        raise BadAnnotation(1, "front matter nests too deeply") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise BadAnnotation(2, f"front matter is a {type(data).__name__}, not a mapping")
    try:
        data = _jsonable(data, [MAX_NODES])
    except OverflowError:
        raise BadAnnotation(2, f"front matter expands to more than {MAX_NODES} values (aliases?)") from None
    keys = {}
    for i in range(1, end):
        m = re.match(r"^([A-Za-z_][\w-]*)\s*:", lines[i])
        if m:
            keys.setdefault(m.group(1), i + 1)
    return data, raw, end + 1, keys


# -- sections ----------------------------------------------------------------------------------
def _sections(lines: list[str], start: int) -> tuple[list[Section], str | None]:
    """``##`` sections outside fenced blocks, and the id of the first ``# `` heading."""
    out: list[Section] = []
    title = None
    fenced = False
    current: list[str] | None = None
    for i in range(start, len(lines)):
        line = lines[i]
        if _FENCE.match(line):
            fenced = not fenced
        if not fenced and not _FENCE.match(line):
            m = _SECTION.match(line)
            if m:
                if current is not None:
                    out[-1].body = "\n".join(current)
                out.append(Section(len(out) + 1, i + 1, m.group(1).strip(), ""))
                current = []
                continue
            h = _H1.match(line)
            if h and title is None and not out:
                text = h.group(1)
                title = text.split(":", 1)[1].split()[0] if ":" in text and text.split(":", 1)[1].split() else text
                continue
        if current is not None:
            current.append(line)
    if current is not None and out:
        out[-1].body = "\n".join(current)
    return out, title


def _section(sections: list[Section], *names: str) -> Section | None:
    wanted = {n.lower() for n in names}
    for s in sections:
        if s.heading.lower() in wanted:
            return s
    return None


# -- control flow -------------------------------------------------------------------------------
def _flow(section: Section | None, ascii_markers: bool) -> tuple[list[FlowLine], str]:
    if section is None:
        return [], ""
    body = section.body.split("\n")
    start, end = None, None
    for i, line in enumerate(body):
        if _FENCE.match(line):
            if start is None:
                start = i
            else:
                end = i
                break
    if start is not None:
        block = list(enumerate(body[start + 1:end if end is not None else len(body)], start + 1))
        notes = "\n".join(body[:start] + (body[end + 1:] if end is not None else [])).strip()
    else:
        block, notes = list(enumerate(body)), ""
    out: list[FlowLine] = []
    parent: FlowLine | None = None
    for idx, text in block:
        if not text.strip():
            continue
        line_no = section.line_no + 1 + idx
        ln = _flow_line(len(out) + 1, line_no, text, ascii_markers)
        if ln.kind == "unparsed" and out and text[:1].isspace():  # a wrapped description
            prev = out[-1]
            prev.description = (prev.description + "\n" + text.strip()).strip()
            prev.raw += "\n" + text
            continue
        if ln.kind == "iter":
            parent = ln
        elif ln.kind == "child" and parent is not None:
            ln.parent_ordinal = parent.ordinal
        out.append(ln)
    return out, notes


def _flow_line(ordinal: int, line_no: int, text: str, ascii_markers: bool) -> FlowLine:
    ln = FlowLine(ordinal, line_no, "unparsed", text)
    m = _CHILD.match(text)
    if m:
        ln.kind, ln.delegation_id = "child", m.group(1)
        ln.iter_from, ln.iter_approx = int(m.group(3)), bool(m.group(2))
        ln.iter_to = int(m.group(4)) if m.group(4) else None
        if ln.iter_to is not None and abs(ln.iter_to - ln.iter_from) > MAX_SPAN:
            ln.iter_from = ln.iter_to = None
            return ln
        if not _rest(ln, m.group(5), ascii_markers):
            ln.kind = "unparsed"
        return ln
    m = _HEAD.match(text)
    if m:
        ln.self_iter = bool(m.group(1))
        ln.iter_from, ln.iter_to = int(m.group(3)), int(m.group(5)) if m.group(5) else None
        if ln.iter_to is not None and abs(ln.iter_to - ln.iter_from) > MAX_SPAN:
            ln.iter_from = ln.iter_to = None
            return ln  # not a plausible range: unparsed
        ln.iter_approx = bool(m.group(2) or m.group(4))
        if _rest(ln, m.group(6) or "", ascii_markers):
            ln.kind = "iter"
        else:
            ln.iter_from = ln.iter_to = None
        return ln
    if _ELLIPSIS.match(text):
        ln.kind = "ellipsis"
    elif _MARKER_LINE.match(text):
        ln.kind, ln.pseudo, ln.description = "marker", True, text.strip().strip("-").strip()
    return ln


def _rest(ln: FlowLine, rest: str, ascii_markers: bool) -> bool:
    """PHASEFIELD (TAGS) (MARKER) (TAGS) DESCRIPTION; False when there is no phase."""
    m = _PHASE.match(rest)
    if not m:
        return False
    field_ = m.group(1)
    ln.phase_raw = field_
    if field_.startswith(("(", "[")):
        ln.pseudo = True
    else:
        phase, _, sub = field_.partition(":")
        ln.phase, ln.subphase = phase.upper(), sub or None
    tags = _TAG.findall(m.group(2))
    pos = m.end()
    marker_seen = False
    while True:
        rest_ws = rest[pos:]
        stripped = rest_ws.lstrip()
        if not stripped:
            pos = len(rest)
            break
        skip = len(rest_ws) - len(stripped)
        t = re.match(r"(?:\[[A-Za-z][A-Za-z0-9]*\])+(?=\s|$)", stripped)
        if t:
            tags += _TAG.findall(t.group(0))
            pos += skip + t.end()
            continue
        token = stripped.split(None, 1)[0]
        if not marker_seen and (token in CANONICAL_MARKERS or ascii_markers and token in ASCII_MARKERS):
            ln.marker_raw = token
            ln.outcome = CANONICAL_MARKERS.get(token) or ASCII_MARKERS[token]
            marker_seen = True
            pos += skip + len(token)
            continue
        pos += skip
        break
    ln.description = rest[pos:].strip()
    ln.tags = tags
    ln.hyp_ids = [t for t in tags if t.startswith("H")]
    ln.deleg_ids = [t for t in tags if re.fullmatch(r"D\d+", t)]
    return True


# -- tables -------------------------------------------------------------------------------------
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


def _hypotheses(section: Section | None, problems: list[Problem]) -> tuple[list[Hypothesis], str | None]:
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


def _delegations(section: Section | None) -> list[dict[str, Any]]:
    header, rows = _table(section)
    out = []
    for line_no, cells in rows:
        row = {h: (cells[i] if i < len(cells) else "") for i, h in enumerate(header)}
        used = _number(row.get("iters used", "").replace("*", "").strip())
        row["line"] = line_no
        row["iters_used_n"] = int(used[0]) if used else None
        out.append(row)
    return out


def _resources(section: Section | None) -> list[tuple[str, str, str]]:
    header, rows = _table(section)
    out = []
    for _, cells in rows:
        if not cells:
            continue
        for i in range(1, min(len(header), len(cells))):
            out.append((cells[0], header[i], cells[i]))
    return out


# -- derived fields -------------------------------------------------------------------------------
def derive(flow: list[FlowLine], hyps: list[Hypothesis], delegations: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The computed fields by the definitions of the spec's §7 (see the README for the choices)."""
    parents = [ln for ln in flow if ln.kind == "iter" and not ln.pseudo]

    def iters_with(pred) -> int:
        its: set[int] = set()
        for ln in parents:
            if pred(ln):
                its.update(ln.iterations())
        return len(its)

    accepted = [h for h in hyps if h.outcome == "accepted"]
    accepted_ids = {h.hid for h in accepted}
    breakthrough = None
    if accepted:
        hits = [min(ln.iterations()) for ln in parents
                if ln.outcome == "success" and accepted_ids & set(ln.hyp_ids) and ln.iter_from is not None]
        if hits:
            breakthrough = min(hits)
        else:
            for h in accepted:
                if h.iters:
                    breakthrough = min(h.iters)
                    break
    rejected_iters: set[int] = set()
    for h in hyps:
        if h.outcome == "rejected" and h.iters:
            rejected_iters.update(h.iters)
    out = {
        "hypothesesTested": len({h.hid for h in hyps if h.hid}),
        "hypothesesRejected": sum(1 for h in hyps if h.outcome == "rejected"),
        "breakthroughIter": breakthrough,
        "itersOnRejectedHypotheses": len(rejected_iters),
        "itersExplore": iters_with(lambda ln: "EXPLORE" in ln.phases()),
        "itersExtract": iters_with(lambda ln: "EXTRACT" in ln.phases()),
        "itersVerify": iters_with(lambda ln: "VERIFY" in ln.phases()),
        "itersWasted": iters_with(lambda ln: bool(ln.phases() & {"STALL", "ERROR"})
                                  or ("VERIFY" in ln.phases() and ln.subphase == "reconfirm")),
        "implementationAttempts": sum(1 for ln in parents if "EXTRACT" in ln.phases() and ln.subphase == "implement"),
    }
    if delegations is not None:
        out["delegationCount"] = len(delegations)
        out["delegationItersTotal"] = sum(d["iters_used_n"] or 0 for d in delegations)
    return out


def verdict_findings(fm: dict[str, Any], score_norm: float | None) -> list[str]:
    """The spec's §8 consistency checks: warnings, never errors."""
    out = []
    verdict = fm.get("verdict")
    s = score_norm
    if isinstance(verdict, str) and s is not None:
        if verdict == "perfect" and s != 1:
            out.append(f"verdict perfect but score is {fm.get('score')}")
        if verdict in ("wrong-answer", "timeout", "error") and s != 0:
            out.append(f"verdict {verdict} but score is {fm.get('score')} (expected 0)")
        if verdict == "partial-credit" and not 0 < s < 1:
            out.append(f"verdict partial-credit but score is {fm.get('score')} (expected between 0 and 1)")
    if verdict == "timeout":
        err, answer = fm.get("error"), fm.get("answer")
        if not (isinstance(err, str) and re.search(r"max.{0,3}iter", err, re.I)) and answer not in (None, ""):
            out.append("verdict timeout but the error does not mention max iterations and an answer was returned")
    if verdict == "error" and not fm.get("error"):
        out.append("verdict error but error is empty")
    if "failureMode" in fm and isinstance(verdict, str):
        success = verdict in ("perfect", "train-perfect")
        if (fm.get("failureMode") is None) != success:
            out.append(f"failureMode {'is null' if fm.get('failureMode') is None else 'is set'} "
                       f"but the verdict is {verdict}")
    if "verdict" not in fm:
        out.append("no verdict")
    return out


# -- the document ------------------------------------------------------------------------------------
def detect_version(fm: dict[str, Any] | None, sections: list[Section], flow: list[FlowLine]) -> str:
    if fm is None or not fm.get("taskId"):
        return "off-format"
    if (_section(sections, "Delegation Log") or "delegationCount" in fm
            or any(ln.kind == "child" or ln.deleg_ids for ln in flow)):
        return "v3"
    if (_section(sections, "Hypothesis Log") or any(k in fm for k in COMPUTED_FIELDS)
            or any(ln.subphase or ln.hyp_ids or (ln.marker_raw in CANONICAL_MARKERS) for ln in flow)):
        return "v2"
    return "v1"


def parse(text: str | bytes) -> Annotation:
    """The structured document. Raises ``BadAnnotation`` only for text that is not
    UTF-8 or a front matter that is not a YAML mapping."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadAnnotation(text[:exc.start].count(b"\n") + 1,
                                f"not UTF-8 text (invalid byte at offset {exc.start})") from None
    if "\x00" in text:
        raise BadAnnotation(text[:text.index("\x00")].count("\n") + 1, "binary data (NUL byte) in a Markdown file")
    text = text.lstrip("\ufeff")
    lines = text.split("\n")
    fm, fm_raw, body_start, field_lines = _front_matter(lines)
    sections, title = _sections(lines, body_start)
    problems: list[Problem] = []
    flow_section = _section(sections, "Control Flow")
    flow, notes = _flow(flow_section, ascii_markers=True)
    version = detect_version(fm, sections, flow)
    if version == "v1" and any(ln.marker_raw in ASCII_MARKERS for ln in flow):
        flow, notes = _flow(flow_section, ascii_markers=False)  # v1: "v"/"x" start descriptions
    hyp_section = _section(sections, "Hypothesis Log")
    hyps, arc = _hypotheses(hyp_section, problems)
    deleg_section = _section(sections, "Delegation Log")
    delegations = _delegations(deleg_section) if deleg_section else []
    resources = _resources(_section(sections, "Resource Log"))
    fm = fm or {}
    if version == "off-format":
        why = "no YAML front matter" if fm_raw is None else "front matter has no taskId"
        problems.insert(0, Problem(1, "format", f"off-format: {why}"))
        return Annotation(version, None, title, fm, fm_raw, sections, flow, notes, hyps, arc, delegations,
                          resources, {}, {}, problems, None, None, field_lines)
    for ln in flow:
        if ln.kind == "unparsed":
            problems.append(Problem(ln.line_no, "format", f"control-flow line not understood: {ln.raw.strip()!r}"))
    if flow_section is None:
        problems.append(Problem(None, "format", "no '## Control Flow' section"))
    for name in REQUIRED_FIELDS:
        if name not in fm:
            problems.append(Problem(1, "format", f"front matter lacks {name}"))
    score_raw = _number(fm.get("score"))
    score = float(score_raw[0]) if score_raw else None
    score_norm = score
    if score is not None and score > 1:
        score_norm = score / 100
        problems.append(Problem(field_lines.get("score"), "verdict",
                                f"score {fm.get('score')} is above 1: read as a percentage ({score_norm:g})"))
    declared = {k: fm[k] for k in COMPUTED_FIELDS + V3_FIELDS if k in fm}
    derived = derive(flow, hyps, delegations if (deleg_section or "delegationCount" in fm) else None)
    if hyp_section is None and not any(k in fm for k in ("hypothesesTested", "hypothesesRejected",
                                                         "breakthroughIter", "itersOnRejectedHypotheses")):
        for k in ("hypothesesTested", "hypothesesRejected", "breakthroughIter", "itersOnRejectedHypotheses"):
            derived.pop(k)  # nothing to derive them from and nothing declared to check
    doc = Annotation(version, str(fm.get("taskId")), title, fm, fm_raw, sections, flow, notes, hyps, arc,
                     delegations, resources, declared, derived, problems, score, score_norm, field_lines)
    for name, ok in doc.agreement().items():
        if ok is False:
            problems.append(Problem(field_lines.get(name), "disagreement",
                                    f"{name}: declared {declared.get(name)!r}, derived {derived.get(name)!r}"))
    for msg in verdict_findings(fm, score_norm):
        problems.append(Problem(field_lines.get("verdict"), "verdict", msg))
    return doc
