"""The HTML report in real headless Chromium, at 60 and at 10,000 iterations.

Chromium's DOM dump says what was drawn (which marks, how many, in which order);
a screenshot of each chart alone (``report.html#chart`` hides the rest) is
decoded here and checked for the colours of that chart's marks, so a chart that
renders blank, or draws into the wrong place, fails.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import struct
import subprocess
import zlib
from collections import Counter
from pathlib import Path

import pytest
from agentledger.example import synth
from agentledger.views import charts, stats

from .conftest import run_cli

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars"]
CHARTS = ("trend-overall", "sessions", "bands-over-time", "signals-over-time", "contributions", "tokens",
          "integrity", "pass-rates")


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is missing (make test installs Debian's chromium package)")
        pytest.skip("chromium not installed (make test installs Debian's chromium package)")
    return exe


def decode_png(data: bytes) -> tuple[int, int, list[bytes], int]:
    """Width, height, unfiltered rows and bytes per pixel of an 8-bit RGB(A) PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and colour in (2, 6) and interlace == 0
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, rows, bpp


def colour_counts(png: Path, colours: list[str], tolerance: int = 6) -> dict[str, int]:
    """How many pixels of each colour (within ``tolerance`` per channel) the image has."""
    _, _, rows, bpp = decode_png(png.read_bytes())
    want = {c: tuple(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in colours}
    seen: Counter = Counter()
    for row in rows:
        seen.update(zip(row[0::bpp], row[1::bpp], row[2::bpp]))
    counts = dict.fromkeys(colours, 0)
    for (r, g, b), n in seen.items():
        for c, (wr, wg, wb) in want.items():
            if abs(r - wr) <= tolerance and abs(g - wg) <= tolerance and abs(b - wb) <= tolerance:
                counts[c] += n
    return counts


class Browser:
    def __init__(self, exe: str, profile: Path) -> None:
        self.exe, self.profile = exe, profile

    def dom(self, page: Path) -> str:
        return subprocess.run([self.exe, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", "--dump-dom",
                               page.as_uri()], capture_output=True, text=True, timeout=120, check=True).stdout

    def chart(self, page: Path, chart: str, out: Path, height: int = 1000) -> dict[str, int]:
        """A screenshot of one chart alone, and the count of each palette colour in it."""
        subprocess.run([self.exe, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", f"--window-size=960,{height}",
                        f"--screenshot={out}", f"{page.as_uri()}#{chart}"], capture_output=True, timeout=120,
                       check=True)
        return colour_counts(out, [charts.INDIGO, charts.CYAN, charts.TEAL, charts.GREEN, charts.SAND, charts.ROSE,
                                   charts.PURPLE, charts.OLIVE, charts.WINE, charts.SPREAD])


def build(root: Path, n: int) -> Path:
    """A generated log of ``n`` iterations with eval runs, scored under 2.1.0, then rescored under 3.0.0."""
    gen = synth.generate(root / "gen", n)
    runs = root / "vally" / "run-a"
    runs.mkdir(parents=True)
    (runs / "results.jsonl").write_bytes(b"".join(synth.vally_trial_line(i) for i in range(40)))
    db = root / "l.sqlite"
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db)]
    assert run_cli("ingest", *args, "--vally", str(root / "vally"))[0] == 0
    assert run_cli("backfill", *args, "--rubric", "3.0.0")[0] == 0
    return db


def newest_sessions(db: Path) -> list[str]:
    with sqlite3.connect(db) as c:
        return [r[0] for r in c.execute("SELECT session_id FROM iterations WHERE session_id <> ''"
                                        " GROUP BY session_id ORDER BY max(iteration) DESC")]


def zero_pass_rows(db: Path) -> tuple[int, int]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT count(*), sum(p = 0) FROM (SELECT sum(passed) AS p FROM trials"
                         " GROUP BY eval_name, model)").fetchone()


