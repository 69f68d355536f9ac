"""The shipped units pass `systemd-analyze verify`; the system unit stays well hardened."""

from __future__ import annotations

import re
import socket
import shutil
import subprocess
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[1] / "systemd"
ANALYZE = shutil.which("systemd-analyze")
pytestmark = pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze is not installed on this machine")


def staged(tmp_path: Path, name: str) -> Path:
    """The unit with its agentledger binary path pointed at one that exists here
    (verify checks ExecStart= executables)."""
    text = (UNITS / name).read_text()
    text = re.sub(r"(/usr/local/bin|%h/\.local/bin)/agentledger", "/bin/true", text)
    out = tmp_path / name
    out.write_text(text)
    if name.endswith(".timer"):
        (tmp_path / name.replace(".timer", ".service")).write_text(
            re.sub(r"%h/\.local/bin/agentledger", "/bin/true", (UNITS / name.replace(".timer", ".service")).read_text()))
    return out


@pytest.mark.parametrize("name", ["agentledger.service", "agentledger-user.service",
                                  "agentledger-ingest.service", "agentledger-ingest.timer"])
def test_units_verify(tmp_path: Path, name: str) -> None:
    unit = staged(tmp_path, name)
    proc = subprocess.run([ANALYZE, "verify", str(unit)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert name not in proc.stderr, proc.stderr  # no warnings about our own unit


def test_system_unit_exposure(tmp_path: Path) -> None:
    unit = staged(tmp_path, "agentledger.service")
    proc = subprocess.run([ANALYZE, "security", "--offline=true", str(unit)], capture_output=True, text=True)
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", proc.stdout + proc.stderr)
    assert m, proc.stdout + proc.stderr
    assert float(m.group(1)) <= 2.0
    assert "Type=notify" in (UNITS / "agentledger.service").read_text()


@pytest.mark.parametrize("name", ["agentledger.service", "agentledger-user.service", "agentledger-ingest.service"])
def test_every_unit_is_hardened(tmp_path: Path, name: str) -> None:
    """docs/usage.md quotes these figures (`systemd-analyze security --offline=true`)."""
    unit = staged(tmp_path, name)
    proc = subprocess.run([ANALYZE, "security", "--offline=true", str(unit)], capture_output=True, text=True)
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", proc.stdout + proc.stderr)
    assert m and float(m.group(1)) <= 1.0, proc.stdout[-2000:]
    assert "RestrictAddressFamilies=AF_UNIX\n" in (UNITS / name).read_text()  # no network unless a drop-in opens it


@pytest.mark.parametrize("name", ["agentledger.service", "agentledger-user.service"])
def test_the_unit_cannot_ship_over_tcp_and_the_documented_drop_in_can(pg, tmp_path: Path, name: str) -> None:
    import sys

    from . import sandbox
    from .test_central import machine

    if not shutil.which("unshare"):
        pytest.skip("unshare (util-linux) is not installed")
    dropin = UNITS / f"{name}.d" / "ship.conf"
    base = sandbox.unit_settings(UNITS / name)
    opened = sandbox.unit_settings(UNITS / name, dropin)
    assert opened["PrivateNetwork"] == ["no"] and opened.get("IPAddressDeny") == base.get("IPAddressDeny")
    assert sandbox.families(opened) == {socket.AF_UNIX, socket.AF_INET, socket.AF_INET6}
    assert sandbox.ip_allowed(opened) == ["192.0.2.10"]  # the placeholder the doc says to replace
    # verify the unit with its drop-in merged in (systemd-analyze verify reads one file)
    merged = staged(tmp_path, name)
    merged.write_text(merged.read_text() + dropin.read_text())
    proc = subprocess.run([ANALYZE, "verify", str(merged)], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0 and name not in proc.stderr, proc.stderr

    db, _ = machine(tmp_path / "m", 10)
    url = pg.create_database(f"unit_{name.split('.')[0].replace('-', '_')}")
    tcp = url.split("?")[0].replace("@/", f"@127.0.0.1:{pg.port}/")
    argv = [sys.executable, "-m", "agentledger", "ship", "--central", tcp, "--db", str(db)]
    for settings, works in ((base, False), (opened, True)):
        proc = subprocess.run(sandbox.command(settings, argv), capture_output=True, text=True, timeout=120,
                              preexec_fn=sandbox.restrict_families(sandbox.families(settings)))
        lines = [x for x in proc.stderr.splitlines() if x.strip()]
        if works:
            assert proc.returncode == 0 and "0 behind" in proc.stdout, proc.stderr
        else:
            assert proc.returncode == 1 and len(lines) == 1 and "may not open a TCP socket" in lines[0], proc.stderr
            assert "Address family not supported" in lines[0] and "drop-in" in lines[0]
    # the private network alone, without the families, already stops TCP
    proc = subprocess.run(sandbox.command(base, argv), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "Network is unreachable" in proc.stderr, proc.stderr
