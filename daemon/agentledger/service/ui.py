"""``agentledger ui``: Datasette over the live ledger, read-only, on loopback.

Datasette opens a database file that may change with ``mode=ro`` (never
``immutable``, which would let SQLite cache pages the daemon is rewriting), so
the daemon keeps writing while people browse. The metadata (titles,
descriptions, units, canned queries) ships in ``schema/datasette/metadata.json``
under the database name ``ledger`` and is renamed to the file's stem here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..paths import schema_dir


def metadata_for(db: Path) -> dict:
    meta = json.loads((schema_dir() / "datasette" / "metadata.json").read_text("utf-8"))
    meta["databases"] = {db.stem: meta["databases"].pop("ledger")}
    return meta


def free_port(host: str, port: int) -> int:
    """``port`` if it can be listened on at ``host`` (0: a free one, chosen now), so the
    address is printed only once it is known to work, with the real port. Raises OSError
    (in use, not an address of this machine)."""
    import socket

    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
        return s.getsockname()[1]


def metadata_pipe(meta: dict) -> int:
    """A pipe's read end (inheritable) holding ``meta`` as JSON, for ``--metadata
    /dev/fd/N``. The whole document fits the pipe's buffer, so it is written before
    Datasette starts and read once by it."""
    import os

    data = json.dumps(meta, indent=2).encode("utf-8")
    read_end, write_end = os.pipe()
    try:
        if len(data) > 65536 or os.write(write_end, data) != len(data):
            raise OSError(f"Datasette metadata of {len(data)} bytes does not fit a pipe")
    finally:
        os.close(write_end)
    os.set_inheritable(read_end, True)
    return read_end


def command(db: Path, metadata_file: Path, host: str, port: int) -> list[str]:
    """The Datasette command line. No ``--immutable``, no ``--root``, no write plugins:
    queries (canned ones included) run on ``mode=ro`` connections. Our own template
    (the database page: views for people first) and plugin (``/-/report``) come from
    the package's files, not from anything installed into Datasette."""
    return [sys.executable, "-m", "datasette", "serve", str(db), "--host", host, "--port", str(port),
            "--metadata", str(metadata_file),
            "--template-dir", str(schema_dir() / "datasette" / "templates"),
            "--plugins-dir", str(Path(__file__).resolve().parent.parent / "views" / "datasette_plugins"),
            "--setting", "sql_time_limit_ms", "5000",
            "--setting", "max_returned_rows", "5000", "--setting", "default_page_size", "100"]


def available() -> bool:
    import importlib.util

    return importlib.util.find_spec("datasette") is not None


def loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address or name (only this machine can connect)."""
    import ipaddress

    if host.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything
