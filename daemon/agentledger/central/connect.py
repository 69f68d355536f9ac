"""Connections to the team ledger, and what their failures mean to a person.

Credentials come from the URL, the ``PG*`` environment variables or a password
file (libpq reads those itself); they are never printed: every message names the
server by its URL without the password, and whatever libpq says is scrubbed of the
URL's password before it is shown (libpq repeats a malformed URL whole, or quotes a
piece of it: ``redact.scrub``). Reads go through ``read.reading``; ``session``
is for the admin's commands that change the schema or its roles.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import AgentledgerError
from ..redact import scrub, strip_password

CONNECT_TIMEOUT = 10  # seconds, unless the URL says otherwise
# Over TCP, a peer that vanished mid-transaction (a dead route, a dropped NAT entry) would
# otherwise hold the shipping thread until the kernel gives up, hours later: keepalive
# probes after 30 s of silence, and data unacknowledged for 60 s ends the connection (the
# shipper then backs off and reconnects). The URL may set any of these itself.
TCP_DEFAULTS = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3,
                "tcp_user_timeout": 60_000}


class CentralError(AgentledgerError):
    """A team-ledger failure, worded for one line: the server, and what went wrong."""


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("psycopg") is not None


def connect(url: str, *, autocommit: bool = False, application: str = "agentledger"):
    """A psycopg connection, or a CentralError saying why not (unreachable, refused,
    wrong password, no such database) without the password."""
    if not available():
        raise CentralError("the team ledger needs psycopg: pip install 'agentledger[central]'")
    import psycopg

    kwargs: dict = {"autocommit": autocommit, "application_name": application}
    for name, value in {"connect_timeout": CONNECT_TIMEOUT, **TCP_DEFAULTS}.items():
        if name not in url:
            kwargs[name] = value
    try:
        return psycopg.connect(url, **kwargs)
    except psycopg.Error as exc:
        reason = describe(exc)
        if "no error details" in reason:  # libpq says no more when socket(2) itself is refused
            reason = _no_socket() or reason
        raise CentralError(scrub(f"{strip_password(url)}: {reason}", url)) from None


def _no_socket() -> str | None:
    """Why this process cannot open a TCP socket, if it cannot (a sandbox's
    RestrictAddressFamilies=: the shipped service units allow AF_UNIX only)."""
    import socket

    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.socket(family, socket.SOCK_STREAM).close()
        except OSError as exc:
            return (f"this process may not open a TCP socket ({exc.strerror}): the service unit's"
                    " RestrictAddressFamilies= allows AF_UNIX only; add the ship.conf drop-in (docs/team.md)")
    return None


@contextmanager
def session(url: str, *, label: str = "") -> Iterator:
    """A connection for one command: committed and closed at the end; any server error
    on the way becomes a CentralError naming ``label`` (default: the URL without
    password)."""
    pg = connect(url)
    import psycopg

    try:
        yield pg
        pg.commit()
    except psycopg.Error as exc:
        raise CentralError(scrub(f"{label or strip_password(url)}: {describe(exc)}", url)) from None
    finally:
        pg.close()


def describe(exc: BaseException) -> str:
    """The useful line of a psycopg error: the server's message, or libpq's reason
    ("Connection refused", "password authentication failed for user …"), without the
    hints and without repeating connection parameters."""
    lines = [t.strip() for t in str(exc).strip().splitlines() if t.strip()]
    line = next((t for t in lines if not t.startswith(("DETAIL", "HINT", "Is the server"))), type(exc).__name__)
    line = line.split("FATAL:", 1)[-1].strip()
    if "failed:" in line:  # "connection failed: connection to server at …, port 5432 failed: Connection refused"
        line = line.rsplit("failed:", 1)[-1].strip() or line
    return line
