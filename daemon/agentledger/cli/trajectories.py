"""Commands for annotated trajectories: ``trajectories``, ``trajectory ID``, ``lint``.

``trajectories`` and ``trajectory`` read the ledger (read-only); ``lint`` reads
files directly and needs no ledger, so an annotation repository's CI can run it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .common import Failure, UsageError, count, read_only, table

EXIT_OK, EXIT_FINDINGS = 0, 1


def add_commands(cmd) -> None:
    p = cmd("trajectories", "List annotated trajectories with declared and derived computed fields.")
    p.add_argument("--task", metavar="ID", help="task id, or a part of it")
    p.add_argument("--group", metavar="TASK_GROUP", help="task group, or a part of it")
    p.add_argument("--verdict", metavar="VERDICT")
    p.add_argument("--format", dest="format_version", choices=("v1", "v2", "v3", "off-format"),
                   help="only files of this format version")
    p.add_argument("--disagreeing", action="store_true",
                   help="only files whose declared computed fields disagree with the derived ones")
    p.add_argument("--limit", type=count, default=200, help="at most this many rows (default 200; 0: all)")
    p.add_argument("--json", action="store_true", help="one object per file")
    p.set_defaults(func=cmd_trajectories)

    p = cmd("trajectory", "Summarise one annotated trajectory: outcome strip, phases, hypotheses, fields.")
    p.add_argument("id", help="task id or file path (a unique part of either)")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=cmd_trajectory)

    p = cmd("lint", "Check annotation files: format problems and declared-vs-derived disagreements "
                    "(exit 1 when any are found).")
    p.add_argument("paths", nargs="+", metavar="PATH", help="files, or directories searched for *.md")
    p.add_argument("--json", action="store_true", help="findings as JSON")
    p.add_argument("--no-disagreements", action="store_true",
                   help="report format problems only, not computed fields that disagree or verdict findings")
    p.set_defaults(func=cmd_lint)


def _objects(conn, where: str = "", params: tuple = (), limit: int = 0) -> list[dict]:
    sql = ("SELECT source, path, task_id, format_version, verdict, score, score_norm, iterations, task_group,"
           " failure_mode, control_flow_lines, control_flow_lines_parsed, outcome_strip, problems, verdict_findings,"
           " sha256 FROM trajectories" + (f" WHERE {where}" if where else "") + " ORDER BY task_id, source, path")
    if limit:
        sql += f" LIMIT {int(limit)}"
    out = []
    for r in conn.execute(sql, params):
        d = dict(r)
        d["verdict_findings"] = json.loads(d["verdict_findings"])
        d["declared"], d["derived"], d["agrees"] = {}, {}, {}
        for f in conn.execute("SELECT name, declared, derived, agrees FROM trajectory_fields"
                              " WHERE source = ? AND path = ? ORDER BY rowid", (r["source"], r["path"])):
            if f["declared"] is not None:
                d["declared"][f["name"]] = json.loads(f["declared"])
            if f["derived"] is not None:
                d["derived"][f["name"]] = json.loads(f["derived"])
            if f["agrees"] is not None:
                d["agrees"][f["name"]] = bool(f["agrees"])
        out.append(d)
    return out


def cmd_trajectories(args: argparse.Namespace) -> int:

    _, conn = read_only(args)
    where, params = [], []
    for col, val in (("task_id", args.task), ("task_group", args.group)):
        if val:
            where.append(f"instr({col}, ?) > 0")
            params.append(val)
    for col, val in (("verdict", args.verdict), ("format_version", args.format_version)):
        if val:
            where.append(f"{col} = ?")
            params.append(val)
    if args.disagreeing:
        where.append("EXISTS (SELECT 1 FROM trajectory_fields f WHERE f.source = trajectories.source"
                     " AND f.path = trajectories.path AND f.agrees = 0)")
    rows = _objects(conn, " AND ".join(where), tuple(params), args.limit)
    conn.close()
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return EXIT_OK
    if not rows:
        print("no trajectories")
        return EXIT_OK
    for r in rows:
        r["fields"] = f"{sum(r['agrees'].values())}/{len(r['agrees'])}" if r["agrees"] else ""
        r["lines"] = f"{r['control_flow_lines_parsed']}/{r['control_flow_lines']}"
        r["strip"] = r["outcome_strip"][:30] + ("…" if len(r["outcome_strip"]) > 30 else "")
    table(rows, ["task_id", "format_version", "verdict", "score", "iterations", "lines", "fields", "strip", "path"])
    return EXIT_OK


def cmd_trajectory(args: argparse.Namespace) -> int:

    _, conn = read_only(args)
    matches = conn.execute(
        "SELECT source, path FROM trajectories WHERE task_id = ? OR path = ? ORDER BY source, path",
        (args.id, args.id)).fetchall() or conn.execute(
        "SELECT source, path FROM trajectories WHERE instr(task_id, ?) > 0 OR instr(path, ?) > 0"
        " ORDER BY source, path", (args.id, args.id)).fetchall()
    if not matches:
        raise Failure(f"no trajectory matches {args.id!r} (`agentledger trajectories` lists them)")
    if len(matches) > 1:
        names = ", ".join(m["path"] for m in matches[:5]) + (", …" if len(matches) > 5 else "")
        raise UsageError(f"{len(matches)} trajectories match {args.id!r}; name one by its path: {names}")
    src, path = matches[0]
    (obj,) = _objects(conn, "source = ? AND path = ?", (src, path))
    obj["phases"] = [dict(r) for r in conn.execute(
        "SELECT phase, count(*) AS lines FROM trajectory_lines WHERE source = ? AND path = ? AND kind = 'iter'"
        " AND pseudo = 0 GROUP BY phase ORDER BY lines DESC, phase", (src, path))]
    obj["hypotheses"] = [dict(r) for r in conn.execute(
        "SELECT hid, outcome, iters_raw, hypothesis FROM trajectory_hypotheses WHERE source = ? AND path = ?"
        " ORDER BY ordinal", (src, path))]
    obj["patterns"] = [r[0] for r in conn.execute(
        "SELECT term FROM trajectory_terms WHERE source = ? AND path = ? AND vocabulary = 'pattern' ORDER BY term",
        (src, path))]
    obj["unparsed"] = [dict(r) for r in conn.execute(
        "SELECT line_no, description FROM trajectory_lines WHERE source = ? AND path = ? AND kind = 'unparsed'",
        (src, path))]
    conn.close()
    if args.json:
        print(json.dumps(obj, indent=2, ensure_ascii=False))
        return EXIT_OK
    print(f"{obj['task_id'] or '(no taskId)'}  [{obj['format_version']}]  {obj['path']}")
    score = obj["score"] if obj["score_norm"] == obj["score"] else f"{obj['score']} (= {obj['score_norm']:g})"
    print(f"  verdict {obj['verdict']}, score {score}, {obj['iterations']} iterations, "
          f"failure mode {obj['failure_mode'] or '-'}, group {obj['task_group'] or '-'}")
    print(f"  outcomes  {obj['outcome_strip'] or '(no iteration lines)'}")
    print(f"  control flow: {obj['control_flow_lines_parsed']} of {obj['control_flow_lines']} lines parsed")
    if obj["phases"]:
        print("  phases    " + ", ".join(f"{p['phase']} {p['lines']}" for p in obj["phases"]))
    if obj["hypotheses"]:
        print("  hypotheses")
        for h in obj["hypotheses"]:
            print(f"    {h['hid']:<5} {h['outcome']:<11} iters {h['iters_raw'] or '-':<10} {h['hypothesis'][:70]}")
    names = list(dict.fromkeys([*obj["declared"], *obj["derived"]]))
    if names:
        print("  computed fields (declared / derived)")
        for n in names:
            mark = {True: "=", False: "≠"}.get(obj["agrees"].get(n), " ")  # type: ignore[arg-type]
            print(f"    {n:<26} {json.dumps(obj['declared'].get(n, '-')):>6} {mark} "
                  f"{json.dumps(obj['derived'].get(n, '-'))}")
    for f in obj["verdict_findings"]:
        print(f"  finding: {f}")
    if obj["patterns"]:
        print("  patterns  " + ", ".join(obj["patterns"]))
    return EXIT_OK


def _files(paths: list[str]) -> list[tuple[Path, bool]]:
    """(file, named explicitly): files found in a directory are linted only when
    their content is a trajectory (a README beside the annotations is not)."""
    from ..sources.annotations.events import discover

    out: list[tuple[Path, bool]] = []
    for p in map(Path, paths):
        if not p.exists():
            raise UsageError(f"no such file or directory: {p}")
        if p.is_dir():
            out += [(p / rel, False) for rel in discover(p)]
        else:
            out.append((p, True))
    return out


def cmd_lint(args: argparse.Namespace) -> int:
    """Findings as ``path:line: kind: message`` (compiler style, so editors can jump)."""
    from ..sources.annotations import parse as P
    from ..sources.annotations.events import is_trajectory
    from ..userfiles import LINT_BYTES, UserFileError, read_bytes

    findings = []
    checked = 0
    for path, explicit in _files(args.paths):
        try:
            data = read_bytes(path, "lint", LINT_BYTES)
        except UserFileError as exc:
            findings.append({"path": str(path), "line": None, "kind": "error", "message": str(exc)})
            continue
        except OSError as exc:
            findings.append({"path": str(path), "line": None, "kind": "error", "message": exc.strerror or str(exc)})
            continue
        if not explicit and not is_trajectory(data):
            continue
        checked += 1
        try:
            doc = P.parse(data)
        except P.BadAnnotation as exc:
            findings.append({"path": str(path), "line": exc.line, "kind": "error", "message": exc.reason})
            continue
        for prob in doc.problems:
            if args.no_disagreements and prob.kind != "format":
                continue
            findings.append({"path": str(path), "line": prob.line, "kind": prob.kind, "message": prob.message})
    if args.json:
        print(json.dumps(findings, indent=2, ensure_ascii=False))
    else:
        for f in findings:
            where = f"{f['path']}:{f['line']}" if f["line"] else f["path"]
            print(f"{where}: {f['kind']}: {f['message']}")
        print(f"{checked} file(s) checked, {len(findings)} finding(s)", file=sys.stderr)
    return EXIT_FINDINGS if findings else EXIT_OK
