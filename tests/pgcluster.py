"""The throwaway PostgreSQL cluster (``agentledger.example.pgcluster``) and a TCP proxy
in front of it that makes the network misbehave, for the team-ledger tests."""

from __future__ import annotations

import socket

from agentledger.example.pgcluster import BIN, PASSWORD, USER, Cluster, available

__all__ = ["BIN", "Cluster", "Proxy", "available", "shut"]


def shut(*socks: socket.socket) -> None:
    """Both directions of each socket shut down (a pump's peer sees the end)."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Proxy:
    """A TCP forwarder in front of the cluster, to make the network misbehave: in
    "blackhole" mode it accepts connections and never answers (a dead route: the
    client's connect_timeout fires); in "freeze" mode the open connections stay open
    and stop moving bytes (a peer gone silent mid-transaction). Switching to
    "forward" or "blackhole" drops every open connection."""

    def __init__(self, target_port: int) -> None:
        import threading

        self.target = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.mode = "forward"
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self._spawn(self._accept)

    def _spawn(self, fn, *args) -> None:
        import threading

        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        self.threads.append(t)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            with self.lock:
                self.open.append(client)
                if self.mode == "blackhole":
                    continue
                try:
                    upstream = socket.create_connection(("127.0.0.1", self.target))
                except OSError:
                    client.close()
                    continue
                self.open.append(upstream)
            self._spawn(self._pump, client, upstream)
            self._spawn(self._pump, upstream, client)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        import time

        try:
            while True:
                while self.mode == "freeze":
                    time.sleep(0.02)
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            shut(src, dst)

    def _drop(self) -> None:
        with self.lock:
            for s in self.open:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            self.open.clear()

    def set(self, mode: str) -> None:
        if mode != "freeze":
            self._drop()
        self.mode = mode

    def url(self, db: str, **params: str) -> str:
        query = "&".join(f"{k}={v}" for k, v in params.items())
        return f"postgresql://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{db}" + (f"?{query}" if query else "")

    def close(self) -> None:
        self.listener.close()
        self._drop()
        for t in self.threads:
            t.join(5)
