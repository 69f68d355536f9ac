"""Annotated trajectories: the real files, hand-computed fields, round trips, fuzzing, the ledger, lint."""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
from pathlib import Path

import pytest
from agentledger.sources.annotations import parse as P
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import need_fixtures, run_cli


def fixtures() -> Path:
    return need_fixtures() / "annotated"


def fixture_files() -> list[Path]:
    return sorted(p for p in fixtures().glob("*.md") if p.name != "PROVENANCE.md")


def parse(name: str) -> P.Annotation:
    return P.parse((fixtures() / name).read_bytes())


# -- the 40 real files ------------------------------------------------------------------------
def test_every_real_file_parses_and_off_format_ones_are_detected() -> None:
    files = fixture_files()
    assert len(files) == 40
    versions: dict[str, list[str]] = {}
    total = parsed = 0
    for f in files:
        doc = P.parse(f.read_bytes())
        versions.setdefault(doc.format_version, []).append(f.name)
        if doc.format_version != "off-format":
            total += doc.control_flow_lines
            parsed += doc.control_flow_lines_parsed
            assert doc.task_id and doc.control_flow_lines > 0, f.name
    # PROVENANCE.md lists the shape of each file: 14 v1, 3 off-format, the rest v2/v3
    assert sorted(versions["off-format"]) == ["002-run-002__arc-0934a4d8.md", "007-run-013__trajectory.md",
                                              "008-run-016__trajectory.md"]
    assert len(versions["v1"]) == 14 and len(versions["v3"]) == 3 and len(versions["v2"]) == 20
    assert sorted(versions["v3"]) == ["007-run-008__trajectory-v3.md", "007-run-011__trajectory.md",
                                      "007-run-012__trajectory.md"]
    assert total > 500 and parsed / total >= 0.999, (parsed, total)


def test_derived_fields_match_hand_computed_values() -> None:
    """Each value below was counted by hand from the file's Control Flow and Hypothesis Log."""
    cases = {
        # v1 OOLONG, wrong answer: iters 1-3 EXPLORE, 4 DELEGATE, 5 EXTRACT, 6 RETURN; no hypothesis log
        "001-no-plugins__oolong-17000210.md": dict(itersExplore=3, itersExtract=1, itersVerify=0, itersWasted=0,
                                                   implementationAttempts=0),
        # v1 OOLONG, perfect: iter 1 EXTRACT, iter 2 EXPLORE
        "001-no-plugins__oolong-17000209.md": dict(itersExplore=1, itersExtract=1, itersVerify=0, itersWasted=0,
                                                   implementationAttempts=0),
        # v1 ARC, error: three EXPLORE lines and a "--- timeout ---" marker line
        "002-run-004__arc-0934a4d8.md": dict(itersExplore=3, itersExtract=0, itersVerify=0, itersWasted=0,
                                             implementationAttempts=0),
        # v2 ARC, perfect: H1 accepted, first ✓ on an H1 line is iter 3 (declared 2)
        "005-arcgentica__arc-7ed72f31.md": dict(hypothesesTested=1, hypothesesRejected=0, breakthroughIter=3,
                                                itersOnRejectedHypotheses=0, itersExplore=2, itersExtract=1,
                                                itersVerify=1, itersWasted=0, implementationAttempts=1),
        # v2 ARC, perfect, ASCII markers (+, ->): every declared value reproduces
        "005-arcgentica__arc-db695cfb.md": dict(hypothesesTested=1, hypothesesRejected=0, breakthroughIter=3,
                                                itersOnRejectedHypotheses=0, itersExplore=2, itersExtract=1,
                                                itersVerify=2, itersWasted=0, implementationAttempts=1),
        # v2 ARC-3, timeout, no hypothesis log: five EXPLORE iterations
        "007-run-003__arc3-ls20-cb3b57cc.md": dict(hypothesesTested=0, hypothesesRejected=0, breakthroughIter=None,
                                                   itersOnRejectedHypotheses=0, itersExplore=5, itersExtract=0,
                                                   itersVerify=0, itersWasted=0, implementationAttempts=0),
        # v3 ARC-3, wrong answer: children not counted; H1 "partially accepted" is not accepted, H3 is (iters
        # 10-11,18, no ✓ line) so the breakthrough is 10; H2 {6} + H4 {12-15} rejected; ERROR 1,4 + STALL 15
        "007-run-011__trajectory.md": dict(hypothesesTested=5, hypothesesRejected=2, breakthroughIter=10,
                                           itersOnRejectedHypotheses=5, itersExplore=9, itersExtract=7,
                                           itersVerify=0, itersWasted=3, implementationAttempts=0,
                                           delegationCount=2, delegationItersTotal=10),
    }
    for name, expected in cases.items():
        doc = parse(name)
        assert doc.derived == expected, name
    v3 = parse("007-run-011__trajectory.md")
    assert v3.outcome_strip() == "→✗~→✗~~→→~→→~✗→✗→~→~✗"
    assert [ln.kind for ln in v3.flow].count("child") == 4 and v3.control_flow_lines == 25
    child = next(ln for ln in v3.flow if ln.kind == "child")
    assert (child.delegation_id, child.iter_from, child.iter_to, child.phase_raw, child.parent_ordinal) == \
        ("D1", 1, 4, "EXPLORE/EXTRACT", 1)
    agree = v3.agreement()
    assert agree["delegationItersTotal"] is True  # declared "~10" is approximately 10
    assert agree["breakthroughIter"] is False and agree["itersExplore"] is False
    hyps = {h.hid: h for h in v3.hypotheses}
    assert hyps["H4"].outcome == "rejected" and hyps["H4"].outcome_note == "(by execution)"
    assert hyps["H1"].iters == [0, 1, 2, 5, 9, 17]
    assert v3.resources[0] == ("Game actions", "initial", "0") and len(v3.delegations) == 2


