"""Reading the team ledger: the one door of every read whose SQL a person gives or our
report runs (``query --central``, ``report --central``), and the read-only session of
the admin's and the machines' own fixed reads (``central status``, ``central new-id``).

The door's safety comes from the server's privileges, never from parsing SQL:
functions that run SQL given as text (``ts_stat``, ``query_to_xml`` and kin) pass any
lexer, and a session whose user is a superuser can reset the role it was set to. So:

1. The door runs only as a role that cannot do harm (``refuse_power``): a URL whose
   session user is a superuser, has CREATEROLE, BYPASSRLS or REPLICATION, owns the
   schema, is a machine role, or is a member of any role that is one of those or of
   the server's file, program and signal roles (``pg_read_server_files``,
   ``pg_write_server_files``, ``pg_execute_server_program``, ``pg_signal_backend``) is
   refused in one line before any statement is sent (exit 2: use a reader,
   ``central add-reader``). Such a role reads no file, signals no other session, and
   takes no lock the shipper waits for: the shipper serialises on its ledger's row
   (``FOR UPDATE``, which needs UPDATE on the table: schema/central/projection.sql),
   not on an advisory lock anyone may take.
2. Its limits live on the server: the statement, lock and idle-in-transaction timeouts
   the admin set on the role (``add-reader`` sets them; ``pg_db_role_setting``, not
   what the client's startup options say) are the most a read may have; ``--timeout``
   can lower the statement timeout, never lift it.
3. One statement per call, by the extended query protocol (the server refuses two
   commands in one prepared statement), in a ``REPEATABLE READ READ ONLY``
   transaction whose snapshot is taken first (every write fails inside it), as the
   reader group role when the session user is in it; always rolled back.
4. The lexer (``check_statement``) stays only to say why in a friendlier first line
   (``set_config() is refused here``); nothing depends on it.

Ctrl-C cancels the statement on the server, whatever the moment it comes (``_cancelling``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import AgentledgerError
from ..redact import scrub, strip_password
from .connect import CentralError, connect, describe

__all__ = ["CentralError", "DEFAULT_TIMEOUT", "PowerfulRole", "QueryError", "Reader", "check_statement", "query",
           "reading"]

DEFAULT_TIMEOUT = 60.0  # seconds a statement may run (query --central --timeout)
READER_ROLE = "agentledger_reader"
MACHINE_ROLE = "agentledger_machine"
# the server's own roles that reach outside the database: files, programs, other sessions
SERVER_POWERS = ("pg_read_server_files", "pg_write_server_files", "pg_execute_server_program", "pg_signal_backend")
# the limits a reader's role carries on the server (``central add-reader`` sets them)
LIMITS = ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")
STATEMENTS = ("select", "with", "values", "table", "explain", "show")
# Functions that act outside the read-only transaction (files, other sessions, the
# server, replication, advisory locks, large objects), change the session (set_config:
# the role), or run SQL given as text (query_to_xml and kin).
REFUSED = re.compile(
    r"set_config|lo_\w+|dblink\w*|query_to_xml\w*|cursor_to_xml\w*|pg_(?:"
    r"read_\w+|ls_\w+|stat_file|file_\w+|write_\w+|terminate_backend|cancel_backend|reload_conf|rotate_logfile\w*"
    r"|switch_wal|switch_xlog|create_\w+|drop_\w+|replication_\w+|logical_\w+|copy_\w+|advisory_\w+"
    r"|try_advisory_\w+|stat_reset\w*|notify|promote|log_backend_memory_contexts|import_system_collations"
    r"|backup_\w+|start_backup|stop_backup|wal_replay_\w+|sleep_until|export_snapshot)|nextval|setval"
    r"|ts_stat|ts_rewrite|(?:table|schema|database)_to_xml\w*")

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<line>--[^\n]*)
  | (?P<block>/\*)
  | (?P<unicode>[uU]&["'])
  | (?P<estr>[eE]'(?:[^'\\]|\\.|'')*')
  | (?P<str>'(?:[^']|'')*')
  | (?P<qid>"(?:[^"]|"")*")
  | (?P<dollar>\$(?:[A-Za-z_\x80-\uffff][\w\x80-\uffff]*)?\$)
  | (?P<word>[A-Za-z_\x80-\uffff][\w$\x80-\uffff]*)
  | (?P<num>\$?\d[\w.]*)
  | (?P<other>.)
""", re.X | re.S)


