"""Team-ledger benchmarks (issue #15). Prints figures; asserts nothing.

    python bench/bench_ship.py [--ledgers 20] [--iterations 5000] [--events-per-ledger 50000]
                               [--catch-up 1000000] [--at-once 2] [--closes 50] [--runs 30]

Starts a throwaway PostgreSQL 15 cluster (agentledger.example.pgcluster, PostgreSQL's default
settings and durability: fsync on) on this machine and, over its unix socket:

* a team: ``--ledgers`` ledgers, each a copy of one generated ledger (``--iterations``
  iterations scored under 2.1.0 and backfilled to 3.0.0) with its own id, padded to
  ``--events-per-ledger`` events with copies of its side-file events (new idempotency
  keys), shipped by one ``agentledger ship`` (the real command) each, ``--at-once`` of
  them at a time (machines ship side by side; here their clients share the server's
  cores): events/s overall;
* one machine's catch-up: one such ledger followed by copies of all its events up to
  ``--catch-up`` events (the same mix), shipped by one ``agentledger ship``: events/s,
  MB/s, and the process's RSS sampled through the pass; once as the database's owner
  (the admin) and once as a machine role of its own (``central add-machine``: what the
  server checks for every batch);
* the catch-up's floor: a script that reads the same events from the same ledger (the
  shipper's query, 5,000 a batch) and copies them as the shipper does (binary ``COPY``, the
  shipper's columns and types, two connections at once, a transaction a batch) into a table with
  the events' columns and only their primary key, its payloads compressed as the events
  table's are (lz4): no trigger, no other index, no projection. It is what storing these
  rows costs this server; the shipper cannot beat it;
* the team query: "latest scores for the team" (per ledger: iterations, mean score,
  each band's count) and "the 50 newest scores across the team" on the result
  (20 ledgers x 5,000 iterations = 100,000 iterations, 1,000,000 events by default):
  p50/p95 over ``--runs`` (after one warm-up run);
* lag: ``agentledger run`` with [[ship]] on a fresh generated log; an agent closes
  ``--closes`` iterations one at a time; time from the sidecar appearing (the
  score is committed) to its score.computed event being visible on the server:
  p50/p95.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _common import preamble, pct, run
from agentledger.example import pgcluster, synth

CLI = [sys.executable, "-m", "agentledger"]


def base_ledger(root: Path, iterations: int) -> tuple[Path, synth.Generated]:
    gen = synth.generate(root / "gen", iterations)
    db = root / "base.sqlite"
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db), "-q"]
    subprocess.run([*CLI, "ingest", *args], check=True)
    subprocess.run([*CLI, "backfill", *args, "--rubric", "3.0.0"], check=True, capture_output=True)
    return db, gen


SIDE_FILES = "type IN ('hook_outcomes.recorded', 'labels.recorded', 'artifact.recorded')"


def copy_of(base: Path, dst: Path, events: int) -> int:
    """``base`` with a new ledger id, padded to ``events`` with copies of its side-file events."""
    shutil.copy(base, dst)
    with sqlite3.connect(dst) as c:
        c.execute("UPDATE ledger_identity SET ledger_id = ?", (str(uuid.uuid4()),))
    return pad(dst, events, SIDE_FILES)


def pad(db: Path, events: int, which: str) -> int:
    """Copies (new idempotency keys) of the ledger's events that match ``which``, in
    order, until it holds ``events``."""
    with sqlite3.connect(db) as c:
        have = c.execute("SELECT count(*) FROM events").fetchone()[0]
        last = c.execute("SELECT max(seq) FROM events").fetchone()[0]
        while have < events:
            c.execute(
                "INSERT INTO events (stream, type, schema_version, idempotency_key, content_hash, occurred_at,"
                " recorded_at, source, source_path, source_position, payload)"
                " SELECT stream, type, schema_version, lower(hex(randomblob(16))), content_hash, occurred_at,"
                f" recorded_at, source, source_path, source_position, payload FROM events"
                f" WHERE seq <= ? AND {which} ORDER BY seq LIMIT ?", (last, events - have))
            have = c.execute("SELECT count(*) FROM events").fetchone()[0]
        return have


def payload_mb(ledgers: list[Path]) -> float:
    return sum(sqlite3.connect(p).execute("SELECT sum(length(payload)) FROM events").fetchone()[0]
               for p in ledgers) / 1e6


SHIP_FLOOR = r"""
import queue, sqlite3, sys, uuid
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from datetime import datetime, timezone
import psycopg
from agentledger.central.ship import COLUMNS as cols, COPY_TYPES as types, LOCAL_BATCH, raw_bytes  # the shipper's own
db, url = sys.argv[1:]
with psycopg.connect(url, autocommit=True) as pg:
    pg.execute("CREATE TABLE floor_events (ledger_id uuid, seq bigint, origin uuid, origin_seq bigint,"
               " idempotency_key text, stream text, type text, schema_version int, content_hash text,"
               " occurred_at text, recorded_at timestamptz, source text, source_path text, source_position text,"
               " payload jsonb COMPRESSION lz4, payload_text text, PRIMARY KEY (ledger_id, seq))")
