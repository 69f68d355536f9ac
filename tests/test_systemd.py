"""The shipped units pass `systemd-analyze verify`; the system unit stays well hardened."""

from __future__ import annotations

import re
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