class QueryError(AgentledgerError):
    """The statement was refused (here or by the server), or failed on the server."""


def _tokens(sql: str) -> list[tuple[str, str]]:
    """(kind, text) for each token that matters: no white space, no comments. A
    string, comment or dollar quote left open is refused (the server would read on
    into whatever follows)."""
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(sql):
        m = _TOKEN.match(sql, pos)
        assert m is not None  # (?P<other>.) matches any character
        kind, text = m.lastgroup or "other", m.group(0)
        if kind == "block":  # comments nest in PostgreSQL
            depth, i = 1, m.end()
            while depth and i < len(sql):
                if sql.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif sql.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
            if depth:
                raise QueryError("the statement has a comment that is never closed")
            pos = i
            continue
        if kind == "dollar":
            end = sql.find(text, m.end())
            if end < 0:
                raise QueryError(f"the statement has a {text}-quoted string that is never closed")
            out.append(("str", sql[pos:end + len(text)]))
            pos = end + len(text)
            continue
        if kind == "unicode":
            raise QueryError("U&'…' and U&\"…\" escapes are not accepted here: write the characters themselves")
        if kind == "other" and text in "'\"":
            raise QueryError("the statement has a quote that is never closed")
        if kind not in ("ws", "line"):
            out.append((kind, text))
        pos = m.end()
    return out


def check_statement(sql: str) -> None:
    """Raise QueryError saying why ``sql`` is not one read statement (see the module's
    layer 4); the server's own refusals stand behind this one."""
    tokens = _tokens(sql)
    while tokens and tokens[-1] == ("other", ";"):
        tokens.pop()
    if not tokens:
        raise QueryError("no statement to run")
    if ("other", ";") in tokens:
        raise QueryError("one statement per call: the SQL holds more than one (a ';' before its end)")
    first = next((t for t in tokens if t != ("other", "(")), ("", ""))
    if first[0] != "word" or first[1].lower() not in STATEMENTS:
        raise QueryError(f"only a read statement runs here (SELECT, WITH, VALUES, TABLE, EXPLAIN or SHOW), not"
                         f" {first[1][:40]!r}: the team ledger is written by shipping, never by a query")
    for (kind, text), nxt in zip(tokens, tokens[1:]):
        if nxt == ("other", "(") and kind in ("word", "qid"):
            name = text[1:-1].replace('""', '"') if kind == "qid" else text.lower()
            if REFUSED.fullmatch(name):
                raise QueryError(f"{name}() is refused here: it acts outside a read-only query")


class PowerfulRole(AgentledgerError):
    """The URL's session user could do harm through the read door: exit 2, one line."""

    exit_code = 2


# One row about the session user: its own powers, the roles it is a member of that carry
# one (a member can SET ROLE to any of them), and the limits the admin set on it (role and
# database settings only: the client's startup options cannot speak for the server).
_POWER = """
SELECT r.rolname, r.rolsuper, r.rolcreaterole, r.rolbypassrls, r.rolreplication,
       coalesce((SELECT nspowner FROM pg_namespace WHERE nspname = 'agentledger') = r.oid, false),
       array(SELECT g.rolname FROM pg_roles g WHERE g.oid <> r.oid AND pg_has_role(r.oid, g.oid, 'MEMBER')
             AND (g.rolsuper OR g.rolcreaterole OR g.rolbypassrls OR g.rolreplication
                  OR g.rolname = ANY (%(named)s)
                  OR g.oid = (SELECT nspowner FROM pg_namespace WHERE nspname = 'agentledger'))
             ORDER BY 1),
       array(SELECT unnest(s.setconfig) FROM pg_db_role_setting s
             WHERE s.setrole = r.oid AND s.setdatabase IN (0, (SELECT oid FROM pg_database
                                                                WHERE datname = current_database()))
             ORDER BY s.setdatabase DESC)
FROM pg_roles r WHERE r.rolname = session_user
"""


