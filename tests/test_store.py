"""Ledger invariants on real SQLite files."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from agentledger.config import Config, StoreConfig, make_source
from agentledger.ledger import Ledger
from agentledger.store import db, events
from agentledger.store.events import Event, append
from agentledger.store.projections import PROJECTION_TABLES, rebuild

from .conftest import REAL_LOG, copy_log, need_fixtures


def test_events_refuse_update_and_delete(tmp_path: Path) -> None:
    conn = db.connect(tmp_path / "l.sqlite")
    with db.write_transaction(conn):
        append(conn, Event("rubric.activated", "ledger", "ledger", "k1", {"version": "2.1.0", "previous": None}))
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("UPDATE events SET type = 'x'")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        conn.execute("DELETE FROM events")
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("INSERT INTO events (stream, type, schema_version, idempotency_key, content_hash,"
                     " recorded_at, source, payload) VALUES ('s','t',1,'k2','h','now','x','not json')")
    assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 1


def test_append_is_idempotent(tmp_path: Path) -> None:
    conn = db.connect(tmp_path / "l.sqlite")
    with db.write_transaction(conn):
        ev = Event("rubric.activated", "ledger", "ledger", "same-key", {"version": "2.1.0", "previous": None})
        assert append(conn, ev) is True
        assert append(conn, Event("rubric.activated", "ledger", "ledger", "same-key",
                                  {"version": "2.1.0", "previous": None})) is False
    row = conn.execute("SELECT schema_version, content_hash, json_valid(payload) FROM events").fetchone()
    assert row[0] == 1 and row[1].startswith("sha256:") and row[2] == 1


def test_append_many_matches_one_by_one_appends(tmp_path: Path) -> None:
    from agentledger.store.events import append_many

    def ev(key: str, v: str) -> Event:
        return Event("rubric.activated", "ledger", "ledger", key, {"version": v, "previous": None})

    conn = db.connect(tmp_path / "l.sqlite")
    with db.write_transaction(conn):
        append(conn, ev("a", "1"))
        new = append_many(conn, [ev("b", "2"), ev("a", "x"), ev("c", "3"), ev("b", "y"), ev("d", "4")])
    assert [e.payload["version"] for e in new] == ["2", "3", "4"]
    stored = conn.execute("SELECT seq, json_extract(payload, '$.version') FROM events ORDER BY seq").fetchall()
    assert [tuple(r) for r in stored] == [(1, "1"), (2, "2"), (3, "3"), (4, "4")]
    assert [e.seq for e in new] == [2, 3, 4]
    with db.write_transaction(conn):
        assert append_many(conn, [ev("a", "1"), ev("d", "4")]) == []


def test_bulk_commits_relax_durability_until_the_last_commit(tmp_path: Path) -> None:
    """Inside ``bulk_commits`` the chunks commit under NORMAL with a long checkpoint
    interval; the last commit (after the yielded function) and everything after the
    block run with the connection's own settings, even when the block fails."""
    settings = lambda c: (c.execute("PRAGMA synchronous").fetchone()[0],  # noqa: E731
                          c.execute("PRAGMA wal_autocheckpoint").fetchone()[0])
    conn = db.connect(tmp_path / "l.sqlite")
    assert settings(conn) == (2, 1000)
    assert conn.execute("PRAGMA page_size").fetchone()[0] == db.PAGE_SIZE == 16384  # a new ledger's
    with db.bulk_commits(conn) as last_commit_follows:
        assert settings(conn) == (1, 4096)  # 64 MiB of WAL
        last_commit_follows()
        assert settings(conn) == (2, 1000)
    assert settings(conn) == (2, 1000)
    with pytest.raises(RuntimeError), db.bulk_commits(conn):
        raise RuntimeError("a chunk failed")
    assert settings(conn) == (2, 1000)
    old = sqlite3.connect(tmp_path / "old.sqlite")  # a ledger made before 16 KiB pages keeps its own
    old.execute("PRAGMA page_size = 4096")
    old.execute("CREATE TABLE t (x)")
    old.close()
    assert db.connect(tmp_path / "old.sqlite").execute("PRAGMA page_size").fetchone()[0] == 4096
    relaxed = db.connect(tmp_path / "n.sqlite", synchronous="NORMAL")
    with db.bulk_commits(relaxed):
        assert settings(relaxed) == (1, 4096)
    assert settings(relaxed) == (1, 1000)


