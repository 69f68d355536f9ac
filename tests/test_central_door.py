"""The team ledger's read door has no power to do harm (#56), against a real PostgreSQL 15:
every kind of role that could do harm is refused at the door in one line; a reader,
connected straight to the server with no lexer in the way, runs every SQL-running
function PostgreSQL ships around every harmful payload and takes every lock it may,
and none of it reads a file, touches another session or holds up shipping; the
reader's limits are the server's; and Ctrl-C cancels on the server even when it lands
between a prepared statement's Parse and its Execute."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agentledger.example.pgcluster import PASSWORD

from .conftest import cli_subprocess, wait_until
from .pgcluster import shut
from .test_central import assert_exactly_the_union, ledger_id, machine, reader
from .test_central_trust import one_line, server_state, shipped_team


def _login(url: str, role: str) -> str:
    return url.replace(f"agentledger:{PASSWORD}@", f"{role}:{role}pw@")


def test_every_kind_of_role_that_could_do_harm_is_refused_at_the_door(pg, tmp_path: Path) -> None:
    import psycopg

    url, _ = shipped_team(pg, tmp_path, "powers")
    machine_line = cli_subprocess("central", "add-machine", url, "door_machine").stdout.strip()
    made = {
        "door_super": "SUPERUSER", "door_createrole": "CREATEROLE", "door_bypassrls": "BYPASSRLS",
        "door_replication": "REPLICATION",
    }
    members = {  # a member can SET ROLE to the role it is in: its powers are the member's
        "door_files": "pg_read_server_files", "door_writes": "pg_write_server_files",
        "door_programs": "pg_execute_server_program", "door_signals": "pg_signal_backend",
        "door_machines": "agentledger_machine", "door_in_super": "door_super", "door_in_owner": "agentledger",
        "door_chain": "door_in_super", "door_noinherit": "door_createrole", "door_in_machine": "door_machine",
    }
    with psycopg.connect(url, autocommit=True) as c:
        for role, power in made.items():
            c.execute(f"CREATE ROLE {role} LOGIN {power} PASSWORD '{role}pw'")
        for role, group in members.items():
            inherit = "NOINHERIT" if role == "door_noinherit" else "INHERIT"
            c.execute(f"CREATE ROLE {role} LOGIN {inherit} PASSWORD '{role}pw'")
            c.execute(f"GRANT {group} TO {role}")
        c.execute("CREATE ROLE door_plain LOGIN PASSWORD 'door_plainpw' IN ROLE agentledger_reader")
    machine_url = _login(url, "door_machine").replace("door_machine:door_machinepw@",
                                                      f"door_machine:{machine_line.rsplit(':', 1)[1]}@")
    refused = [url, machine_url, *(_login(url, r) for r in [*made, *members])]
    assert len(refused) >= 16
    before = server_state(url)
    for u in refused:
        for args in (["query", "--central", u, "SELECT 1"], ["report", "--central", u, "-o", str(tmp_path / "r.html")]):
            proc = cli_subprocess(*args)
            line = one_line(proc.stderr)
            assert proc.returncode == 2 and "add-reader" in line and "cannot do harm" in line, (u, line)
            assert "pw@" not in line and PASSWORD not in line and not proc.stdout
    assert server_state(url) == before
    ok = cli_subprocess("query", "--central", _login(url, "door_plain"), "SELECT count(*) FROM latest_scores")
    assert ok.returncode == 0 and int(ok.stdout.split()[-1]) == 40, ok.stderr


# Every function PostgreSQL 15 ships that runs SQL it is given as text, each around a
# statement; and what a statement run that way might try. None may succeed as a reader.
WRAPPERS = [
    "SELECT * FROM ts_stat($w${inner}$w$)",
    "SELECT * FROM ts_stat($w${inner}$w$, 'ab')",
    "SELECT ts_rewrite('a'::tsquery, $w${inner}$w$)",
    "SELECT query_to_xml($w${inner}$w$, true, true, '')",
    "SELECT query_to_xmlschema($w${inner}$w$, true, true, '')",
    "SELECT query_to_xml_and_xmlschema($w${inner}$w$, true, true, '')",
    "SELECT b.word FROM ts_stat($w$SELECT to_tsvector(set_config($x$role$x$,$x$none$x$,true))$w$) a,"
    " LATERAL ts_stat($w${inner}$w$ || left(a.word, 0)) b",
    # not a function, but what runs SQL text for any role with psql: an anonymous block
    "DO $w$DECLARE r text; BEGIN EXECUTE $q${inner}$q$ INTO r; RAISE NOTICE '%', r; END$w$",
]
PAYLOADS = [
    "SELECT to_tsvector(pg_read_file('/etc/passwd'))",
    "SELECT to_tsvector(set_config('role', 'none', true) || pg_read_file('/etc/passwd'))",
    "SELECT to_tsvector(set_config('role', 'agentledger', true) || pg_read_file('/etc/passwd'))",
    "SELECT to_tsvector(encode(pg_read_binary_file('/etc/passwd'), 'escape'))",
    "SELECT to_tsvector(pg_ls_dir('/')::text)",
    "SELECT to_tsvector(pg_stat_file('/etc/passwd')::text)",
    "SELECT to_tsvector(pg_terminate_backend({victim})::text)",
    "SELECT to_tsvector(pg_cancel_backend({victim})::text)",
    "SELECT to_tsvector(lo_import('/etc/passwd')::text)",
    "SELECT to_tsvector(pg_reload_conf()::text)",
    "SELECT to_tsvector(current_setting('data_directory'))",
    "SELECT to_tsvector((SELECT count(*) FROM agentledger.events WHERE false)::text || pg_read_file('/etc/hostname'))",
]


def test_a_reader_runs_every_sql_running_function_and_takes_every_lock_without_harm(pg, tmp_path: Path) -> None:
    import psycopg

    url, db = shipped_team(pg, tmp_path, "harmless")
    reads = reader(url)
    before = server_state(url)
    victim = psycopg.connect(url)  # another session: the shipper's, say
    try:
        tried = 0
        for wrapper in WRAPPERS:
            for payload in PAYLOADS:
                sql = wrapper.format(inner=payload.format(victim=victim.info.backend_pid))
                for read_only in (True, False):  # as the door runs it, and as psql would
                    with psycopg.connect(reads) as c:
                        c.read_only = read_only
                        notices: list[str] = []
                        c.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
                        try:
                            cur = c.execute(sql)
                            out = str(cur.fetchall() if cur.description else "")
                        except psycopg.Error as exc:
                            out = str(exc)
                        out += " ".join(notices)
                        assert "root:" not in out and "/bin/" not in out and "pg_wal" not in out, (sql, out)
                        assert str(pg.data) not in out, (sql, out)
                    tried += 1
        assert tried >= 160
        assert victim.execute("SELECT 1").fetchone() == (1,)  # never terminated nor cancelled
    finally:
        victim.close()
    assert server_state(url) == before

    # every lock a reader can take, held in one open transaction while a machine ships
    holder = psycopg.connect(reads, autocommit=True)
    holder.execute("SET idle_in_transaction_session_timeout = 0")  # as a reader may: held for as long as it likes
    holder.execute("SET lock_timeout = 0")
    holder.autocommit = False
    try:
        relations = [r[0] for r in holder.execute(
            "SELECT c.oid::regclass::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'agentledger' AND c.relkind IN ('r', 'v', 'p') ORDER BY 1")]
        holder.rollback()
        assert len(relations) >= 10
        taken = []
        modes = ["ACCESS SHARE", "ROW SHARE", "ROW EXCLUSIVE", "SHARE UPDATE EXCLUSIVE", "SHARE",
                 "SHARE ROW EXCLUSIVE", "EXCLUSIVE", "ACCESS EXCLUSIVE"]
        for rel in relations:
            for mode in modes:
                try:
                    with holder.transaction():
                        holder.execute(f"LOCK TABLE {rel} IN {mode} MODE NOWAIT")
                    taken.append((rel, mode))
                except psycopg.Error:
                    pass
            for strength in ("UPDATE", "NO KEY UPDATE", "SHARE", "KEY SHARE"):
                with pytest.raises(psycopg.Error):
                    with holder.transaction():
                        holder.execute(f"SELECT 1 FROM {rel} FOR {strength}")
        assert {mode for _, mode in taken} <= {"ACCESS SHARE"}, taken
        # now hold them all, and every advisory lock agentledger ever used, while shipping runs
        for rel, mode in taken:  # (one transaction, begun by the first statement, held to the end)
            holder.execute(f"LOCK TABLE {rel} IN {mode} MODE")
        from agentledger.central.schema import LOCK

        more, _ = machine(tmp_path / "more", 30, seed=9)  # a ledger with everything still to send
        ids = [ledger_id(more), *(r[0] for r in holder.execute("SELECT ledger_id::text FROM agentledger.ledgers"))]
        keys = [holder.execute("SELECT hashtextextended(%s, 0)", (i,)).fetchone()[0] for i in ids]
        for key in [LOCK, *keys, *range(1, 64)]:
            holder.execute("SELECT pg_advisory_lock(%s)", (key,))
            holder.execute("SELECT pg_advisory_xact_lock_shared(%s)", (key,))
        for shipper in (more, db):
            proc = cli_subprocess("ship", "--central", url, "--db", str(shipper), timeout=120)
            assert proc.returncode == 0, proc.stderr
        assert_exactly_the_union(url, [db, more])
        assert holder.execute("SELECT count(*) FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory'"
                              ).fetchone()[0] >= 64  # held all along
    finally:
        holder.close()


def test_a_readers_limits_are_the_servers_and_a_read_only_lowers_them(pg, tmp_path: Path) -> None:
    url, _ = shipped_team(pg, tmp_path, "limits")
    reads = reader(url)

    def shown(u: str, *extra: str) -> str:
        proc = cli_subprocess("query", "--central", u, *extra, "SELECT current_setting('statement_timeout') AS s,"
                              " current_setting('lock_timeout') AS l,"
                              " current_setting('idle_in_transaction_session_timeout') AS i")
        assert proc.returncode == 0, proc.stderr
        return " ".join(proc.stdout.split()[-3:])

    assert shown(reads) == "1min 5s 1min"                    # the role's, under the default 60 s
    assert shown(reads, "--timeout", "0") == "1min 5s 1min"  # "no limit" asks for more than the role has
    assert shown(reads, "--timeout", "600") == "1min 5s 1min"
    assert shown(reads, "--timeout", "2.5") == "2500ms 5s 1min"
    # the client's startup options cannot speak for the server either
    lifted = reads + ("&" if "?" in reads else "?") + "options=-c%20statement_timeout%3D0%20-c%20lock_timeout%3D0"
    assert shown(lifted, "--timeout", "0") == "1min 5s 1min"


class HoldParse:
    """A TCP forwarder in front of the cluster that, once the client sends a Parse message
    of the statement holding ``marker``, holds the server's answers back until ``release``:
    the client sits between its Parse and its Execute, where a cancel finds nothing
    running on the server."""

    def __init__(self, port: int, marker: bytes) -> None:
        self.target, self.marker = port, marker
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.parsed, self.released, self.cancels = threading.Event(), threading.Event(), 0
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            if self.parsed.is_set():
                self.cancels += 1  # a connection opened after the Parse: a cancel request
            for src, dst, watch in ((client, upstream, True), (upstream, client, False)):
                t = threading.Thread(target=self._pump, args=(src, dst, watch), daemon=True)
                t.start()
                self.threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket, watch: bool) -> None:
        try:
            while data := src.recv(65536):
                if watch and self.marker in data and b"P" in data:
                    self.parsed.set()
                if not watch and self.parsed.is_set() and not self.released.is_set():
                    self.released.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            shut(src, dst)

    def close(self) -> None:
        self.released.set()
        self.listener.close()


def test_ctrl_c_between_parse_and_execute_still_cancels_on_the_server(pg, tmp_path: Path) -> None:
    from psycopg.conninfo import conninfo_to_dict

    url = pg.create_database("parsewindow")
    reads = reader(url)
    info = conninfo_to_dict(reads)
    marker = b"pg_sleep(600) AS parse_window"
    proxy = HoldParse(int(info["port"]), marker)
    via = f"postgresql://{info['user']}:{info['password']}@127.0.0.1:{proxy.port}/{info['dbname']}"
    sleeper = "SELECT " + marker.decode()
    p = subprocess.Popen([sys.executable, "-m", "agentledger", "query", "--central", via, "--timeout", "0", sleeper],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(proxy.parsed.is_set, 60)       # the Parse is out; its answer is held
        p.send_signal(signal.SIGINT)
        wait_until(lambda: proxy.cancels >= 1, 60)  # a cancel reached the server while nothing ran there
        proxy.released.set()                       # the Parse's answer goes on: the client sends the Execute
        _, err = p.communicate(timeout=30)  # well inside the reader's own 60 s statement limit
        assert p.returncode == 130 and one_line(err) == "agentledger: interrupted"
        from .test_central_trust import active

        wait_until(lambda: not active(url, sleeper), 30)  # cancelled on the server, not left running
    finally:
        proxy.close()
        p.kill()
        p.wait()


def test_a_ledger_name_says_which_ledger_once(pg, tmp_path: Path) -> None:
    """A machine cannot pass its ledger off as another's: a name another ledger holds, or
    another machine role's own name, is given as NAME~ID8; the team views keep the
    ledgers apart; a name holding escape sequences is shown escaped in `central status`."""
    import psycopg

    from .test_central_trust import add_role, as_role

    url = pg.create_database("names")
    assert cli_subprocess("central", "init", url).returncode == 0
    ann_url, ann_env = as_role(tmp_path, add_role(url, "add-machine", "ann_box"), url)
    ben_url, ben_env = as_role(tmp_path, add_role(url, "add-machine", "ben_box"), url)
    alice, _ = machine(tmp_path / "alice", 20, seed=1)
    assert cli_subprocess("ship", "--central", ann_url, "--db", str(alice),
                          env={**ann_env, "AGENTLEDGER_LEDGER_NAME": "ann_box"}).returncode == 0
    tries = ["ann_box", "ann_box", "cat_box", "\x1b[2J\x1b[Hall clear", "line\nforged"]
    bobs = []
    for k, name in enumerate(tries):
        db, _ = machine(tmp_path / f"bob{k}", 5 + k, seed=10 + k)
        proc = cli_subprocess("ship", "--central", ben_url, "--db", str(db), env={**ben_env, "AGENTLEDGER_LEDGER_NAME": name})
        assert proc.returncode == 0, proc.stderr
        bobs.append(db)
    with psycopg.connect(url) as c:
        names = dict(c.execute("SELECT ledger_id::text, name FROM agentledger.ledgers").fetchall())
        per_ledger = dict(c.execute("SELECT l.ledger_id::text, count(*) FROM agentledger.latest_scores s"
                                    " JOIN agentledger.ledgers l ON l.name = s.ledger GROUP BY 1").fetchall())
    assert len(set(names.values())) == len(names) == 1 + len(tries)
    assert names[ledger_id(alice)] == "ann_box"
    for db, asked in zip(bobs, tries):
        got = names[ledger_id(db)]
        if asked in ("ann_box",):  # alice's, and alice's role's name: bob's ledgers are told apart
            assert got == f"ann_box~{ledger_id(db)[:8]}", got
        elif asked == "cat_box":
            assert got == "cat_box"
    # the views keep every ledger's scores apart (nothing merged under alice's name)
    assert per_ledger[ledger_id(alice)] == 20
    assert sorted(per_ledger[ledger_id(db)] for db in bobs) == [5 + k for k in range(len(tries))]
    status = cli_subprocess("central", "status", url)
    assert status.returncode == 0 and "\x1b" not in status.stdout and "\\x1b[2J" in status.stdout
    assert not any(line.startswith("forged") for line in status.stdout.splitlines())
