"""``agentledger run``: the long-lived service.

How it runs, in order:

1. On a first start, scan every source fully (as ``ingest --once``); systemd's
   start timeout is extended while that scan runs. Then start the watches, scan
   (again) to catch what was written meanwhile or while the service was down
   (unchanged files are only stat'ed), and only then say ``READY=1``. A warm
   restart makes only the second scan.
2. Watch every source directory (``watching.py``). A change set is only a hint:
   the named files are re-stat'ed and re-read by the same code as a scan, and
   our own temp files and sidecars are filtered out so writes do not echo.
3. Between change sets (at least every 100 ms) the main loop pings the
   watchdog (so a stuck loop gets the service restarted) and runs what the
   scheduler asked for: a full reconcile scan (the backstop for missed
   notifications, default every 300 s), a trunk re-check (a commit landing
   or a revert changes ``landed``), a WAL checkpoint when idle, and
   ``PRAGMA optimize`` every few hours. All ledger work stays on this one
   thread; APScheduler's jobs only enqueue requests. Two helpers take work off
   its path: a writer thread lands the sidecars of large scoring passes (the
   next change is read meanwhile), and a checkpoint thread keeps the WAL short
   so that no commit stalls on an automatic checkpoint (``checkpointer``).
4. Signal handlers only set flags (``signals.py``), which the main loop acts on.
   SIGTERM/SIGINT: finish the current step (a long pass ends at its next batch's
   commit), stop the scheduler, ``STOPPING=1``, exit 0. SIGHUP: ``RELOADING=1``,
   reload the configuration, watch anew, and ``READY=1`` after the new watches'
   catch-up scan (a changed rubric's backfill), so ``systemctl reload`` returns when done.
"""

from __future__ import annotations

import os
import queue
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from ..config import Config
from ..errors import Stopping
from ..ledger import Ledger, Outcome
from .backoff import backoff
from .checkpointer import Checkpointer
from .hook import HookServer
from .notify import Notifier
from .runlock import AlreadyRunning, hold_run_lock, same_ledger
from .signals import Signals
from .watching import Changes, Watches

log = structlog.get_logger("agentledger.daemon")
TICK_MS = 100  # how often the main loop runs with nothing changing (the watchdog, the scheduler's requests)
# Watching anew (a watched directory appeared, went or was replaced) ends with a scan of
# everything: at most one per this many seconds, whoever moves directories in and out of
# place (what happened meanwhile waits for that scan; nothing is lost).
REWATCH_GAP_S = 2.0


def load_checked(load: Callable[[], Config]) -> Config | None:
    """A reload's configuration, or None (said in one line) when it does not load
    whole: the running configuration stays."""
    from ..ledger.rubrics import check

    try:
        cfg = load()
        check(cfg)  # an unknown rubric is refused here, before anything changes
    except Exception as exc:  # noqa: BLE001 - any configuration that does not load is refused whole
        refuse_reload(exc)
        return None
    return cfg


def refuse_reload(why: object) -> None:
    log.error(f"reload refused: {why}; keeping the running configuration")


def log_reloaded(cfg: Config) -> None:
    log.info("configuration reloaded", rubric=cfg.scoring.rubric, iteration_logs=len(cfg.iteration_logs),
             vally=len(cfg.vally), annotations=len(cfg.annotations),
             transcripts=sum(len(s.transcripts) for s in cfg.iteration_logs), ship=len(cfg.ship))


def open_reloaded(cfg: Config, moved: bool, stopping: Callable[[], bool]) -> tuple[Ledger, int] | None:
    """A reload's ledger, opened while the running one still works (a failure leaves it
    as it was), and, when the reload ``moved`` to another ledger, that ledger's run lock,
    taken before anything is opened (one daemon per ledger holds across a reload); None,
    said in one line, when another daemon holds it."""
    lock = -1
    if moved:
        try:
            lock = hold_run_lock(cfg.store.path)
        except AlreadyRunning as exc:
            refuse_reload(exc)
            return None
    new = None
    try:
        new = Ledger(cfg, background_writes=True)
        new.ctx.stopping = stopping
        new.register_sources()
    except BaseException:
        if new is not None:
            new.close()
        if moved:
            os.close(lock)
        raise
    log_reloaded(cfg)
    return new, lock


