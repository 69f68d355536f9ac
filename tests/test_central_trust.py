"""The team ledger under attack, against a real PostgreSQL 15 server: a read never
writes whatever the SQL and whoever the role, a machine writes only its own ledger
(the server refuses the rest), and no password is ever printed."""

from __future__ import annotations

import os
import resource
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentledger.example.pgcluster import PASSWORD

from .conftest import cli_subprocess, wait_until
from .test_central import assert_exactly_the_union, ledger_id, machine, reader, ship


def server_state(url: str) -> tuple:
    """What an attack must not change: every table's row count, the schema's tables and
    functions, the ledgers' names, the roles."""
    import psycopg

    with psycopg.connect(url) as pg:
        tables = [r[0] for r in pg.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast') AND c.relkind IN ('r', 'v')"
            " AND n.nspname NOT LIKE 'pg_temp%' ORDER BY 1")]
        counts = [pg.execute(f"SELECT count(*) FROM agentledger.{t}").fetchone()[0] for t in tables
                  if pg.execute("SELECT to_regclass(%s)", (f"agentledger.{t}",)).fetchone()[0]]
        functions = [r[0] for r in pg.execute("SELECT proname FROM pg_proc p JOIN pg_namespace n"
                                              " ON n.oid = p.pronamespace WHERE nspname = 'agentledger' ORDER BY 1")]
        names = pg.execute("SELECT ledger_id::text, name, host FROM agentledger.ledgers ORDER BY 1").fetchall()
        roles = [r[0] for r in pg.execute("SELECT rolname FROM pg_roles ORDER BY 1")]
        settings = pg.execute("SELECT setting FROM pg_settings WHERE name = 'default_transaction_read_only'"
                              ).fetchone()
        large_objects = pg.execute("SELECT count(*) FROM pg_largeobject_metadata").fetchone()[0]
    return tables, counts, functions, names, roles, settings, large_objects


