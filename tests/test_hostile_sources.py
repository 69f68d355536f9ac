"""Only the sources are read, and nothing a file says can take another file's place:
links out of the tree, files that claim another iteration, names that name none,
and quarantine reasons that would repeat a file's bytes."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from agentledger.example import synth

from .conftest import cli_subprocess, run_cli


def setup(tmp_path: Path, n: int = 20):
    gen = synth.generate(tmp_path / "gen", n, seed=5)
    db = tmp_path / "l.sqlite"
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db)]
    code, _, err = run_cli("ingest", *args)
    assert code == 0, err
    return gen, db, args


def quarantine(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT path, reason FROM quarantine WHERE resolved_seq IS NULL ORDER BY seq").fetchall()


def record_of(db: Path, n: int) -> tuple | None:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT file, content_hash FROM iterations WHERE iteration = ?", (n,)).fetchone()


def all_text(db: Path) -> str:
    """Every event payload and quarantine reason, as one string to search."""
    with sqlite3.connect(db) as c:
        return "\n".join([r[0] for r in c.execute("SELECT payload FROM events")]
                         + [r[0] for r in c.execute("SELECT reason FROM quarantine")])


def test_a_link_out_of_the_tree_is_refused_by_name_and_never_read(tmp_path: Path) -> None:
    gen, db, args = setup(tmp_path)
    secret = tmp_path / "outside" / "secret.yaml"
    secret.parent.mkdir()
    secret.write_text((gen.log / "iter-3.yaml").read_text().replace("iteration: 3", "iteration: 97")
                      + "# TOP-SECRET-MARKER\n")
    os.symlink("/etc/passwd", gen.log / "iter-96.yaml")
    os.symlink(secret, gen.log / "iter-97.yaml")
    (gen.log / "archive").mkdir()
    inside = gen.log / "archive" / "iter-98.yaml"
    inside.write_text((gen.log / "iter-3.yaml").read_text().replace("iteration: 3", "iteration: 98"))
    os.symlink(inside, gen.log / "iter-98.yaml")  # a link that stays inside the tree is read
    code, _, err = run_cli("ingest", *args)
    assert code == 0, err
    problems = dict(quarantine(db))
    for name in ("iter-96.yaml", "iter-97.yaml"):
        assert "symbolic link that leads outside" in problems[name] and name in problems[name]
    assert record_of(db, 97) is None and record_of(db, 98) is not None
    text = all_text(db)
    assert "root:" not in text and "TOP-SECRET-MARKER" not in text and str(secret) not in text


def test_a_vally_results_link_out_of_the_tree_is_refused(tmp_path: Path) -> None:
    runs = tmp_path / "vally" / "run-a"
    runs.mkdir(parents=True)
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_bytes(synth.vally_trial_line(1))
    os.symlink(outside, runs / "results.jsonl")
    db = tmp_path / "l.sqlite"
    code, _, err = run_cli("ingest", "--vally", str(tmp_path / "vally"), "--db", str(db))
    assert code == 0, err
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM trials").fetchone()[0] == 0
        reasons = [r[0] for r in c.execute("SELECT reason FROM quarantine")]
    assert len(reasons) == 1 and "leads outside" in reasons[0]
    assert run_cli("ingest", "--vally", str(tmp_path / "vally"), "--db", str(db))[0] == 0
    with sqlite3.connect(db) as c:  # once, not once a scan
        assert c.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 1


def test_a_file_that_claims_another_iteration_never_takes_its_place(tmp_path: Path) -> None:
    gen, db, args = setup(tmp_path)
    real = record_of(db, 6)
    with sqlite3.connect(db) as c:
        score = c.execute("SELECT value, inputs_hash FROM latest_scores WHERE iteration = 6").fetchone()
    body = (gen.log / "iter-6.yaml").read_text()
    (gen.log / "iter-94.yaml").write_text(body.replace("task_id:", "task_id: forged-", 1))
    (gen.log / "iter-006.yaml").write_text(body.replace("task_id:", "task_id: forged-", 1))
    (gen.log / "iter--1.yaml").write_text(body.replace("iteration: 6", "iteration: -1"))
    (gen.log / "iter-x.yaml").write_text(body)
    code, _, err = run_cli("ingest", *args)
    assert code == 0, err
    assert record_of(db, 6) == real
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT value, inputs_hash FROM latest_scores WHERE iteration = 6").fetchone() == score
        assert c.execute("SELECT count(*) FROM iterations WHERE iteration IN (94, -1)").fetchone()[0] == 0
    problems = dict(quarantine(db))
    assert "iter-94.yaml says iteration 6, whose record is iter-6.yaml" in problems["iter-94.yaml"]
    assert "not an iteration file name" in problems["iter-006.yaml"]
    assert "not an iteration file name" in problems["iter--1.yaml"]
    assert "not an iteration file name" in problems["iter-x.yaml"]
    # removing the impostor resolves its problem
    (gen.log / "iter-94.yaml").unlink()
    assert run_cli("ingest", *args)[0] == 0
    assert "iter-94.yaml" not in dict(quarantine(db))


def test_score_refuses_an_iteration_number_that_is_none(tmp_path: Path) -> None:
    for bad in ("-1", "99999999999999999999", "x", "066", "６６", " 6"):
        proc = cli_subprocess("score", bad)
        lines = [x for x in proc.stderr.splitlines() if x.strip()]
        assert proc.returncode == 2 and len(lines) == 1 and "not an iteration number" in lines[0], proc.stderr


def test_a_quarantine_reason_repeats_little_of_the_file_and_nothing_unprintable(tmp_path: Path) -> None:
    gen, db, args = setup(tmp_path)
    junk = "iteration: 7\ntask_id: [" + "\x1b[31mA" * 5000 + "\n"
    (gen.log / "iter-7.yaml").write_text(junk)
    runs = tmp_path / "vally" / "run-a"
    runs.mkdir(parents=True)
    (runs / "results.jsonl").write_bytes(b'{"type": "trial-result", "x": "' + b"\x1b" * 10 + b"B" * 9000 + b'"\n')
    assert run_cli("ingest", *args, "--vally", str(tmp_path / "vally"))[0] == 0
    with sqlite3.connect(db) as c:
        reasons = [r[0] for r in c.execute("SELECT reason FROM quarantine")]
    assert len(reasons) >= 2
    for reason in reasons:
        assert len(reason) <= 300 and "\x1b" not in reason, reason
    json.dumps(reasons)


def test_bounded_escapes_and_cuts_what_a_parser_quotes() -> None:
    from agentledger.sources.confine import REASON_CHARS, bounded

    quoted = "cannot unmarshal !!str `" + "\x1b[31mroot:x:0:0\u2028\x00" * 100 + "` into int\nsecond line"
    out = bounded(quoted)
    assert len(out) == REASON_CHARS and out.endswith("…")
    assert "\x1b" not in out and "\x00" not in out and "\u2028" not in out and "\nsecond" not in out
    assert out.startswith("cannot unmarshal !!str `\\x1b[31mroot:x:0:0\\u2028\\x00")
    assert bounded("short and clean") == "short and clean"


def _export(db: Path) -> list[dict]:
    proc = cli_subprocess("export", "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    return [json.loads(x) for x in proc.stdout.splitlines() if x.strip()]


def _whole(lines: list[dict]) -> str:
    """``lines`` as a whole export: numbered from seq 1 with no gap, as an import takes one."""
    return "".join(json.dumps({**x, "seq": i}) + "\n" for i, x in enumerate(lines, 1))


def _count(db: Path) -> int:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT count(*) FROM events").fetchone()[0]


def test_an_import_with_a_lone_surrogate_is_one_clear_line_and_a_pair_is_taken(tmp_path: Path) -> None:
    """A JSON string can escape half a UTF-16 pair alone (\\udc00): not text. An export
    line holding one is refused with one line and nothing imported (it used to end the
    import with a traceback, from the projections' SQLite text); an escaped pair (an
    emoji) is text and is taken."""
    _, db, _ = setup(tmp_path)
    lines = _export(db)
    labels = [x for x in lines if x["type"] == "iteration.recorded"][:2]
    fresh = tmp_path / "fresh.sqlite"
    for lone in ["\udc00", "\ud800"]:
        bad = json.loads(json.dumps(labels[0]))
        bad["payload"]["record"]["task_id"] = f"lone {lone} half"
        path = tmp_path / "lone.jsonl"
        path.write_text(_whole([labels[1], bad]))  # escaped: ensure_ascii
        assert "\\ud" in path.read_text()
        proc = cli_subprocess("import", str(path), "--db", str(fresh))
        err = [x for x in proc.stderr.splitlines() if x.strip()]
        assert proc.returncode == 1 and len(err) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert f"line 2: a string holds a lone surrogate (U+{ord(lone):04X})" in err[0]
        assert _count(fresh) == 0
    pair = json.loads(json.dumps(labels[0]))
    pair["payload"]["record"]["task_id"] = "a pair \U0001F600 here"
    path = tmp_path / "pair.jsonl"
    path.write_text(_whole([pair]))
    assert "\\ud83d\\ude00" in path.read_text()
    proc = cli_subprocess("import", str(path), "--db", str(fresh))
    assert proc.returncode == 0, proc.stderr
    with sqlite3.connect(fresh) as c:
        assert c.execute("SELECT task_id FROM iterations").fetchall() == [("a pair \U0001F600 here",)]


def test_an_imported_score_never_reaches_a_sidecar_before_this_ledger_scored_it(tmp_path: Path) -> None:
    gen, db, args = setup(tmp_path)
    lines = _export(db)
    last = max((x for x in lines if x["type"] == "score.computed" and x["payload"]["iteration"] == 5),
               key=lambda x: x["seq"])
    sidecar = gen.log / "iter-5.score.yaml"
    honest = sidecar.read_bytes()

    # an edited value: its own breakdown contradicts it; refused whole, with one line naming the event
    forged = json.loads(json.dumps(last))
    forged["payload"]["value"] = 0.999
    forged["idempotency_key"] += "-forged"
    bad = tmp_path / "forged.jsonl"
    bad.write_text(_whole([*lines[:3], forged]))
    fresh = tmp_path / "fresh.sqlite"
    proc = cli_subprocess("import", str(bad), "--db", str(fresh))
    lines_err = [x for x in proc.stderr.splitlines() if x.strip()]
    assert proc.returncode == 1 and len(lines_err) == 1 and "Traceback" not in proc.stderr
    assert forged["idempotency_key"] in lines_err[0] and "refused" in lines_err[0]
    assert _count(fresh) == 0

    # binary junk
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 40)
    proc = cli_subprocess("import", str(junk), "--db", str(fresh))
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert _count(fresh) == 0

    # a consistent forgery (a detail line) in a whole export, restored into an empty ledger
    # beside the same log: taken in, but no sidecar is ever written from it: the first
    # ingest there scores iteration 5 itself
    forged = json.loads(json.dumps(last))
    forged["payload"]["breakdown"][0]["detail"] = "FORGED DETAIL"
    forged["idempotency_key"] += "-consistent"
    good = tmp_path / "consistent.jsonl"
    good.write_text(_whole([*lines, forged]))
    proc = cli_subprocess("import", str(good), "--db", str(fresh))
    assert proc.returncode == 0, proc.stderr
    assert sidecar.read_bytes() == honest
    restored = [*args[:-1], str(fresh)]
    code, _, err = run_cli("ingest", *restored)
    assert code == 0, err
    assert sidecar.read_bytes() == honest and b"FORGED" not in sidecar.read_bytes()
    with sqlite3.connect(fresh) as c:
        detail = c.execute("SELECT json_extract(e.payload, '$.breakdown[0].detail') FROM latest_scores l"
                           " JOIN events e ON e.seq = l.seq WHERE l.iteration = 5").fetchone()[0]
    assert detail != "FORGED DETAIL"
    code, _, err = run_cli("rebuild", *restored)
    assert code == 0, err
    assert sidecar.read_bytes() == honest


def _swap_race(name: Path, secret: Path, honest: bytes, read) -> None:
    """An attacker swaps ``name`` between a regular file (``honest``) and a link to
    ``secret`` as fast as rename allows while ``read(name)`` reads it again and again:
    every read is the regular file's bytes or a refusal (``OSError``), never the
    target's, and both states are met."""
    import threading

    stop = threading.Event()

    def attacker() -> None:
        k = 0
        while not stop.is_set():
            k += 1
            staged = name.with_name(f".staged-{k}")
            if k % 2:
                os.symlink(secret, staged)
            else:
                staged.write_bytes(honest)
            os.rename(staged, name)

    thread = threading.Thread(target=attacker)
    thread.start()
    reads = refusals = 0
    try:
        for _ in range(3000):
            try:
                data = read(name)
            except OSError:  # Outside (resolved out) or ELOOP (a link met at open)
                refusals += 1
                continue
            assert b"TOP-SECRET" not in data
            reads += 1
    finally:
        stop.set()
        thread.join()
    assert reads and refusals


