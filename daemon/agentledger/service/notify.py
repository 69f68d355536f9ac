"""The systemd notification protocol (sd_notify), without libsystemd.

A datagram of newline-separated ``KEY=VALUE`` lines to ``$NOTIFY_SOCKET`` (a
path, or ``@name`` for the abstract namespace). No socket: every call is a
no-op, so the daemon runs the same under systemd and in a terminal.
"""

from __future__ import annotations

import os
import socket
import time


class Notifier:
    def __init__(self, address: str | None = None):
        self.address = address if address is not None else os.environ.get("NOTIFY_SOCKET", "")
        usec = os.environ.get("WATCHDOG_USEC", "")
        pid = os.environ.get("WATCHDOG_PID", "")
        ours = not pid or pid == str(os.getpid())
        self.watchdog_interval = int(usec) / 2e6 if usec.isdigit() and ours else None  # ping at half
        self._last_ping = 0.0

    def send(self, *fields: str) -> bool:
        if not self.address:
            return False
        target = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                # Never block: a receiver that stopped reading (a full datagram
                # queue) must not stall the main loop. A dropped ping is harmless.
                sock.sendto("\n".join(fields).encode("utf-8"), socket.MSG_DONTWAIT, target)
            return True
        except OSError:
            return False  # systemd gone, queue full, or socket unreachable: never fatal

    def watchdog(self) -> None:
        """Ping if half the watchdog interval has passed (called from the main loop)."""
        now = time.monotonic()
        if self.watchdog_interval and now - self._last_ping >= self.watchdog_interval:
            self._last_ping = now
            self.send("WATCHDOG=1")