def test_old_payload_versions_are_upcast_on_read_never_rewritten(tmp_path: Path, monkeypatch) -> None:
    conn = db.connect(tmp_path / "l.sqlite")
    with db.write_transaction(conn):
        append(conn, Event("rubric.activated", "ledger", "ledger", "k", {"version": "2.1.0", "previous": None}))
    stored = conn.execute("SELECT payload FROM events").fetchone()[0]
    monkeypatch.setitem(events.CURRENT, "rubric.activated", 2)
    monkeypatch.setitem(events.UPCASTERS, ("rubric.activated", 1), lambda p: {**p, "reason": "config"})
    (ev,) = list(events.read(conn))
    assert ev.schema_version == 2 and ev.payload["reason"] == "config"
    assert tuple(conn.execute("SELECT payload, schema_version FROM events").fetchone()) == (stored, 1)


def _dump(conn: sqlite3.Connection) -> dict[str, list[tuple]]:
    return {t: sorted(tuple(r) for r in conn.execute(f"SELECT * FROM {t}")) for t in PROJECTION_TABLES}


def test_rebuild_reproduces_projections_and_sidecars(tmp_path: Path, empty_repo) -> None:
    need_fixtures()
    log = tmp_path / "log"
    copy_log(REAL_LOG, log)
    cfg = Config(store=StoreConfig(path=tmp_path / "l.sqlite"), iteration_logs=(make_source(log, empty_repo.path),))
    ledger = Ledger(cfg)
    src = cfg.iteration_logs[0]
    ledger.ingest(src)
    ledger.ensure_rubric()
    ledger.score(src)
    (log / "iter-70.yaml").write_text((log / "iter-70.yaml").read_text().replace("retries: 0", "retries: 2", 1))
    ledger.ingest(src)
    ledger.score(src)
    before = _dump(ledger.conn)
    files = {p.name: p.read_bytes() for p in log.iterdir()}
    (log / "iter-66.score.yaml").unlink()
    (log / "iter-67.score.yaml").write_text("tampered\n")

    replayed = rebuild(ledger.conn)
    assert replayed == ledger.conn.execute("SELECT count(*) FROM events").fetchone()[0]
    assert _dump(ledger.conn) == before
    report = ledger.sync_sidecars(src)
    assert report.sidecars_written == 2
    assert {p.name: p.read_bytes() for p in log.iterdir()} == files


def test_checkpoint_and_events_commit_together(tmp_path: Path, empty_repo, monkeypatch) -> None:
    """A failure between appending events and moving the checkpoint leaves neither."""
    log = tmp_path / "log"
    log.mkdir()
    (log / "iter-1.yaml").write_text("schema_version: 1\niteration: 1\n")
    (log / "iter-2.yaml").write_text("schema_version: 1\niteration: 2\n")
    cfg = Config(store=StoreConfig(path=tmp_path / "l.sqlite"), iteration_logs=(make_source(log, empty_repo.path),))
    ledger = Ledger(cfg)
    src = cfg.iteration_logs[0]
    from agentledger.ledger import commit

    real = commit.record_files

    def failing(batch, files, report):
        real(batch, files, report)  # both files' events and checkpoints are in the transaction
        assert batch.conn.execute("SELECT count(*) FROM source_checkpoints").fetchone()[0] == 2
        raise OSError("disk on fire")

    monkeypatch.setattr(commit, "record_files", failing)
    with pytest.raises(OSError):
        ledger.ingest(src)
    c = ledger.conn
    assert c.execute("SELECT count(*) FROM events").fetchone()[0] == 0
    assert c.execute("SELECT count(*) FROM source_checkpoints").fetchone()[0] == 0
    assert c.execute("SELECT count(*) FROM iterations").fetchone()[0] == 0
    monkeypatch.setattr(commit, "record_files", real)
    ledger.ingest(src)
    assert c.execute("SELECT count(*) FROM iterations").fetchone()[0] == 2
    assert c.execute("SELECT count(*) FROM source_checkpoints").fetchone()[0] == 2