local = sqlite3.connect(db)
lid, free = uuid.uuid4().bytes, queue.Queue()
for _ in range(2):
    free.put(pg := psycopg.connect(url))
    raw_bytes(pg)
def send(rows):
    pg = free.get()
    try:
        with pg.transaction(), pg.cursor() as cur, \
                cur.copy(f"COPY floor_events ({cols}) FROM STDIN (FORMAT BINARY)") as cp:
            cp.set_types(types)
            for seq, stream, type_, version, key, hash_, occurred, recorded, source, path, position, payload in rows:
                at = datetime.fromisoformat(recorded)
                cp.write_row((lid, seq, lid, None, key, stream, type_, version, hash_, occurred,
                              at if at.tzinfo else at.replace(tzinfo=timezone.utc), source, path, position,
                              b"\x01" + payload, None))
    finally:
        free.put(pg)
after, inflight = 0, []
with ThreadPoolExecutor(2) as pool:
    while rows := local.execute(LOCAL_BATCH, (after, 5000)).fetchall():
        after = rows[-1][0]
        if len(inflight) == 2:  # a batch in flight on each connection: the next waits for one
            done, pending = wait(inflight, return_when=FIRST_COMPLETED)
            for f in done:
                f.result()  # a batch that failed fails the floor
            inflight = list(pending)
        inflight.append(pool.submit(send, rows))
    for f in inflight:
        f.result()
while not free.empty():
    free.get().close()