def check_common(browser: Browser, db: Path, page: Path, tmp: Path) -> str:
    """What holds at any size; returns the DOM."""
    dom = browser.dom(page)
    for chart in CHARTS:
        assert f'<figure id="{chart}">' in dom, chart
    assert dom.count('class="rolling"') == 1 and dom.count('class="pband"') == 1
    assert 'class="boundary"' in dom and "rubric 3.0.0 →" in dom
    sessions = newest_sessions(db)
    box = figure(dom, "sessions")
    drawn = [part.split("</text>", 1)[0].rsplit(">", 1)[-1] for part in box.split('class="rowlabel"')[1:]]
    assert drawn == sessions[:30]  # newest first
    assert box.count("median") >= len(drawn)
    rows, zero = zero_pass_rows(db)
    rates = figure(dom, "pass-rates")
    assert rates.count('class="ci"') == rows and rates.count('class="zero"') == zero > 0
    assert "95 % CI 0%" in rates  # a 0/n row says so, with its interval
    assert dom.count('class="paneltitle"') >= 8 + 2  # a panel per signal of 3.0.0, plus the tokens chart's two
    trend = browser.chart(page, "trend-overall", tmp / "trend.png")
    assert trend[charts.INDIGO] > 300 and trend[charts.SPREAD] > 5000 and trend[charts.PURPLE] > 20, trend
    bands = browser.chart(page, "bands-over-time", tmp / "bands.png")
    for colour in (charts.GREEN, charts.TEAL, charts.SAND, charts.ROSE):
        assert bands[colour] > 1000, bands
    assert bands[charts.SPREAD] == 0, bands  # the trend chart is not in this picture
    boxes = browser.chart(page, "sessions", tmp / "sessions.png")
    assert boxes[charts.CYAN] > 200 * min(len(sessions), 30) // 5 and boxes[charts.INDIGO] > 100, boxes
    signals = browser.chart(page, "signals-over-time", tmp / "signals.png")
    assert signals[charts.INDIGO] > 8 * 60, signals
    tokens = browser.chart(page, "tokens", tmp / "tokens.png")
    assert tokens[charts.INDIGO] > 1000 and tokens[charts.CYAN] > 50 and tokens[charts.TEAL] > 1000, tokens
    passes = browser.chart(page, "pass-rates", tmp / "passes.png")
    assert passes[charts.TEAL] > 200 and passes[charts.ROSE] > 20, passes  # bars, and the marks at 0
    return dom


def figure(html: str, chart: str) -> str:
    return html.split(f'<figure id="{chart}">', 1)[1].split("</figure>", 1)[0]


def reported(tmp_path: Path, n: int) -> tuple[Browser, Path, Path]:
    """A browser, the ledger of ``n`` generated iterations and its report."""
    browser = Browser(chromium(), tmp_path / "profile")
    db = build(tmp_path, n)
    page = tmp_path / "report.html"
    code, out, _ = run_cli("report", "--db", str(db), "--output", str(page))
    assert code == 0 and f"{n} iterations" in out
    return browser, db, page


def test_report_at_60_iterations(tmp_path: Path) -> None:
    browser, db, page = reported(tmp_path, 60)
    html = page.read_text()
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html
    assert "<script" not in html  # self-contained: nothing to fetch, nothing to run
    dom = check_common(browser, db, page, tmp_path)
    assert dom.count('class="point"') == 60  # few enough to draw each iteration
    assert "single iterations are summarised" not in dom
    assert dom.count('class="segment"') > 60 * 4
    # --session narrows the score charts to one session and draws its own trend
    one = tmp_path / "one.html"
    assert run_cli("report", "--db", str(db), "--session", "sess-00001", "--output", str(one))[0] == 0
    text = one.read_text()
    assert "session sess-00001" in text and '<figure id="trend-session">' in text
    assert figure(text, "sessions").count('class="rowlabel"') == 1


def test_report_at_10000_iterations(tmp_path: Path) -> None:
    browser, db, page = reported(tmp_path, 10_000)
    assert page.stat().st_size < 400_000  # summaries, not 10,000 marks a chart
    dom = check_common(browser, db, page, tmp_path)
    assert 'class="point"' not in dom and "10,000 iterations: single iterations are summarised" in dom
    sessions = len(newest_sessions(db))
    assert f"The newest 30 of {sessions:,} sessions" in dom
    assert dom.count('class="segment"') > 80 * 4 and "9921" in dom  # the last 80 iterations' columns
    shares = figure(dom, "bands-over-time")
    assert 40 * 3 <= shares.count('class="share"') <= 40 * 5  # 40 groups of 250 iterations


def test_statistics_by_hand() -> None:
    lo, hi = stats.wilson(0, 10)
    assert lo == 0 and abs(hi - 0.27753) < 1e-5  # z²/(n+z²) at 0 of n
    lo, hi = stats.wilson(5, 10)
    assert abs(lo - 0.23659) < 1e-5 and abs(hi - 0.76341) < 1e-5
    assert stats.wilson(0, 0) == (0.0, 1.0)
    assert stats.quantile([1, 2, 3, 4], 0.5) == 2.5 and stats.quantile([7], 0.9) == 7
    s = stats.summary([0.1, 0.9, 0.5, 0.3])
    assert (s.n, s.low, s.median, s.high) == (4, 0.1, 0.4, 0.9) and abs(s.mean - 0.45) < 1e-12
    points = stats.rolling([float(i) for i in range(10)], window=3, samples=4)
    assert [p.index for p in points] == [2, 5, 8, 9]  # evenly spaced, and always the last
    assert points[1].mean == 4.0 and abs(points[1].p10 - 3.2) < 1e-12  # over 3, 4, 5
    assert stats.bins(10_000) == [(i, i + 250) for i in range(0, 10_000, 250)]
    assert stats.bins(12) == [(0, 5), (5, 10), (10, 12)] and stats.bins(0) == []
    assert stats.rolling_window(60) == 5 and stats.rolling_window(10_000) == 400