def test_a_link_swapped_in_under_a_reader_is_never_followed_out(tmp_path: Path) -> None:
    """A file directly in the log directory is checked with one ``lstat`` (not a link: it
    is inside) and opened with ``O_NOFOLLOW``. An attacker swapping the name between a
    regular file and a link out of the tree, as fast as rename allows, while it is read
    again and again: every read is the regular file's bytes or a refusal, never the
    target's."""
    from agentledger.sources import confine

    root = tmp_path / "log"
    root.mkdir()
    secret = tmp_path / "secret.yaml"
    secret.write_text("TOP-SECRET-MARKER\n")
    name = root / "iter-5.yaml"
    name.write_text("schema_version: 1\niteration: 5\n")

    def read(path: Path) -> bytes:
        with confine.open_within(path, root) as fh:
            return fh.read()

    _swap_race(name, secret, b"schema_version: 1\niteration: 5\n", read)


def test_an_artifact_reached_through_a_link_out_of_the_tree_is_refused(tmp_path: Path) -> None:
    """The repository files a record names are read only where they resolve inside the
    repository: an artifact that is a link out of it, or under a directory that is one, is
    refused by name and never read; a directory link that stays inside is followed; a
    ``..`` path is no artifact at all. Nothing of the files outside reaches the ledger."""
    gen, db, args = setup(tmp_path)
    outside = tmp_path / "outside"
    (outside / "task-31").mkdir(parents=True)
    secret = "schema_version: 1\nstatus: pass\n# TOP-SECRET-MARKER\n"
    (outside / "secret.yaml").write_text(secret)
    (outside / "task-31" / "test.result.yaml").write_text(secret)
    ver = gen.repo / ".agents/active/verification"
    (ver / "task-30").mkdir(parents=True)
    os.symlink(outside / "secret.yaml", ver / "task-30" / "test.result.yaml")  # the file is a link out
    os.symlink(outside / "task-31", ver / "task-31")  # a directory on the way is a link out
    (ver / "real-32").mkdir()
    (ver / "real-32" / "test.result.yaml").write_text("schema_version: 1\nstatus: pass\n")
    os.symlink(ver / "real-32", ver / "task-32")  # a link that stays inside the repository
    arts = {30: ".agents/active/verification/task-30/test.result.yaml",
            31: ".agents/active/verification/task-31/test.result.yaml",
            32: ".agents/active/verification/task-32/test.result.yaml",
            33: "../outside/task-31/test.result.yaml"}
    for n, art in arts.items():
        (gen.log / f"iter-{n}.yaml").write_text(
            f"schema_version: 2\niteration: {n}\ntask_id: t-{n}\ncommit: deadbeef\nimpl:\n  summary: \"x\"\n"
            f"verifiers:\n  - type: test\n    status: pass\n    result_artifact: \"{art}\"\n")
    code, _, err = run_cli("ingest", *args)
    assert code == 0, err
    problems = dict(quarantine(db))
    for n in (30, 31):
        assert "symbolic link that leads outside" in problems[arts[n]], problems
    assert arts[32] not in problems and arts[33] not in problems
    with sqlite3.connect(db) as c:
        read = dict(c.execute("SELECT path, available FROM artifacts WHERE path LIKE '%task-3%'"))
    assert read == {arts[32]: 1}
    text = all_text(db)
    assert "TOP-SECRET-MARKER" not in text and str(outside) not in text