def test_content_changes_make_events_touch_does_not(tmp_path: Path, empty_repo) -> None:
    import os

    log = tmp_path / "log"
    log.mkdir()
    f = log / "iter-1.yaml"
    a, b = "schema_version: 1\niteration: 1\nretries: 1\n", "schema_version: 1\niteration: 1\nretries: 2\n"
    f.write_text(a)
    cfg = Config(store=StoreConfig(path=tmp_path / "l.sqlite"), iteration_logs=(make_source(log, empty_repo.path),))
    ledger = Ledger(cfg)
    src = cfg.iteration_logs[0]
    count = lambda: ledger.conn.execute("SELECT count(*) FROM events WHERE type = 'iteration.recorded'").fetchone()[0]  # noqa: E731
    ledger.ingest(src)
    assert count() == 1
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))  # touch: same bytes
    assert ledger.ingest(src).events == 0
    f.write_text(b)
    ledger.ingest(src)
    f.write_text(a)  # back to the first content: still a new event (A -> B -> A)
    ledger.ingest(src)
    assert count() == 3
    rec = ledger.conn.execute("SELECT record FROM iteration_records").fetchone()[0]
    assert '"retries":1' in rec


def test_readonly_connection_cannot_write(tmp_path: Path) -> None:
    db.connect(tmp_path / "l.sqlite").close()
    ro = db.connect_readonly(tmp_path / "l.sqlite")
    with pytest.raises(sqlite3.OperationalError):
        ro.execute("CREATE TABLE x (a)")
    with pytest.raises(sqlite3.OperationalError):
        ro.execute("INSERT INTO ledger_state VALUES ('a', 'b')")