def refuse_power(pg, label: str) -> dict[str, float]:
    """Raise ``PowerfulRole`` unless the session user is powerless (the module's layer 1);
    the limits (seconds, 0 for none) the admin set on it otherwise."""
    row = pg.execute(_POWER, {"named": [*SERVER_POWERS, MACHINE_ROLE]}).fetchone()
    name, superuser, createrole, bypassrls, replication, owner, groups, settings = row
    powers = [what for what, has in (("is a superuser", superuser), ("has CREATEROLE", createrole),
                                     ("has BYPASSRLS", bypassrls), ("has REPLICATION", replication),
                                     ("owns the agentledger schema", owner)) if has]
    if MACHINE_ROLE in groups:
        powers.append("is a machine role (it ships; it does not read)")
    if others := [g for g in groups if g != MACHINE_ROLE]:
        powers.append(f"is a member of {', '.join(others)}")
    if powers:
        said = " and ".join(powers[:2]) + (f" (and {len(powers) - 2} more)" if len(powers) > 2 else "")
        raise PowerfulRole(f"{label}: the URL's role {name} {said}: the read door runs only as a"
                           " role that cannot do harm; make a reader with `agentledger central add-reader"
                           " ADMIN_URL NAME` and use its URL")
    limits: dict[str, float] = {}
    for item in settings:  # database-and-role settings first: they win over the role's own
        key, _, value = item.partition("=")
        if key in LIMITS and key not in limits:
            limits[key] = _seconds(key, value)
    return limits


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "": 1e-3}
_DURATION = re.compile(r"\s*([0-9]+(?:\.[0-9]*)?)\s*(us|ms|s|min|h|d|)\s*")


def _seconds(key: str, value: str) -> float:
    """A time setting as the server stores it on a role ('60s', '5min', '1500': a plain
    number is milliseconds for these three), in seconds. One not understood is refused
    rather than taken for no limit (fails closed)."""
    m = _DURATION.fullmatch(value)
    if m is None:
        raise QueryError(f"the reader role's {key} = {value!r} is not a time this door reads; refused")
    return float(m.group(1)) * _UNITS[m.group(2)]


def effective(server: float, asked: float) -> float:
    """The lower of the server's limit and the one asked for (0: none), never more than the server's."""
    if not server:
        return asked
    return min(server, asked) if asked else server


class Reader:
    """The read session's connection: ``execute`` sends one checked statement with
    the extended protocol and makes sure the read-only transaction is still open."""

    def __init__(self, pg, url: str) -> None:
        self.pg = pg
        self.url = url

    def execute(self, sql: str, params=None):
        import psycopg
        from psycopg.pq import TransactionStatus

        check_statement(sql)
        with _cancelling(self.pg) as interrupted:
            try:
                cur = self.pg.execute(sql, params, prepare=True)
            except psycopg.Error as exc:
                if interrupted.is_set():
                    raise KeyboardInterrupt from None
                why = scrub(describe(exc), self.url)
                if isinstance(exc, psycopg.errors.QueryCanceled) and "timeout" in why:
                    why += " (the time limit: --timeout SECONDS, 0 for none, at most the role's)"
                raise QueryError(why) from None
        if interrupted.is_set():
            raise KeyboardInterrupt
        if self.pg.info.transaction_status != TransactionStatus.INTRANS:  # layer 3 makes this unreachable
            raise QueryError("the statement ended the read-only transaction; refused")
        return cur


@contextmanager
def _cancelling(pg) -> Iterator:
    """Ctrl-C while a statement is out: cancel it on the server, again every 100 ms until
    the statement has ended. One cancel is not enough: psycopg sends a prepared
    statement's Parse and its Execute as two round trips, and a cancel that reaches the
    server between them finds nothing running and is dropped, after which the Execute
    would run to its end (tests/test_central_trust.py holds the Parse's answer back to
    hit that window). The handler only sets a flag; a thread sends the cancels."""
    import signal
    import threading

    interrupted, done, wake = threading.Event(), threading.Event(), threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield interrupted
        return

    def keep_cancelling() -> None:
        wake.wait()
        while not done.is_set():
            try:
                pg.cancel_safe(timeout=5)
            except Exception:  # noqa: BLE001 - a failed cancel is tried again
                pass
            done.wait(0.1)

    def on_sigint(signum, frame) -> None:
        if interrupted.is_set():  # a second Ctrl-C: leave without waiting for the server
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        interrupted.set()
        wake.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    thread = threading.Thread(target=keep_cancelling, name="agentledger-cancel", daemon=True)
    thread.start()
    try:
        yield interrupted
    finally:
        done.set()
        wake.set()
        thread.join()
        signal.signal(signal.SIGINT, previous)


