"""The team ledger from the command line: ``ship`` (one pass, for cron, CI runners or
the end of a close-task hook), ``central init``, ``central status``, ``central
add-machine`` / ``add-reader`` (the admin's) and ``central new-id``. ``query --central`` lives with ``query`` (``read.py``) and borrows
``destination`` from here.
Everything here imports psycopg only through ``central/``, and only when called.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..redact import scrub
from ..terminal import shown
from .common import EXIT_FAIL, EXIT_OK, Failure, UsageError, load_config


def add_commands(cmd) -> None:
    p = cmd("ship", "Send new events to the team ledger(s) in [[ship]] (or --central URL), once.")
    p.add_argument("--central", metavar="URL", help="a PostgreSQL URL instead of the configured [[ship]] entries")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_ship)

    p = cmd("central", "The team ledger (PostgreSQL): create or upgrade its schema, list its machines and ledgers,"
                       " add a machine's or a reader's role, or give this ledger a new id when another ledger has"
                       " the same one.")
    p.add_argument("action", choices=("init", "status", "add-machine", "add-reader", "new-id"),
                   help="init: create/upgrade the schema (the admin); status: its machines and ledgers;"
                        " add-machine NAME / add-reader NAME: a login role that may ship only its own ledgers /"
                        " only read (the admin; prints the ~/.pgpass line it needs); new-id: a new id for this"
                        " ledger (its events the server holds under the old id stay the old ledger's)")
    p.add_argument("words", nargs="*", metavar="[URL] [NAME]",
                   help="PostgreSQL URL (default: the one [[ship]] entry); NAME for add-machine and add-reader")
    p.add_argument("--ledger", action="append", metavar="ID",
                   help="add-machine: bind this ledger id to the machine (repeatable; default: the unclaimed"
                        " ledgers that shipped under NAME)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(func=cmd_central)


def destination(args: argparse.Namespace, url: str | None):
    """The one team ledger a command talks to: ``url``, else the only [[ship]] entry."""
    from ..config import ShipDestination

    if url:
        if not url.startswith(("postgresql://", "postgres://")):
            raise UsageError(f"not a PostgreSQL URL: {shown(scrub(url))!r} (postgresql://user@host/db)")
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


def _words(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """(URL, NAME) from the positional words: a URL is the one that looks like one."""
    urls = [w for w in args.words if w.startswith(("postgresql://", "postgres://"))]
    names = [w for w in args.words if w not in urls]
    wants_name = args.action in ("add-machine", "add-reader")
    if len(urls) > 1 or len(names) > (1 if wants_name else 0):
        raise UsageError(f"central {args.action} takes {'[URL] NAME' if wants_name else '[URL]'},"
                         f" not {shown(scrub(' '.join(args.words)))!r}")
    if wants_name and not names:
        raise UsageError(f"central {args.action} needs the NAME of the role to make")
    if args.ledger and args.action != "add-machine":
        raise UsageError("--ledger goes with add-machine")
    return (urls[0] if urls else None), (names[0] if names else None)


def cmd_central(args: argparse.Namespace) -> int:
    from ..central import connect, machines, read, schema

    url, name = _words(args)
    dest = destination(args, url)
    if args.action == "new-id":
        return _new_id(args, dest)
    try:
        if args.action == "status":
            with read.reading(dest.url, label=dest.label, door=False) as pg:
                if schema.current_version(pg) is None:
                    raise Failure(f"{dest.label}: no team ledger here yet (agentledger central init, or ship)")
                result, text = _status(pg, dest.label)
        else:
            with connect.session(dest.url, label=dest.label) as pg:
                applied = schema.migrate(pg)
                version = schema.current_version(pg)
                if args.action == "init":
                    result = {"destination": dest.label, "applied": applied, "version": version[0] if version else 0}
                    text = (f"central: {dest.label}: schema version {result['version']}"
                            f" ({applied} migration(s) applied)")
                else:
                    kind = args.action.removeprefix("add-")
                    added = machines.add(pg, name, kind, ledgers=args.ledger)
                    result, text = vars(added), added.pgpass
                    bound = f"; bound to ledger(s) {', '.join(added.ledgers)}" if added.ledgers else ""
                    print(f"central: {kind} role {added.role} made on {dest.label}{bound}.\n"
                          f"  On that {kind}: add the line printed below to ~/.pgpass (chmod 600) and use\n"
                          f"  url = \"{added.url}\"" + (" in its [[ship]] entry" if kind == "machine" else
                                                      " with query --central / report --central"),
                          file=sys.stderr)
    except (connect.CentralError, read.QueryError) as exc:
        raise Failure(str(exc)) from None
    print(json.dumps(result, indent=2) if args.json else text)
    return EXIT_OK


def _status(pg, label: str) -> tuple[dict, str]:
    """The machines and readers (roles, kinds, ledgers), then the ledgers with their machine."""
    from ..central import machines

    roles = machines.listing(pg) if pg.execute(
        "SELECT to_regclass('agentledger.machines') IS NOT NULL").fetchone()[0] else []
    claims = "agentledger.ledger_roles" if roles or pg.execute(
        "SELECT to_regclass('agentledger.ledger_roles') IS NOT NULL").fetchone()[0] else None
    cur = pg.execute("SELECT l.name, l.host, l.ledger_id::text, l.last_seq, l.last_shipped_at::text, "
                     + ("coalesce(r.role::text, '')" if claims else "''")
                     + " FROM agentledger.ledgers l"
                     + (" LEFT JOIN agentledger.ledger_roles r USING (ledger_id)" if claims else "")
                     + " ORDER BY l.name, l.host")
    rows = [dict(zip(("name", "host", "ledger_id", "last_seq", "last_shipped_at", "machine"), r)) for r in cur]
    lines = [f"central: {label}: {sum(r['kind'] == 'machine' for r in roles)} machine role(s),"
             f" {sum(r['kind'] == 'reader' for r in roles)} reader role(s), {len(rows)} ledger(s)"]
    lines += [f"  {r['kind']:<8} {shown(r['role']):<24} {len(r['ledgers'])} ledger(s)  since {r['created_at'][:19]}"
              for r in roles]
    lines += [f"  ledger   {shown(r['name']):<20} {shown(r['host']):<20} {r['ledger_id']}  seq {r['last_seq']:<10}"
              f" {r['last_shipped_at'][:19]}  machine {shown(r['machine']) or '(unclaimed: shipped by the admin)'}"
              for r in rows]
    return {"destination": label, "roles": roles, "ledgers": rows}, "\n".join(lines)


def _new_id(args: argparse.Namespace, dest) -> int:
    from ..central import connect, read, schema
    from ..central.identity import new_identity
    from ..store.db import connect as open_ledger
    from ..store.db import write_transaction

    cfg = load_config(args)
    if not cfg.store.path.is_file():
        raise Failure(f"no ledger at {cfg.store.path}")
    local = open_ledger(cfg.store.path, create=False)
    try:
        with read.reading(dest.url, label=dest.label, door=False) as pg:
            if schema.current_version(pg) is None:
                raise Failure(f"{dest.label}: no team ledger here yet: nothing to keep, and no need for a new id")
            with write_transaction(local):
                done = new_identity(local, pg)
    except (connect.CentralError, read.QueryError) as exc:
        raise Failure(str(exc)) from None
    finally:
        local.close()
    if args.json:
        print(json.dumps({"destination": dest.label, **vars(done)}, indent=2))
    else:
        print(f"central: this ledger is now {done.new} (was {done.old}); {done.kept} of its events are on"
              f" {dest.label} under the old id and stay that ledger's; `agentledger ship` sends the rest")
    return EXIT_OK