def test_a_watched_change_under_a_directory_link_out_of_the_tree_is_refused(tmp_path: Path) -> None:
    """The service reads what its watches name: a recursive watch follows a directory link
    (watchfiles names ``…/verification/task-31/test.result.yaml`` when a file changes in the
    directory ``task-31`` leads to), and the artifact it names is confined to the repository,
    as a scan confines it: refused by name, never read (it was confined to its own
    directory, so a link on the way was followed out)."""
    from agentledger.config import Config, StoreConfig, make_source
    from agentledger.ledger import Ledger

    gen = synth.generate(tmp_path / "gen", 20, seed=5)
    outside = tmp_path / "outside"
    outside.mkdir()
    ver = gen.repo / ".agents/active/verification"
    ver.mkdir(parents=True, exist_ok=True)
    os.symlink(outside, ver / "task-31")
    art = ".agents/active/verification/task-31/test.result.yaml"
    (gen.log / "iter-21.yaml").write_text(
        "schema_version: 2\niteration: 21\ntask_id: t-21\ncommit: deadbeef\nimpl:\n  summary: \"x\"\n"
        f"verifiers:\n  - type: test\n    status: pass\n    result_artifact: \"{art}\"\n")
    db = tmp_path / "l.sqlite"
    ledger = Ledger(Config(store=StoreConfig(path=db), iteration_logs=(make_source(gen.log, gen.repo),)))
    try:
        ledger.scan_all()  # the artifact is not there yet: read as missing
        (outside / "test.result.yaml").write_text("schema_version: 1\nstatus: TOP-SECRET-MARKER\n")
        ledger.ingest_paths([gen.repo / art])  # what the watch hands the service
    finally:
        ledger.close()
    assert "symbolic link that leads outside" in dict(quarantine(db)).get(art, "")
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM artifacts WHERE path = ? AND available", (art,)).fetchone()[0] == 0
    text = all_text(db)
    assert "TOP-SECRET-MARKER" not in text and str(outside) not in text


