"""The service's signals as flags: SIGTERM and SIGINT ask it to stop, SIGHUP to reload.

A handler runs in the main thread between two of its bytecodes, whatever that thread
holds at the moment (a queue's lock, a logger's, an ``Event``'s own): a handler that
waits for a lock (``Queue.put``, ``Event.set``, a log line) can wait for one the code it
interrupted will never release, and the service hangs for good. So each handler sets a
flag and returns; the main loop acts on the flags at its next step.
"""

from __future__ import annotations

import signal
import time


class SignalFlag:
    """Set by one attribute store, no lock (see above); waiting on it polls. watchfiles
    takes it as its stop event."""

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def clear(self) -> None:
        self._set = False

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self._set and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.05))
        return self._set


class Signals:
    def __init__(self, log) -> None:
        self.log = log
        self.stop = SignalFlag()  # SIGTERM, SIGINT
        self.reload = SignalFlag()  # SIGHUP: the main loop makes it a "reload" request
        self.stop_signal: int | None = None
        self._stop_logged = False

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, lambda *_: self.reload.set())

    def _on_stop(self, signum, _frame) -> None:
        self.stop_signal = signum
        self.stop.set()

    def stopping(self) -> bool:
        """Whether a stop was asked; logged the first time the main thread asks."""
        if not self.stop.is_set():
            return False
        if not self._stop_logged:
            self._stop_logged = True
            name = signal.Signals(self.stop_signal).name if self.stop_signal is not None else None
            self.log.info("stop requested", signal=name)
        return True