class Daemon:
    def __init__(self, load_config: Callable[[], Config], serve_hook: bool = False):
        """``serve_hook``: answer the close-task hook (``hook.py``) while running."""
        from dataclasses import replace

        self.cfg = load_config()
        # `run --rubric X` activates X once, at the start; a reload reads the configuration
        # again but never re-asserts X over a later activation (the close-task hook's, say)
        self.load_config = lambda: replace(load_config(), explicit_rubric=None)
        self.signals = Signals(log)
        self.stop = self.signals.stop
        self.requests: queue.Queue[str] = queue.Queue()
        self.notifier = Notifier()
        self.ledger: Ledger | None = None
        self.last_change = time.monotonic()
        self.failures = 0  # consecutive failed steps
        self.retry_at: float | None = None  # when to retry after a failure (a reconcile)
        self.checkpointer: Checkpointer | None = None
        self.shipping = None  # a ShipLoop when [[ship]] names team ledgers
        self.run_lock = -1  # hold_run_lock
        self.reloading = False  # a reload took effect; its READY=1 follows the new watches' first scan
        self.serve_hook = serve_hook
        self.hook: HookServer | None = None  # answers the close-task hook while the service runs

    # -- lifecycle ----------------------------------------------------------------------
    def run(self) -> int:
        self.signals.install()
        log_limits(self.cfg)
        self.ledger = self._open_ledger()
        if self.ledger is None:  # stopped while waiting for the store
            self.notifier.send("STOPPING=1")
            return 0
        try:
            self.run_lock = hold_run_lock(self.cfg.store.path)
        except AlreadyRunning as exc:  # a second daemon would score and ship everything twice
            self.ledger.close()
            log.error(str(exc))
            self.notifier.send("STOPPING=1", f"STATUS={exc}")
            return 1
        self.notifier.send("EXTEND_TIMEOUT_USEC=600000000", "STATUS=initial scan")
        self.checkpointer = Checkpointer(self.cfg.store.path).start()
        self._restart_hook()
        scheduler = None
        try:
            if self._cold():  # a warm restart leaves it all to the catch-up scan: one scan, not two
                self._guard("initial scan", self.ledger.scan_all)
            self._restart_shipping()
            scheduler = start_scheduler(self.cfg, self.requests.put)
            self._loop()
        except Stopping:  # a long pass ended at a batch's commit; the next start goes on from there
            log.info("stopped between batches of a long pass")
        finally:
            self.notifier.send("STOPPING=1", "STATUS=stopping")
            if scheduler is not None:
                scheduler.shutdown(wait=False)
            if self.shipping is not None:
                self.shipping.stop()
            self.checkpointer.stop()
            if self.hook is not None:
                self.hook.stop()
            self.ledger.close()
            os.close(self.run_lock)
            log.info("stopped")
        return 0

    def _cold(self) -> bool:
        """Whether this ledger has never read its sources (a first start): its long first
        scan then runs before the watches exist, so that their queues do not fill while it
        works. Otherwise the scan after the watches exist finds what changed while the
        service was down; the watches hear what changes during it."""
        assert self.ledger is not None
        return self.ledger.conn.execute("SELECT 1 FROM source_checkpoints LIMIT 1").fetchone() is None

    def _open_ledger(self) -> Ledger | None:
        """Open (and migrate) the store, waiting with backoff while it cannot be:
        a read-only or full file system, a missing mount, a permission not yet
        granted. Exiting instead would only trade this loop for systemd's restart
        limit. Keeps systemd's start timeout extended while it waits."""
        delay = 0.5
        while not self.signals.stopping():
            led = None
            try:
                led = Ledger(self.cfg, background_writes=True)
                led.ctx.stopping = self.signals.stopping  # a long pass ends at a batch on SIGTERM
                led.register_sources()
                if delay > 0.5:
                    log.info("recovered", step="open store")
                return led
            except Exception as exc:  # noqa: BLE001 - the service waits for its store
                if led is not None:
                    led.close()
                log.error("cannot open the ledger; will retry", path=str(self.cfg.store.path),
                          error=f"{type(exc).__name__}: {exc}", retry_in_s=delay)
                self.notifier.send(f"EXTEND_TIMEOUT_USEC={int((delay + 30) * 1e6)}",
                                   f"STATUS=waiting for the store: {exc}")
                self.stop.wait(delay)
                delay = min(delay * 2, 60.0)
        return None

    def _restart_shipping(self) -> None:
        """(Re)start the shipping thread for the configured [[ship]] destinations."""
        if self.shipping is not None:
            self.shipping.stop()
            self.shipping = None
        if self.cfg.ship:
            from .shipping import start

            self.shipping = start(self.cfg)

    def _restart_hook(self) -> None:
        """(Re)start answering the close-task hook under the configuration now in force."""
        if self.hook is not None:
            self.hook.stop()
            self.hook = None
        if self.serve_hook:
            self.hook = HookServer(self.cfg, log).start()

    # -- the loop -------------------------------------------------------------------------
    def _loop(self) -> None:
        # Between changes the loop wakes every tick (the watchdog, the scheduler's requests);
        # a wake with nothing to do costs a few microseconds.
        tick = TICK_MS
        if self.notifier.watchdog_interval:
            tick = max(50, min(tick, int(self.notifier.watchdog_interval * 1000 / 2)))
        ready = False
        rewatch_at = 0.0  # the earliest time to watch anew (REWATCH_GAP_S)
        while not self.signals.stopping():
            flat, trees = self.ledger.watch_paths()
            watches = Watches(flat, trees, debounce_ms=self.cfg.daemon.debounce_ms,
                              force_polling=self.cfg.daemon.force_polling or None)
            try:
                self.notifier.watchdog()
                # the watches exist now: catch up on what was written while none did (since the
                # initial scan began, or between a reload's watchers), then say READY
                self._guard("catch-up scan", self.ledger.scan_all)
                if self.reloading:  # `systemctl reload` returns once its backfill is on disk
                    self.reloading = False
                    self._guard("reload", self.ledger.wait_for_writes)
                    self.notifier.send("READY=1", f"STATUS={self._status()}")
                if not ready:
                    self.notifier.send("READY=1", f"STATUS={self._status()}")
                    log.info("ready", watched=watches.watched, status=self._status())
                    ready = True
                while (changes := watches.wait(tick, self.stop)) is not None:
                    self.notifier.watchdog()
                    if changes:
                        self.last_change = time.monotonic()
                        self._guard("changes", lambda c=changes: self._handle(c))
                    if self.retry_at is not None and time.monotonic() >= self.retry_at:
                        self.retry_at = None
                        self.requests.put("reconcile")
                    if self._drain():  # a reload took effect: watch its paths
                        break
                    if watches.moved and time.monotonic() >= rewatch_at:  # a watched directory came or went
                        log.info("watching anew", changed=[str(p) for p in watches.appeared()])
                        rewatch_at = time.monotonic() + REWATCH_GAP_S
                        break
                    if self.signals.stopping():
                        return
            finally:
                watches.close()

    def _guard(self, what: str, fn: Callable[[], Outcome | None]) -> None:
        """Never let one failing step end the service (a full disk, a read-only or
        locked store, a vanished directory): log it and retry with a reconcile after
        an exponential backoff (0.5 s doubling to 60 s). Nothing is lost meanwhile:
        a failed transaction moved no checkpoint, so the reconcile reads it again."""
        try:
            report = fn()
            if report is not None and self.ledger is not None:
                report.add(self.ledger.collect_writes())  # sidecars that landed since the last step
            if report is not None:
                log_outcome(what, report)
                if report.events and self.shipping is not None:
                    self.shipping.nudge()  # new events: to the team ledger now, not at the next poll
            if self.failures:
                log.info("recovered", step=what, after_failures=self.failures)
            self.failures = 0
        except Exception as exc:  # noqa: BLE001 - the daemon must outlive any one failure
            self.failures += 1
            delay = backoff(self.failures)
            self.retry_at = time.monotonic() + delay
            log.error("step failed; will retry", step=what, error=f"{type(exc).__name__}: {exc}",
                      retry_in_s=delay, failures=self.failures,
                      exc_info=self.failures == 1)  # the traceback once, not on every retry

    def _drain(self) -> bool:
        rewatch = False
        while True:
            if self.signals.reload.is_set():  # SIGHUP (see signals.py): a request like the others
                self.signals.reload.clear()
                self.requests.put("reload")
            try:
                req = self.requests.get_nowait()
            except queue.Empty:
                return rewatch
            led = self.ledger
            assert led is not None
            if req == "reconcile":
                self._guard("reconcile", led.scan_all)
            elif req == "trunk":
                self._guard("trunk", lambda: _sum(led.rescore(s) for s in self.cfg.iteration_logs
                                                  if s.path.is_dir()))
            elif req == "checkpoint" and time.monotonic() - self.last_change > 30:
                self._guard("checkpoint", lambda: led.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)") and None)
            elif req == "optimize":
                self._guard("optimize", lambda: led.conn.execute("PRAGMA optimize") and None)
            elif req == "reload":
                # systemd's reload protocol: `systemctl reload` returns once READY=1 follows
                self.notifier.send("RELOADING=1", f"MONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}",
                                   "STATUS=reloading the configuration")
                before = self.ledger
                self._guard("reload", self._reload)
                if self.ledger is not before:  # READY=1 after the new watches' catch-up scan
                    rewatch = self.reloading = True
                else:  # refused: the watches it had go on
                    self.notifier.send("READY=1", f"STATUS={self._status()}")
                continue
            self.notifier.send(f"STATUS={self._status()}")

    def _reload(self) -> None:
        cfg = load_checked(self.load_config)
        if cfg is None:
            return
        assert self.ledger is not None
        moved = not same_ledger(cfg.store.path, self.cfg.store.path)
        opened = open_reloaded(cfg, moved, self.signals.stopping)
        if opened is None:
            return
        new, lock = opened
        self.ledger.close()
        if moved:  # the old ledger is free for another daemon once this one has left it
            if self.checkpointer is not None:  # (its connection first: the lock's descriptor is the ledger's)
                self.checkpointer.stop()
            os.close(self.run_lock)
            self.run_lock = lock
            if self.checkpointer is not None:
                self.checkpointer = Checkpointer(cfg.store.path).start()
        old_ship = self.cfg.ship, self.cfg.ledger, self.cfg.store.path
        self.cfg, self.ledger = cfg, new
        if (cfg.ship, cfg.ledger, cfg.store.path) != old_ship:
            self._restart_shipping()
        self._restart_hook()  # its scan (and backfill) is the new watches' catch-up scan, before READY=1

    # -- change sets are hints --------------------------------------------------------------
    def _handle(self, changes: Changes) -> Outcome:
        assert self.ledger is not None
        return self.ledger.ingest_paths(Path(p) for _, p in changes)

    # -- telling people what is going on ---------------------------------------------------------
    def _status(self) -> str:
        led = self.ledger
        if led is None:
            return "starting"
        c = led.conn
        n = c.execute("SELECT count(*) FROM iterations").fetchone()[0]
        q = c.execute("SELECT count(*) FROM quarantine WHERE resolved_seq IS NULL").fetchone()[0]
        return f"{n} iterations, rubric {led.rubric.version}, {q} quarantined"


