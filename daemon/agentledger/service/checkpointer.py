"""WAL checkpoints on a thread of their own, so that no commit pays for one.

SQLite's automatic checkpoint runs inside the commit that takes the WAL past
``wal_autocheckpoint`` pages (16 MiB with our pages): that commit copies every
page in the log into the database file and fsyncs it. In the daemon a
transcript line that rescores a hundred iterations writes 1-2 MB of WAL, so
every tenth one or so stalled 150-350 ms on a checkpoint (measured), and those
were the slowest notifications. Here a second connection runs a PASSIVE
checkpoint about once a second whenever another connection has committed
since its last look (``PRAGMA data_version``), so the log never gets near the
automatic threshold. PASSIVE never waits for readers or writers; what it cannot
copy now it copies next time. The automatic checkpoint stays on as the backstop
(if this thread stopped, commits would checkpoint as before).
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import structlog

log = structlog.get_logger("agentledger.daemon")


class Checkpointer:
    def __init__(self, path: Path, interval: float = 1.0) -> None:
        self.path = path
        self.interval = interval
        self.checkpoints = 0  # PASSIVE checkpoints that found frames to copy
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agentledger-checkpoint", daemon=True)

    def start(self) -> Checkpointer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None)
        except sqlite3.Error as exc:
            log.warning("checkpoint thread not started; commits checkpoint instead", error=str(exc))
            return
        try:
            seen = failed = None
            while not self._stop.wait(self.interval):
                try:
                    version = conn.execute("PRAGMA data_version").fetchone()[0]
                    if version == seen:
                        continue
                    _busy, frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    seen, failed = version, None
                    self.checkpoints += frames > 0 and copied > 0
                except sqlite3.Error as exc:  # e.g. a full disk: the next round tries again
                    if str(exc) != failed:  # said once, not every second
                        log.warning("background checkpoint failed; will retry", error=str(exc))
                    failed = str(exc)
        finally:
            conn.close()
