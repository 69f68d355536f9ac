"""The atomic sidecar writer."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agentledger.output.sidecars import SidecarRefused, is_temp_name, unsafe_session_id, write_atomic


def test_write_skip_replace(tmp_path: Path) -> None:
    p = tmp_path / "iter-1.score.yaml"
    assert write_atomic(p, b"a\n") is True
    inode = p.stat().st_ino
    assert write_atomic(p, b"a\n") is False and p.stat().st_ino == inode  # same bytes: untouched
    assert write_atomic(p, b"b\n", durable=False) is True and p.read_bytes() == b"b\n"
    assert p.stat().st_ino != inode  # replaced by rename, never rewritten in place
    assert oct(p.stat().st_mode & 0o777) == "0o644"
    assert [q.name for q in tmp_path.iterdir()] == ["iter-1.score.yaml"]  # no temp file left


def test_symlink_target_is_refused_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("keep me")
    link = tmp_path / "log" / "iter-1.score.yaml"
    link.parent.mkdir()
    link.symlink_to(outside)
    with pytest.raises(SidecarRefused):
        write_atomic(link, b"score\n")
    assert outside.read_text() == "keep me" and link.is_symlink()


def test_failed_write_leaves_no_temp_file(tmp_path: Path, monkeypatch) -> None:
    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        write_atomic(tmp_path / "iter-1.score.yaml", b"x\n")
    assert list(tmp_path.iterdir()) == []


def test_session_id_safety_and_temp_names() -> None:
    assert unsafe_session_id("0bff2f58-962f-4852-abaf-38cd6151218e") is None
    assert unsafe_session_id("sess-abc") is None
    for bad in ("../../etc/x", "a/b", "..", "a\\b", "x\ny", "", "z" * 300):
        assert unsafe_session_id(bad), bad
    assert is_temp_name(".agentledger-abc.tmp") and is_temp_name(".fsops-1.tmp")
    assert is_temp_name("iter-3.hook-outcomes.yaml.tmp") and not is_temp_name("iter-3.yaml")


def test_what_a_pass_writes_is_known_without_reading_it_back(tmp_path: Path, monkeypatch) -> None:
    """A bulk pass records each sidecar it wrote (its stat key and sha256, from the file it
    wrote) in ``sidecar_seen``: the sync that ends an ingest then reads none of them."""
    import hashlib
    import sqlite3

    from agentledger.example import synth
    from agentledger.ledger import sidecar_sync

    from .conftest import run_cli

    gen = synth.generate(tmp_path / "gen", 40, seed=2)
    db = tmp_path / "l.sqlite"
    read_back: list[str] = []
    real = sidecar_sync.disk_sha
    monkeypatch.setattr(sidecar_sync, "disk_sha", lambda p: read_back.append(str(p)) or real(p))
    assert run_cli("ingest", "--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db))[0] == 0
    written = sorted(gen.log.glob("*.score.yaml"))
    assert len(written) > 40 and read_back == []
    with sqlite3.connect(db) as c:
        seen = {r[0]: r[1:] for r in c.execute("SELECT path, dev, ino, size, mtime_ns, sha256 FROM sidecar_seen")}
    for p in written:
        st = p.stat()
        assert seen[str(p)] == (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
                                hashlib.sha256(p.read_bytes()).hexdigest())


def test_a_switch_of_rubric_reads_no_sidecar_it_knows_to_differ(tmp_path: Path, monkeypatch) -> None:
    """A sidecar whose stat is the one ``sidecar_seen`` recorded holds the bytes recorded
    with it: a backfill to another rubric (and the switch back) knows every file differs
    without reading any; one edited by hand since is read, and rewritten like the rest."""
    from agentledger.example import synth
    from agentledger.ledger import sidecar_sync

    from .conftest import run_cli

    gen = synth.generate(tmp_path / "gen", 30, seed=3)
    common = ["--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(tmp_path / "l.sqlite")]
    assert run_cli("ingest", *common)[0] == 0
    read_back: list[str] = []
    real = sidecar_sync.disk_sha
    monkeypatch.setattr(sidecar_sync, "disk_sha", lambda p: read_back.append(str(p)) or real(p))
    edited = gen.log / "iter-7.score.yaml"
    for rubric in ("3.0.0", "2.1.0", "3.0.0"):  # a new rubric, then switches to ones the ledger holds
        if rubric == "2.1.0":
            edited.write_bytes(edited.read_bytes() + b"# by hand\n")
        assert run_cli("backfill", *common, "--rubric", rubric)[0] == 0
        sidecars = sorted(gen.log.glob("iter-*.score.yaml"))
        assert len(sidecars) >= 30
        assert all(f"rubric_version: {rubric}\n".encode() in p.read_bytes() for p in sidecars), rubric
    assert read_back == [str(edited)]  # once, by the first sync after the edit


def test_the_worker_processes_write_only_what_is_still_the_ledgers(tmp_path: Path) -> None:
    """A bulk pass of a command hands its writes to the worker pool (``PoolWriter``). Each
    run of writes is checked against the ledger under the sidecar lock, in the worker:
    bytes the ledger no longer holds are skipped, the others land (recorded for
    ``sidecar_seen``), and a write refused at the file (a symlink) comes back as an error."""
    import hashlib
    import sqlite3

    from agentledger.example import synth
    from agentledger.ledger.sidecar_writes import PoolWriter
    from agentledger.process import parallel

    from .conftest import run_cli

    gen = synth.generate(tmp_path / "gen", 12, seed=5)
    db = tmp_path / "l.sqlite"
    assert run_cli("ingest", "--iteration-log", str(gen.log), "--repo", str(gen.repo), "--db", str(db))[0] == 0
    with sqlite3.connect(db) as c:
        source, sha = c.execute("SELECT source, sidecar_sha256 FROM scores WHERE iteration = 2").fetchone()
    right = (gen.log / "iter-2.score.yaml").read_bytes()
    assert hashlib.sha256(right).hexdigest() == sha
    pool = parallel.executor()
    if pool is None:
        pytest.skip("one core: no worker pool to write with")
    (gen.log / "iter-2.score.yaml").unlink()
    (gen.log / "iter-3.score.yaml").unlink()
    (gen.log / "iter-3.score.yaml").symlink_to(tmp_path / "elsewhere")
    writer = PoolWriter(pool, db, "2.1.0")
    writer.submit(gen.log / "iter-1.score.yaml", b"stale\n", False, key=("scores", source, 1, "2.1.0", "0" * 64))
    writer.submit(gen.log / "iter-2.score.yaml", right, False, key=("scores", source, 2, "2.1.0", sha))
    writer.submit(gen.log / "iter-3.score.yaml", b"x\n", False)  # no key: not asked about
    writer.close()
    assert writer.superseded == 1
    written, errors, seen = writer.take()
    assert written["sidecars_written"] == 1
    assert [p for p, _ in errors] == [str(gen.log / "iter-3.score.yaml")] and not (tmp_path / "elsewhere").exists()
    assert (gen.log / "iter-2.score.yaml").read_bytes() == right
    assert b"stale" not in (gen.log / "iter-1.score.yaml").read_bytes()
    st = (gen.log / "iter-2.score.yaml").stat()
    assert seen == [(str(gen.log / "iter-2.score.yaml"), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, sha)]


# -- a run of writes that reuses the replaced files' inodes (output/spare.py) --------------------

def _run_over(directory: Path, names: list[str], data: bytes):
    from agentledger.output.spare import Spares

    with Spares() as spares:
        for name in names:
            assert write_atomic(directory / name, data, durable=False, compare=False, spares=spares)


def _sidecars(tmp_path: Path, n: int) -> list[str]:
    names = [f"iter-{i}.score.yaml" for i in range(n)]
    for i, name in enumerate(names):
        (tmp_path / name).write_bytes(b"old %d\n" % i)
    return names


def test_a_run_swaps_files_in_and_writes_the_next_into_the_inode_swapped_out(tmp_path: Path, monkeypatch) -> None:
    """Replacing a file frees its inode, and freeing is what costs (output/spare.py): a run
    frees none. Each target gets a new inode holding the new bytes; the one it had before
    holds the next target's bytes; one temp file is made for the whole run and nothing is
    left over."""
    from agentledger.output import sidecars

    made: list[str] = []
    real = sidecars._temp_file
    monkeypatch.setattr(sidecars, "_temp_file", lambda d: made.append(d) or real(d))
    names = _sidecars(tmp_path, 5)
    before = [(tmp_path / n).stat().st_ino for n in names]
    _run_over(tmp_path, names, b"new\n")
    assert len(made) == 1
    after = [(tmp_path / n).stat().st_ino for n in names]
    assert all((tmp_path / n).read_bytes() == b"new\n" for n in names)
    assert all(a != b for a, b in zip(after, before))
    assert after[1:] == before[:-1]  # the inode swapped out of one target carries the next
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)  # the last spare removed
    assert all(oct((tmp_path / n).stat().st_mode & 0o777) == "0o644" for n in names)


def test_a_file_someone_has_open_is_never_written_again(tmp_path: Path) -> None:
    """A reader that opened the old sidecar before the swap keeps reading its bytes: the
    kernel grants the write lease only when no other descriptor has the file open, so that
    inode is removed, not reused (without the lease check the reader sees the next file's
    bytes)."""
    names = _sidecars(tmp_path, 3)
    with open(tmp_path / names[0], "rb") as reader:
        _run_over(tmp_path, names, b"brand new bytes, longer than the old ones\n")
        assert reader.read() == b"old 0\n"
        assert os.fstat(reader.fileno()).st_nlink == 0  # removed, its reader's copy intact
    assert all((tmp_path / n).read_bytes() == b"brand new bytes, longer than the old ones\n" for n in names)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)


def test_a_file_with_another_name_is_never_written_again(tmp_path: Path) -> None:
    """A hard link elsewhere to a sidecar keeps that sidecar's bytes: a swapped-out file with
    a second name is removed from the directory, never reused."""
    names = _sidecars(tmp_path, 3)
    (tmp_path / "keep").mkdir()
    os.link(tmp_path / names[0], tmp_path / "keep" / "copy")
    _run_over(tmp_path, names, b"new\n")
    assert (tmp_path / "keep" / "copy").read_bytes() == b"old 0\n"
    assert (tmp_path / "keep" / "copy").stat().st_nlink == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another user")
def test_another_users_file_is_never_reused(tmp_path: Path) -> None:
    """A sidecar another user owns is replaced as before and its inode is not taken over
    (the new file would be theirs)."""
    names = _sidecars(tmp_path, 2)
    os.chown(tmp_path / names[0], 65534, 65534)
    _run_over(tmp_path, names, b"new\n")
    assert all((tmp_path / n).stat().st_uid == 0 for n in names)  # a reused inode would keep its owner
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)


def test_a_run_makes_a_missing_file_and_a_failed_write_leaves_nothing(tmp_path: Path, monkeypatch) -> None:
    """A target that does not exist yet is renamed into place as before; a write that fails
    after the spare was taken removes it (no temp file left in the user's directory)."""
    from agentledger.output.spare import Spares

    names = _sidecars(tmp_path, 2)
    with Spares() as spares:
        assert write_atomic(tmp_path / names[0], b"new\n", compare=False, spares=spares)
        assert write_atomic(tmp_path / "iter-9.score.yaml", b"made\n", compare=False, spares=spares)
        real = os.pwrite

        def full(fd, data, offset):
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(os, "pwrite", full)
        with pytest.raises(OSError):
            write_atomic(tmp_path / names[1], b"newer\n", compare=False, spares=spares)
        monkeypatch.setattr(os, "pwrite", real)
    assert (tmp_path / "iter-9.score.yaml").read_bytes() == b"made\n"
    assert (tmp_path / names[1]).read_bytes() == b"old 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*names, "iter-9.score.yaml"])


def test_without_renameat2_a_run_renames_as_before(tmp_path: Path, monkeypatch) -> None:
    """Where the call is missing (another libc, a file system that refuses the exchange),
    every write of a run still lands, by temp file and rename, and nothing is left over."""
    from agentledger.output import spare

    from agentledger.output import sidecars

    monkeypatch.setattr(spare, "_renameat2", lambda: None)
    made: list[str] = []
    real = sidecars._temp_file
    monkeypatch.setattr(sidecars, "_temp_file", lambda d: made.append(d) or real(d))
    names = _sidecars(tmp_path, 3)
    _run_over(tmp_path, names, b"new\n")
    assert len(made) == 3  # a temp file a write: nothing swapped, nothing reused
    assert all((tmp_path / n).read_bytes() == b"new\n" for n in names)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)