def test_a_link_swapped_in_under_the_tailer_is_never_followed_out(tmp_path: Path) -> None:
    """A tailed file (vally's ``run-a/results.jsonl``) is checked with ``resolve_within``
    and read by the tailer, which opens it without following a link at its last
    component: an attacker swapping the name between a regular file and a link out of the
    tree as fast as rename allows never gets the target's bytes read, only the regular
    file's or a refusal. (The tailer used to open the checked path following links.)"""
    from agentledger.sources import confine, jsonl

    root = tmp_path / "vally"
    (root / "run-a").mkdir(parents=True)
    secret = tmp_path / "secret.jsonl"
    secret.write_text('{"TOP-SECRET-MARKER": 1}\n' * 50)
    name = root / "run-a" / "results.jsonl"
    name.write_bytes(synth.vally_trial_line(1))

    def read(path: Path) -> bytes:
        checked = confine.resolve_within(path, root)
        return b"".join(line.data for batch in jsonl.tail(checked, jsonl.Position()) for line in batch.items)

    _swap_race(name, secret, synth.vally_trial_line(1), read)


def test_a_link_swapped_in_under_the_annotations_reader_is_never_followed_out(tmp_path: Path) -> None:
    """An annotated trajectory is a regular file by ``lstat`` before it is read; a link
    renamed over it between that look and the read, or a directory on its way that leads
    out of the tree, is never followed: the reader gets the honest file's events or none.
    (It used to open the path following links.)"""
    from agentledger.config import AnnotationSource, Config, StoreConfig
    from agentledger.ledger import Ledger
    from agentledger.ledger.outcome import Outcome

    root = tmp_path / "annotations"
    root.mkdir()
    honest = synth.annotation("t-honest").encode()
    secret = tmp_path / "secret.md"
    secret.write_text(synth.annotation("TOP-SECRET-MARKER"))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "b.md").write_text(synth.annotation("TOP-SECRET-MARKER"))
    os.symlink(tmp_path / "elsewhere", root / "away")
    name = root / "a.md"
    name.write_bytes(honest)
    src = AnnotationSource(root)
    ledger = Ledger(Config(store=StoreConfig(path=tmp_path / "l.sqlite"), annotations=(src,)))
    try:
        assert ledger.annotations._look(src, "away/b.md", None, Outcome()) is None  # a directory link out

        def read(path: Path) -> bytes:
            found = ledger.annotations._look(src, path.name, None, Outcome())
            if found is None:
                raise OSError("not read")
            return json.dumps([ev.payload for ev in found[3]]).encode()

        _swap_race(name, secret, honest, read)
    finally:
        ledger.close()


