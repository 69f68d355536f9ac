"""Every read is bounded (#56): a file a user names is read only if it is a regular file
of sane size (devices, FIFOs, directories and giants are refused at once, in one line,
never read or waited on); a real archive is told from an alias bomb by its expansion
against its size; a results file of one endless line is quarantined and the next valid
line is read; a query is bounded in memory and stopped inside a long step."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentledger.example import synth

from .conftest import REAL_LOG, cli_subprocess, empty_ledger, need_fixtures


@pytest.fixture
def hostile(tmp_path: Path) -> dict[str, Path]:
    """What may stand where a user names a file: a device, a FIFO, a directory, a giant, a link to a device."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    giant = tmp_path / "giant"
    with open(giant, "wb") as fh:
        fh.truncate(3 << 30)  # 3 GiB, sparse
    dev = tmp_path / "dev-link"
    dev.symlink_to("/dev/zero")
    return {"/dev/zero": Path("/dev/zero"), "/dev/urandom": Path("/dev/urandom"), "a FIFO": fifo,
            "a directory": tmp_path, "a 3 GiB file": giant, "a link to /dev/zero": dev}


def _one_line_and_quick(argv: list[str], *, stdin=None, env=None) -> str:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "agentledger", *argv], capture_output=True, text=True, timeout=60,
                          stdin=stdin if stdin is not None else subprocess.DEVNULL, env={**os.environ, **(env or {})})
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode in (1, 2) and len(lines) == 1 and "Traceback" not in proc.stderr, (argv, proc.stderr)
    assert time.monotonic() - started < 30, argv  # refused at once, not after reading gigabytes
    return lines[0]


def test_a_file_a_user_names_is_only_ever_a_regular_file_of_sane_size(tmp_path: Path, hostile) -> None:
    db = empty_ledger(tmp_path / "l.sqlite")
    for what, path in hostile.items():
        said = _one_line_and_quick(["status", "--config", str(path)])
        assert "refused" in said or "directory" in said, (what, said)
        prices = tmp_path / "prices.toml"
        cfg = tmp_path / "with-prices.toml"
        cfg.write_text(f'[store]\npath = "{db}"\n[cost]\nprices = "{path}"\n')
        said = _one_line_and_quick(["cost", "--config", str(cfg)])
        assert "refused" in said or "directory" in said, (what, said)
        said = _one_line_and_quick(["import", str(path), "--db", str(tmp_path / f"i-{len(what)}.sqlite")])
        assert "refused" in said or "directory" in said, (what, said)
        if what != "a directory":  # (lint takes a directory of trajectories)
            proc = cli_subprocess("lint", str(path), timeout=60)
            assert proc.returncode in (1, 2) and "refused" in proc.stdout + proc.stderr, (what, proc.stdout)
        del prices
    # standard input that is a device is refused too; a pipe of one endless line stops at the line cap
    with open("/dev/zero", "rb") as zero:
        assert "character device" in _one_line_and_quick(["import", "-", "--db", str(tmp_path / "z.sqlite")],
                                                           stdin=zero)


@pytest.mark.parametrize("price, says", [("1e308", "give a price from 0 to"), ("-1", "give a price from 0 to"),
                                         ("nan", "give a price from 0 to"), ("inf", "give a price from 0 to"),
                                         ("1000001", "give a price from 0 to"), ("true", "give a price from 0 to")])
def test_a_price_that_would_make_no_number_is_refused(tmp_path: Path, price: str, says: str) -> None:
    db = empty_ledger(tmp_path / "l.sqlite")
    prices = tmp_path / "prices.toml"
    prices.write_text(f'[models."m"]\ninput = {price}\n')
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[store]\npath = "{db}"\n[cost]\nprices = "{prices}"\n')
    said = _one_line_and_quick(["cost", "--config", str(cfg)])
    assert says in said and "$inf" not in said


def _archive(n: int) -> str:
    """A real-format historical.yaml of ``n`` iterations: the fixture's entries, numbered on."""
    need_fixtures()
    text = (REAL_LOG / "historical.yaml").read_text()
    head, _, body = text.partition("iterations:\n")
    entries = re.split(r"(?m)^(?=  - schema_version:)", body)
    entries = [e for e in entries if e.strip()]
    out = [head, "iterations:\n"]
    for k in range(n):
        e = entries[k % len(entries)]
        out.append(re.sub(r"(?m)^    iteration: \d+$", f"    iteration: {k + 1}", e, count=1))
    return "".join(out)


