"""Reading the team ledger: one query in a read-only transaction, with the
``agentledger`` schema first on the search path (so ``latest_scores`` means the
team's), and ``:name`` parameters as in the local ``query``."""

from __future__ import annotations

import re

from .connect import CentralError, describe, session

__all__ = ["CentralError", "QueryError", "query"]

# :name, but not a ::cast and not inside a quoted string
_PARAM = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|(?<![:\w]):([A-Za-z_]\w*)")


class QueryError(RuntimeError):
    """The server refused the query (syntax, a write in a read-only transaction)."""


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


def query(url: str, sql: str, params: dict[str, str]) -> tuple[list[str], list[tuple]]:
    import psycopg

    with session(url, read_only=True) as pg:
        try:
            pg.execute("SET search_path = agentledger, public")
            cur = pg.execute(to_pyformat(sql) if params else sql, params or None)
            columns = [d.name for d in cur.description or []]
            return columns, cur.fetchall() if cur.description else []
        except psycopg.Error as exc:
            raise QueryError(describe(exc)) from None
