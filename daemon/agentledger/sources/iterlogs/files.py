"""The iteration-log source: find files, notice changes, read, parse, propose events.

Records are exactly ``iter-<N>.yaml`` and ``historical.yaml``; side files are
``iter-<N>.hook-outcomes.yaml`` and ``iter-<N>.labels.yaml``; repository
artifacts (verifier results, review decisions, plans' ``TASKS.yaml``) are read
from the repo. Everything else in the directory (score sidecars, temp files)
is ignored.

A file is re-read only when its stat changed since its checkpoint, and an
event is proposed only when its content hash changed. Nothing here raises on
bad input: every failure becomes a ``source.quarantined`` event with the path,
position and reason. This module never touches the store; ``ingest`` commits
what it proposes.
"""

from __future__ import annotations

import errno
import os
import stat as statmod
from collections.abc import Iterable
from dataclasses import dataclass, field

from ... import names
from ...config import IterationLogSource
from ...names import HISTORICAL, HOOK, LABELS, MISNAMED, RECORD
from ...output.sidecars import is_temp_name
from ...store.events import Event, content_hash
from ...terminal import shown
from . import artifacts as A
from .. import confine

LOG_KINDS = (RECORD, HISTORICAL, HOOK, LABELS, MISNAMED)
ARTIFACT_KINDS = (A.VERIFIER_RESULT, A.REVIEW_DECISION, A.TASKS)

TASKS_GLOB = ".agents/workflow/plans/*/TASKS.yaml"


def classify(name: str) -> tuple[str, int | None] | None:
    """(kind, N from the name) for a file of the log directory, None to ignore it: the
    grammar's (``names.parse``), less our sidecars and temp files. A name like an
    iteration's file but not spelled as one (``iter-066.hook-outcomes.yaml``) is
    ``MISNAMED``: quarantined, never any iteration's."""
    if not name.endswith(".yaml") or name.endswith(".score.yaml") or is_temp_name(name):
        return None  # (score sidecars are most names of a scored log)
    return names.parse(name)


@dataclass(frozen=True)
class Candidate:
    """A file a scan may read, and the tree it must resolve inside (``root``: the log
    directory, or the repository for artifacts and plans; ``confine.py``). Every candidate
    names its tree: a default of the file's own directory let a directory link on the way
    lead out. Its paths are strings: a cold ingest makes a candidate for each of ~13,000
    files before the workers have a job, and sends each to a worker, which unpickled a
    ``Path`` in 12-20 us (a string: ~2 us)."""

    kind: str
    rel: str  # name in the log dir, or repo-relative path for artifacts
    abs: str
    root: str
    n: int | None = None  # N from the file name (side files)


def in_log(src: IterationLogSource, name: str, kind: str, n: int | None) -> Candidate:
    base = str(src.path)
    return Candidate(kind, name, f"{base}{os.sep}{name}", base, n)


def in_repo(src: IterationLogSource, kind: str, rel: str) -> Candidate:
    repo = str(src.repo)
    return Candidate(kind, rel, f"{repo}{os.sep}{rel}", repo)


@dataclass
class Observation:
    """What reading one candidate found; ``ingest`` turns it into committed events."""

    cand: Candidate
    stat: tuple[int, int, int, int] | None  # dev, ino, size, mtime_ns; None when missing
    digest: str | None = None  # content hash; "error:…" for unreadable; None when missing
    events: list[Event] = field(default_factory=list)  # proposed, keys completed at commit
    unchanged: bool = False  # content hash equals the checkpoint's: only the stat moves
    prev: str | None = None  # the checkpoint's content hash (set by the committing process)
    after: int | None = None  # the checkpoint's last seq (ditto; ``commit.place``)


@dataclass
class ReadLimits:
    max_file_bytes: int = 8 * 1024 * 1024


def log_candidates(src: IterationLogSource, names: Iterable[str] | None = None) -> list[Candidate]:
    """Candidates in the log directory: all of it, or just ``names``.

    Raises ``OSError`` when the directory cannot be listed: an empty answer would
    read as "every file was removed"."""
    if names is None:
        with os.scandir(src.path) as it:
            names = [e.name for e in it]
    out = []
    for name in names:
        c = classify(name)
        if c is not None:
            out.append(in_log(src, name, *c))
    return out


def changed_log_candidates(src: IterationLogSource, logs: dict[str, tuple[int, int, int, int] | None],
                           known: dict[str, tuple[int, int, int, int]]) -> list[Candidate]:
    """The log files of a listing (``logs``: name -> stat key, ``listing.Listing``) whose
    stat is not the ``known`` one (name -> stat key of a file last read whole and fine).
    A scan that finds nothing changed costs the listing, no read and no candidate; a
    file whose stat could not be taken is a candidate (``observe`` says why)."""
    out = []
    for name, key in logs.items():
        if key is None or known.get(name) != key:
            out.append(in_log(src, name, *classify(name)))  # type: ignore[misc]
    return out


