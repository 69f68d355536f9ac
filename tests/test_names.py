"""One file-name grammar (``names.py``): a name either is the one the grammar makes for
an iteration's file, or it stands for no iteration. Attacked with generated spellings
of the number (leading zeros, digits of other scripts, signs, spaces) and with the
red team's repro: an agent that cannot remove its own failing gate by writing a
look-alike side file and removing it again."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from hypothesis import given, settings, strategies as st

from agentledger import names
from agentledger.sources.iterlogs.files import MISNAMED, classify

from .conftest import REAL_LOG, REFERENCE, copy_log, need_fixtures, run_cli

SUFFIXES = [".yaml", ".hook-outcomes.yaml", ".labels.yaml"]
# digits Python's \d and int() take that are not ASCII: fullwidth, Arabic-Indic,
# Devanagari, Bengali, mathematical bold, superscript-like, and ASCII ones
DIGITS = "0123456789０１２３４５６７８９٠١٢٣٤٥٦٧٨٩०१२३४५६७८९০১২৩৪৫৬৭৮৯𝟎𝟏𝟐𝟑𝟒𝟓𝟔𝟕𝟖𝟗²³¹"
NOISE = st.sampled_from(["", "0", "00", "+", "-", " ", "\t", "_", "\u200b", "\ufeff", ".", "x"])


def number_spellings() -> st.SearchStrategy[str]:
    plain = st.integers(min_value=0, max_value=10**6).map(str)
    odd = st.text(alphabet=DIGITS, min_size=1, max_size=6)
    return st.one_of(plain, st.builds(lambda a, n, b: a + n + b, NOISE, st.one_of(plain, odd), NOISE))


@settings(max_examples=600, deadline=None)
@given(number=number_spellings(), suffix=st.sampled_from(SUFFIXES))
def test_a_name_is_an_iterations_only_when_it_is_spelled_as_the_grammar_spells_it(number: str, suffix: str) -> None:
    name = f"iter-{number}{suffix}"
    got = classify(name)
    assert got is not None  # every iter-….yaml is either read or quarantined, never silently skipped
    kind, n = got
    if kind == MISNAMED:
        assert not (number.isascii() and number.isdigit() and (number == "0" or not number.startswith("0")))
    else:
        assert n is not None and names.iteration_file(kind, n) == name


@settings(max_examples=300, deadline=None)
@given(n=st.integers(min_value=0, max_value=10**12), kind=st.sampled_from([names.RECORD, names.HOOK, names.LABELS]))
def test_the_makers_and_the_parser_are_inverse(n: int, kind: str) -> None:
    assert names.parse(names.iteration_file(kind, n)) == (kind, n)
    assert names.iteration_number(str(n)) == n
    assert classify(names.iteration_file(names.SCORE, n)) is None  # our output is never an input


def test_look_alike_numbers_name_no_iteration() -> None:
    for text in ["066", "00", "６６", "٦٦", "+66", "-66", " 66", "66 ", "6_6", "", "1e2", "0x42", "६६"]:
        assert names.iteration_number(text) is None, text
        for suffix in SUFFIXES:
            assert classify(f"iter-{text}{suffix}") == (MISNAMED, None), (text, suffix)


def _hook_value(db: Path, n: int) -> float:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT value FROM latest_scores WHERE iteration = ?", (n,)).fetchone()[0]


def test_a_look_alike_side_file_cannot_remove_an_iterations_failing_gate(tmp_path: Path, empty_repo) -> None:
    """The red team's repro and its variants: a copy of iteration 66's failing gate made
    to pass, under names that spell 66 another way, ingested, removed, rescored."""
    need_fixtures()
    ref = (REFERENCE / "rubric-2.1.0" / "real-iteration-log" / "iter-66.score.yaml").read_bytes()
    for i, spelling in enumerate(["066", "６６", "0066", "٦٦"]):
        log = copy_log(REAL_LOG, tmp_path / f"log{i}")
        db = tmp_path / f"l{i}.sqlite"
        args = ["--iteration-log", str(log), "--repo", str(empty_repo.path), "--db", str(db)]
        honest = (log / "iter-66.hook-outcomes.yaml").read_text()
        assert "result: remediate" in honest
        forged = log / f"iter-{spelling}.hook-outcomes.yaml"
        forged.write_text(honest.replace("result: remediate", "result: allow"))
        labels = log / f"iter-{spelling}.labels.yaml"
        labels.write_text("schema_version: 1\nlabels: []\n")
        assert run_cli("ingest", *args)[0] == 0
        with sqlite3.connect(db) as c:
            problems = {p for (p,) in c.execute("SELECT path FROM quarantine WHERE resolved_seq IS NULL")}
        assert {forged.name, labels.name} <= problems, spelling
        assert (log / "iter-66.score.yaml").read_bytes() == ref, spelling
        forged.unlink()
        labels.unlink()
        for step in (["ingest", "--rescore-all"], ["rebuild"], ["score", "66"]):
            code, _, err = run_cli(*step, *args)
            assert code == 0, err
            assert (log / "iter-66.score.yaml").read_bytes() == ref, (spelling, step)
        assert _hook_value(db, 66) == 0.8591549295774648


def test_an_older_ledger_that_took_a_look_alike_is_mended_by_the_migration(tmp_path: Path, empty_repo) -> None:
    """A ledger written by the code before the grammar holds iteration 66's outcome from
    ``iter-066.hook-outcomes.yaml``: migration 0028 derives it again from the canonical
    file's event, and the look-alike's checkpoint goes, so the next scan quarantines it."""
    need_fixtures()
    from agentledger.store.db import connect

    log = copy_log(REAL_LOG, tmp_path / "log")
    db = tmp_path / "l.sqlite"
    args = ["--iteration-log", str(log), "--repo", str(empty_repo.path), "--db", str(db)]
    assert run_cli("ingest", *args)[0] == 0
    honest = sqlite3.connect(db).execute(
        "SELECT file, outcome, seq FROM hook_outcomes WHERE iteration = 66").fetchone()
    # what the older code left: the look-alike's row in the canonical one's place, its checkpoint
    with sqlite3.connect(db) as c:
        c.execute("UPDATE hook_outcomes SET file = 'iter-066.hook-outcomes.yaml', outcome = '{\"records\":[],"
                  "\"error\":\"\",\"read_error\":false}', records = 0 WHERE iteration = 66")
        c.execute("INSERT INTO source_checkpoints (source, path, kind) SELECT source, 'iter-066.hook-outcomes.yaml',"
                  " 'hook_outcomes' FROM source_checkpoints LIMIT 1")
        c.execute("DELETE FROM _sqlite_migrations WHERE name = '0028_one_name_grammar'")
        c.execute("PRAGMA user_version = 27")
    shutil.copy(log / "iter-66.hook-outcomes.yaml", log / "iter-066.hook-outcomes.yaml")
    connect(db).close()  # migrates
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT file, outcome, seq FROM hook_outcomes WHERE iteration = 66").fetchone() == honest
        assert c.execute("SELECT count(*) FROM source_checkpoints WHERE path = 'iter-066.hook-outcomes.yaml'"
                         ).fetchone()[0] == 0
    assert run_cli("ingest", *args)[0] == 0
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM quarantine WHERE path = 'iter-066.hook-outcomes.yaml'"
                         " AND resolved_seq IS NULL").fetchone()[0] == 1
    assert _hook_value(db, 66) == 0.8591549295774648