def test_a_link_to_a_device_or_a_fifo_planted_at_a_sidecar_never_holds_up_a_scan(tmp_path: Path) -> None:
    """A scan compares each sidecar it does not know with the ledger's bytes by reading it.
    A link to ``/dev/zero`` planted at one (an endless read) and a FIFO at another (an open
    that waits for a writer) are not the ledger's files: they are neither followed nor
    opened to wait, the scan ends and says each path, and every other sidecar is kept."""
    gen, db, args = setup(tmp_path)
    link, fifo = gen.log / "iter-5.score.yaml", gen.log / "iter-6.score.yaml"
    kept = (gen.log / "iter-7.score.yaml").read_bytes()
    link.unlink()
    os.symlink("/dev/zero", link)
    fifo.unlink()
    os.mkfifo(fifo)
    proc = cli_subprocess("ingest", *args, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert str(link) in proc.stderr and str(fifo) in proc.stderr
    assert os.path.islink(link) and os.readlink(link) == "/dev/zero"
    assert (gen.log / "iter-7.score.yaml").read_bytes() == kept


def test_a_fifo_named_like_a_tailed_file_never_holds_up_a_scan(tmp_path: Path) -> None:
    """A FIFO named ``results.jsonl`` (an open that waits for a writer, for good) is opened
    without waiting and refused as no regular file: the scan ends, says its path and
    ingests the other runs."""
    runs = tmp_path / "vally"
    (runs / "run-a").mkdir(parents=True)
    (runs / "run-b").mkdir()
    os.mkfifo(runs / "run-a" / "results.jsonl")
    (runs / "run-b" / "results.jsonl").write_bytes(synth.vally_trial_line(1))
    db = tmp_path / "l.sqlite"
    proc = cli_subprocess("ingest", "--vally", str(runs), "--db", str(db), timeout=120)
    assert proc.returncode == 1 and str(runs / "run-a" / "results.jsonl") in proc.stderr, proc.stderr
    assert "not a regular file" in proc.stderr
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM trials").fetchone()[0] == 1