def test_schema_is_strict_and_migrated_once(tmp_path: Path) -> None:
    conn = db.connect(tmp_path / "l.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchone()[0]
    assert "STRICT" in sql
    applied = conn.execute("SELECT name FROM _sqlite_migrations").fetchall()
    conn.close()
    conn = db.connect(tmp_path / "l.sqlite")
    assert conn.execute("SELECT name FROM _sqlite_migrations").fetchall() == applied


def test_a_new_ledger_leaves_no_wal_of_its_migrations(tmp_path: Path) -> None:
    """Each migration commits its own rewrite of the schema's pages: without a checkpoint
    once they are applied, a new ledger's WAL held ~3.8 MB (more than the database) until
    the first background checkpoint, room a nearly full disk did not have for the first
    records (test_daemon.py's full disk test failed that way when one migration was added)."""
    conn = db.connect(tmp_path / "l.sqlite")
    wal = tmp_path / "l.sqlite-wal"
    assert conn.execute("SELECT count(*) FROM _sqlite_migrations").fetchone()[0] > 20
    assert not wal.exists() or wal.stat().st_size == 0
    conn.close()


def test_a_new_ledger_is_migrated_without_importing_numpy(tmp_path: Path) -> None:
    """sqlite-utils imports numpy when it is installed (~75 ms of a cold ingest's start);
    the migrations bar that import while sqlite-utils loads, and only then."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from agentledger.store import db\n"
        "db.connect(sys.argv[1]).close()\n"
        "assert 'sqlite_utils' in sys.modules and 'numpy' not in sys.modules, sorted(sys.modules)\n"
        "import numpy, sqlite_utils\n"
        "print(numpy.asarray([1, 2]).sum(), sqlite_utils.db.np is None)\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "l.sqlite")], capture_output=True,
                         text=True, check=True).stdout
    assert out.split() == ["3", "True"]  # numpy still imports; sqlite-utils was loaded without it
    # a process that has numpy already gives it to sqlite-utils as usual
    script = "import numpy, sys\nfrom agentledger.store import db\ndb.connect(sys.argv[1]).close()\n" \
             "import sqlite_utils\nprint(sqlite_utils.db.np is numpy)\n"
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "m.sqlite")], capture_output=True,
                         text=True, check=True).stdout
    assert out.split() == ["True"]


def test_background_checkpoints_keep_the_wal_from_commits(tmp_path: Path) -> None:
    """The daemon's checkpoint thread copies committed WAL frames into the
    database file on its own connection: commits stop paying for it."""
    import time

    from agentledger.service.checkpointer import Checkpointer

    path = tmp_path / "l.sqlite"
    conn = db.connect(path)
    conn.execute("PRAGMA wal_autocheckpoint = 0")  # only the thread checkpoints here
    size = path.stat().st_size
    with db.write_transaction(conn):
        conn.execute("CREATE TABLE blobs (b BLOB)")
        conn.executemany("INSERT INTO blobs VALUES (?)", [(os.urandom(100_000),) for _ in range(40)])
    assert path.stat().st_size < size + 1_000_000  # the rows are in the WAL, not yet in the file
    cp = Checkpointer(path, interval=0.05).start()
    try:
        deadline = time.monotonic() + 20
        while (path.stat().st_size < size + 4_000_000 or not cp.checkpoints) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert path.stat().st_size >= size + 4_000_000
        assert cp.checkpoints >= 1
        with db.write_transaction(conn):  # writers are never blocked by it
            conn.execute("INSERT INTO blobs VALUES (x'00')")
    finally:
        cp.stop()
    assert conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == 41
    conn.close()


def _update_each_row(conn: sqlite3.Connection):
    """The quarantine family's ``resolve_many`` as it was: an UPDATE for every resolving
    row (the oracle)."""
    return lambda rows: conn.executemany(
        "UPDATE quarantine SET resolved_seq = ? WHERE source = ? AND path = ? AND resolved_seq IS NULL", rows)


def test_quarantine_resolves_what_an_update_of_every_row_resolves(tmp_path: Path) -> None:
    """A transaction asks once which paths have an open problem and updates only those
    (``store/quarantine.py``): for drawn runs of good files, problems of whole files and of
    lines, in transactions of drawn sizes, the quarantine table is what the family that
    updated every resolving row left, open problems and the seq that resolved each alike."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from agentledger.store.projections import Projector

    paths = st.sampled_from(["iter-1.yaml", "iter-2.yaml", "a/result.json", "run/results.jsonl"])
    step = st.tuples(st.sampled_from(["good-file", "good-run", "artifact", "bad", "bad-line", "removed"]), paths,
                     st.integers(1, 3))
    counter = iter(range(10**9))

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(st.lists(step, max_size=8), max_size=6), st.sampled_from(["s1", "s2"]))
    def check(transactions, other_source) -> None:
        n = next(counter)
        dumps = []
        for k, oracle in enumerate((False, True)):
            conn = db.connect(tmp_path / f"q{n}-{k}.sqlite")
            seq = 0
            for steps in transactions:
                projector = Projector(conn, queue=False)
                if oracle:
                    projector.quarantine.resolve_many = _update_each_row(conn)  # type: ignore[method-assign]
                conn.execute("BEGIN IMMEDIATE")
                run = []
                for what, path, times in steps:
                    for _ in range(times):
                        seq += 1
                        source = "s1" if seq % 3 else other_source
                        if what in ("good-file", "good-run", "removed"):
                            ev = Event("file.removed" if what == "removed" else "labels.recorded", "x", source,
                                       f"k{seq}", {"file": path, "kind": "labels", "iteration": 1, "outcome": {}})
                        elif what == "artifact":
                            ev = Event("artifact.recorded", "x", source, f"k{seq}", {"path": path, "artifact": {}})
                        else:
                            kind = "vally" if what == "bad-line" else "record"
                            ev = Event("source.quarantined", "x", source, f"k{seq}",
                                       {"path": path, "kind": kind, "reason": f"bad {seq}", "line": seq})
                        ev.seq = seq
                        if what == "good-run":  # a run of records: resolved together
                            run.append((seq, source, path))
                            continue
                        if run:
                            projector.quarantine.resolve_many(run)
                            run = []
                        projector.quarantine.handlers()[ev.type](ev, ev.payload)
                if run:
                    projector.quarantine.resolve_many(run)
                projector.quarantine.flush()
                conn.execute("COMMIT")
            dumps.append(conn.execute("SELECT * FROM quarantine ORDER BY id").fetchall())
            conn.close()
        assert dumps[0] == dumps[1]

    check()