def start_scheduler(cfg: Config, put: Callable[[str], None]):
    """APScheduler's jobs only enqueue requests (``put``): the ledger's work stays on the
    main loop's thread."""
    from apscheduler.schedulers.background import BackgroundScheduler

    d = cfg.daemon
    sched = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1,
                                              "misfire_grace_time": None})
    for name, seconds in (("reconcile", d.reconcile_seconds), ("trunk", d.trunk_check_seconds),
                          ("checkpoint", 60), ("optimize", 4 * 3600)):
        sched.add_job(put, "interval", seconds=seconds, args=[name], id=name, replace_existing=True)
    sched.start()
    return sched


def log_outcome(what: str, r: Outcome) -> None:
    if r.events or r.scored or r.sidecars_written or r.errors:
        log.info(what, events=r.events, scored=r.scored, sidecars=r.sidecars_written,
                 sessions=r.sessions_written, quarantined=r.quarantined)
    for err in r.errors:
        log.error(what, error=err)
    for path, why in r.unwritten.items():  # once per problem: a known one failing again is not said again
        log.error("sidecar not written (listed by `agentledger quarantine`)", step=what, path=path, error=why)


def log_limits(cfg: Config) -> None:
    limits = {}
    for name in ("max_user_watches", "max_user_instances", "max_queued_events"):
        try:
            limits[name] = int(Path(f"/proc/sys/fs/inotify/{name}").read_text())
        except (OSError, ValueError):
            pass
    log.info("starting", inotify=limits, force_polling=cfg.daemon.force_polling, pid=os.getpid())


def _sum(reports) -> Outcome:
    total = Outcome()
    for r in reports:
        total.add(r)
    return total


__all__ = ["Daemon"]
