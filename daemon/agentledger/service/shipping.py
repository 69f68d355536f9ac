"""Shipping inside ``agentledger run``: new events go to every ``[[ship]]``
destination soon after they are committed, on a thread of their own.

Why a thread: a team ledger that is slow, down or behind a dead network must
never hold up watching, scoring or the systemd watchdog. The thread has its own
SQLite connection (it reads events and writes only its cursors) and its own
server connections; the main loop only nudges it after a step that appended
events. Once a second it also compares the ledger's last seq with its cursors,
so events committed by another process (the close-task hook) follow as soon.

The server connections are closed once a destination has had nothing to send
for ``idle_seconds``: a server's connection slots are shared by the whole team,
and an idle machine should not hold any. A destination that fails is logged
once when it goes down and once when it comes back; in between it is retried
with the daemon's backoff (0.5 s doubling to 60 s) while everything else goes
on. Nothing is lost meanwhile: the cursor only moves after the server has
committed, and the server ignores what it has.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import structlog

from ..config import Config, ShipDestination
from .backoff import backoff

log = structlog.get_logger("agentledger.ship")
BATCHES_PER_TURN = 20  # then look at the stop flag and the other destinations again


@dataclass
class _State:
    dest: ShipDestination
    shipper: object | None = None
    failures: int = 0
    retry_at: float = 0.0
    down_since: float | None = None
    sent_at: float = 0.0  # when a turn last had something to send (see _close_idle)


class ShipLoop:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="agentledger-ship", daemon=True)
        self.states = [_State(d) for d in cfg.ship]

    def start(self) -> ShipLoop:
        self.thread.start()
        return self

    def nudge(self) -> None:
        self.wake.set()

    def stop(self, timeout: float = 15.0) -> None:
        """Ask the thread to finish its current batch and end; a server that hangs
        cannot hold the daemon's exit (the thread is a daemon thread)."""
        self.stopping.set()
        self.wake.set()
        self.thread.join(timeout)

    def _run(self) -> None:
        from ..central.ship import cursor_of
        from ..store.db import connect

        conn = connect(self.cfg.store.path, create=False)
        try:
            while not self.stopping.is_set():
                self.wake.wait(1.0)
                self.wake.clear()
                top = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()[0]
                for st in self.states:
                    if self.stopping.is_set():
                        break
                    if time.monotonic() < st.retry_at or cursor_of(conn, st.dest) >= top:
                        self._close_idle(st)
                        continue
                    if self._turn(conn, st):
                        self.wake.set()  # more to send: come back at once, after the others
        finally:
            for st in self.states:
                if st.shipper is not None:
                    st.shipper.close()  # type: ignore[attr-defined]
            conn.close()

    @staticmethod
    def _close_idle(st: _State) -> None:
        shipper, idle = st.shipper, time.monotonic() - st.sent_at > st.dest.idle_seconds
        if shipper is not None and idle and shipper.pgs:  # type: ignore[attr-defined]
            shipper.close()  # type: ignore[attr-defined]
            log.debug("idle: server connections closed", destination=st.dest.label)

    def _turn(self, conn, st: _State) -> bool:
        """Up to BATCHES_PER_TURN batches to one destination; True when more remain."""
        from ..central.connect import CentralError
        from ..central.ship import Shipper

        st.sent_at = time.monotonic()
        try:
            if st.shipper is None:
                st.shipper = Shipper(conn, st.dest, name=self.cfg.ledger.name)
            report = st.shipper.ship(max_batches=BATCHES_PER_TURN)  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001 - nothing here may end the daemon
            st.failures += 1
            delay = backoff(st.failures)
            st.retry_at = time.monotonic() + delay
            if not isinstance(exc, CentralError):  # a bug, not the server: its traceback once
                log.error("shipping failed; will retry", destination=st.dest.label,
                          error=f"{type(exc).__name__}: {exc}", retry_in_s=delay, exc_info=st.failures == 1)
            elif st.down_since is None:
                st.down_since = time.monotonic()
                log.warning("team ledger unreachable; shipping later", destination=st.dest.label,
                            error=str(exc).removeprefix(f"{st.dest.label}: "), retry_in_s=delay)
            return False
        if st.down_since is not None:
            log.info("team ledger reachable again", destination=st.dest.label,
                     down_s=round(time.monotonic() - st.down_since, 1), failures=st.failures)
            st.down_since = None
        st.failures = 0
        if report.sent:
            log.info("shipped", destination=st.dest.label, events=report.sent, new=report.new,
                     cursor=report.cursor, behind=report.behind)
        return report.behind > 0


def start(cfg: Config) -> ShipLoop | None:
    """The shipping thread for ``cfg``'s [[ship]] destinations, or None (said once: no
    retry could help) when the [central] extra is not installed."""
    from ..central.connect import available

    if not available():
        log.error("shipping is off: [[ship]] needs the [central] extra (pip install 'agentledger[central]')",
                  destinations=[d.label for d in cfg.ship])
        return None
    return ShipLoop(cfg).start()
