"""A throwaway PostgreSQL 15 cluster for the team-ledger tests: Debian's server
binaries, a data directory in a fresh temp directory, a unix socket there and
127.0.0.1 on a free port, password authentication (scram-sha-256).

PostgreSQL refuses to run as root; under root the server runs as the
``postgres`` user (Debian's package creates it), which is why the directory is
made with ``mkdtemp`` in the system temp directory rather than under pytest's
0700 tree. The postmaster is this process's child and gets SIGQUIT if this
process dies (PR_SET_PDEATHSIG), so a killed test run leaves no server behind.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

BIN = Path(os.environ.get("AGENTLEDGER_PG_BIN", "/usr/lib/postgresql/15/bin"))
USER = "agentledger"
PASSWORD = "s3cret-pw"


def available() -> bool:
    return (BIN / "initdb").is_file() and (BIN / "postgres").is_file()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, *, durable: bool = False) -> None:
        """``durable``: PostgreSQL's default fsync behaviour (benchmarks); tests turn
        fsync off, which changes nothing they check."""
        self.durable = durable
        self.dir = Path(tempfile.mkdtemp(prefix="agentledger-pg-"))
        self.data = self.dir / "data"
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None
        self.log = self.dir / "server.log"
        self._uid = self._gid = None
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            self._uid, self._gid = pw.pw_uid, pw.pw_gid
            os.chown(self.dir, self._uid, self._gid)
        pwfile = self.dir / "pwfile"
        pwfile.write_text(PASSWORD + "\n")
        if self._uid is not None:
            os.chown(pwfile, self._uid, self._gid)
        subprocess.run([str(BIN / "initdb"), "-D", str(self.data), "-U", USER, "--auth=scram-sha-256",
                        f"--pwfile={pwfile}", "-E", "UTF8", "--no-sync", "--locale=C"],
                       check=True, capture_output=True, preexec_fn=self._demote, timeout=120)
        pwfile.unlink()
        self.start()

    def _demote(self) -> None:
        """In the child: become the postgres user (under root), then ask for SIGQUIT
        when the parent dies (after setuid, which would clear it)."""
        if self._uid is not None:
            os.setgid(self._gid)
            os.setgroups([])
            os.setuid(self._uid)
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGQUIT)  # PR_SET_PDEATHSIG

    def start(self) -> None:
        log = self.log.open("ab")
        self.proc = subprocess.Popen(
            [str(BIN / "postgres"), "-D", str(self.data), "-k", str(self.dir), "-p", str(self.port),
             "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=60",
             *(() if self.durable else ("-c", "fsync=off", "-c", "full_page_writes=off"))],
            stdout=log, stderr=subprocess.STDOUT, preexec_fn=self._demote)
        log.close()
        deadline = time.monotonic() + 60
        while not self.accepting():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not start: {self.log.read_text()[-2000:]}")
            time.sleep(0.05)

    def accepting(self) -> bool:
        return subprocess.run([str(BIN / "pg_isready"), "-h", str(self.dir), "-p", str(self.port), "-U", USER],
                              capture_output=True).returncode == 0

    def stop(self, sig: int = signal.SIGINT) -> None:
        """SIGINT: fast shutdown (clients disconnected); SIGQUIT: immediate (a crash)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=60)
        self.proc = None

    def url(self, db: str = "postgres", *, password: str = PASSWORD, tcp: bool = False) -> str:
        if tcp:
            return f"postgresql://{USER}:{password}@127.0.0.1:{self.port}/{db}"
        return f"postgresql://{USER}:{password}@/{db}?host={self.dir}&port={self.port}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


class Proxy:
    """A TCP forwarder in front of the cluster, to make the network misbehave: in
    "blackhole" mode it accepts connections and never answers (a dead route: the
    client's connect_timeout fires), and switching modes drops every open connection."""

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

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

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
