"""Looking at the ledger: documented views on the reference fixtures, read-only access
(query and Datasette), the HTML report in real Chromium, export → import."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml
from agentledger.example import synth
from agentledger.store.projections import PROJECTION_TABLES

from .conftest import REFERENCE, empty_ledger, need_fixtures, run_cli
from .test_conformance import ledger_for, prepare, run_ingest

VIEWS = ("session_overview", "recent_scores", "signal_overview", "latest_scores", "score_history", "signal_contributions", "integrity_deltas", "integrity_by_role",
         "session_scores", "open_quarantine", "quarantine_summary", "run_summaries", "trial_pass_rates_by_model",
         "source_lag")


@pytest.fixture(scope="module")
def reference_ledger(tmp_path_factory) -> tuple[Path, Path]:
    """The real iteration log scored under 2.1.0: (ledger file, log dir)."""
    need_fixtures()  # a skip where the shared fixtures are not (a failure when CI=true)
    tmp = tmp_path_factory.mktemp("ref")
    log, repo = prepare("real-iteration-log", tmp)
    led = ledger_for(tmp, log, repo, "2.1.0")
    run_ingest(led)
    led.close()
    return tmp / "ledger.sqlite", log


def q(db: Path, sql: str, *args) -> list[dict]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        c.row_factory = sqlite3.Row
        return [dict(r) for r in c.execute(sql, args)]


def test_views_match_the_reference_sidecars(reference_ledger) -> None:
    db, _ = reference_ledger
    expected_dir = REFERENCE / "rubric-2.1.0" / "real-iteration-log"
    refs = {int(p.name[5:-11]): yaml.safe_load(p.read_text()) for p in expected_dir.glob("iter-*.score.yaml")}
    latest = {r["iteration"]: r for r in q(db, "SELECT * FROM latest_scores")}
    assert set(latest) == set(refs) and len(refs) > 40
    for it, ref in refs.items():
        row = latest[it]
        assert row["band"] == ref["band"] and row["rubric_version"] == "2.1.0" and row["scored"] == ref["scored"]
        if isinstance(ref["value"], float):
            assert abs(row["value"] - ref["value"]) <= 1e-9
        assert row["scored_at"].endswith("Z") and row["inputs_hash"].startswith("sha256:")
        contrib = q(db, "SELECT signal, sub_score, contribution, present, detail FROM signal_contributions"
                        " WHERE iteration = ? ORDER BY rowid", it)
        assert [c["signal"] for c in contrib] == [b["signal"] for b in ref["breakdown"]]
        for c, b in zip(contrib, ref["breakdown"]):
            assert abs(c["contribution"] - b["contribution"]) <= 1e-9 and c["detail"] == b["detail"]
            assert bool(c["present"]) == b["present"]
    history = q(db, "SELECT iteration, count(*) AS n FROM score_history GROUP BY iteration")
    assert {r["iteration"] for r in history} == set(refs) and all(r["n"] == 1 for r in history)
    # session scores and integrity views agree with their tables
    assert len(q(db, "SELECT * FROM session_scores")) == len(q(db, "SELECT * FROM sessions"))
    deltas = q(db, "SELECT role, signal, delta, comparable FROM integrity_deltas")
    assert deltas and {d["role"] for d in deltas} <= {"impl", "review", "verify", "orchestrator"} | {
        d["role"] for d in deltas}
    by_role = q(db, "SELECT sum(pairs) AS n FROM integrity_by_role")[0]["n"]
    assert by_role == len(deltas)
    for view in VIEWS:  # every documented view exists and runs
        q(db, f"SELECT * FROM {view} LIMIT 1")
    lag = q(db, "SELECT * FROM source_lag WHERE path LIKE 'iter-%'")
    assert lag and all(r["last_event_at"] is None or r["last_event_at"].endswith("Z") for r in lag)


def test_views_for_people_round_what_the_exact_views_hold(reference_ledger) -> None:
    db, _ = reference_ledger
    latest = q(db, "SELECT session_id, iteration, value FROM latest_scores")
    recent = q(db, "SELECT session_id, iteration, score FROM recent_scores")
    exact = {r["iteration"]: r["value"] for r in latest}
    assert len(recent) == len(latest) and all(
        r["score"] == (None if exact[r["iteration"]] is None else round(exact[r["iteration"]], 3)) for r in recent)
    sessions = q(db, "SELECT * FROM session_overview")
    assert sessions and sum(s["iterations"] for s in sessions) == len([r for r in latest if r["session_id"]])
    for s in sessions:
        values = [r["value"] for r in latest if r["session_id"] == s["session_id"] and r["value"] is not None]
        assert s["mean_score"] == round(sum(values) / len(values), 3) and s["max_score"] == round(max(values), 3)
        assert s["excellent"] + s["good"] + s["fair"] + s["poor"] == s["iterations"]
    last = [s["last_iteration"] for s in sessions]
    assert last == sorted(last, reverse=True)  # the most recent session first
    signals = q(db, "SELECT * FROM signal_overview")
    assert [s["signal"] for s in signals] and {s["rubric_version"] for s in signals} == {"2.1.0"}
    for s in signals:
        subs = [r["sub_score"] for r in q(db, "SELECT sub_score FROM signal_contributions WHERE signal = ?"
                                            " AND present AND rubric_version = '2.1.0'", s["signal"])]
        assert s["present"] == len(subs) and s["scores"] == len(latest)
        assert s["mean_sub_score"] == (round(sum(subs) / len(subs), 3) if subs else None)
    costs = [s["mean_cost"] for s in signals]
    assert costs == sorted(costs, reverse=True)


def test_every_view_is_documented_in_the_manual_and_the_datasette_metadata() -> None:
    root = Path(__file__).resolve().parents[1]
    readme = (root / "docs" / "usage.md").read_text()
    meta = json.loads((root / "schema" / "datasette" / "metadata.json").read_text())
    tables = meta["databases"]["ledger"]["tables"]
    for view in VIEWS:
        assert f"`{view}`" in readme, view
        assert view in tables and tables[view].get("title"), view


def test_query_cannot_write(reference_ledger) -> None:
    db, _ = reference_ledger
    code, _, err = run_cli("query", "DELETE FROM scores", "--db", str(db))
    assert code == 1 and "readonly" in err.replace("-", "").lower()
    assert q(db, "SELECT count(*) AS n FROM scores")[0]["n"] > 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def start_ui(db: Path) -> tuple[subprocess.Popen, str]:
    """`agentledger ui` on ``db``, once it answers: (process, base URL)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "agentledger", "ui", "--db", str(db), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if get(base + "/-/versions.json")[0] == 200:
                return proc, base
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(proc.communicate()[0])
        time.sleep(0.2)