@contextmanager
def reading(url: str, *, label: str = "", timeout: float = DEFAULT_TIMEOUT, door: bool = True) -> Iterator[Reader]:
    """A read session on the team ledger (see the module docstring); always rolled
    back and closed. ``timeout``: seconds a statement may run, 0 for none, at most the
    role's own limit. ``door``: the SQL may be a person's (``query --central``) or the
    team report's, so the session user must be powerless (``refuse_power``); False only
    for the fixed reads of ``central status`` and ``central new-id``, which the admin
    and the machines run and which no person's SQL reaches."""
    import psycopg
    from psycopg import IsolationLevel

    pg = connect(url)
    try:
        pg.isolation_level, pg.read_only = IsolationLevel.REPEATABLE_READ, True
        limits = refuse_power(pg, label or strip_password(url)) if door else {}
        pg.execute("SELECT set_config('statement_timeout', %s, true), set_config('lock_timeout', %s, true),"
                   " set_config('idle_in_transaction_session_timeout', %s, true), set_config('search_path', %s, true)",
                   (_ms(effective(limits.get("statement_timeout", 0), timeout)),
                    _ms(limits.get("lock_timeout", 0)), _ms(limits.get("idle_in_transaction_session_timeout", 0)),
                    "agentledger, public"))
        if _reader_role_applies(pg):
            pg.execute(f"SET LOCAL ROLE {READER_ROLE}")
        pg.execute("SELECT 1")  # the snapshot is taken: the transaction stays read-only, whatever comes next
        yield Reader(pg, url)
    except psycopg.Error as exc:
        raise CentralError(scrub(f"{label}: {describe(exc)}" if label else describe(exc), url)) from None
    finally:
        try:
            pg.rollback()
        except Exception:  # noqa: BLE001 - a broken or cancelled connection: closing is all that is left
            pass
        pg.close()


def _ms(seconds: float) -> str:
    return f"{int(seconds * 1000)}ms"


def _reader_role_applies(pg) -> bool:
    """Whether the statement can run as the reader role here: it exists (roles are
    cluster-wide), this database's schema grants it (another database of the cluster
    may be at migration 4 while this one is not), and the URL's role may assume it.
    Two statements: SQL does not promise to skip a function that raises for a missing
    role or schema."""
    exists = pg.execute("SELECT to_regrole(%s) IS NOT NULL AND to_regnamespace('agentledger') IS NOT NULL",
                        (READER_ROLE,)).fetchone()[0]
    return bool(exists) and pg.execute(
        "SELECT has_schema_privilege(%s, 'agentledger', 'USAGE') AND pg_has_role(current_user, %s, 'MEMBER')",
        (READER_ROLE, READER_ROLE)).fetchone()[0]


# :name, but not a ::cast and not inside a quoted string
_PARAM = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|(?<![:\w]):([A-Za-z_]\w*)")


def to_pyformat(sql: str) -> str:
    """``:name`` → ``%(name)s`` and ``%`` → ``%%``, outside quoted strings and casts."""
    def swap(m: re.Match) -> str:
        return m.group(0).replace("%", "%%") if m.group(1) is None else f"%({m.group(1)})s"

    out, last = [], 0
    for m in _PARAM.finditer(sql):
        out.append(sql[last:m.start()].replace("%", "%%"))
        out.append(swap(m))
        last = m.end()
    out.append(sql[last:].replace("%", "%%"))
    return "".join(out)


def query(url: str, sql: str, params: dict[str, str], *, label: str = "",
          timeout: float = DEFAULT_TIMEOUT) -> tuple[list[str], list[tuple]]:
    """``query --central``: one statement through the door; (columns, rows)."""
    check_statement(sql)  # before connecting: a refused statement costs no connection
    with reading(url, label=label, timeout=timeout) as reader:
        cur = reader.execute(to_pyformat(sql) if params else sql, params or None)
        columns = [d.name for d in cur.description or []]
        return columns, cur.fetchall() if cur.description else []
