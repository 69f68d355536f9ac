"""The trajectory family: annotated trajectories, one ``annotation.recorded`` event →
rows in the ``trajectory_*`` tables (lines, hypotheses, delegations, resources,
sections, fields, vocabulary terms)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from ..jsonnum import is_int64
from .events import Event, canonical_json

ANNOTATION_TABLES = ("trajectories", "trajectory_lines", "trajectory_hypotheses", "trajectory_delegations",
                     "trajectory_resources", "trajectory_sections", "trajectory_fields", "trajectory_terms")


class TrajectoryFamily:
    tables = ANNOTATION_TABLES

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def handlers(self) -> dict[str, Callable[[Event, dict[str, Any]], None]]:
        return {"annotation.recorded": self._annotation_recorded, "file.removed": self._file_removed}

    def flush(self) -> None:
        pass

    def _forget_annotation(self, source: str, path: str) -> None:
        for table in ANNOTATION_TABLES:
            self.conn.execute(f"DELETE FROM {table} WHERE source = ? AND path = ?", (source, path))

    def _file_removed(self, ev: Event, p: dict[str, Any]) -> None:
        if p["kind"] == "annotation":
            self._forget_annotation(ev.source, p["file"])

    def _annotation_recorded(self, ev: Event, p: dict[str, Any]) -> None:
        from ..sources.annotations.model import COMPUTED_FIELDS, KNOWN_FIELDS, V3_FIELDS
        from ..sources.annotations.events import normalise_term

        src, path, d = ev.source, p["path"], p["document"]
        self._forget_annotation(src, path)
        fm = d["frontmatter"]

        def text(key: str) -> str | None:
            v = fm.get(key)
            return None if v is None else v if isinstance(v, str) else canonical_json(v)

        def integer(key: str) -> int | None:
            v = fm.get(key)
            return v if is_int64(v) else None

        findings = [x["message"] for x in d["problems"] if x["kind"] == "verdict"]
        self.conn.execute(
            "INSERT INTO trajectories (source, path, sha256, format_version, task_id, title_id, score, score_norm,"
            " iterations, wall_time_ms, answer_type, task_group, answer, expected, error, failure_mode, verdict,"
            " frontmatter, extra, control_flow_lines, control_flow_lines_parsed, outcome_strip, hypothesis_arc,"
            " problems, verdict_findings, seq) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (src, path, p["sha256"], d["format_version"], d["task_id"], d["title_id"], d["score"], d["score_norm"],
             integer("iterations"), integer("wallTimeMs"), text("answerType"), text("taskGroup"), text("answer"),
             text("expected"), text("error"), text("failureMode"), text("verdict"), canonical_json(fm),
             canonical_json({k: v for k, v in fm.items() if k not in KNOWN_FIELDS}), d["control_flow_lines"],
             d["control_flow_lines_parsed"], d["outcome_strip"], d["hypothesis_arc"], len(d["problems"]),
             canonical_json(findings), ev.seq))
        self.conn.executemany(
            "INSERT INTO trajectory_lines (source, path, ordinal, line_no, kind, iter_from, iter_to, iter_approx,"
            " delegation_id, parent_ordinal, phase_raw, phase, subphase, tags, hyp_ids, marker_raw, outcome,"
            " description, pseudo) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [(src, path, ln["ordinal"], ln["line_no"], ln["kind"], ln["iter_from"], ln["iter_to"],
              int(ln["iter_approx"]), ln["delegation_id"], ln["parent_ordinal"], ln["phase_raw"], ln["phase"],
              ln["subphase"], canonical_json(ln["tags"]), canonical_json(ln["hyp_ids"]), ln["marker_raw"],
              ln["outcome"], ln["description"], int(ln["pseudo"])) for ln in d["flow"]])
        self.conn.executemany(
            "INSERT INTO trajectory_hypotheses (source, path, ordinal, line_no, hid, hypothesis, iters_raw, iters,"
            " outcome, outcome_note, superseded_by, evidence) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            [(src, path, i, h["line_no"], h["hid"], h["text"], h["iters_raw"],
              None if h["iters"] is None else canonical_json(h["iters"]), h["outcome"], h["outcome_note"],
              h["superseded_by"], h["evidence"]) for i, h in enumerate(d["hypotheses"], 1)])
        self.conn.executemany(
            "INSERT INTO trajectory_delegations (source, path, ordinal, did, iters_used, row) VALUES (?,?,?,?,?,?)",
            [(src, path, i, (r.get("id") or "").replace("*", "").strip() or None, r.get("iters_used_n"),
              canonical_json(r)) for i, r in enumerate(d["delegations"], 1)])
        self.conn.executemany(
            "INSERT INTO trajectory_resources (source, path, resource, col, raw_value) VALUES (?,?,?,?,?)",
            [(src, path, *r) for r in d["resources"]])
        self.conn.executemany(
            "INSERT INTO trajectory_sections (source, path, ordinal, heading, body) VALUES (?,?,?,?,?)",
            [(src, path, sec["ordinal"], sec["heading"], sec["body"]) for sec in d["sections"]])
        declared, derived, agreement = d["declared"], d["derived"], d["agreement"]
        self.conn.executemany(
            "INSERT INTO trajectory_fields (source, path, name, declared, derived, agrees) VALUES (?,?,?,?,?,?)",
            [(src, path, name, canonical_json(declared[name]) if name in declared else None,
              canonical_json(derived[name]) if name in derived else None,
              None if agreement.get(name) is None else int(agreement[name]))
             for name in COMPUTED_FIELDS + V3_FIELDS if name in declared or name in derived])
        terms = {("pattern", t) for t in map(normalise_term, fm.get("patterns") or [] if isinstance(
            fm.get("patterns"), list) else []) if t}
        if (fm_mode := normalise_term(fm.get("failureMode"))) is not None:
            terms.add(("failure_mode", fm_mode))
        self.conn.executemany(
            "INSERT INTO trajectory_terms (source, path, vocabulary, term) VALUES (?,?,?,?)",
            [(src, path, v, t) for v, t in sorted(terms)])