def test_a_real_archive_of_any_size_is_no_bomb_and_a_bomb_of_any_size_is_one(tmp_path: Path) -> None:
    from agentledger.reference.yamlv3.decode import YamlError
    from agentledger.sources.iterlogs.records import parse_historical

    text = _archive(5000)
    assert len(text) > 5_000_000 and not re.search(r": [&*][A-Za-z]", text)  # no anchor, no alias
    assert len(parse_historical(text)) == 5000
    # one entry aliased by many: what a historical.yaml's decoding walks (each alias is a
    # whole record decoded again); the expansion grows past the budget, which grows with
    # the input's size, padding too
    fields = ", ".join(f"{k}: true" for k in ("read_loop_state", "one_item_only", "committed_after_tests",
                                              "tests_positive_and_negative", "tests_used_sandbox",
                                              "aligned_with_canonical_tasks", "ran_cli_command"))
    entry = (f"{{schema_version: 1, iteration: 1, date: d, task_id: t, commit: c, retries: 1, tests_added: 2,"
             f" tests_total_pass: true, scope_note: s, summary: x, self_assessment: {{{fields}}}}}")
    for width, pad in ((100_000, 0), (150_000, 256 << 10)):
        bomb = f"v: &v {entry}\niterations: [" + ",".join(["*v"] * width) + "]\n# " + "p" * pad + "\n"
        with pytest.raises(YamlError, match="too large or expands too many aliases"):
            parse_historical(bomb)


def test_a_results_file_of_one_endless_line_is_quarantined_and_the_next_line_is_read(tmp_path: Path) -> None:
    runs = tmp_path / "vally" / "run-1"
    runs.mkdir(parents=True)
    results = runs / "results.jsonl"
    good = [synth.vally_trial_line(i) for i in range(3)]
    with open(results, "wb") as fh:
        fh.write(good[0])
        fh.write(b"x" * (2 << 20))  # over the line limit below, and no newline
    db = tmp_path / "l.sqlite"
    env = {"AGENTLEDGER_LIMITS_MAX_LINE_BYTES": str(1 << 20)}
    args = ["ingest", "--vally", str(tmp_path / "vally"), "--db", str(db)]
    assert cli_subprocess(*args, env=env).returncode == 0

    def problems() -> list[tuple]:
        with sqlite3.connect(db) as c:
            return c.execute("SELECT line, byte_offset, reason FROM quarantine WHERE path LIKE '%results.jsonl'").fetchall()

    found = problems()
    assert len(found) == 1 and found[0][0] == 2 and found[0][1] == len(good[0]) and "no end yet" in found[0][2]
    status = json.loads(cli_subprocess("status", "--json", "--db", str(db)).stdout)
    vally = next(s for s in status["sources"] if s["kind"] == "vally")
    assert vally["lag_bytes"] == 0 and vally["bytes_read"] == results.stat().st_size  # true: every byte was looked at
    with open(results, "ab") as fh:  # more of the endless line, then its end, then good lines
        fh.write(b"y" * (1 << 20) + b"\n" + good[1] + good[2])
    assert cli_subprocess(*args, env=env).returncode == 0
    assert len(problems()) == 1  # the same line, not quarantined again
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM trials").fetchone()[0] == 3
    assert cli_subprocess(*args, env=env).returncode == 0
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM trials").fetchone()[0] == 3


@pytest.mark.parametrize("sql", [
    "SELECT length(replace(hex(zeroblob(200000000)), '0', 'ab'))",
    "SELECT length(group_concat(hex(randomblob(1000)), '')) FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL"
    " SELECT i + 1 FROM n LIMIT 400000) SELECT i FROM n)",
    "SELECT group_concat(hex(randomblob(1000000))) FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL"
    " SELECT i + 1 FROM n LIMIT 600) SELECT i FROM n)",
])
def test_a_query_is_bounded_in_memory(tmp_path: Path, sql: str) -> None:
    db = empty_ledger(tmp_path / "l.sqlite")
    said = _one_line_and_quick(["query", "--db", str(db), "--timeout", "0", sql])
    assert "query stopped" in said and "MiB" in said, said


def test_a_query_in_a_process_that_goes_on_is_bounded_without_a_process_wide_limit(tmp_path: Path) -> None:
    """In this (pytest's) process, as anywhere `main` is called in process: no value over
    64 MiB and no result over 256 MiB, and the process's own memory is never capped after."""
    from .conftest import run_cli

    db = empty_ledger(tmp_path / "l.sqlite")
    rows = ("SELECT randomblob(30000000) FROM (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n"
            " LIMIT 12) SELECT i FROM n)")
    for sql, says in [("SELECT length(randomblob(200000000))", "a value over 64 MiB"),
                      (rows, "its rows hold more than 256 MiB")]:
        code, out, err = run_cli("query", "--db", str(db), sql)
        assert code == 1 and says in err and not out, (sql, err)
    conn = sqlite3.connect(":memory:")  # and SQLite here may still take what it needs
    assert conn.execute("SELECT length(randomblob(600000000))").fetchone()[0] == 600_000_000
    conn.close()


