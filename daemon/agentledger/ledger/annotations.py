"""Ingest of annotated trajectories: whole Markdown files, re-read when their stat
moved and recorded when their bytes did, in batches of 200 with their checkpoints."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable

from ..config import AnnotationSource
from ..sources import confine
from ..store import db as store
from ..store.log import FileCheckpoint
from . import commit
from .context import Context
from .outcome import Outcome

BATCH_FILES = 200


class Annotations:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self._seeded = False

    def ingest(self, src: AnnotationSource, rels: Iterable[str] | None = None) -> Outcome:
        """Read the annotation files of ``src`` that changed: all of them (a scan, which
        also notices removals), or just ``rels`` (a change notification's hint)."""
        from ..sources.annotations import events as A

        report = Outcome()
        if not src.path.is_dir():
            report.errors.append(f"{src.path}: annotations directory does not exist")
            return report
        self._seed_vocabulary()
        known = {r[0]: r[1:] for r in self.ctx.conn.execute(
            "SELECT path, dev, ino, size, mtime_ns, content_hash, last_seq FROM source_checkpoints WHERE source = ?"
            " AND kind = ?", (src.id, A.KIND))}
        full = rels is None
        try:
            todo = A.discover(src.path) if full else sorted(set(rels or ()))
        except OSError as exc:
            report.errors.append(f"{src.path}: {exc.strerror or exc}")
            return report
        if full:
            todo += sorted(set(known) - set(todo))  # gone since the last scan
        for start in range(0, len(todo), BATCH_FILES):
            changes = []  # rebound first: the last batch's parsed documents are freed before these are read
            for rel in todo[start:start + BATCH_FILES]:
                change = self._look(src, rel, known.get(rel), report)
                if change is not None:
                    changes.append(change)
            if not changes:
                continue
            commit.place(self.ctx.conn, [(f"{src.id}:{rel}", events, rel in known, known[rel][5] if rel in known else None)
                                         for rel, _, _, events in changes])
            with commit.transaction(self.ctx) as batch:
                for rel, sig, sha, events in changes:
                    commit.record(batch, events, report, src.path / rel,
                                  checkpoint=FileCheckpoint(src.id, rel, A.KIND, sig, sha))
            report.files_read += len(changes)
        return report

    def _look(self, src: AnnotationSource, rel: str, prev: tuple | None, report: Outcome):
        """(rel, stat | None, sha | None, events) for a file that changed, else None."""
        from ..sources.annotations import events as A

        path = src.path / rel
        limit = self.ctx.cfg.limits.max_file_bytes
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return (rel, None, None, [A.removed(src.id, rel, prev[4])]) if prev is not None else None
        except OSError as exc:
            report.errors.append(f"{path}: {exc.strerror or exc}")
            return None
        if not stat.S_ISREG(st.st_mode):
            return None  # symlinks, directories named *.md, fifos: not annotation files
        sig = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        if prev is not None and tuple(prev[:4]) == sig:
            return None
        if st.st_size > limit:
            sha = f"size:{st.st_size}"
            events = [] if prev and prev[4] == sha else [A.quarantine(
                src.id, rel, None, f"{st.st_size} bytes, over the max_file_bytes limit ({limit})", None,
                f"annotation|{src.id}|{rel}|{sha}|{prev[4] if prev else '-'}")]
            return rel, sig, sha, events
        try:  # inside the tree, and no link swapped in since the lstat above
            with confine.open_within(path, src.path) as fh:
                data = fh.read(limit + 1)
        except confine.Outside:
            return None  # (a link out, as the lstat would have found it)
        except OSError as exc:
            report.errors.append(f"{path}: {exc.strerror or exc}")
            return None
        sha = hashlib.sha256(data).hexdigest()
        same = prev is not None and prev[4] == sha
        return rel, sig, sha, [] if same else A.events_for(src.id, rel, data, prev[4] if prev else None, sha)

    def _seed_vocabulary(self) -> None:
        """The format's seed terms (``schema/annotations/vocabulary.toml``), once per process."""
        if self._seeded:
            return
        from ..paths import schema_dir
        from ..sources.annotations.events import seeds

        conn = self.ctx.conn
        rows = seeds(schema_dir())
        have = {tuple(r) for r in conn.execute("SELECT vocabulary, term, category FROM vocabulary_seeds")}
        if set(rows) != have:
            with store.write_transaction(conn):
                conn.execute("DELETE FROM vocabulary_seeds")
                conn.executemany("INSERT INTO vocabulary_seeds (vocabulary, term, category) VALUES (?,?,?)", rows)
        self._seeded = True
