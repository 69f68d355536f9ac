"""An import never speaks for this ledger's files (#56): it restores a whole export into
an empty ledger, nothing else. Attacked with a forged line of every event type an
export holds (into a ledger that has read its files: refused whole), with the red
team's repro (iteration 64's record made to say 40 retries, a new key, a foreign
ledger), and with a restore that carries forgeries (the files on disk win at the
first scan)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from agentledger.example import synth

from .conftest import REAL_LOG, copy_log, need_fixtures, run_cli


def _export(db: Path, *extra: str) -> list[dict]:
    code, out, err = run_cli("export", "--db", str(db), *extra)
    assert code == 0, err
    return [json.loads(x) for x in out.splitlines() if x.strip()]


def _write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _count(db: Path) -> int:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT count(*) FROM events").fetchone()[0]


def _sidecars(log: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(log.glob("*.score.yaml"))}


def _tamper(value):
    """The same value, changed: a number grows, a string gains a suffix, a flag flips."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 40
    if isinstance(value, str):
        return value + "-forged"
    if isinstance(value, dict):
        for k in sorted(value):
            if not isinstance(value[k], (dict, list)) or value[k]:
                value[k] = _tamper(value[k])
                return value
    if isinstance(value, list) and value:
        value[0] = _tamper(value[0])
    return value


def _forged(line: dict, n: int, **changes) -> dict:
    out = json.loads(json.dumps(line))
    out["payload"] = _tamper(out["payload"])
    out.update({"idempotency_key": f"{line['idempotency_key']}|forged-{n}",
                "ledger": "00000000-0000-4000-8000-00000000f0e1", "origin_seq": 10_000 + n}, **changes)
    return out


def test_a_forged_line_of_any_type_is_refused_by_a_ledger_that_has_read_its_files(tmp_path: Path) -> None:
    gen = synth.generate(tmp_path / "gen", 24, seed=3)
    db = tmp_path / "l.sqlite"
    args = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db)]
    assert run_cli("ingest", *args)[0] == 0
    assert run_cli("backfill", "--rubric", "3.0.0", *args)[0] == 0
    lines = _export(db)
    by_type = {}
    for x in lines:
        by_type.setdefault(x["type"], x)
    assert {"iteration.recorded", "score.computed", "rubric.activated", "artifact.recorded"} <= set(by_type)
    before, disk = _count(db), _sidecars(gen.log)
    attempts = []
    for n, (type_, line) in enumerate(sorted(by_type.items())):
        forged = _forged(line, n)
        attempts += [
            [forged],                                       # a line alone, as the red team sent it
            [{**forged, "seq": 1}],                         # numbered as a whole export
            [*lines, {**forged, "seq": len(lines) + 1}],    # the ledger's own export, one line added
            [{**forged, "ledger": lines[0]["ledger"]}],     # claiming this very ledger
            [{k: v for k, v in forged.items() if k not in ("ledger", "origin_seq")}],  # naming no origin
            [lines[0], {**forged, "seq": 2}],               # behind a line the ledger holds
        ]
    for i, attempt in enumerate(attempts):
        code, _, err = run_cli("import", str(_write(tmp_path / f"a{i}.jsonl", attempt)), "--db", str(db))
        assert code == 1 and "nothing was imported" in err and len(err.strip().splitlines()) == 1, (i, err)
    assert len(attempts) >= 40
    assert _count(db) == before
    # a line the ledger holds, its payload changed under the same key: already present, so nothing
    same_key = [{**_forged(x, 0), "idempotency_key": x["idempotency_key"]} for x in by_type.values()]
    code, out, err = run_cli("import", str(_write(tmp_path / "same.jsonl", [{**x, "seq": i} for i, x in
                                                                           enumerate(same_key, 1)])), "--db", str(db))
    assert (code == 0 and "0 new" in out) or (code == 1 and "nothing was imported" in err), err
    assert _count(db) == before
    for step in (["ingest"], ["ingest", "--rescore-all"], ["rebuild"]):
        assert run_cli(*step, *args)[0] == 0
    assert _sidecars(gen.log) == disk
    # the ledger's own export again brings nothing new: taken, and changes nothing
    code, out, err = run_cli("import", str(_write(tmp_path / "own.jsonl", lines)), "--db", str(db))
    assert code == 0 and f"{len(lines)} events read, 0 new" in out, err