def tasks_candidates(src: IterationLogSource) -> list[Candidate]:
    plans = src.repo / ".agents" / "workflow" / "plans"
    try:
        entries = sorted(os.scandir(plans), key=lambda e: e.name.encode("utf-8", "surrogateescape"))
    except OSError:
        return []
    out = []
    for e in entries:
        cand = in_repo(src, A.TASKS, f".agents/workflow/plans/{e.name}/TASKS.yaml")
        if os.path.lexists(cand.abs):
            out.append(cand)
    return out


def artifact_candidates(src: IterationLogSource, refs: Iterable[tuple[str, str]],
                        known: dict[str, tuple[int, int, int, int]] | None = None) -> list[Candidate]:
    """``refs``: (kind, raw path as written in a record). With ``known`` (repo-relative
    path -> stat key of an artifact last read whole and fine), only those whose stat
    moved: a full scan of 10,000 iterations checks ~2,500 artifacts, nearly always
    unchanged, and one that has not moved costs a stat, no candidate."""
    out: dict[str, Candidate] = {}
    done: set[str] = set()
    root = f"{src.repo}{os.sep}"
    for kind, raw in refs:
        rel = A.resolve_artifact_path(raw)
        if rel is None or rel in done:
            continue
        done.add(rel)
        if known is not None and (key := known.get(rel)) is not None:
            try:
                st = os.stat(root + rel)
                if (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns) == key:
                    continue
            except OSError:
                pass
        out[rel] = in_repo(src, kind, rel)
    return list(out.values())


def stat_of(path: str) -> tuple[tuple[int, int, int, int] | None, OSError | None, os.stat_result | None]:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):  # a dangling symlink is a bad file, not a missing one
            return (0, 0, 0, 0), FileNotFoundError(errno.ENOENT, "no such file or directory (dangling symlink)"), None
        return None, None, None
    except OSError as exc:  # ELOOP, EACCES, …
        try:
            lst = os.lstat(path)
            key = (lst.st_dev, lst.st_ino, lst.st_size, lst.st_mtime_ns)
        except OSError:
            key = (0, 0, 0, 0)
        return key, exc, None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns), None, st


def observe(src: IterationLogSource, cand: Candidate, checkpoint: dict | None,
            limits: ReadLimits) -> Observation | None:
    """Stat, and when needed read and parse, one candidate. None when nothing changed."""
    key, err, st = stat_of(cand.abs)
    if key is None:
        if checkpoint is None or checkpoint.get("content_hash") is None:
            return None
        ev = Event("file.removed", f"{src.id}:{cand.rel}", src.id, "",
                   {"file": cand.rel, "kind": cand.kind}, source_path=cand.rel)
        return Observation(cand, None, None, [ev])
    known = checkpoint.get("content_hash") if checkpoint is not None else None
    if known and checkpoint.get("stat") == key and not known.startswith("error:"):  # type: ignore[union-attr]
        return None  # a file that could not be read is tried again (chmod changes no stat key)
    data: bytes | None = None
    reason = None
    if err is not None:
        reason = f"read {cand.abs}: {err.strerror or err}"
    elif st is not None and statmod.S_ISDIR(st.st_mode):
        reason = f"read {cand.abs}: is a directory"
    elif st is not None and not statmod.S_ISREG(st.st_mode):
        reason = f"read {cand.abs}: not a regular file"
    elif st is not None and st.st_size > limits.max_file_bytes:
        reason = (f"file is {st.st_size} bytes, over the max_file_bytes limit "
                  f"({limits.max_file_bytes}); not read")
    else:
        try:
            with confine.open_within(cand.abs, cand.root) as fh:
                # Size the read from stat (a read(limit) would allocate the whole
                # limit each time); a file that grew meanwhile is read on, to the limit.
                data = fh.read(st.st_size + 1) if st is not None else b""
                if st is None or len(data) > st.st_size:
                    data += fh.read(limits.max_file_bytes + 1 - len(data))
            if len(data) > limits.max_file_bytes:
                data, reason = None, f"file grew over the max_file_bytes limit ({limits.max_file_bytes}); not read"
        except OSError as exc:
            reason = f"read {cand.abs}: {exc.strerror or exc}"
    digest = content_hash(data) if data is not None else f"error:{content_hash((reason or '').encode())}"
    if checkpoint is not None and checkpoint.get("content_hash") == digest:
        return Observation(cand, key, digest, [], unchanged=True)
    obs = Observation(cand, key, digest)
    if data is None:
        _unreadable(src, obs, reason or "unreadable")
    else:
        _parse(src, obs, data, limits)
    return obs


def _event(src: IterationLogSource, obs: Observation, type_: str, payload: dict,
           position: str | None = None) -> Event:
    return Event(type_, f"{src.id}:{obs.cand.rel}", src.id, "", payload,
                 source_path=obs.cand.rel, source_position=position)