"""


def catch_up(cluster: pgcluster.Cluster, base: Path, root: Path, args) -> None:
    """One ledger's whole backlog in one ``agentledger ship``, its RSS sampled as it goes:
    as the admin, then as a machine role (into a database of its own)."""
    db = root / "catch-up.sqlite"
    copy_of(base, db, args.events_per_ledger)  # a team ledger (below), then copies of it: the same mix
    total = pad(db, args.catch_up, "1")
    mb = payload_mb([db])
    rates: list[float] = []  # events/s of each catch-up
    for who in ("the admin", "a machine role"):
        url, env = cluster.create_database("catchup_" + who.split()[-1]), {}
        if who != "the admin":
            subprocess.run([*CLI, "central", "init", url, "-q"], check=True, capture_output=True)
            line = subprocess.run([*CLI, "central", "add-machine", url, "bench_machine"], check=True,
                                  capture_output=True, text=True).stdout.strip()
            (root / "pgpass").write_text(line + "\n")
            (root / "pgpass").chmod(0o600)
            host, port, dbname, role, _ = line.split(":")
            url, env = f"postgresql://{role}@/{dbname}?host={host}&port={port}", {"PGPASSFILE": str(root / "pgpass")}
        os.sync()  # the ledger's pages on disk, as a machine's would be, not being written back meanwhile
        samples: list = []  # (seconds, RSS MiB)
        wall, peak = run([*CLI, "ship", "--central", url, "--db", str(db), "-q"], rss_samples=samples, env=env)
        at = {q: min(samples, key=lambda s: abs(s[0] - wall * q / 4))[1] for q in (1, 2, 3, 4)}
        print(f"catch-up as {who}: one ledger of {total:,} events ({mb:,.0f} MB of payloads) in one ship:"
              f" {wall:.1f} s = {total / wall:,.0f} events/s, {mb / wall:,.1f} MB/s; RSS at 1/4, 1/2, 3/4 and the"
              f" end of the pass: {', '.join(f'{v:.0f}' for v in at.values())} MB, peak {peak / 1024:.0f} MB")
        with sqlite3.connect(db) as c:
            c.execute("DELETE FROM ship_cursors")
        rates.append(total / wall)
    os.sync()
    wall, _ = run([sys.executable, "-c", SHIP_FLOOR, str(db), cluster.create_database("catchup_floor")])
    print(f"catch-up floor (the same rows copied the same way into a table with only their primary key):"
          f" {wall:.1f} s = {total / wall:,.0f} events/s; the shipper at"
          f" {', '.join(f'{r / (total / wall):.2f}x' for r in rates)} of it")
    db.unlink()


def team_and_query(cluster: pgcluster.Cluster, base: Path, root: Path, args) -> None:
    from concurrent.futures import ThreadPoolExecutor

    import psycopg

    ledgers = [root / f"ledger-{i:02d}.sqlite" for i in range(args.ledgers)]
    total = sum(copy_of(base, p, args.events_per_ledger) for p in ledgers)
    mb = payload_mb(ledgers)
    print(f"team: {args.ledgers} ledgers, {total:,} events, {mb:,.0f} MB of payloads ({mb * 1e6 / total:,.0f} bytes"
          f" an event)")
    url = cluster.create_database("bench")
    os.sync()
    t = time.perf_counter()
    with ThreadPoolExecutor(args.at_once) as pool:
        peak = max(rss for _, rss in pool.map(
            lambda p: run([*CLI, "ship", "--central", url, "--db", str(p), "-q"]), ledgers))
    wall = time.perf_counter() - t
    print(f"team: {total:,} events from {args.ledgers} ledgers, {args.at_once} ship processes at a time, in"
          f" {wall:.1f} s = {total / wall:,.0f} events/s, {mb / wall:,.1f} MB/s; peak RSS of one ship process"
          f" {peak / 1024:.0f} MB")
    with psycopg.connect(url) as pg:
        pg.execute("SET search_path = agentledger")
        pg.execute("ANALYZE")
        n_events, n_its, size = pg.execute(
            "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM score_latest),"
            " pg_database_size(current_database())").fetchone()
        print(f"central database: {size / 2**20:,.0f} MiB for {n_events:,} events"
              f" ({size / n_events:,.0f} bytes an event, indexes and projections included)")
        queries = {
            "latest scores for the team (per ledger: iterations, mean, bands)":
                "SELECT ledger, host, count(*), avg(value), count(*) FILTER (WHERE band = 'excellent'),"
                " count(*) FILTER (WHERE band = 'good'), count(*) FILTER (WHERE band = 'fair'),"
                " count(*) FILTER (WHERE band = 'poor') FROM latest_scores GROUP BY ledger, host",
            "the 50 newest scores across the team":
                "SELECT * FROM latest_scores ORDER BY scored_at DESC LIMIT 50",
        }
        # the alternative to projection tables kept by each batch: a materialised view
        # refreshed after each batch; one refresh is what each batch would then add
        pg.execute("CREATE MATERIALIZED VIEW mv_latest AS SELECT DISTINCT ON (ledger_id, source,"
                   " (payload->>'iteration')::int) ledger_id, source, (payload->>'iteration')::int AS iteration,"
                   " payload->>'rubric_version' AS rubric_version, (payload->>'value')::float8 AS value,"
                   " payload->>'band' AS band, recorded_at, seq FROM events WHERE type = 'score.computed'"
                   " ORDER BY ledger_id, source, (payload->>'iteration')::int, seq DESC")
        t = time.perf_counter()
        pg.execute("REFRESH MATERIALIZED VIEW mv_latest")
        print(f"a materialised latest-scores view instead of the projection table: one REFRESH at"
              f" {n_events:,} events takes {time.perf_counter() - t:.1f} s (it would follow every batch)")
        pg.execute("DROP MATERIALIZED VIEW mv_latest")
        for name, sql in queries.items():
            pg.execute(sql).fetchall()
            times = []
            for _ in range(args.runs):
                t = time.perf_counter()
                pg.execute(sql).fetchall()
                times.append((time.perf_counter() - t) * 1000)
            print(f"query at {n_events:,} events, {n_its:,} iterations: {name}: p50 {pct(times, 50):.1f} ms,"
                  f" p95 {pct(times, 95):.1f} ms")


def lag(cluster: pgcluster.Cluster, root: Path, args) -> None:
    import psycopg

    url = cluster.create_database("lag")
    gen = synth.generate(root / "lag" / "gen", 200)
    db = root / "lag" / "ledger.sqlite"
    cfg = root / "lag" / "agentledger.toml"
    cfg.write_text(f'[store]\npath = "{db}"\n[[ship]]\nurl = "{url}"\n'
                   f'[[iteration_logs]]\npath = "{gen.log}"\nrepo = "{gen.repo}"\n')
    proc = subprocess.Popen([*CLI, "run", "--config", str(cfg), "--log-format", "json"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lags = []
    try:
        with psycopg.connect(url, autocommit=True) as pg:
            def visible(n: int) -> bool:
                try:
                    return pg.execute("SELECT 1 FROM agentledger.events WHERE type = 'score.computed'"
                                      " AND (payload->>'iteration')::int = %s LIMIT 1", (n,)).fetchone() is not None
                except psycopg.errors.UndefinedTable:
                    return False

            deadline = time.monotonic() + 300
            while not visible(200):  # the initial backlog has arrived
                assert time.monotonic() < deadline and proc.poll() is None
                time.sleep(0.05)
            for n in range(201, 201 + args.closes):
                synth.add_iteration(gen, n)
                sidecar = gen.log / f"iter-{n}.score.yaml"
                while not sidecar.exists():
                    time.sleep(0.002)
                t = time.perf_counter()
                while not visible(n):
                    time.sleep(0.005)
                lags.append((time.perf_counter() - t) * 1000)
    finally:
        proc.terminate()
        proc.wait(30)
    print(f"lag from a committed score to the server (daemon, {args.closes} closes): p50 {pct(lags, 50):.0f} ms,"
          f" p95 {pct(lags, 95):.0f} ms, max {max(lags):.0f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ledgers", type=int, default=20)
    ap.add_argument("--iterations", type=int, default=5000)
    ap.add_argument("--events-per-ledger", type=int, default=50_000)
    ap.add_argument("--catch-up", type=int, default=1_000_000)
    ap.add_argument("--at-once", type=int, default=2)
    ap.add_argument("--closes", type=int, default=50)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--skip", choices=("catch-up", "team", "lag"), action="append", default=[])
    args = ap.parse_args()
    print(preamble(), flush=True)
    if not pgcluster.available():
        raise SystemExit(f"needs PostgreSQL 15 server binaries in {pgcluster.BIN}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up (cluster, temp dir) when stopped
    root = Path(tempfile.mkdtemp(prefix="agentledger-bench-ship-"))
    cluster = pgcluster.Cluster(durable=True)
    try:
        print(f"PostgreSQL {cluster.dir} (fsync on), {os.cpu_count()} cores")
        if {"catch-up", "team"} - set(args.skip):
            t = time.perf_counter()
            base, _ = base_ledger(root, args.iterations)
            print(f"setup: a generated ledger of {args.iterations:,} iterations in {time.perf_counter() - t:.0f} s")
            if "catch-up" not in args.skip:
                catch_up(cluster, base, root, args)
            if "team" not in args.skip:
                team_and_query(cluster, base, root, args)
        if "lag" not in args.skip:
            lag(cluster, root, args)
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
