"""The team ledger against a real PostgreSQL 15 server (tests/pgcluster.py): every
machine's events arrive exactly once however the shipper dies, the projections
follow, and wrong input is one clear line that leaves local work alone."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

from agentledger.example import synth
from agentledger.example.pgcluster import PASSWORD

from .conftest import cli_subprocess, run_cli, wait_until


def machine(root: Path, n: int, *, seed: int = 7, extras: bool = False) -> tuple[Path, list[str]]:
    """A generated log of ``n`` iterations ingested into its own ledger: (ledger, its source flags)."""
    gen = synth.generate(root / "gen", n, seed=seed)
    db = root / "ledger.sqlite"
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db)]
    if extras:
        runs = root / "vally" / "run-a"
        runs.mkdir(parents=True)
        # a NUL in a string: JSONB cannot hold it (the exact text travels in payload_text)
        nul = json.loads(synth.vally_trial_line(30))
        nul["stimulus"] = "a NUL \u0000 here"
        (runs / "results.jsonl").write_bytes(b"".join(synth.vally_trial_line(i) for i in range(30))
                                             + json.dumps(nul).encode() + b"\n{broken\n")
        synth.claude_transcript(root / "transcripts" / "s.jsonl", n)
        args += ["--vally", str(root / "vally"), "--transcripts", str(root / "transcripts")]
    code, _, err = run_cli("ingest", *args)
    assert code == 0, err
    return db, args


# every column an event has in both places; the payload and recorded_at compared as values
EVENT_COLUMNS = ("seq, idempotency_key, type, {payload}, stream, schema_version, content_hash, occurred_at,"
                 " recorded_at, source, source_path, source_position, {origin}, origin_seq")


def local_events(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as c:
        me = c.execute("SELECT ledger_id FROM ledger_identity").fetchone()[0]
        rows = c.execute("SELECT " + EVENT_COLUMNS.format(payload="payload", origin="o.origin")
                         + " FROM events e LEFT JOIN event_origins o USING (seq) ORDER BY seq").fetchall()
    return [(*r[:3], json.loads(r[3]), *r[4:8], datetime.fromisoformat(r[8]), *r[9:12], r[12] or me, r[13])
            for r in rows]


def ledger_id(db: Path) -> str:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT ledger_id FROM ledger_identity").fetchone()[0]


def central_events(url: str, lid: str) -> list[tuple]:
    """As local_events has them: a payload JSONB could not hold is compared from its exact text."""
    import psycopg

    with psycopg.connect(url) as pg:
        return [(seq, key, typ, payload if text is None else json.loads(text), *rest) for seq, key, typ, payload, text,
                *rest in pg.execute("SELECT " + EVENT_COLUMNS.format(payload="payload, payload_text",
                                                                      origin="origin::text")
                                    + " FROM agentledger.events WHERE ledger_id = %s ORDER BY seq", (lid,))]


def assert_exactly_the_union(url: str, dbs: list[Path]) -> int:
    """Row by row: each ledger's central events are its local ones (0 missing, 0
    duplicated, same payloads), and nothing else is there. Returns the rows compared."""
    import psycopg

    compared = 0
    for db in dbs:
        local, central = local_events(db), central_events(url, ledger_id(db))
        assert [r[0] for r in central] == [r[0] for r in local]  # no gap, no duplicate, same order
        assert central == local
        compared += len(local)
    with psycopg.connect(url) as pg:
        assert pg.execute("SELECT count(*) FROM agentledger.events").fetchone()[0] == compared
    return compared


_READERS = iter(range(1, 10**6))


def reader(url: str) -> str:
    """A reader role on the team ledger at ``url``, made by its admin (``central add-reader``;
    ``central init`` first when the database has no schema yet), and its URL with the
    password in it: the read door takes no admin's or superuser's URL."""
    from psycopg.conninfo import conninfo_to_dict

    assert run_cli("central", "init", url)[0] == 0
    name = f"reader_{os.getpid()}_{next(_READERS)}"
    code, out, err = run_cli("central", "add-reader", url, name)
    assert code == 0, err
    password = out.strip().rsplit(":", 1)[1]
    info = conninfo_to_dict(url)
    if info["host"].startswith("/"):
        return f"postgresql://{name}:{password}@/{info['dbname']}?host={info['host']}&port={info['port']}"
    return f"postgresql://{name}:{password}@{info['host']}:{info['port']}/{info['dbname']}"


def ship(url: str, db: Path, *extra: str) -> subprocess.CompletedProcess:
    return cli_subprocess("ship", "--central", url, "--db", str(db), *extra, timeout=300)


def test_three_machines_ship_concurrently_and_the_union_arrives_exactly_once(pg, tmp_path: Path) -> None:
    import psycopg

    url = pg.create_database("three")
    dbs = [machine(tmp_path / "a", 300, seed=1, extras=True)[0], machine(tmp_path / "b", 200, seed=2)[0],
           machine(tmp_path / "c", 250, seed=3)[0]]
    procs = [subprocess.Popen([sys.executable, "-m", "agentledger", "ship", "--central", url, "--db", str(db)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "AGENTLEDGER_LEDGER_NAME": f"box-{k}"})
             for k, db in enumerate(dbs) for _ in range(2)]  # each machine twice at once: the second finds nothing new
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    rows = assert_exactly_the_union(url, dbs)
    assert rows > 1500
    with psycopg.connect(url) as c:  # the NUL's event: the projections read it, with U+FFFD in its place
        assert c.execute("SELECT stimulus FROM agentledger.trials WHERE stimulus LIKE 'a NUL%'").fetchall() == [
            ("a NUL \ufffd here",)]
        assert c.execute("SELECT count(*) FROM agentledger.events WHERE payload IS NULL").fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM agentledger.events WHERE payload_text IS NOT NULL").fetchone()[0] == 1
    # the projections people query agree with each machine's own
    reads = reader(url)
    code, out, _ = run_cli("query", "--central", reads, "--json",
                           "SELECT ledger_id::text AS id, source, iteration, rubric_version, value, band FROM latest_scores")
    central = {(r["id"], r["iteration"]): (r["rubric_version"], r["value"], r["band"]) for r in json.loads(out)}
    for db in dbs:
        with sqlite3.connect(db) as c:
            local = {(ledger_id(db), it): (rv, v, b) for it, rv, v, b in c.execute(
                "SELECT iteration, rubric_version, value, band FROM latest_scores")}
        assert {k: v for k, v in central.items() if k[0] == ledger_id(db)} == local
    code, out, _ = run_cli("query", "--central", reads, "--json", "SELECT count(*) AS n, sum(passed::int) AS p FROM trials")
    with sqlite3.connect(dbs[0]) as c:
        assert tuple(json.loads(out)[0].values()) == c.execute("SELECT count(*), sum(passed) FROM trials").fetchone()
    code, out, _ = run_cli("query", "--central", reads, "--json", "SELECT path, line FROM open_quarantine")
    with sqlite3.connect(dbs[0]) as c:
        local_q = c.execute("SELECT path, line FROM open_quarantine").fetchall()
    assert [(r["path"], r["line"]) for r in json.loads(out)] == local_q == [("run-a/results.jsonl", 32)]
    # the team report: every machine and repository, drawn by the same charts as a machine's own
    page = tmp_path / "team.html"
    code, out, err = run_cli("report", "--central", reads, "-o", str(page))
    assert code == 0 and f"{750} iterations" in out, err
    html = page.read_text()
    for chart in ("trend-overall", "sessions", "by-machine", "by-repository", "bands-over-time", "signals-over-time",
                  "tokens", "pass-rates"):
        assert f'<figure id="{chart}">' in html, chart
    machines = html.split('<figure id="by-machine">', 1)[1].split("</figure>", 1)[0]
    assert all(f">box-{k}<" in machines for k in range(3)) and "agentledger team report" in html
    # as the README writes it: the one [[ship]] entry of the config, the SQL right after --central
    cfg = tmp_path / "agentledger.toml"
    cfg.write_text(f'[store]\npath = "{dbs[0]}"\n[[ship]]\nurl = "{reads}"\n')
    for argv in (["query", "--central", "SELECT count(*) AS n FROM latest_scores"],
                 ["query", "SELECT count(*) AS n FROM latest_scores", "--central"]):
        code, out, err = run_cli(*argv, "--config", str(cfg), "--json")
        assert code == 0 and json.loads(out) == [{"n": 750}], (argv, err)


def test_sigkill_the_shipper_anywhere_then_restart_still_exactly_the_union(pg, tmp_path: Path, monkeypatch) -> None:
    """20 kills: 5 mid-COPY (seen in pg_stat_activity), 5 after the server committed but
    before the local cursor moved (the ledger held locked by this test), 10 at random
    moments; after each, the next ship goes on. Every other kill of each kind hits a pass
    sending the whole ledger again (each batch takes the slow way: the server has it),
    the others a pass of events the server has never seen (straight into events), on
    copies of the machine's ledger with their own ids. Nothing is lost or doubled. The
    machine ships as a role of its own (the server checks every batch)."""
    import psycopg

    admin = pg.create_database("kills")
    # the machine ships as a role of its own (central add-machine), as a team's machines do
    assert cli_subprocess("central", "init", admin).returncode == 0
    line = cli_subprocess("central", "add-machine", admin, "killed_box").stdout.strip()
    (tmp_path / "pgpass").write_text(line + "\n")
    (tmp_path / "pgpass").chmod(0o600)
    host, port, dbname, role, _ = line.split(":")
    url = f"postgresql://{role}@/{dbname}?host={host}&port={port}"
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "pgpass"))  # for this test's subprocesses
    main, _ = machine(tmp_path / "m", 600, extras=True)
    total = len(local_events(main))
    rng = random.Random(11)
    wanted = {"copy": 5, "committed": 5, "random": 10}
    killed = dict.fromkeys(wanted, 0)
    ledgers = [main]

    def config(db: Path) -> Path:
        cfg = db.with_suffix(".toml")
        cfg.write_text(f'[store]\npath = "{db}"\n[[ship]]\nurl = "{url}"\nbatch = 40\n')
        return cfg

    def cursor(db: Path) -> int:
        with sqlite3.connect(db) as c:
            row = c.execute("SELECT last_seq FROM ship_cursors").fetchone()
        return row[0] if row else 0

    def last_commit(db: Path) -> object:
        """When the server last committed a batch of this ledger's (the batch's transaction time)."""
        with psycopg.connect(url) as c:
            if c.execute("SELECT to_regclass('agentledger.ledgers')").fetchone()[0] is None:
                return None
            row = c.execute("SELECT last_shipped_at FROM agentledger.ledgers WHERE ledger_id = %s",
                            (ledger_id(db),)).fetchone()
            return row[0] if row else None

    def copying() -> str | None:
        with psycopg.connect(url) as c:
            row = c.execute("SELECT split_part(query, ' ', 2) FROM pg_stat_activity WHERE application_name ="
                            " 'agentledger' AND query LIKE 'COPY %%' AND state = 'active'").fetchone()
            return row[0] if row else None

    def fresh_copy() -> Path:
        """The machine's ledger under a new id: all of it new to the server."""
        db = tmp_path / f"copy-{len(ledgers)}.sqlite"
        with sqlite3.connect(main) as src, sqlite3.connect(db) as dst:
            src.backup(dst)
            dst.execute("UPDATE ledger_identity SET ledger_id = ?", (str(uuid.uuid4()),))
            dst.execute("DELETE FROM ship_cursors")
        ledgers.append(db)
        return db

    started = time.monotonic()
    assert ship(url, main, "--config", str(config(main))).returncode == 0
    whole = time.monotonic() - started  # how long one full pass takes, process start included
    attempts = 0
    while killed != wanted:  # a pass that ends before its kill (the machine was quicker) is tried again
        attempts += 1
        assert attempts <= 80, killed
        kind = rng.choice([k for k in wanted if killed[k] < wanted[k]])
        resend = killed[kind] % 2 == 0
        if resend:  # the whole ledger again: every batch is on the server already
            db = main
            with sqlite3.connect(db) as c:
                c.execute("DELETE FROM ship_cursors")
        else:  # the rest of a copy the server has not seen, or a new copy once one is through
            db = ledgers[-1] if len(ledgers) > 1 and cursor(ledgers[-1]) < total else fresh_copy()
        lock = None
        if kind == "committed":
            lock = sqlite3.connect(db, timeout=0)
            lock.execute("BEGIN IMMEDIATE")  # the shipper's cursor write will wait on this
            before, held_at = last_commit(db), cursor(db)
        proc = subprocess.Popen([sys.executable, "-m", "agentledger", "ship", "--config", str(config(db))],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        moment = True
        try:
            if kind == "copy":  # the slow way's COPY when sending again, else the one straight into events
                target = "ship_staging" if resend else "agentledger.events"
                moment = wait_until(lambda: proc.poll() is not None or copying() == target, timeout=60,
                                    interval=0.001) and proc.poll() is None
            elif kind == "committed":
                assert wait_until(lambda: last_commit(db) != before, timeout=60)  # the server committed a batch
            else:
                time.sleep(rng.uniform(0.05, 0.95) * whole)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            if lock is not None:
                lock.rollback()
                lock.close()
        if proc.returncode != -signal.SIGKILL or not moment:
            whole *= 0.7
            continue
        killed[kind] += 1
        if kind == "committed":
            assert cursor(db) == held_at  # killed in the gap: the server committed, the cursor did not move
    for db in ledgers:
        final = ship(url, db, "--config", str(config(db)))
        assert final.returncode == 0, final.stderr
    status = cli_subprocess("status", "--config", str(config(main))).stdout
    assert f"shipped to    {url}  (up to #{total}, 0 events behind" in status
    assert f"(id {ledger_id(main)})" in status
    assert assert_exactly_the_union(admin, ledgers) == total * len(ledgers)


def test_a_rubric_bump_on_one_machine_moves_only_its_central_scores(pg, tmp_path: Path) -> None:
    url = pg.create_database("bump")
    a, a_args = machine(tmp_path / "a", 60, seed=4)
    b, _ = machine(tmp_path / "b", 60, seed=5)
    for db in (a, b):
        assert ship(url, db).returncode == 0
    assert run_cli("backfill", *a_args, "--rubric", "3.0.0")[0] == 0
    assert ship(url, a).returncode == 0
    reads = reader(url)
    code, out, _ = run_cli("query", "--central", reads, "--json",
                           "SELECT ledger_id::text AS id, rubric_version, count(*) AS n FROM latest_scores"
                           " GROUP BY 1, 2 ORDER BY 1, 2")
    assert {(r["id"], r["rubric_version"], r["n"]) for r in json.loads(out)} == {
        (ledger_id(a), "3.0.0", 60), (ledger_id(b), "2.1.0", 60)}
    code, out, _ = run_cli("query", "--central", reads, "--json",
                           "SELECT count(*) AS n FROM score_history WHERE ledger_id = :id", "-p", "id", ledger_id(a))
    assert json.loads(out)[0]["n"] == 120  # both rubrics' scores stay in the history


def test_wrong_input_is_one_clear_line_and_local_work_goes_on(pg, tmp_path: Path) -> None:
    import psycopg

    db, args = machine(tmp_path / "m", 20)
    good = pg.create_database("good")
    cases = {
        "wrong password": (pg.url("good", password="nope"), "password authentication failed"),
        "no such database": (pg.url("missing"), 'database "missing" does not exist'),
        "nothing listening": ("postgresql://agentledger:pw@127.0.0.1:1/x", "Connection refused"),
    }
    foreign = pg.create_database("foreign")
    with psycopg.connect(foreign, autocommit=True) as c:
        c.execute("CREATE SCHEMA agentledger; CREATE TABLE agentledger.things (x int)")
    cases["a schema agentledger did not make"] = (foreign, "did not make")
    newer = pg.create_database("newer")
    assert ship(newer, db).returncode == 0
    with psycopg.connect(newer, autocommit=True) as c:
        c.execute("INSERT INTO agentledger.schema_version (version, app, name) VALUES (99, 'agentledger', 'future')")
    cases["a newer schema"] = (newer, "newer than this agentledger knows")
    for what, (url, said) in cases.items():
        proc = ship(url, db)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1 and said in lines[0], (what, proc.stderr)
        assert "Traceback" not in proc.stderr and "pw@" not in proc.stderr and "nope" not in proc.stderr, what
    bad = ship("mysql://x@y/z", db)
    assert bad.returncode == 2 and "not a PostgreSQL URL" in bad.stderr
    # local work is unaffected: the cursor did not move, ingest and score still work, then shipping catches up
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM ship_cursors WHERE last_seq > 0").fetchone()[0] == 1  # "newer" only
    assert run_cli("ingest", *args, "--rescore-all")[0] == 0
    assert ship(good, db).returncode == 0
    assert_exactly_the_union(good, [db])


def test_two_ledgers_with_one_id_stop_the_pass_instead_of_losing_events(pg, tmp_path: Path) -> None:
    """A ledger file copied to a second machine (a machine image) keeps its id: both then
    number new, different events with the same seqs. The second to ship must not see
    its events dropped as "already there": one line, exit 1, its cursor unmoved,
    nothing of it on the server; the first machine is unaffected. ``central new-id``
    then gives the copy an id of its own: the events from before the copy stay the
    first machine's, the copy's own arrive under its new id, none twice."""
    import shutil

    import psycopg
    from agentledger.central.ship import Shipper
    from agentledger.config import ShipDestination
    from agentledger.store.db import connect as open_ledger

    url = pg.create_database("clone")
    a, _ = machine(tmp_path / "a", 10, seed=1)
    b = tmp_path / "b.sqlite"
    shutil.copy(a, b)  # the image: both start from the same ledger
    shared = len(local_events(b))
    _, a_more = machine(tmp_path / "a-more", 15, seed=2)
    _, b_more = machine(tmp_path / "b-more", 15, seed=3)
    assert run_cli("ingest", *a_more[:4], "--db", str(a))[0] == 0
    assert run_cli("ingest", *b_more[:4], "--db", str(b))[0] == 0
    assert ledger_id(a) == ledger_id(b)
    assert ship(url, a).returncode == 0
    with psycopg.connect(url) as c:
        held = c.execute("SELECT count(*) FROM agentledger.events").fetchone()[0]
    proc = ship(url, b)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and "other events under this ledger's id" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    with sqlite3.connect(b) as c:
        assert c.execute("SELECT count(*) FROM ship_cursors WHERE last_seq > 0").fetchone()[0] == 0
    with psycopg.connect(url) as c:
        assert c.execute("SELECT count(*) FROM agentledger.events").fetchone()[0] == held
    assert_exactly_the_union(url, [a])
    # the way out: a new id for b; what the server holds under the old id stays a's
    out = run_cli("central", "new-id", url, "--db", str(b), "--json")
    assert out[0] == 0, out
    done = json.loads(out[1])
    assert done["old"] == ledger_id(a) and done["new"] == ledger_id(b) != ledger_id(a) and done["kept"] == shared
    assert ship(url, a).returncode == 0
    # a shipper made before the new id (the daemon's) follows it at its next pass
    local = open_ledger(b, create=False)
    shipper = Shipper(local, ShipDestination(url))
    shipper.ledger_id, shipper.ledger_uuid = done["old"], uuid.UUID(done["old"])  # as it was when made
    try:
        assert shipper.ship().new == len(local_events(b)) - shared
    finally:
        shipper.close()
        local.close()
    mine = [e for e in local_events(b) if e[-2] == ledger_id(b)]
    assert [e[0] for e in mine] == [e[0] for e in local_events(b)][shared:]  # the events after the copy
    assert central_events(url, ledger_id(b)) == mine
    assert central_events(url, ledger_id(a)) == local_events(a)  # nothing of b's under a's id
    with psycopg.connect(url) as c:
        assert c.execute("SELECT count(*) FROM agentledger.events").fetchone()[0] == held + len(mine)


def test_an_imported_event_with_an_unreadable_time_is_one_clear_line(pg, tmp_path: Path) -> None:
    """An export edited by hand can carry a recorded_at the server cannot hold: the
    pass ends with one line naming the event, and its batch is not confirmed."""
    a, _ = machine(tmp_path / "a", 5)
    export = tmp_path / "a.jsonl"
    assert run_cli("export", "--db", str(a), "-o", str(export))[0] == 0
    lines = [json.loads(line) for line in export.read_text().splitlines()]
    lines[len(lines) // 2]["recorded_at"] = "yesterday"
    export.write_text("".join(json.dumps(line) + "\n" for line in lines))
    b = tmp_path / "b.sqlite"
    assert run_cli("import", str(export), "--db", str(b))[0] == 0
    url = pg.create_database("times")
    proc = ship(url, b)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "recorded_at 'yesterday', which is not an ISO 8601 time" in proc.stderr and "Traceback" not in proc.stderr
    with sqlite3.connect(b) as c:
        assert c.execute("SELECT count(*) FROM ship_cursors WHERE last_seq > 0").fetchone()[0] == 0


def test_a_payload_with_a_lone_surrogate_of_either_half_arrives_exactly(pg, tmp_path: Path) -> None:
    """A ledger may hold a payload whose text escapes a lone surrogate, low (\\udc00) or
    high (\\ud800): imported before the import refused them. JSONB holds neither: each
    arrives exactly in payload_text, with U+FFFD in its JSONB, and the pass ships
    everything (a lone low one used to fail the batch's COPY, at every pass)."""
    import psycopg

    a, _ = machine(tmp_path / "a", 5)
    with sqlite3.connect(a) as c:
        for n, lone in enumerate(["\\udc00", "\\ud800"]):
            c.execute("INSERT INTO events (stream, type, schema_version, idempotency_key, content_hash,"
                      " recorded_at, source, payload) VALUES ('s', 'artifact.recorded', 1, ?, 'h',"
                      " '2026-11-28T00:00:00Z', 'src', ?)",
                      (f"lone-{n}", '{"path":"p%d","artifact":{"note":"lone %s half"}}' % (n, lone)))
    url = pg.create_database("surrogates")
    proc = ship(url, a)
    assert proc.returncode == 0, proc.stderr
    assert_exactly_the_union(url, [a])
    with psycopg.connect(url) as c:
        assert c.execute("SELECT payload->'artifact'->>'note' FROM agentledger.events WHERE payload_text IS NOT NULL"
                         " ORDER BY seq").fetchall() == [("lone \ufffd half",), ("lone \ufffd half",)]


def test_migration_2_gives_the_payloads_jsonb_could_not_hold_a_jsonb_the_projections_read(pg) -> None:
    """A database made by migration 1 may hold events whose payload had a NUL (no JSONB,
    exact text only): migration 2 gives them a JSONB with U+FFFD for each NUL that is
    not itself escaped, leaves a lone surrogate alone, and drops the per-row foreign key."""
    import psycopg
    from agentledger.central import schema
    from psycopg.types.json import Jsonb

    url = pg.create_database("legacy")
    lid = str(uuid.uuid4())
    texts = {1: r'{"s":"a\u0000b","t":"c\\u0000d","u":"\\\u0000\u0000"}', 2: r'{"s":"lone \ud800"}'}
    with psycopg.connect(url) as c:
        assert schema.migrate(c, upto=1) == 1
        c.execute("INSERT INTO agentledger.ledgers (ledger_id, name, host) VALUES (%s, 'old', 'old')", (lid,))
        for seq, text in [*texts.items(), (3, '{"fine":1}')]:
            c.execute("INSERT INTO agentledger.events (ledger_id, seq, origin, idempotency_key, stream, type,"
                      " schema_version, content_hash, recorded_at, source, payload, payload_text) VALUES"
                      " (%s, %s, %s, %s, 's', 'labels.recorded', 1, 'h', now(), 'src', %s, %s)",
                      (lid, seq, lid, f"k{seq}", Jsonb(json.loads(text)) if seq == 3 else None,
                       None if seq == 3 else text))
        c.commit()
        assert schema.migrate(c) == len(schema.migration_files()) - 1
        got = dict(c.execute("SELECT seq, payload FROM agentledger.events ORDER BY seq").fetchall())
        assert got == {1: {"s": "a\ufffdb", "t": "c\\u0000d", "u": "\\\ufffd\ufffd"}, 2: None, 3: {"fine": 1}}
        assert c.execute("SELECT count(*) FROM pg_constraint WHERE conrelid = 'agentledger.events'::regclass"
                         " AND contype = 'f'").fetchone()[0] == 0


def test_a_new_record_of_an_iteration_updates_its_central_row_in_its_page(pg, tmp_path: Path) -> None:
    """The projection code keeps room on the pages of the iterations table: new records of one
    iteration in ten (as a catch-up's batch has them) are heap-only updates, with no index
    entry and no other page. (Their new scores change scored_at, which is indexed.)"""
    import psycopg

    url = pg.create_database("room")
    db, args = machine(tmp_path, 300)
    assert ship(url, db).returncode == 0
    log = Path(args[1])
    for n in range(10, 301, 10):
        record = log / f"iter-{n}.yaml"
        text, edits = re.subn(r"(?m)^(\s*)retries: \d+$", r"\1retries: 7", record.read_text(), count=1)
        assert edits == 1
        record.write_text(text)
    assert run_cli("ingest", *args)[0] == 0
    assert ship(url, db).returncode == 0
    query = ("SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
             " WHERE schemaname = 'agentledger' AND relname IN ('scores', 'iterations') ORDER BY 1")
    with psycopg.connect(url, autocommit=True) as c:
        # the shipper's server process reports its counts as it exits, after the client has
        stats = wait_until(lambda: (rows := c.execute(query).fetchall()) and all(r[1] >= 30 for r in rows) and rows,
                           timeout=60)
    assert stats == [("iterations", 30, 30), ("scores", 30, 0)]


def test_the_local_product_never_imports_psycopg(tmp_path: Path) -> None:
    db, args = machine(tmp_path / "m", 5)
    probe = ("import sys, runpy; sys.argv = ['agentledger', *sys.argv[1:]];"
             " from agentledger.cli import main; code = main(sys.argv[1:]);"
             " print('psycopg' in sys.modules or any(m.startswith('psycopg') for m in sys.modules))")
    for command in (["score", "3", *args], ["ingest", *args], ["status", "--db", str(db)],
                    ["report", "--db", str(db), "-o", str(tmp_path / "r.html")]):
        out = subprocess.run([sys.executable, "-c", probe, *command], capture_output=True, text=True, timeout=120)
        assert out.stdout.strip().splitlines()[-1] == "False", (command, out.stderr)


def test_config_ship_entries_are_checked_and_never_print_the_password(tmp_path: Path) -> None:
    cfg = tmp_path / "agentledger.toml"
    cfg.write_text('[ledger]\nname = "laptop"\n[[ship]]\nurl = "postgresql://me:hunter2@db.example/team"\nbatch = 100\n')
    code, out, err = run_cli("config", "--config", str(cfg))
    assert code == 0 and "hunter2" not in out and "postgresql://me@db.example/team (batch 100)" in out
    assert 'ledger.name' in out and '"laptop"' in out
    for text, said in (('[[ship]]\nurl = "http://x"\n', "needs url"), ('[[ship]]\nurl = "postgresql://x/y"\nbatch = 0\n',
                       "batch"), ('[[ship]]\nurl = "postgresql://x/y"\nport = 1\n', "unknown key(s): port")):
        cfg.write_text(text)
        code, _, err = run_cli("config", "--config", str(cfg))
        assert code == 2 and said in err, (text, err)
    assert uuid.UUID(ledger_id(machine(tmp_path / "m", 3)[0])).version == 4


def test_the_daemon_ships_as_it_goes_and_outlives_the_server_and_the_network(pg, tmp_path: Path, make_repo) -> None:
    """`agentledger run` with [[ship]]: the backlog and every new iteration reach the
    team ledger; the server stopped mid-ship, then a dead route (connections accepted
    and never answered) are each logged once, the daemon keeps scoring, and once the
    server is back the central events are exactly the local ones."""
    from .pgcluster import Proxy
    from .test_daemon import RECORD, log_of, running

    pg.create_database("live")
    proxy = Proxy(pg.port)
    repo = make_repo()
    log = log_of(tmp_path, 300)
    db = tmp_path / "l.sqlite"
    url = proxy.url("live", connect_timeout="2")
    cfg = tmp_path / "agentledger.toml"
    cfg.write_text(f'[store]\npath = "{db}"\n[ledger]\nname = "box-1"\n[[ship]]\nurl = "{url}"\nname = "team"\n'
                   f'batch = 50\n[[iteration_logs]]\npath = "{log}"\nrepo = "{repo.path}"\n')
    daemon_log = tmp_path / "daemon.log"

    def caught_up() -> bool:
        try:
            return len(central_events(url, ledger_id(db))) == len(local_events(db))
        except Exception:  # noqa: BLE001 - the server may be away on purpose
            return False

    def said(text: str) -> int:
        return daemon_log.read_text().count(text)

    try:
        with running(tmp_path, cfg) as (proc, notify):
            notify.wait_for("READY=1", timeout=60)
            assert wait_until(caught_up, timeout=60)
            # a new iteration reaches the team ledger soon after its score is committed
            (log / "iter-301.yaml").write_text(RECORD.format(n=301, r=0))
            assert wait_until(lambda: caught_up() and any(
                e[2] == "score.computed" and e[3]["iteration"] == 301 for e in central_events(url, ledger_id(db))),
                timeout=30)
            # the server stops once a backlog has begun to arrive (or, if it all got there
            # first, with the next iteration's events still to send)
            shipped = len(central_events(url, ledger_id(db)))
            for n in range(302, 502):
                (log / f"iter-{n}.yaml").write_text(RECORD.format(n=n, r=n % 2))
            assert wait_until(lambda: len(central_events(url, ledger_id(db))) > shipped, timeout=60, interval=0.001)
            pg.stop()
            (log / "iter-502.yaml").write_text(RECORD.format(n=502, r=1))  # local work goes on
            assert wait_until(lambda: (log / "iter-502.score.yaml").is_file(), timeout=60)
            assert wait_until(lambda: said("team ledger unreachable") == 1, timeout=30)
            pg.start()
            assert wait_until(caught_up, timeout=90) and said("team ledger reachable again") == 1
            # a dead route: connections are accepted and never answered
            proxy.set("blackhole")
            for n in range(503, 553):
                (log / f"iter-{n}.yaml").write_text(RECORD.format(n=n, r=0))
            assert wait_until(lambda: said("team ledger unreachable") == 2, timeout=60)
            assert proc.poll() is None and not caught_up()
            proxy.set("forward")
            assert wait_until(caught_up, timeout=90) and said("team ledger reachable again") == 2
            assert_exactly_the_union(url, [db])
            assert "box-1" in run_cli("central", "status", url)[1]
            assert ledger_id(db) in run_cli("central", "status", url)[1]  # what forgetting a machine needs
            assert "s3cret" not in daemon_log.read_text()
    finally:
        proxy.close()
        if not pg.accepting():
            pg.start()


def test_the_daemon_holds_one_connection_for_a_small_batch_and_none_when_idle(pg, tmp_path: Path,
                                                                             make_repo) -> None:
    """A team's server has connection slots for every machine: a daemon with little to
    send uses one connection (not ``connections``), and none once it has had nothing
    to send for ``idle_seconds``; the next iteration still arrives."""
    import psycopg

    from .test_daemon import RECORD, log_of, running

    url = pg.create_database("idle")
    log = log_of(tmp_path, 30)
    db = tmp_path / "l.sqlite"
    cfg = tmp_path / "agentledger.toml"
    cfg.write_text(f'[store]\npath = "{db}"\n[[ship]]\nurl = "{url}"\nconnections = 2\nidle_seconds = 3\n'
                   f'[[iteration_logs]]\npath = "{log}"\nrepo = "{make_repo().path}"\n')

    def scored(n: int) -> bool:
        try:
            return any(e[2] == "score.computed" and e[3]["iteration"] == n for e in central_events(url, ledger_id(db)))
        except psycopg.Error:  # the schema is not there yet
            return False

    with psycopg.connect(url, autocommit=True) as c, running(tmp_path, cfg) as (proc, notify):
        def held() -> int:
            return c.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                             " AND application_name = 'agentledger'").fetchone()[0]

        notify.wait_for("READY=1", timeout=60)
        assert wait_until(lambda: scored(30), timeout=60)
        assert held() <= 1
        assert wait_until(lambda: held() == 0, timeout=30)
        (log / "iter-31.yaml").write_text(RECORD.format(n=31, r=0))
        assert wait_until(lambda: scored(31), timeout=30)
        assert held() <= 1
        assert wait_until(lambda: held() == 0, timeout=30) and proc.poll() is None
        assert_exactly_the_union(url, [db])


def rollbacks(url: str) -> int:
    """Transactions rolled back in that database so far, read once no other session is
    left in it (a backend reports its counts before it leaves pg_stat_activity)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        assert wait_until(lambda: c.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                                            " AND pid <> pg_backend_pid()").fetchone()[0] == 0, timeout=60)
        return c.execute("SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()").fetchone()[0]


def test_rebuild_and_reimport_ship_nothing_twice(pg, tmp_path: Path) -> None:
    """A rebuilt ledger changes no seq; a ledger re-created from its export (a new file,
    a new id) keeps each event's origin: shipping either adds nothing already there,
    while the re-created ledger's own new events still arrive. New events go straight
    into the events table (no transaction rolled back); a batch the server holds
    already costs one rolled-back attempt, then goes the slow way."""
    import psycopg

    url = pg.create_database("again")
    a, a_args = machine(tmp_path / "a", 40, seed=8)
    assert ship(url, a).returncode == 0
    assert rollbacks(url) == 0
    before = len(local_events(a))
    assert run_cli("rebuild", "--db", str(a))[0] == 0
    again = ship(url, a, "--json")
    assert again.returncode == 0 and json.loads(again.stdout)[0]["sent"] == 0
    export = tmp_path / "a.jsonl"
    assert run_cli("export", "--db", str(a), "-o", str(export))[0] == 0
    exported = [json.loads(line) for line in export.read_text().splitlines()]
    assert all(e["ledger"] == ledger_id(a) and e["origin_seq"] == e["seq"] for e in exported)
    b = tmp_path / "b.sqlite"  # the machine's disk replaced: its ledger re-created from the export
    assert run_cli("import", str(export), "--db", str(b))[0] == 0
    assert ledger_id(b) != ledger_id(a)
    shipped = ship(url, b, "--json")
    result = json.loads(shipped.stdout)[0]
    assert shipped.returncode == 0 and result["sent"] == before and result["new"] == 0
    assert rollbacks(url) == result["batches"]
    with psycopg.connect(url) as c:
        assert c.execute("SELECT count(*) FROM agentledger.events").fetchone()[0] == before
        assert c.execute("SELECT count(*) FROM agentledger.score_latest WHERE ledger_id = %s",
                         (ledger_id(b),)).fetchone()[0] == 0  # nothing counted twice in the projections either
    # re-exporting from b keeps a's id and seqs as the origin; b's own new events ship as b's
    seq_in_a = {e["idempotency_key"]: e["seq"] for e in exported}
    assert [(e["ledger"], e["origin_seq"]) for e in map(json.loads, run_cli("export", "--db", str(b))[1].splitlines())
            ] == [(ledger_id(a), seq_in_a[e["idempotency_key"]]) for e in exported]
    assert run_cli("ingest", *a_args[:4], "--db", str(b), "--rubric", "3.0.0")[0] == 0
    shipped = ship(url, b, "--json")
    assert shipped.returncode == 0 and json.loads(shipped.stdout)[0]["new"] >= 40
    assert rollbacks(url) == result["batches"]
    with psycopg.connect(url) as c:
        assert c.execute("SELECT count(*) FROM agentledger.score_latest WHERE ledger_id = %s",
                         (ledger_id(b),)).fetchone()[0] == 40
        total = c.execute("SELECT count(*) FROM agentledger.events").fetchone()[0]
    # a copy of a copy: c imports b's export (a's events and b's own); it brings nothing new
    b_export = tmp_path / "b.jsonl"
    assert run_cli("export", "--db", str(b), "-o", str(b_export))[0] == 0
    c_db = tmp_path / "c.sqlite"
    assert run_cli("import", str(b_export), "--db", str(c_db))[0] == 0
    shipped = ship(url, c_db, "--json")
    assert shipped.returncode == 0 and json.loads(shipped.stdout)[0]["new"] == 0
    # two imports of an export without origin seqs (written before they were kept)
    # recognise each other by (origin, idempotency_key)
    old_export = tmp_path / "old.jsonl"
    old_export.write_text(re.sub(r', "origin_seq": \d+', "", b_export.read_text()))
    assert "origin_seq" not in old_export.read_text()
    news = []
    for name in ("d", "e"):
        assert run_cli("import", str(old_export), "--db", str(tmp_path / f"{name}.sqlite"))[0] == 0
        shipped = ship(url, tmp_path / f"{name}.sqlite", "--json")
        assert shipped.returncode == 0
        news.append(json.loads(shipped.stdout)[0]["new"])
    assert news[1] == 0
    with psycopg.connect(url) as c:
        assert c.execute("SELECT count(*) FROM agentledger.events").fetchone()[0] == total + news[0]


def test_a_pass_stalled_by_a_silent_peer_is_cut_off_and_retried(pg, tmp_path: Path) -> None:
    """The route goes silent mid-pass (connections stay open, no byte moves): after
    stall_seconds without a confirmed batch the pass ends with one line, exit 1, the
    cursor where the server left it; once the route works, the next pass completes."""
    from .pgcluster import Proxy

    pg.create_database("stall")
    proxy = Proxy(pg.port)
    try:
        db, _ = machine(tmp_path / "m", 400, extras=True)
        url = proxy.url("stall")
        cfg = tmp_path / "agentledger.toml"
        cfg.write_text(f'[store]\npath = "{db}"\n[[ship]]\nurl = "{url}"\nbatch = 10\nstall_seconds = 2\n')
        proc = subprocess.Popen([sys.executable, "-m", "agentledger", "ship", "--config", str(cfg)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        def arriving() -> bool:
            try:
                return len(central_events(pg.url("stall"), ledger_id(db))) > 0
            except Exception:  # noqa: BLE001 - the schema is not there yet
                return False

        assert wait_until(lambda: proc.poll() is not None or arriving(), timeout=60, interval=0.005)
        proxy.set("freeze")
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 1 and err.count("\n") == 1 and "no progress for 2 s" in err, err
        proxy.set("forward")
        assert ship(url, db, "--config", str(cfg)).returncode == 0
        assert_exactly_the_union(pg.url("stall"), [db])
    finally:
        proxy.close()


def test_connections_give_up_on_a_silent_peer(pg) -> None:
    """Keepalives and a TCP user timeout are set unless the URL sets them (a vanished
    peer would otherwise hold the shipping thread for hours)."""
    from agentledger.central.connect import connect

    pg.create_database("tcp")
    url = pg.url("tcp", tcp=True)
    with connect(url) as conn:
        params = conn.info.get_parameters()
        assert params.get("keepalives") == "1" and params.get("tcp_user_timeout") == "60000", params
    with connect(url + "?tcp_user_timeout=5000") as conn:
        assert conn.info.get_parameters().get("tcp_user_timeout") == "5000"