def test_the_report_page_is_kept_until_the_ledger_changes(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("datasette") is None:
        pytest.skip("Datasette is the [ui] extra; `make test` installs it")
    gen = synth.generate(tmp_path / "gen", 8)
    db = tmp_path / "ledger.sqlite"
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db)]
    assert run_cli("ingest", *args)[0] == 0
    proc, base = start_ui(db)

    def state() -> str:
        with urllib.request.urlopen(base + "/-/report", timeout=30) as r:
            return r.headers["X-Agentledger-Report"]

    try:
        first, second = state(), state()
        assert first.startswith("miss;") and second == first.replace("miss", "hit")
        (gen.log / "iter-9.yaml").write_text((gen.log / "iter-8.yaml").read_text().replace("iteration: 8",
                                                                                          "iteration: 9"))
        assert run_cli("ingest", *args)[0] == 0
        third = state()
        assert third.startswith("miss;") and third != first
    finally:
        proc.terminate()
        proc.communicate(timeout=20)


def test_ui_serves_the_live_ledger_read_only_on_loopback(reference_ledger, tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("datasette") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Datasette is missing (the [ui] extra; `make test` installs it)")
        pytest.skip("Datasette is the [ui] extra; `make test` installs it")
    src, _ = reference_ledger
    db = tmp_path / "ledger.sqlite"
    shutil.copy(src, db)
    before = db.read_bytes()
    proc, base = start_ui(db)
    try:
        status, page = get(base + "/ledger/latest_scores")
        assert status == 200 and "Latest score per iteration" in page
        status, body = get(base + "/ledger.json")
        hidden = {t["name"] for t in json.loads(body)["tables"] if t["hidden"]}
        assert {"pending", "git_state", "source_checkpoints", "_sqlite_migrations", "record_files"} <= hidden
        assert not hidden & {"events", "scores", "iterations", "trials", "trajectories"}
        status, body = get(base + "/ledger/pass_rate_by_model.json?_shape=array")
        assert status == 200 and json.loads(body) == []
        status, body = get(base + "/ledger/band_changes_after_bump.json?_shape=array&before=2.0.2&after=2.1.0")
        assert status == 200 and isinstance(json.loads(body), list)
        # the database page: views for people first (with their descriptions), the canned
        # queries linked to the report's charts, a useful default query, no internal tables
        status, page = get(base + "/ledger")
        assert status == 200
        order = [page.index(x) for x in ("Start here", 'href="/ledger/session_overview"', 'href="/ledger/recent_scores"',
                                         "Questions with answers", 'href="/-/report#sessions"', "from session_overview",
                                         'href="/ledger/latest_scores"', 'href="/ledger/events"')]
        assert order == sorted(order), order
        assert "how many fell in each band" in page  # a description, not just a name
        for internal in ("pending", "git_state", "source_checkpoints", "_sqlite_migrations", "sqlite_sequence"):
            assert f'href="/ledger/{internal}"' not in page, internal
        # canned queries run with sensible defaults when their parameters are left empty
        with sqlite3.connect(db) as c:
            newest = c.execute("SELECT session_id FROM iterations WHERE session_id <> '' GROUP BY session_id"
                               " ORDER BY max(iteration) DESC LIMIT 1").fetchone()[0]
            its = [r[0] for r in c.execute("SELECT iteration FROM iterations WHERE session_id = ? ORDER BY iteration",
                                           (newest,))]
        status, body = get(base + "/ledger/session_trend.json?_shape=array")
        assert status == 200 and [r["iteration"] for r in json.loads(body)] == its
        status, body = get(base + "/ledger/signals_pulling_down.json?_shape=array")
        assert status == 200 and len(json.loads(body)) >= 5
        status, body = get(base + "/ledger/session_overview.json?_shape=array")
        rows = json.loads(body)
        assert rows[0]["session_id"] == newest and all(len(str(r["mean_score"]).split(".")[-1]) <= 3 for r in rows)
        # the report, drawn on request from Datasette's read-only connection
        status, page = get(base + "/-/report")
        assert status == 200 and '<figure id="trend-overall">' in page and '<figure id="sessions">' in page
        with urllib.request.urlopen(base + "/-/report", timeout=10) as r:  # the ledger has not changed: kept
            assert r.headers["X-Agentledger-Report"].startswith("hit;") and r.read().decode() == page
        status, page = get(base + "/-/report?session=" + urllib.parse.quote(newest))
        assert status == 200 and '<figure id="trend-session">' in page
        status, body = get(base + "/ledger.json?sql=" + urllib.parse.quote("DELETE FROM scores") + "&_shape=array")
        assert status >= 400 or "error" in body.lower()
        status, body = get(base + "/ledger.json?sql=" + urllib.parse.quote("SELECT count(*) AS n FROM scores")
                           + "&_shape=array")
        assert json.loads(body)[0]["n"] > 40
    finally:
        proc.terminate()
        output = proc.communicate(timeout=20)[0]
    # the refused DELETE is one line, not a traceback with the frames' locals
    assert output.count("agentledger ui: refused") == 1 and "locals" not in output and "Traceback" not in output
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM scores").fetchone()[0] > 40
    assert db.read_bytes() == before  # nothing was written


def dump(db: Path) -> dict[str, list]:
    with sqlite3.connect(db) as c:
        return {t: sorted(map(tuple, c.execute(f"SELECT * FROM {t}")), key=repr) for t in PROJECTION_TABLES}


def test_export_then_import_reproduces_the_projections(tmp_path: Path) -> None:
    gen = synth.generate(tmp_path / "gen", 30)
    runs = tmp_path / "vally" / "run-a"
    runs.mkdir(parents=True)
    (runs / "results.jsonl").write_bytes(b"".join(synth.vally_trial_line(i) for i in range(5)) + b"{bad\n")
    ann = tmp_path / "ann"
    ann.mkdir()
    (ann / "a.md").write_text(synth.annotation("arc-1", 2))
    src = tmp_path / "src.sqlite"
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(src)]
    assert run_cli("ingest", "--once", *args, "--vally", str(tmp_path / "vally"))[0] == 0
    assert run_cli("ingest", "--once", "--annotations", str(ann), "--db", str(src))[0] == 0
    assert run_cli("backfill", *args, "--rubric", "3.0.0")[0] == 0
    exported = tmp_path / "events.jsonl"
    assert run_cli("export", "--db", str(src), "--output", str(exported))[0] == 0
    lines = exported.read_text().splitlines()
    with sqlite3.connect(src) as c:
        assert len(lines) == c.execute("SELECT count(*) FROM events").fetchone()[0]
        stored = c.execute("SELECT payload FROM events ORDER BY seq").fetchall()
    assert [json.loads(line)["payload"] for line in lines] == [json.loads(p) for (p,) in stored]
    dst = tmp_path / "dst.sqlite"
    code, out, _ = run_cli("import", str(exported), "--db", str(dst))
    assert code == 0 and f"{len(lines)} new" in out
    assert dump(dst) == dump(src)
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        cols = "seq, type, schema_version, idempotency_key, content_hash, recorded_at, payload"
        assert a.execute(f"SELECT {cols} FROM events").fetchall() == b.execute(f"SELECT {cols} FROM events").fetchall()
    code, out, _ = run_cli("import", str(exported), "--db", str(dst))  # idempotent
    assert code == 0 and "0 new" in out and dump(dst) == dump(src)
    # resume from a seq; scores as CSV
    code, out, _ = run_cli("export", "--db", str(src), "--after", "10", "--type", "score.computed")
    tail = [json.loads(x) for x in out.splitlines()]
    assert tail and all(e["seq"] > 10 and e["type"] == "score.computed" for e in tail)
    code, out, _ = run_cli("export", "--db", str(src), "--format", "csv", "--rubric", "3.0.0")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 30 and {r["rubric_version"] for r in rows} == {"3.0.0"}
    assert all(r["scored_at"].endswith("Z") for r in rows)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": 99}\n')
    code, _, err = run_cli("import", str(bad), "--db", str(tmp_path / "x.sqlite"))
    assert code == 1 and "line 1" in err


def test_read_commands_upgrade_a_ledger_written_by_an_older_version(tmp_path: Path) -> None:
    db = empty_ledger(tmp_path / "l.sqlite")  # a current ledger
    with sqlite3.connect(db) as c:  # make it look like one written before migration 5
        views = [r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'view'")]
        for v in ("latest_scores", "score_history", "source_lag"):
            assert v in views
        for v in views:
            if v in ("latest_scores", "score_history", "signal_contributions", "integrity_by_role",
                     "integrity_deltas", "session_scores", "open_quarantine", "quarantine_summary",
                     "run_summaries", "trial_pass_rates_by_model", "source_lag"):
                c.execute(f"DROP VIEW {v}")
        c.execute("DELETE FROM _sqlite_migrations WHERE name = '0005_views'")
        c.execute("PRAGMA user_version = 4")
    code, out, err = run_cli("query", "SELECT count(*) AS n FROM latest_scores", "--json", "--db", str(db))
    assert code == 0 and json.loads(out) == [{"n": 0}], err