def _outcome(text: str, at_a_time: bool):
    from agentledger.reference.yamlv3.decode import YamlError
    from agentledger.sources.iterlogs.records import parse_historical

    try:
        return [r.to_json() for r in parse_historical(text, entry_at_a_time_from=0 if at_a_time else 10**12)]
    except YamlError as exc:
        return ("error", exc.message, exc.line, exc.column)


VARIANTS = [  # (what is done to a small real archive, a pattern and its replacement in it)
    ("as it is", r"\A", ""),
    ("a type error in the 7th entry", r"(?s)((?:.*?\n  - ){6}.*?)retries: 0", r"\1retries: many"),
    ("type errors in three entries", r"(?m)^    files_changed: \d+$", "    files_changed: [x]"),
    ("a syntax error in the 20th entry", r"(?s)((?:.*?\n  - ){19}.*?)summary: ", "\\1summary: [unclosed "),
    ("an entry that is a scalar", r"\n  - schema_version: 1\n", "\n  - 5\n  - schema_version: 1\n"),
    ("a null entry", r"\n  - schema_version: 1\n", "\n  - ~\n  - schema_version: 1\n"),
    ("another root key after the entries", r"\Z", "other: 1\n"),
    ("a document marker after the entries", r"\Z", "---\nx: 1\n"),
    ("an anchor in one entry used in another", r"(?s)\A(.*?)retries: 0(.*?)retries: 0", r"\1retries: &r 0\2retries: *r"),
    ("an anchor used in its own entry", r"(?s)(  - schema_version: 1\n)", "\\1    tests_added: &t 3\n    retries: *t\n"),
    ("comments between entries", r"\n  - schema_version", "\n# a comment\n\n  - schema_version"),
    ("a duplicate key in an entry", r"(?m)^    retries: 0$", "    retries: 0\n    retries: 1"),
    ("a tab where indentation goes", r"(?m)^    wave:", "\twave:"),
    ("entries at the root's indentation", r"(?m)^  ", ""),
    ("a deeper line at the root's indentation", r"\Z", "  - schema_version: 1\n  iteration: 3\n"),
]


@pytest.mark.parametrize("what, pattern, repl", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_an_archive_read_an_entry_at_a_time_says_what_the_whole_document_says(what, pattern, repl) -> None:
    need_fixtures()
    text = re.sub(pattern, repl, (REAL_LOG / "historical.yaml").read_text(), count=1)
    assert _outcome(text, True) == _outcome(text, False), what


def test_a_large_archive_is_read_an_entry_at_a_time_in_bounded_memory(tmp_path: Path) -> None:
    """20,000 iterations (26 MB): the whole document held its node tree (583 MB peak); an
    entry at a time holds one entry (the child's peak RSS stays under 200 MB: VmHWM, its
    own; getrusage's maxrss would carry over the parent's from before the exec)."""
    need_fixtures()
    script = tmp_path / "big.py"
    script.write_text(
        "import sys\n"
        "sys.path.insert(0, %r)\n"
        "from tests.test_bounded import _archive\n"
        "from agentledger.sources.iterlogs.records import parse_historical\n"
        "text = _archive(20000)\n"
        "assert len(parse_historical(text)) == 20000\n"
        "hwm = next(ln for ln in open('/proc/self/status') if ln.startswith('VmHWM:'))\n"
        "print(int(hwm.split()[1]) // 1024)\n" % str(Path(__file__).parents[1]))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout.split()[-1]) < 200, proc.stdout


def test_most_variants_are_read_an_entry_at_a_time_and_the_rest_whole() -> None:
    """The comparison above is no comparison of one path with itself: most variants take
    the entry path, and the shapes it does not read go whole."""
    from agentledger.reference.yamlv3.decode import Decoder
    from agentledger.sources.iterlogs import archive

    need_fixtures()
    took = {}
    for what, pattern, repl in VARIANTS:
        text = re.sub(pattern, repl, (REAL_LOG / "historical.yaml").read_text(), count=1)
        try:
            archive.entries(text, Decoder(10**9), lambda d, n: n)
            took[what] = "entry"
        except archive.NotPlain:
            took[what] = "whole"
    assert sum(v == "entry" for v in took.values()) >= 8, took
    for what in ("another root key after the entries", "an anchor in one entry used in another",
                 "a syntax error in the 20th entry"):
        assert took[what] == "whole", what
