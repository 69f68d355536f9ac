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
from typing import Any

from ...jsonnum import is_int64
from .model import ASCII_MARKERS, CANONICAL_MARKERS, COMPUTED_FIELDS, REQUIRED_FIELDS, V3_FIELDS, Annotation, BadAnnotation, FlowLine, Problem, Section, as_number, derive, verdict_findings
from .tables import MAX_SPAN, read_delegations, read_hypotheses, read_resources

MAX_NODES = 100_000  # values in a front matter, aliases expanded


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

    from ...reference.yamlv3.decode import YamlError, check_nesting

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


# -- derived fields -------------------------------------------------------------------------------


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
    hyps, arc = read_hypotheses(hyp_section, problems)
    deleg_section = _section(sections, "Delegation Log")
    delegations = read_delegations(deleg_section) if deleg_section else []
    resources = read_resources(_section(sections, "Resource Log"))
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
    score_raw = as_number(fm.get("score"))
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
