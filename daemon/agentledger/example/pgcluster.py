"""A throwaway PostgreSQL 15 cluster for the team-ledger tests, the demo's team part
and the shipping benchmark: Debian's server binaries, a data directory in a fresh
temp directory, a unix socket there and 127.0.0.1 on a free port, password
authentication (scram-sha-256).

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

BIN = Path("/usr/lib/postgresql/15/bin")
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
        # named after this process, so a leftover check can tell a live run's cluster
        # (another test run beside this one) from a killed one's
        self.dir = Path(tempfile.mkdtemp(prefix=f"agentledger-pg-{os.getpid()}-"))
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
