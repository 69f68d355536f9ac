"""The team ledger from the command line: ``ship`` (one pass, for cron, CI runners or
the end of a close-task hook), ``central init``, ``central status`` and ``central
new-id``. ``query --central`` lives with ``query`` (``read.py``) and borrows
``destination`` from here.
Everything here imports psycopg only through ``central/``, and only when called.
"""

from __future__ import annotations

import argparse
import json
import sys

from .common import EXIT_FAIL, EXIT_OK, Failure, UsageError, load_config


def add_commands(cmd) -> None:
    p = cmd("ship", "Send new events to the team ledger(s) in [[ship]] (or --central URL), once.")
    p.add_argument("--central", metavar="URL", help="a PostgreSQL URL instead of the configured [[ship]] entries")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_ship)

    p = cmd("central", "The team ledger (PostgreSQL): create or upgrade its schema, list the ledgers it holds, or"
                       " give this ledger a new id when another ledger has the same one.")
    p.add_argument("action", choices=("init", "status", "new-id"),
                   help="init: create/upgrade the schema; status: its ledgers; new-id: a new id for this ledger"
                        " (its events the server holds under the old id stay the old ledger's)")
    p.add_argument("url", nargs="?", help="PostgreSQL URL (default: the one [[ship]] entry)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_central)


def destination(args: argparse.Namespace, url: str | None):
    """The one team ledger a command talks to: ``url``, else the only [[ship]] entry."""
    from ..config import ShipDestination

    if url:
        if not url.startswith(("postgresql://", "postgres://")):
            raise UsageError(f"not a PostgreSQL URL: {url!r} (postgresql://user@host/db)")
        return ShipDestination(url)
    ship = load_config(args).ship
    if len(ship) != 1:
        raise UsageError("name the team ledger: a postgresql:// URL, or exactly one [[ship]] entry in the config"
                         + (f" (there are {len(ship)}: {', '.join(d.label for d in ship)})" if ship else ""))
    return ship[0]


def cmd_ship(args: argparse.Namespace) -> int:
    from ..central import ship
    from ..central.connect import CentralError
    from ..store.db import connect

    cfg = load_config(args)
    destinations = [destination(args, args.central)] if args.central else list(cfg.ship)
    if not destinations:
        raise UsageError("nothing to ship to: add [[ship]] url = \"postgresql://…\" to the config, or pass --central URL")
    if not cfg.store.path.is_file():
        raise Failure(f"no ledger at {cfg.store.path}; run `agentledger ingest` first")
    local = connect(cfg.store.path, create=False)
    try:
        results = ship.ship_all(local, destinations, name=cfg.ledger.name)
    finally:
        local.close()
    failed = [r for r in results if isinstance(r, CentralError)]
    done = [r for r in results if not isinstance(r, CentralError)]
    if args.json:
        print(json.dumps([vars(r) for r in done], indent=2))
    elif not getattr(args, "quiet", False):
        for r in done:
            print(f"ship: {r.destination}: {r.sent} events sent ({r.new} new) in {r.batches} batch(es),"
                  f" cursor {r.cursor}, {r.behind} behind")
    for exc in failed:
        print(f"agentledger: error: {exc}", file=sys.stderr)
    return EXIT_FAIL if failed else EXIT_OK


def cmd_central(args: argparse.Namespace) -> int:
    from ..central import connect, schema

    dest = destination(args, args.url)
    if args.action == "new-id":
        return _new_id(args, dest)
    try:
        with connect.session(dest.url, label=dest.label) as pg:
            if args.action == "init":
                applied = schema.migrate(pg)
                version = schema.current_version(pg)
                result = {"destination": dest.label, "applied": applied, "version": version[0] if version else 0}
                text = (f"central: {dest.label}: schema version {result['version']}"
                        f" ({applied} migration(s) applied)")
            else:
                if schema.current_version(pg) is None:
                    raise Failure(f"{dest.label}: no team ledger here yet (agentledger central init, or ship)")
                cur = pg.execute("SELECT name, host, ledger_id::text, last_seq, last_shipped_at::text"
                                 " FROM agentledger.ledgers ORDER BY name, host")
                rows = [dict(zip(("name", "host", "ledger_id", "last_seq", "last_shipped_at"), r)) for r in cur]
                result = {"destination": dest.label, "ledgers": rows}
                text = "\n".join([f"central: {dest.label}: {len(rows)} ledger(s)"] + [
                    f"  {r['name']:<20} {r['host']:<20} {r['ledger_id']}  seq {r['last_seq']:<10}"
                    f" {r['last_shipped_at']}"
                    for r in rows])
    except connect.CentralError as exc:
        raise Failure(str(exc)) from None
    print(json.dumps(result, indent=2) if args.json else text)
    return EXIT_OK


def _new_id(args: argparse.Namespace, dest) -> int:
    from ..central import connect, schema
    from ..central.identity import new_identity
    from ..store.db import connect as open_ledger
    from ..store.db import write_transaction

    cfg = load_config(args)
    if not cfg.store.path.is_file():
        raise Failure(f"no ledger at {cfg.store.path}")
    local = open_ledger(cfg.store.path, create=False)
    try:
        with connect.session(dest.url, label=dest.label, read_only=True) as pg:
            if schema.current_version(pg) is None:
                raise Failure(f"{dest.label}: no team ledger here yet: nothing to keep, and no need for a new id")
            with write_transaction(local):
                done = new_identity(local, pg)
    except connect.CentralError as exc:
        raise Failure(str(exc)) from None
    finally:
        local.close()
    if args.json:
        print(json.dumps({"destination": dest.label, **vars(done)}, indent=2))
    else:
        print(f"central: this ledger is now {done.new} (was {done.old}); {done.kept} of its events are on"
              f" {dest.label} under the old id and stay that ledger's; `agentledger ship` sends the rest")
    return EXIT_OK