def quarantine_event(src: IterationLogSource, obs: Observation, reason: str, *, line: int | None = None,
                     column: int | None = None, byte_offset: int | None = None) -> Event:
    pos = None
    if line is not None:
        pos = f"{line}:{column}" if column is not None else str(line)
    elif byte_offset is not None:
        pos = f"@{byte_offset}"
    payload = {"path": obs.cand.rel, "kind": obs.cand.kind, "reason": confine.bounded(reason), "line": line,
               "column": column, "byte_offset": byte_offset, "content_hash": obs.digest}
    return _event(src, obs, "source.quarantined", payload, pos)


def _unreadable(src: IterationLogSource, obs: Observation, reason: str) -> None:
    from ...model import HookOutcomes, Labels, to_jsonable  # the data model: imported by a read

    c = obs.cand
    reason = confine.bounded(reason)
    if c.kind == HOOK:
        outcome = HookOutcomes(error=reason, read_error=True)
        obs.events.append(_event(src, obs, "hook_outcomes.recorded",
                                 {"file": c.rel, "iteration": c.n, "outcome": to_jsonable(outcome)}))
    elif c.kind == LABELS:
        outcome = Labels(error=f"labels: read iter-{c.n} sidecar: {reason}")
        obs.events.append(_event(src, obs, "labels.recorded",
                                 {"file": c.rel, "iteration": c.n, "outcome": to_jsonable(outcome)}))
    obs.events.append(quarantine_event(src, obs, reason))


def _decode_text(src: IterationLogSource, obs: Observation, data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        reason = f"invalid UTF-8 at byte offset {exc.start} (line {line})"
        if obs.cand.kind in (HOOK, LABELS):
            _unreadable(src, obs, reason)
        else:
            obs.events.append(quarantine_event(src, obs, reason, line=line, byte_offset=exc.start))
        return None


def _parse(src: IterationLogSource, obs: Observation, data: bytes, limits: ReadLimits) -> None:
    c = obs.cand
    if c.kind == MISNAMED:
        obs.events.append(quarantine_event(src, obs, f"{shown(c.rel)} is not an iteration file name (iter-N.yaml,"
                                                     " iter-N.hook-outcomes.yaml or iter-N.labels.yaml, N ASCII digits"
                                                     " with no leading zero): not ingested"))
        return
    text = _decode_text(src, obs, data)
    if text is None:
        return
    # The YAML parser and the data model are imported by the first file that is read:
    # a scan that finds nothing changed (the common case) never loads them.
    from ...model import to_jsonable
    from ...reference.yamlv3.decode import YamlError
    from .records import parse_historical, parse_record
    from .sidefiles import parse_hook_outcomes, parse_labels
    try:
        if c.kind == RECORD:
            rec = parse_record(text)
            # a file that says another iteration would take the place of that one's record
            if rec.iteration < 0 or c.rel != names.iteration_file(RECORD, rec.iteration):
                obs.events.append(quarantine_event(
                    src, obs, f"{shown(c.rel)} says iteration {rec.iteration}, whose record is iter-{rec.iteration}.yaml;"
                              " not ingested (an iteration's record is the file named for it)"))
                return
            obs.events.append(_event(src, obs, "iteration.recorded",
                                     {"file": c.rel, "record": rec.to_json()}))
            sid = rec.agent.session_id
            why = names.unsafe_session_id(sid) if sid else None
            if why:
                from ...reference.fmt import go_quote

                obs.events.append(quarantine_event(
                    src, obs, f"session_id {go_quote(sid)} {why}; its session sidecar is refused"))
        elif c.kind == HISTORICAL:
            recs = parse_historical(text)
            obs.events.append(_event(src, obs, "historical.recorded",
                                     {"file": c.rel, "records": [r.to_json() for r in recs]}))
        elif c.kind == HOOK:
            outcome = parse_hook_outcomes(text)
            obs.events.append(_event(src, obs, "hook_outcomes.recorded",
                                     {"file": c.rel, "iteration": c.n, "outcome": to_jsonable(outcome)}))
            if outcome.error:
                obs.events.append(quarantine_event(src, obs, outcome.error))
        elif c.kind == LABELS:
            outcome = parse_labels(text, c.n or 0)
            obs.events.append(_event(src, obs, "labels.recorded",
                                     {"file": c.rel, "iteration": c.n, "outcome": to_jsonable(outcome)}))
            if outcome.error:
                obs.events.append(quarantine_event(src, obs, outcome.error))
        else:
            art = A.parse_artifact(c.kind, text)
            obs.events.append(_event(src, obs, "artifact.recorded",
                                     {"path": c.rel, "artifact": to_jsonable(art)}))
    except YamlError as exc:
        obs.events.append(quarantine_event(src, obs, exc.message, line=exc.line, column=exc.column))
    except RecursionError:
        obs.events.append(quarantine_event(src, obs, "document nests too deeply"))
    except Exception as exc:  # noqa: BLE001 - a parser bug must not stop ingestion
        obs.events.append(quarantine_event(src, obs, f"internal parse error: {type(exc).__name__}: {exc}"))