def test_a_directory_put_at_the_target_during_a_write_is_put_back(tmp_path: Path, monkeypatch) -> None:
    """A race: the target becomes a directory between the writer's look at it and the
    swap. The swap is undone (the directory stays where it was put, the temp file is
    removed) and the write fails, as a rename over a directory does."""
    import shutil

    from agentledger.output import spare

    names = _sidecars(tmp_path, 1)
    target = tmp_path / names[0]
    real = spare._renameat2()
    raced: list[bool] = []

    def racing_exchange(old, old_path, new, new_path, flags):
        if not raced:  # the first exchange: someone swaps a directory in just before it
            raced.append(True)
            target.unlink()
            target.mkdir()
            (target / "inside").write_text("keep")
        return real[0](old, old_path, new, new_path, flags)
    monkeypatch.setattr(spare, "_renameat2", lambda: (racing_exchange, real[1]))
    with pytest.raises(IsADirectoryError):
        _run_over(tmp_path, names, b"new\n")
    assert target.is_dir() and (target / "inside").read_text() == "keep"
    assert [p.name for p in tmp_path.iterdir()] == [names[0]]
    shutil.rmtree(target)


def test_a_fifo_swapped_out_by_a_bulk_write_is_never_waited_on(tmp_path: Path) -> None:
    """A bulk write swaps its new file into place (``renameat2(RENAME_EXCHANGE)``) and keeps
    what it swapped out for the next write, opening it for writing. When that is a FIFO
    planted at the sidecar's path after the writer looked (an open for writing waits for a
    reader), it is opened without waiting, not kept, and removed: the run goes on."""
    import threading

    from agentledger.output.spare import Spares

    fifo = tmp_path / ".agentledger-tmp-x"
    os.mkfifo(fifo)
    with Spares() as spares:
        keeper = threading.Thread(target=spares._keep, args=(str(tmp_path), str(fifo)))
        keeper.start()
        keeper.join(10)
        stuck = keeper.is_alive()
        if stuck:  # the old open waits for a reader: give it one, so that no thread outlives the test
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
            keeper.join()
        assert not stuck
        assert spares.take(str(tmp_path)) is None and not fifo.exists()