def test_verdict_and_score_checks() -> None:
    doc = parse("007-run-013__trajectory.md")
    assert doc.format_version == "off-format" and doc.problems[0].message == "off-format: front matter has no taskId"
    ok = parse("005-arcgentica__arc-db695cfb.md")
    assert [p for p in ok.problems if p.kind == "verdict"] == []
    text = (fixtures() / "005-arcgentica__arc-db695cfb.md").read_text()
    bad = P.parse(text.replace("score: 1.0", "score: 14.3", 1))
    msgs = [p.message for p in bad.problems if p.kind == "verdict"]
    assert bad.score == 14.3 and abs(bad.score_norm - 0.143) < 1e-12
    assert any("read as a percentage" in m for m in msgs) and any("verdict perfect but score" in m for m in msgs)


# -- generated annotations round-trip ------------------------------------------------------------
PHASES = ["EXPLORE", "EXTRACT", "VERIFY", "ERROR", "STALL", "PLAN", "RETURN", "DELEGATE", "THEORIZE"]
SUBS = [None, "hyp-test", "implement", "reconfirm", "train-val", "structure"]
MARKS = {"✓": "success", "✗": "failure", "~": "partial", "→": "neutral", None: None}
OUTCOMES = ["rejected", "accepted", "abandoned", "superseded"]


@st.composite
def annotations(draw):
    n_h = draw(st.integers(0, 6))
    lines = []
    for it in range(draw(st.integers(1, 25))):
        lines.append((it, draw(st.sampled_from(PHASES)), draw(st.sampled_from(SUBS)),
                      draw(st.one_of(st.none(), st.integers(1, max(n_h, 1)))) if n_h else None,
                      draw(st.sampled_from(list(MARKS))), draw(st.sampled_from(["", "probe the grid", "x2 ~52px ->"]))))
    hyps = [(k, draw(st.sampled_from(OUTCOMES)), sorted(draw(st.sets(st.integers(0, 24), min_size=1, max_size=4))))
            for k in range(1, n_h + 1)]
    pad = draw(st.sampled_from([" ", "  ", "   "]))
    return lines, hyps, pad


def render(lines, hyps, pad) -> str:
    out = ["---", "taskId: arc-gen", "score: 0", f"iterations: {len(lines)}", "wallTimeMs: 1", "answerType: GRID",
           "taskGroup: TASK_TYPE.ARC", 'answer: ""', 'expected: ""', "error: null", "patterns:", "  - brute-force",
           "failureMode: spinning", "verdict: wrong-answer", "---", "", "# Trajectory: arc-gen", "",
           "## Control Flow", "", "```"]
    for it, phase, sub, h, mark, desc in lines:
        field = phase + (f":{sub}" if sub else "")
        parts = [f"iter{pad}{it:>2}", field] + ([f"[H{h}]"] if h else []) + ([mark] if mark else []) + [desc]
        out.append(pad.join(p for p in parts if p) + pad)
    out += ["```", ""]
    if hyps:
        out += ["## Hypothesis Log", "", "| ID | Hypothesis | Iters | Outcome | Evidence |", "|---|---|---|---|---|"]
        out += [f"| H{k} | idea {k} | {','.join(map(str, its))} | **{o}** | e |" for k, o, its in hyps]
    return "\n".join(out) + "\n"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(annotations())
