"""Reading the team ledger: the one door every read path goes through (``query
--central``, ``report --central``, ``central status``, ``central new-id``).

A read can never write, whatever the SQL and whoever the role in the URL, because
the server refuses it, in layers that each hold on their own:

1. One statement per call, sent with the extended query protocol (a named
   prepared statement): the server refuses a string with two commands
   ("cannot insert multiple commands into a prepared statement"), so
   ``COMMIT; DELETE …`` never reaches the executor.
2. A ``REPEATABLE READ READ ONLY`` transaction whose snapshot is taken before the
   statement runs: PostgreSQL then refuses ``SET TRANSACTION READ WRITE`` and
   ``set_config('transaction_read_only', 'off', …)``, and every write (DML, DDL,
   ``SELECT … INTO``, ``nextval``, a writing CTE) fails inside it.
3. When the team ledger has its reader role (``agentledger_reader``, central
   migration 4) and the URL's role may assume it (an admin or a superuser may),
   the statement runs as that role (``SET LOCAL ROLE``): it can SELECT and
   nothing else, so even a superuser's URL loses the powers that act outside a
   transaction (``lo_export``, ``pg_terminate_backend``, ``COPY … TO PROGRAM``).
4. Before anything is sent, the statement is lexed (strings, quoted identifiers,
   dollar quotes and nested comments understood): it must begin with ``SELECT``,
   ``WITH``, ``VALUES``, ``TABLE``, ``EXPLAIN`` or ``SHOW``, and may not call a
   function that changes state outside the transaction or runs SQL text
   (``set_config``, which could drop layer 3, ``lo_*``, ``dblink``,
   ``query_to_xml``, …; ``REFUSED``). This layer is what says why, in one line.

A statement timeout (``SET LOCAL``; the statement cannot change it, set_config
being refused) ends a runaway query; Ctrl-C cancels it on the server (psycopg
sends the cancel request) and the transaction is always rolled back.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import AgentledgerError
from ..redact import scrub
from .connect import CentralError, connect, describe

__all__ = ["CentralError", "DEFAULT_TIMEOUT", "QueryError", "Reader", "check_statement", "query", "reading"]

DEFAULT_TIMEOUT = 60.0  # seconds a statement may run (query --central --timeout)
READER_ROLE = "agentledger_reader"
STATEMENTS = ("select", "with", "values", "table", "explain", "show")
# Functions that act outside the read-only transaction (files, other sessions, the
# server, replication, advisory locks, large objects), change the session (set_config:
# the role), or run SQL given as text (query_to_xml and kin).
REFUSED = re.compile(
    r"set_config|lo_\w+|dblink\w*|query_to_xml\w*|cursor_to_xml\w*|pg_(?:"
    r"read_\w+|ls_\w+|stat_file|file_\w+|write_\w+|terminate_backend|cancel_backend|reload_conf|rotate_logfile\w*"
    r"|switch_wal|switch_xlog|create_\w+|drop_\w+|replication_\w+|logical_\w+|copy_\w+|advisory_\w+"
    r"|try_advisory_\w+|stat_reset\w*|notify|promote|log_backend_memory_contexts|import_system_collations"
    r"|backup_\w+|start_backup|stop_backup|wal_replay_\w+|sleep_until|export_snapshot)|nextval|setval")

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
        try:
            cur = self.pg.execute(sql, params, prepare=True)
        except psycopg.Error as exc:
            why = scrub(describe(exc), self.url)
            if isinstance(exc, psycopg.errors.QueryCanceled) and "timeout" in why:
                why += " (the time limit: --timeout SECONDS, 0 for none)"
            raise QueryError(why) from None
        if self.pg.info.transaction_status != TransactionStatus.INTRANS:  # layer 1 and 4 make this unreachable
            raise QueryError("the statement ended the read-only transaction; refused")
        return cur


@contextmanager
def reading(url: str, *, label: str = "", timeout: float = DEFAULT_TIMEOUT) -> Iterator[Reader]:
    """A read session on the team ledger (see the module docstring); always rolled
    back and closed. ``timeout``: seconds a statement may run, 0 for no limit."""
    import psycopg
    from psycopg import IsolationLevel

    pg = connect(url)
    try:
        pg.isolation_level, pg.read_only = IsolationLevel.REPEATABLE_READ, True
        pg.execute("SELECT set_config('statement_timeout', %s, true), set_config('search_path', %s, true)",
                   (f"{int(timeout * 1000)}ms", "agentledger, public"))
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