def test_a_part_of_an_export_is_not_a_restore(tmp_path: Path) -> None:
    gen = synth.generate(tmp_path / "gen", 8, seed=4)
    db = tmp_path / "l.sqlite"
    assert run_cli("ingest", "--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db))[0] == 0
    for i, part in enumerate([_export(db, "--after", "3"), _export(db, "--type", "score.computed"),
                              _export(db)[1:], [x for j, x in enumerate(_export(db)) if j != 4]]):
        fresh = tmp_path / f"fresh{i}.sqlite"
        code, _, err = run_cli("import", str(_write(tmp_path / f"p{i}.jsonl", part)), "--db", str(fresh))
        assert code == 1 and "an import takes a whole export" in err, err
        with sqlite3.connect(fresh) as c:
            assert c.execute("SELECT count(*) FROM events").fetchone()[0] == 0


def test_a_restore_with_forged_lines_is_corrected_by_the_files_at_its_first_scan(tmp_path: Path, empty_repo) -> None:
    """The red team's repro as a restore: iteration 64's record made to say 40 retries, and
    a record of an iteration no file holds. The restore takes them as history; the first
    ingest reads every file again, so iteration 64 scores what its file says, byte for
    byte the sidecar of a ledger that never saw the export, and the iteration with no
    file is gone."""
    need_fixtures()
    log = copy_log(REAL_LOG, tmp_path / "log")
    honest_db, db = tmp_path / "honest.sqlite", tmp_path / "restored.sqlite"
    args = ["--iteration-log", str(log), "--repo", str(empty_repo.path)]
    assert run_cli("ingest", *args, "--db", str(honest_db))[0] == 0
    honest = _sidecars(log)
    lines = _export(honest_db)
    rec = next(x for x in lines if x["type"] == "iteration.recorded" and x["payload"]["record"]["iteration"] == 64)
    forged = json.loads(json.dumps(rec))
    forged["payload"]["record"]["impl"]["retries"] = 40
    ghost = json.loads(json.dumps(rec))
    ghost["payload"]["record"]["iteration"] = 999
    ghost["payload"]["file"] = ghost["source_path"] = "iter-999.yaml"
    ghost["stream"] = rec["stream"].replace("iter-64.yaml", "iter-999.yaml")
    extra = [{**forged, "idempotency_key": rec["idempotency_key"] + "|forged", "ledger": "0" * 8 + "-0000-4000-8000-"
              + "0" * 12, "origin_seq": 9999}, {**ghost, "idempotency_key": rec["idempotency_key"] + "|ghost"}]
    restore = [*lines, *({**x, "seq": len(lines) + i} for i, x in enumerate(extra, 1))]
    for p in log.glob("*.score.yaml"):
        p.unlink()
    code, out, err = run_cli("import", str(_write(tmp_path / "restore.jsonl", restore)), "--db", str(db))
    assert code == 0, err
    assert not list(log.glob("*.score.yaml"))  # no sidecar from what an import brought
    assert run_cli("ingest", *args, "--db", str(db))[0] == 0
    assert _sidecars(log) == honest
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT json_extract(record, '$.impl.retries') FROM record_files"
                         " WHERE iteration = 64").fetchone()[0] != 40
        assert c.execute("SELECT count(*) FROM iterations WHERE iteration = 999").fetchone()[0] == 0
        h = sqlite3.connect(honest_db)
        assert (c.execute("SELECT iteration, value FROM latest_scores ORDER BY iteration").fetchall()
                == h.execute("SELECT iteration, value FROM latest_scores ORDER BY iteration").fetchall())
    for step in (["ingest", "--rescore-all"], ["rebuild"], ["score", "64"]):
        assert run_cli(*step, *args, "--db", str(db))[0] == 0
        assert _sidecars(log) == honest, step
