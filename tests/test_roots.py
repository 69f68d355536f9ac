"""The tree a source reads is the tree configured, and one daemon holds a ledger
whatever the path it is named by (#56): a configured directory replaced while the
ledger runs (by a link out, another directory, a link that is moved on) is refused on
every pass, nothing of the new tree is read and no sidecar lands in it; a second `run`
through a symlink or a hard link to the ledger file finds the first one's lock."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from agentledger.config import Config, IterationLogSource, StoreConfig
from agentledger.example import synth
from agentledger.ledger import Ledger

from .conftest import wait_until


def _outside(tmp_path: Path, log: Path) -> Path:
    """A tree the agent controls: records of its own (iterations 1000-1002), no sidecar."""
    out = tmp_path / "outside"
    out.mkdir()
    body = next(log.glob("iter-1?.yaml")).read_text()
    import re

    n = int(re.search(r"^iteration: (\d+)", body, re.M).group(1))
    for k in range(1000, 1003):
        (out / f"iter-{k}.yaml").write_text(body.replace(f"iteration: {n}", f"iteration: {k}", 1))
    return out


SWAPS = {
    "a link out": lambda log, out, real: (log.rename(real), log.symlink_to(out)),
    "another directory": lambda log, out, real: (log.rename(real), shutil.copytree(out, log)),
    "a relative link out": lambda log, out, real: (log.rename(real), log.symlink_to(os.path.relpath(out, log.parent))),
    "a link back to the moved one, then out": lambda log, out, real: (
        log.rename(real), log.symlink_to(real), log.unlink(), log.symlink_to(out)),
    "the directory emptied into another": lambda log, out, real: (
        log.rename(real), log.mkdir(), [shutil.copy(p, log / p.name) for p in out.iterdir()]),
}


@pytest.mark.parametrize("how", list(SWAPS))
def test_a_configured_directory_replaced_while_the_ledger_runs_is_refused(tmp_path: Path, how: str) -> None:
    gen = synth.generate(tmp_path / "gen", 20, seed=6)
    cfg = Config(store=StoreConfig(path=tmp_path / "l.sqlite"), iteration_logs=(IterationLogSource(gen.log, gen.repo),))
    led = Ledger(cfg)
    try:
        first = led.scan_all()
        assert not first.errors, first.errors
        out = _outside(tmp_path, gen.log)
        before = {p.name for p in out.iterdir()}
        SWAPS[how](gen.log, out, gen.log.with_name("iteration-log.real"))
        for step in (led.scan_all, lambda: led.ingest_paths([gen.log / "iter-1000.yaml"]),
                     lambda: led.sync_sidecars(cfg.iteration_logs[0]), lambda: led.rescore(cfg.iteration_logs[0])):
            report = step()
            assert any("refused" in e and "restart" in e for e in report.errors), (how, report.errors)
        assert {p.name for p in out.iterdir()} == before  # no sidecar written into the tree the link leads to
        if how in ("another directory", "the directory emptied into another"):
            assert not list(gen.log.glob("*.score.yaml"))
        conn = sqlite3.connect(cfg.store.path)
        assert conn.execute("SELECT count(*) FROM iterations WHERE iteration >= 1000").fetchone()[0] == 0
        conn.close()
    finally:
        led.close()
    # a new process pins what is there then
    again = Ledger(cfg)
    try:
        assert not [e for e in again.scan_all().errors if "refused" in e]
    finally:
        again.close()


def _run(cfg: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "agentledger", "run", "--config", str(cfg), "--log-format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_second_daemon_through_a_symlink_or_a_hard_link_to_the_ledger_finds_the_first(tmp_path: Path) -> None:
    gen = synth.generate(tmp_path / "gen", 5, seed=7)
    db = tmp_path / "store" / "l.sqlite"
    db.parent.mkdir()

    def config(name: str, store: Path) -> Path:
        p = tmp_path / f"{name}.toml"
        p.write_text(f'[store]\npath = "{store}"\n[[iteration_logs]]\npath = "{gen.log}"\nrepo = "{gen.repo}"\n')
        return p

    first = _run(config("first", db))
    try:
        wait_until(lambda: db.exists() and Path(f"{db}.run.lock").exists(), 60)
        link = tmp_path / "elsewhere" / "link.sqlite"
        link.parent.mkdir()
        link.symlink_to(db)
        hard = tmp_path / "hard.sqlite"
        os.link(db, hard)
        for spelling in (link, hard, tmp_path / "store" / "." / "l.sqlite"):
            second = _run(config("second", spelling))
            try:
                out, err = second.communicate(timeout=60)
            finally:
                second.kill()
                second.wait()
            assert second.returncode == 1 and "one daemon per ledger" in out + err, (spelling, out, err)
        assert first.poll() is None  # the first runs on
    finally:
        first.terminate()
        first.communicate(timeout=60)


def test_the_service_refuses_a_log_directory_swapped_for_a_link_while_it_watches(tmp_path: Path, make_repo) -> None:
    """The red team's repro against a real `agentledger run`: `mv iteration-log
    iteration-log.real; ln -s OUTSIDE iteration-log`, then records written into OUTSIDE.
    The service says so and goes on; nothing of OUTSIDE is ingested and no sidecar is
    written there; a record closed in the real directory is not lost either (it is read
    after a restart, which pins what is there then)."""
    from .test_daemon import RECORD, configured, running

    log, cfg = configured(tmp_path, make_repo, 3)
    outside = tmp_path / "outside"
    outside.mkdir()
    with running(tmp_path, cfg) as (proc, notify):
        assert notify.wait_for("READY=1", 60)
        assert wait_until(lambda: (log / "iter-3.score.yaml").is_file(), 60)
        real = log.with_name("iteration-log.real")
        log.rename(real)
        log.symlink_to(outside)
        written = []

        def refused() -> bool:  # records keep coming into OUTSIDE until the service has said no
            n = 1000 + len(written)
            (outside / f"iter-{n}.yaml").write_text(RECORD.format(n=n, r=0))
            written.append(f"iter-{n}.yaml")
            return "the configured directory" in (tmp_path / "daemon.log").read_text()

        assert wait_until(refused, 60, 0.5)
        assert proc.poll() is None
        (outside / "iter-999.yaml").write_text(RECORD.format(n=999, r=0))  # and after it
        assert wait_until(lambda: (tmp_path / "daemon.log").read_text().count("the configured directory") >= 2, 60)
        assert sorted(p.name for p in outside.iterdir()) == sorted([*written, "iter-999.yaml"])
    with sqlite3.connect(tmp_path / "l.sqlite") as c:
        assert c.execute("SELECT count(*) FROM iterations WHERE iteration >= 999").fetchone()[0] == 0
    assert "Traceback" not in (tmp_path / "daemon.log").read_text()