def test_generated_annotations_round_trip(gen) -> None:
    lines, hyps, pad = gen
    doc = P.parse(render(lines, hyps, pad))
    assert doc.control_flow_lines == doc.control_flow_lines_parsed == len(lines)
    assert [(ln.iter_from, ln.phase, ln.subphase, ln.outcome) for ln in doc.flow] == \
        [(it, phase, sub, MARKS[mark]) for it, phase, sub, _, mark, _ in lines]
    assert [ln.description for ln in doc.flow] == [d for *_, d in lines]
    assert [(h.hid, h.outcome, h.iters) for h in doc.hypotheses] == [(f"H{k}", o, its) for k, o, its in hyps]
    count = lambda pred: len({it for it, ph, sub, *_ in lines if pred(ph, sub)})  # noqa: E731
    assert doc.derived["itersExplore"] == count(lambda ph, sub: ph == "EXPLORE")
    assert doc.derived["itersVerify"] == count(lambda ph, sub: ph == "VERIFY")
    assert doc.derived["itersWasted"] == count(lambda ph, sub: ph in ("ERROR", "STALL")
                                               or (ph, sub) == ("VERIFY", "reconfirm"))
    assert doc.derived["implementationAttempts"] == sum(1 for _, ph, sub, *_ in lines if (ph, sub) == ("EXTRACT",
                                                                                                       "implement"))
    if hyps:
        assert doc.derived["hypothesesRejected"] == sum(1 for _, o, _ in hyps if o == "rejected")
        assert doc.derived["itersOnRejectedHypotheses"] == len({i for _, o, its in hyps if o == "rejected"
                                                                for i in its})


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=600))
def test_fuzzed_text_never_raises_anything_but_bad_annotation(text) -> None:
    for candidate in (text, "---\n" + text, "---\ntaskId: x\n---\n## Control Flow\n```\n" + text + "\n```\n"):
        try:
            P.parse(candidate)
        except P.BadAnnotation:
            pass


def test_mutated_real_files_never_raise_anything_but_bad_annotation() -> None:
    rng = random.Random(7)
    for f in fixture_files():
        data = bytearray(f.read_bytes())
        for _ in range(15):
            d = bytearray(data)
            for _ in range(rng.randint(1, 30)):
                d[rng.randrange(len(d))] = rng.choice(b"-|`[]~\n :#\x00\xff\xe2*H0123456789")
            cut = d[: rng.randrange(len(d) + 1)] if rng.random() < 0.3 else d
            try:
                P.parse(bytes(cut))
            except P.BadAnnotation:
                pass


# -- the ledger ---------------------------------------------------------------------------------------
def ingest(tmp: Path, root: Path) -> tuple[int, str, str]:
    return run_cli("ingest", "--once", "--annotations", str(root), "--db", str(tmp / "l.sqlite"))


def rows(tmp: Path, sql: str, *args) -> list[tuple]:
    with sqlite3.connect(tmp / "l.sqlite") as c:
        return [tuple(r) for r in c.execute(sql, args)]