def one_line(stderr: str) -> str:
    lines = [x for x in stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def shipped_team(pg, tmp_path: Path, name: str) -> tuple[str, Path]:
    """A team ledger holding one machine's events, shipped by the admin (the superuser)."""
    url = pg.create_database(name)
    db, _ = machine(tmp_path / "m", 40, extras=True)
    proc = ship(url, db)
    assert proc.returncode == 0, proc.stderr
    return url, db


ATTACKS = [
    "COMMIT; DELETE FROM agentledger.events",
    "COMMIT; CREATE TABLE agentledger.pwned(a int)",
    "SELECT 1; DELETE FROM agentledger.events",
    "DELETE FROM agentledger.events",
    "TRUNCATE agentledger.events",
    "UPDATE agentledger.ledgers SET name = 'mallory'",
    "INSERT INTO agentledger.ledgers (ledger_id, name, host) VALUES (gen_random_uuid(), 'x', 'y')",
    "CREATE TABLE agentledger.pwned(a int)",
    "SET TRANSACTION READ WRITE",
    "SET default_transaction_read_only = off",
    "RESET ALL",
    "SELECT set_config('default_transaction_read_only', 'off', false)",
    "SELECT set_config('transaction_read_only', 'off', true)",
    "SELECT pg_catalog.set_config('role', 'none', true)",
    'SELECT "set_config"(\'role\', \'none\', true)',
    "SELECT U&\"set\\005fconfig\"('role', 'none', true)",
    "DO $$BEGIN DELETE FROM agentledger.events; END$$",
    "COPY agentledger.events TO PROGRAM 'touch /tmp/agentledger-pwned'",
    "COPY (SELECT 1) TO '/tmp/agentledger-pwned'",
    "SELECT lo_import('/etc/hostname')",
    "SELECT lo_from_bytea(0, 'x')",
    "SELECT lo_export(1, '/tmp/agentledger-pwned')",
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity",
    "SELECT pg_advisory_lock(1)",
    "SELECT pg_reload_conf()",
    "SELECT query_to_xml('DELETE FROM agentledger.events', true, true, '')",
    "WITH d AS (DELETE FROM agentledger.events RETURNING 1) SELECT count(*) FROM d",
    "SELECT * INTO agentledger.copy FROM agentledger.events",
    "SELECT * FROM agentledger.ledgers FOR UPDATE",
    "EXPLAIN ANALYZE DELETE FROM agentledger.events",
    "CALL agentledger.nothing()",
    "LOCK TABLE agentledger.events",
    "PREPARE p AS DELETE FROM agentledger.events",
    "SELECT agentledger.register(gen_random_uuid(), 'x', 'y')",
    "SELECT agentledger.project(ledger_id, 0, 1000000, '{score.computed}') FROM agentledger.ledgers",
    "/* a comment /* nested */ still */ DELETE FROM agentledger.events",
    "SELECT 1 -- ; DELETE FROM agentledger.events\n; DELETE FROM agentledger.events",
    "SELECT 'unterminated",
]


def test_a_read_never_writes_whatever_the_sql(pg, tmp_path: Path) -> None:
    url, _ = shipped_team(pg, tmp_path, "reads")  # the URL names the cluster's superuser
    reads = reader(url)
    before = server_state(url)
    assert before[1][before[0].index("events")] > 100
    # the superuser's URL is refused at the door, before any statement is sent
    proc = cli_subprocess("query", "--central", url, "SELECT 1")
    assert proc.returncode == 2 and "is a superuser" in one_line(proc.stderr) and "add-reader" in proc.stderr
    for sql in ATTACKS:
        proc = cli_subprocess("query", "--central", reads, sql)
        assert proc.returncode == 1, (sql, proc.stdout, proc.stderr)
        line = one_line(proc.stderr)
        assert line.startswith("agentledger: query failed: "), (sql, line)
        assert server_state(url) == before, sql
    assert not Path("/tmp/agentledger-pwned").exists()
    # what a read is for still works, with parameters, a cast, a % and a trailing ';'
    proc = cli_subprocess("query", "--central", reads, "--json", "-p", "band", "excellent",
                          "SELECT count(*)::int AS n, '100%' AS pct FROM latest_scores WHERE band <> :band;")
    assert proc.returncode == 0, proc.stderr
    assert '"pct": "100%"' in proc.stdout
    assert cli_subprocess("query", "--central", reads, "SHOW transaction_read_only").stdout.split()[-1] == "on"
    # report --central goes through the same door; central status is the admin's own fixed read
    assert cli_subprocess("report", "--central", reads, "-o", str(tmp_path / "r.html")).returncode == 0
    assert cli_subprocess("report", "--central", url, "-o", str(tmp_path / "r.html")).returncode == 2
    assert cli_subprocess("central", "status", url).returncode == 0
    assert server_state(url) == before


def test_the_server_itself_refuses_what_the_statement_check_would_have_stopped(pg, tmp_path: Path) -> None:
    """The door without its statement check, as a reader: the server's privileges alone."""
    import psycopg

    from agentledger.central.read import reading

    url, _ = shipped_team(pg, tmp_path, "layers")
    reads = reader(url)
    before = server_state(url)
    other = psycopg.connect(url)  # a session a superuser could terminate
    try:
        for sql, refusal in [
            ("COMMIT; DELETE FROM agentledger.events", "multiple commands"),
            ("SET TRANSACTION READ WRITE", "before any query"),
            ("SELECT set_config('transaction_read_only', 'off', true)", "before any query"),
            ("DELETE FROM agentledger.events", "read-only transaction"),
            ("CREATE TABLE agentledger.pwned(a int)", "read-only transaction"),
            ("COPY agentledger.events TO PROGRAM 'touch /tmp/agentledger-pwned'", "permission denied"),
            ("SELECT lo_import('/etc/hostname')", "permission denied"),
            (f"SELECT pg_terminate_backend({other.info.backend_pid})", "permission denied"),
            ("SELECT pg_reload_conf()", "permission denied"),
            ("SELECT pg_read_file('/etc/hostname')", "permission denied"),
        ]:
            with reading(reads) as door:
                assert door.pg.execute("SELECT current_user").fetchone()[0] == "agentledger_reader"
                with pytest.raises(psycopg.Error) as err:
                    door.pg.execute(sql, prepare=True)
                denied = isinstance(err.value, psycopg.errors.InsufficientPrivilege)
                assert refusal in str(err.value) or (refusal == "permission denied" and denied), (sql, str(err.value))
        assert not other.closed and other.execute("SELECT 1").fetchone() == (1,)
    finally:
        other.close()
    assert server_state(url) == before
    assert not Path("/tmp/agentledger-pwned").exists()


def active(url: str, text: str) -> list[int]:
    import psycopg

    with psycopg.connect(url) as pg:
        return [r[0] for r in pg.execute("SELECT pid FROM pg_stat_activity WHERE state = 'active' AND query = %s",
                                         (text,))]


def test_a_runaway_query_stops_at_its_time_limit_and_ctrl_c_cancels_it_on_the_server(pg, tmp_path: Path) -> None:
    url = reader(pg.create_database("runaway"))
    started = time.monotonic()
    proc = cli_subprocess("query", "--central", url, "--timeout", "1", "SELECT pg_sleep(600)")
    assert proc.returncode == 1 and time.monotonic() - started < 60
    assert "statement timeout" in one_line(proc.stderr) and "--timeout" in proc.stderr
    sleeper = "SELECT pg_sleep(600) AS forever"
    p = subprocess.Popen([sys.executable, "-m", "agentledger", "query", "--central", url, "--timeout", "0", sleeper],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: active(url, sleeper), 60)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        assert p.returncode == 130 and one_line(err) == "agentledger: interrupted"
        wait_until(lambda: not active(url, sleeper), 30)  # cancelled on the server, not left running
    finally:
        p.kill()
        p.wait()


def test_a_local_runaway_query_stops_at_its_time_limit(tmp_path: Path) -> None:
    from .conftest import empty_ledger

    db = empty_ledger(tmp_path / "l.sqlite")
    forever = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n"
    proc = cli_subprocess("query", "--db", str(db), "--timeout", "0.5", forever)
    assert proc.returncode == 1 and "time limit" in one_line(proc.stderr)
    # the CPU a whole `query` of nothing takes here (start, imports, a fresh clone's bytecode
    # compiled on the way): past that and 0.3 s more, a runaway one is inside its query
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert cli_subprocess("query", "--db", str(db), "SELECT 1").returncode == 0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    startup = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    p = subprocess.Popen([sys.executable, "-m", "agentledger", "query", "--db", str(db), "--timeout", "0", forever],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _cpu_seconds(p.pid) > startup + 0.3, 60)  # inside the query, not still starting
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
        assert p.returncode == 1 and "interrupted (Ctrl-C)" in one_line(err)
    finally:
        p.kill()
        p.wait()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def add_role(url: str, action: str, name: str, *extra: str) -> str:
    """`central add-machine|add-reader`: the ~/.pgpass line it prints."""
    proc = cli_subprocess("central", action, url, name, *extra)
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    assert line.count(":") >= 4 and "postgresql://" not in line
    password = line.rsplit(":", 1)[1]
    assert password not in proc.stderr  # the URL it suggests has no password
    return line


def as_role(tmp_path: Path, pgpass_line: str, url: str) -> tuple[str, dict]:
    """The URL (no password) and environment a machine uses with its ~/.pgpass line."""
    from psycopg.conninfo import conninfo_to_dict

    role = pgpass_line.split(":")[3]
    pgpass = tmp_path / f"{role}.pgpass"
    pgpass.write_text(pgpass_line + "\n")
    pgpass.chmod(0o600)
    info = conninfo_to_dict(url)
    return (f"postgresql://{role}@/{info['dbname']}?host={info['host']}&port={info['port']}",
            {"PGPASSFILE": str(pgpass)})


def test_a_machine_ships_only_its_own_ledger_and_cannot_erase_or_forge(pg, tmp_path: Path) -> None:
    import shutil

    import psycopg

    url = pg.create_database("machines")
    assert cli_subprocess("central", "init", url).returncode == 0
    alice_url, alice_env = as_role(tmp_path, add_role(url, "add-machine", "alice_box"), url)
    bob_url, bob_env = as_role(tmp_path, add_role(url, "add-machine", "bob_box"), url)
    reader_url, reader_env = as_role(tmp_path, add_role(url, "add-reader", "dashboards"), url)

    alice, _ = machine(tmp_path / "alice", 50, seed=1)
    bob, _ = machine(tmp_path / "bob", 30, seed=2)
    for db, u, env, name in ((alice, alice_url, alice_env, "alice"), (bob, bob_url, bob_env, "bob")):
        proc = cli_subprocess("ship", "--central", u, "--db", str(db), env={**env, "AGENTLEDGER_LEDGER_NAME": name})
        assert proc.returncode == 0, proc.stderr
    assert_exactly_the_union(url, [alice, bob])
    before = server_state(url)

    # bob's copy of a ledger, its id edited to alice's and its cursor set to her last seq
    forged = tmp_path / "forged.sqlite"
    shutil.copy(bob, forged)
    with sqlite3.connect(forged) as c:
        top = c.execute("SELECT max(seq) FROM events").fetchone()[0]
        c.execute("UPDATE ledger_identity SET ledger_id = ?", (ledger_id(alice),))
        c.execute("DELETE FROM ship_cursors")
    with sqlite3.connect(alice) as c:
        mine = c.execute("SELECT max(seq) FROM events").fetchone()[0]
    assert top > 20
    with sqlite3.connect(forged) as c:
        c.execute("INSERT INTO ship_cursors (destination, last_seq, shipped_at) VALUES (?, ?, '')",
                  (bob_url, min(mine, top - 10)))
    proc = cli_subprocess("ship", "--central", bob_url, "--db", str(forged),
                          env={**bob_env, "AGENTLEDGER_LEDGER_NAME": "alice"})
    assert proc.returncode == 1
    assert f"belongs to machine alice_box, not to bob_box" in one_line(proc.stderr)
    assert server_state(url) == before

    def refused(u: str, env: dict, sql: str, params=()) -> str:
        with psycopg.connect(u, passfile=env["PGPASSFILE"]) as c:
            with pytest.raises(psycopg.Error) as err:
                c.execute(sql, params)
            return str(err.value)

    alice_id, bob_id = ledger_id(alice), ledger_id(bob)
    for sql in ["DELETE FROM agentledger.events", "DELETE FROM agentledger.events WHERE ledger_id = '%s'" % bob_id,
                "UPDATE agentledger.events SET payload = '{}'", "TRUNCATE agentledger.events",
                "UPDATE agentledger.ledgers SET name = 'mallory'", "DELETE FROM agentledger.ledgers",
                "DELETE FROM agentledger.ledger_roles", "UPDATE agentledger.ledger_roles SET role = 'bob_box'",
                "INSERT INTO agentledger.ledger_roles (ledger_id, role) VALUES (gen_random_uuid(), 'bob_box')",
                "DELETE FROM agentledger.scores", "UPDATE agentledger.iterations SET session_id = 'x'",
                "CREATE TABLE agentledger.pwned (a int)", "DROP TRIGGER events_shipped_by_their_machine"
                " ON agentledger.events", "ALTER TABLE agentledger.events DISABLE TRIGGER ALL",
                "SET session_replication_role = replica", "GRANT agentledger_machine TO bob_box"]:
        assert refused(bob_url, bob_env, sql).startswith(("permission denied", "must be", "must have")), sql
    # the server refuses events, a registration or a projection for a ledger that is not bob's
    forged_row = ("INSERT INTO agentledger.events (ledger_id, seq, origin, idempotency_key, stream, type,"
                  " schema_version, content_hash, recorded_at, source, payload) VALUES (%s, 999999, %s, 'k', 's',"
                  " 'score.computed', 1, 'h', now(), 'x', '{}')")
    assert "belongs to machine alice_box" in refused(bob_url, bob_env, forged_row, (alice_id, alice_id))
    assert "belongs to machine alice_box" in refused(bob_url, bob_env, forged_row, (bob_id, alice_id))  # origin
    assert "belongs to machine alice_box" in refused(bob_url, bob_env, "SELECT agentledger.register(%s, 'x', 'y')",
                                                     (alice_id,))
    assert "belongs to machine alice_box" in refused(bob_url, bob_env,
                                                     "SELECT agentledger.project(%s, 0, 99999, '{score.computed}')",
                                                     (alice_id,))
    for sql in ["SELECT agentledger.register(gen_random_uuid(), 'x', 'y')", forged_row.replace("%s", "gen_random_uuid()"),
                "DELETE FROM agentledger.events", "UPDATE agentledger.ledgers SET name = 'x'"]:
        assert "permission denied" in refused(reader_url, reader_env, sql)
    assert server_state(url) == before
    # the reader reads
    proc = cli_subprocess("query", "--central", reader_url, "SELECT count(*) FROM latest_scores", env=reader_env)
    assert proc.returncode == 0 and int(proc.stdout.split()[-1]) == 80

    # central status: the machines, their roles and their ledgers
    proc = cli_subprocess("central", "status", url)
    assert proc.returncode == 0, proc.stderr
    assert "2 machine role(s), 1 reader role(s), 2 ledger(s)" in proc.stdout
    assert f"{alice_id}" in proc.stdout and "machine alice_box" in proc.stdout and "machine bob_box" in proc.stdout

    # honest machines still ship, and nothing they did not send is on the server
    bob_more, _ = machine(tmp_path / "bob", 40, seed=2)
    proc = cli_subprocess("ship", "--central", bob_url, "--db", str(bob_more), env={**bob_env})
    assert proc.returncode == 0, proc.stderr
    assert_exactly_the_union(url, [alice, bob_more])


def test_a_machine_ships_on_against_older_projection_code_until_the_admins_init(pg, tmp_path: Path) -> None:
    """New projection code (schema/central/projection.sql) does not stop a machine role: it
    ships against the server's older code, which it cannot replace, and the admin's next
    `central init` installs the new one, with the iterations table's room for updates."""
    import psycopg

    from agentledger.central import projection

    url = pg.create_database("older_code")
    assert cli_subprocess("central", "init", url).returncode == 0
    machine_url, env = as_role(tmp_path, add_role(url, "add-machine", "older_code_box"), url)
    options = "SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = 'agentledger.iterations'::regclass"
    installed = "SELECT sha256 FROM agentledger.installed_code WHERE name = 'projection'"
    with psycopg.connect(url, autocommit=True) as c:
        assert c.execute(options).fetchone()[0] == ["fillfactor=80"]
        c.execute("ALTER TABLE agentledger.iterations RESET (fillfactor)")  # a server the code before set up
        c.execute("UPDATE agentledger.installed_code SET sha256 = 'older' WHERE name = 'projection'")
    db, _ = machine(tmp_path / "m", 20)
    proc = cli_subprocess("ship", "--central", machine_url, "--db", str(db), env=env)
    assert proc.returncode == 0, proc.stderr
    assert_exactly_the_union(url, [db])
    with psycopg.connect(url) as c:
        assert c.execute(options).fetchone()[0] == [] and c.execute(installed).fetchone()[0] == "older"
    assert cli_subprocess("central", "init", url).returncode == 0
    with psycopg.connect(url) as c:
        assert c.execute(options).fetchone()[0] == ["fillfactor=80"]
        assert c.execute(installed).fetchone()[0] == projection.sha256()


def test_upgrading_a_database_of_one_shared_role_keeps_every_event(pg, tmp_path: Path) -> None:
    """A team ledger at migration 3 (one owner role ships for everyone) → `central init`
    → every event stays, the projections are those a fresh ship gives, and add-machine
    binds each existing ledger to its machine by name."""
    import psycopg

    from agentledger.central import schema
    from agentledger.central.ship import LOCAL_BATCH, Shipper
    from agentledger.config import ShipDestination

    old, fresh = pg.create_database("old"), pg.create_database("fresh")
    db, _ = machine(tmp_path / "m", 60, extras=True)
    with psycopg.connect(old) as conn:
        schema.migrate(conn, upto=3)
        local = sqlite3.connect(db)
        shipper = Shipper(local, ShipDestination(old), name="laptop")
        conn.execute("INSERT INTO agentledger.ledgers (ledger_id, name, host) VALUES (%s, 'laptop', 'h')",
                     (shipper.ledger_id,))
        with conn.cursor() as cur:
            shipper._copy(cur, "agentledger.events", local.execute(LOCAL_BATCH, (0, 10**9)).fetchall(), {})
        local.close()
    events = assert_exactly_the_union(old, [db])
    proc = cli_subprocess("central", "init", old)
    assert proc.returncode == 0, proc.stderr
    last = len(schema.migration_files())
    assert f"schema version {last} ({last - 3} migration(s) applied)" in proc.stdout
    assert assert_exactly_the_union(old, [db]) == events
    assert ship(fresh, db).returncode == 0
    view = "SELECT source, iteration, rubric_version, value, band, session_id FROM latest_scores ORDER BY 1, 2"
    got = {u: cli_subprocess("query", "--central", reader(u), "--json", view).stdout for u in (old, fresh)}
    assert got[old] == got[fresh] and len(got[old]) > 1000
    line = add_role(old, "add-machine", "laptop")
    proc = cli_subprocess("central", "status", old)
    assert "machine laptop" in proc.stdout and line.split(":")[3] == "laptop"
    laptop_url, env = as_role(tmp_path, line, old)
    assert cli_subprocess("ship", "--central", laptop_url, "--db", str(db), env=env).returncode == 0


def test_no_password_is_ever_printed_whatever_libpq_says(pg, tmp_path: Path) -> None:
    db, _ = machine(tmp_path / "m", 5)
    sock = pg.url("x").split("?", 1)[1]
    bad = [
        ("postgresql://agentledger:s3cr3t%40x@[::1:55432/x", ["s3cr3t%40x", "s3cr3t@x", "s3cr3t"]),
        ("postgresql://agentledger:s3cr3t%4@localhost/db", ["s3cr3t%4", "s3cr3t"]),
        ("postgresql://agentledger:hunter2pw@127.0.0.1:notaport/db", ["hunter2pw"]),
        ("postgresql://agentledger:hunter2pw@127.0.0.1:1/db", ["hunter2pw"]),
        (f"postgresql://agentledger:wrong-hunter2@/postgres?{sock}", ["wrong-hunter2"]),
        (f"postgresql://agentledger@/postgres?{sock}&password=hunter2pw&sslmode=bogus", ["hunter2pw"]),
        ("postgresql://agentledger:hunter2pw@/postgres?host=/nonexistent&port=5", ["hunter2pw"]),
        ("postgresql://agent:ledger:hunter2pw@@localhost:1/db", ["hunter2pw"]),
    ]
    for url, secrets in bad:
        for args in (("query", "--central", url, "SELECT 1"), ("ship", "--central", url, "--db", str(db)),
                     ("central", "status", url), ("central", "init", url), ("central", "add-machine", url, "m"),
                     ("report", "--central", url, "-o", str(tmp_path / "r.html"))):
            proc = cli_subprocess(*args, timeout=120)
            assert proc.returncode in (1, 2), (args, proc.stdout, proc.stderr)
            one_line(proc.stderr)
            for secret in secrets + [PASSWORD]:
                assert secret not in proc.stdout + proc.stderr, (args, proc.stderr)


def test_a_password_added_to_the_url_keeps_the_cursor(pg, tmp_path: Path) -> None:
    url = pg.create_database("cursorkey")
    db, _ = machine(tmp_path / "m", 30)
    bare = url.replace(f":{PASSWORD}@", "@")
    first = cli_subprocess("ship", "--central", bare, "--db", str(db), env={"PGPASSWORD": PASSWORD})
    assert first.returncode == 0 and " 0 behind" in first.stdout, first.stderr
    again = cli_subprocess("ship", "--central", url, "--db", str(db))
    assert again.returncode == 0 and "0 events sent" in again.stdout, again.stdout
    with sqlite3.connect(db) as c:  # a cursor an older release wrote under the URL with *** for the password
        c.execute("UPDATE ship_cursors SET destination = ?", (url.replace(f":{PASSWORD}@", ":***@"),))
    legacy = cli_subprocess("ship", "--central", url, "--db", str(db))
    assert legacy.returncode == 0 and "0 events sent" in legacy.stdout, legacy.stdout
    with sqlite3.connect(db) as c:
        keys = [r[0] for r in c.execute("SELECT destination FROM ship_cursors")]
    assert keys == [bare]  # the cursor moved to the password-free key; no key ever holds a password
    status = cli_subprocess("status", "--db", str(db))
    assert PASSWORD not in status.stdout + status.stderr


def test_the_daemon_log_never_carries_a_password() -> None:
    code = ("from agentledger.service import logs; import structlog; logs.setup('json');"
            " log = structlog.get_logger('t');"
            " log.warning('unreachable', destination='postgresql://me@h/db',"
            " error='connection to postgresql://me:hunter2pw@h/db failed: password=hunter2pw');"
            " import logging; logging.getLogger('x').error('dsn host=h password=hunter2pw user=me')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "hunter2pw" not in proc.stdout + proc.stderr and proc.stdout.count("***") == 3, proc.stdout


def test_a_team_ledger_from_before_roles_is_read_through_the_same_door(pg, tmp_path: Path) -> None:
    """No reader group yet (migration 3): a powerless login role the admin made reads,
    read-only, one statement; the superuser's URL is refused there too."""
    import psycopg

    from agentledger.central import schema

    url = pg.create_database("before_roles")
    with psycopg.connect(url) as conn:
        schema.migrate(conn, upto=3)
        conn.execute("CREATE ROLE plain_reader_before_roles LOGIN PASSWORD 'plainpw'")
        conn.execute("GRANT USAGE ON SCHEMA agentledger TO plain_reader_before_roles")
        conn.execute("GRANT SELECT ON ALL TABLES IN SCHEMA agentledger TO plain_reader_before_roles")
    plain = url.replace(f"agentledger:{PASSWORD}@", "plain_reader_before_roles:plainpw@")
    assert plain != url
    ok = cli_subprocess("query", "--central", plain, "SELECT count(*) AS n FROM agentledger.events")
    assert ok.returncode == 0 and ok.stdout.split()[-1] == "0", ok.stderr
    for sql in ("COMMIT; DELETE FROM agentledger.events", "CREATE TABLE agentledger.x (a int)"):
        proc = cli_subprocess("query", "--central", plain, sql)
        assert proc.returncode == 1 and one_line(proc.stderr).startswith("agentledger: query failed:")
    assert cli_subprocess("query", "--central", url, "SELECT 1").returncode == 2