def test_ingest_queries_views_and_rebuild(tmp_path: Path) -> None:
    root = tmp_path / "analyses" / "trajectories"
    shutil.copytree(fixtures(), root)
    (root / "reviews").mkdir()
    (root / "reviews" / "arc-1.md").write_text("# Review of arc-1\nnot a trajectory\n")
    code, _, _ = ingest(tmp_path, root)
    assert code == 0
    assert rows(tmp_path, "SELECT count(*) FROM trajectories") == [(40,)]  # not PROVENANCE.md, not reviews/
    code, out, _ = run_cli("trajectories", "--json", "--limit", "0", "--db", str(tmp_path / "l.sqlite"))
    objs = json.loads(out)
    assert len(objs) == 40
    for o in objs:
        assert {"path", "task_id", "format_version", "control_flow_lines", "control_flow_lines_parsed",
                "declared", "derived"} <= set(o)
    by_path = {o["path"]: o for o in objs}
    assert by_path["005-arcgentica__arc-db695cfb.md"]["declared"] == by_path["005-arcgentica__arc-db695cfb.md"][
        "derived"]
    # off-format files are listed and quarantined
    code, out, _ = run_cli("quarantine", "--json", "--db", str(tmp_path / "l.sqlite"))
    assert sorted(Path(q["path"]).name for q in json.loads(out)) == [
        "002-run-002__arc-0934a4d8.md", "007-run-013__trajectory.md", "008-run-016__trajectory.md"]
    # the views answer the questions, and agree with the parser's own counts
    docs = [P.parse(f.read_bytes()) for f in fixture_files()]
    modes: dict[str, int] = {}
    for d in docs:
        if d.frontmatter.get("failureMode"):  # off-format files keep their front matter too
            modes[d.frontmatter["failureMode"]] = modes.get(d.frontmatter["failureMode"], 0) + 1
    ranking = dict(rows(tmp_path, "SELECT failure_mode, sum(trajectories) FROM failure_mode_ranking GROUP BY 1"))
    assert ranking == modes
    before = rows(tmp_path, "SELECT hypotheses_before, trajectories FROM hypotheses_before_breakthrough_distribution")
    expect: dict[int | None, int] = {}
    for d in docs:
        if d.hypotheses:
            k = next((i for i, h in enumerate(d.hypotheses) if h.outcome == "accepted"), None)
            expect[k] = expect.get(k, 0) + 1
    assert dict(before) == expect
    share = dict(rows(tmp_path, "SELECT phase, iterations FROM phase_iteration_share"))
    explore = sum(len({i for ln in d.flow if ln.kind == "iter" and not ln.pseudo and ln.phase == "EXPLORE"
                       for i in ln.iterations()}) for d in docs)
    assert share["EXPLORE"] == explore
    vocab = dict(rows(tmp_path, "SELECT term, uses FROM vocabulary WHERE vocabulary = 'pattern'"))
    assert vocab["format-discovery"] > 10 and vocab["jq-on-plaintext"] == 0  # a seed term nobody used
    assert rows(tmp_path, "SELECT seed FROM vocabulary WHERE term = 'diagonal-geometry'") == [(0,)]  # coined
    # a summary for one file
    code, out, _ = run_cli("trajectory", "arc-db695cfb", "--db", str(tmp_path / "l.sqlite"))
    assert code == 0 and "→→✓→→✓" in out and "breakthroughIter" in out
    # projections are derived state
    tables = ["trajectories", "trajectory_lines", "trajectory_hypotheses", "trajectory_fields", "trajectory_terms",
              "trajectory_sections", "trajectory_resources", "trajectory_delegations", "quarantine"]
    dump = lambda: {t: sorted(rows(tmp_path, f"SELECT * FROM {t}"), key=repr) for t in tables}  # noqa: E731
    first = dump()
    assert run_cli("rebuild", "--annotations", str(root), "--db", str(tmp_path / "l.sqlite"))[0] == 0
    assert dump() == first


def test_file_lifecycle_and_bad_input(tmp_path: Path) -> None:
    root = tmp_path / "a"
    root.mkdir()
    good = fixtures() / "005-arcgentica__arc-db695cfb.md"
    f = root / "t.md"
    shutil.copy(good, f)
    ingest(tmp_path, root)
    events = lambda: rows(tmp_path, "SELECT count(*) FROM events WHERE type = 'annotation.recorded'")[0][0]  # noqa: E731
    assert events() == 1
    os.utime(f)  # touched, same bytes: nothing new
    ingest(tmp_path, root)
    assert events() == 1
    f.write_text(good.read_text().replace("verdict: perfect", "verdict: wrong-answer"))
    ingest(tmp_path, root)
    assert events() == 2 and rows(tmp_path, "SELECT verdict FROM trajectories") == [("wrong-answer",)]
    shutil.copy(good, f)  # back to the first content: recorded again
    ingest(tmp_path, root)
    assert events() == 3 and rows(tmp_path, "SELECT verdict FROM trajectories") == [("perfect",)]
    # broken files are quarantined with a line; the last good content of a file stays
    f.write_bytes(good.read_bytes().replace(b"score: 1.0", b"score: [1.0", 1))
    (root / "binary.md").write_bytes(b"---\ntaskId: x\n---\n\x00\x01\x02")
    (root / "latin1.md").write_bytes("---\ntaskId: caf\xe9\n---\n".encode("latin-1"))
    (root / "iter-9.md").mkdir()  # a directory named like a file: ignored
    code, _, _ = ingest(tmp_path, root)
    assert code == 0
    q = {Path(p).name: (line, reason) for p, line, reason in rows(
        tmp_path, "SELECT path, line, reason FROM quarantine WHERE resolved_seq IS NULL")}
    score_line = good.read_text().split("\n").index("score: 1.0") + 1
    assert q["t.md"][0] == score_line and "not valid YAML" in q["t.md"][1] and "flow sequence" in q["t.md"][1]
    assert "NUL" in q["binary.md"][1] and q["binary.md"][0] == 4
    assert "not UTF-8" in q["latin1.md"][1] and q["latin1.md"][0] == 2
    assert rows(tmp_path, "SELECT verdict FROM trajectories WHERE path = 't.md'") == [("perfect",)]
    shutil.copy(good, f)  # the next valid write is ingested and resolves the quarantine
    ingest(tmp_path, root)
    assert "t.md" not in {Path(p).name for (p,) in rows(
        tmp_path, "SELECT path FROM quarantine WHERE resolved_seq IS NULL")}
    f.unlink()
    ingest(tmp_path, root)
    assert rows(tmp_path, "SELECT count(*) FROM trajectories WHERE path = 't.md'") == [(0,)]
    assert rows(tmp_path, "SELECT count(*) FROM trajectory_lines WHERE path = 't.md'") == [(0,)]
    # put back as it was, then an edit made once more: each is recorded again (their keys
    # name where the file's history stood, not only its content before and after)
    shutil.copy(good, f)
    ingest(tmp_path, root)
    assert rows(tmp_path, "SELECT verdict FROM trajectories WHERE path = 't.md'") == [("perfect",)]
    f.write_text(good.read_text().replace("verdict: perfect", "verdict: wrong-answer"))
    ingest(tmp_path, root)
    assert rows(tmp_path, "SELECT verdict FROM trajectories WHERE path = 't.md'") == [("wrong-answer",)]


def test_lint_reports_file_and_line_and_exits_1(tmp_path: Path) -> None:
    clean = tmp_path / "clean.md"
    clean.write_text(render([(1, "EXPLORE", "parse", None, "→", "look"), (2, "RETURN", None, None, "✓", "done")],
                            [], " "))
    assert run_cli("lint", str(clean))[0] == 0
    code, out, err = run_cli("lint", str(fixtures()))
    assert code == 1
    assert f"{fixtures() / '005-arcgentica__arc-7ed72f31.md'}:19: disagreement: breakthroughIter: declared 2, " \
           "derived 3" in out
    assert "PROVENANCE.md" not in out and "40 file(s) checked" in err
    broken = tmp_path / "broken.md"
    broken.write_text(clean.read_text().replace("iter  2", "iter two"))
    code, out, _ = run_cli("lint", "--no-disagreements", str(broken))
    assert code == 1 and f"{broken}:23: format: control-flow line not understood" in out


def test_the_daemon_ingests_an_annotation_written_while_it_watches(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    root = tmp_path / "analyses"
    (root / "run-1" / "trajectories").mkdir(parents=True)
    db = tmp_path / "l.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "agentledger", "run", "--annotations", str(root), "--db", str(db)],
                            stdout=(tmp_path / "daemon.log").open("w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not (db.exists() and "ready" in (tmp_path / "daemon.log").read_text()):
            assert time.monotonic() < deadline and proc.poll() is None, (tmp_path / "daemon.log").read_text()
            time.sleep(0.05)
        target = root / "run-1" / "trajectories" / "arc-db695cfb.md"
        tmp = target.with_name(".arc-db695cfb.md.tmp")
        shutil.copy(fixtures() / "005-arcgentica__arc-db695cfb.md", tmp)
        os.replace(tmp, target)  # an editor-style save into a subdirectory
        start = time.monotonic()
        while not rows(tmp_path, "SELECT task_id FROM trajectories"):
            assert time.monotonic() - start < 10, (tmp_path / "daemon.log").read_text()
            time.sleep(0.05)
        assert rows(tmp_path, "SELECT task_id, path FROM trajectories") == [
            ("arc-db695cfb", "run-1/trajectories/arc-db695cfb.md")]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0


def test_hostile_front_matter_is_refused_quickly() -> None:
    import time

    levels = ["a: &a [1,1,1,1,1,1,1,1,1]"] + [
        f"{chr(98 + k)}: &{chr(98 + k)} [" + ",".join([f"*{chr(97 + k)}"] * 9) + "]" for k in range(7)]
    start = time.monotonic()
    with pytest.raises(P.BadAnnotation, match="aliases"):
        P.parse("---\ntaskId: x\n" + "\n".join(levels) + "\n---\n")
    with pytest.raises(P.BadAnnotation, match="nesting deeper") as exc:
        P.parse("---\ntaskId: x\nk: " + "[" * 50_000 + "\n---\n")
    assert exc.value.line == 3 and time.monotonic() - start < 5
