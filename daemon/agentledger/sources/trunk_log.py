"""The trunk's history (``git log <trunk>``), read lazily, newest first, for one tip.

Scoring one recent iteration (the close-task hook) reads only the newest commits; a
batch reads the log once. ``GitRepo.trunk_log`` keeps one per repository and extends it
when the trunk fast-forwards.
"""

from __future__ import annotations

import re
import subprocess
import threading

HEX_RUNS = re.compile(r"[0-9a-fA-F]+")  # in a revert's body: the SHAs it names, abbreviated or whole


def _equal_fold(a: str, b: str) -> bool:
    """Go strings.EqualFold (simple case folding), closely enough."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x != y and x.lower() != y.lower() and x.upper() != y.upper():
            return False
    return True


class TrunkLog:
    """``git log <trunk>`` read lazily, newest first, cached for one tip.

    Each commit gets an ordinal that grows with age (the newest read so far is
    ``newest``), so "commits above ``sha``" are those with a smaller ordinal.
    When the trunk fast-forwards linearly, ``extend`` puts the new commits in
    front with smaller ordinals instead of reading the whole log again."""

    def __init__(self, repo, tip: str | None):
        """``repo``: the ``GitRepo`` whose trunk this is (it starts the git process)."""
        self.repo = repo
        self.tip = tip
        self.index: dict[str, int] = {}  # sha -> ordinal
        self.sha_at: dict[int, str] = {}
        self.subject_at: dict[int, str] = {}
        self.revert_prefix: dict[str, int] = {}  # hex run -> newest ordinal whose revert body has it
        self.revert_lengths: list[int] = []  # the lengths of those runs, ascending (first_revert looks up only these)
        self.by_subject: dict[str, list[int]] = {}  # casefolded subject -> ordinals, newest first
        self.newest = 0
        self._next = 0  # ordinal of the next older commit read
        self._proc: subprocess.Popen[bytes] | None = None
        self._buf = b""
        self._eof = tip is None
        # held while reading: ``read_all`` may run on a thread of its own (``GitRepo``
        # reads a batch's log ahead of it), and a reader on another waits for it
        self._reading = threading.Lock()

    def _start(self) -> None:
        self._proc = self.repo.stream("log", self.tip or self.repo.trunk, "--format=%H%x1f%s%x1f%B%x1e")

    def _read_more(self) -> bool:
        if self._eof:
            return False
        if self._proc is None:
            self._start()
        assert self._proc is not None and self._proc.stdout is not None
        chunk = self._proc.stdout.read1(1 << 16)
        if not chunk:
            self._finish()
            if self._buf.strip():
                self._add(self._buf, self._take_older())
            self._buf = b""
            return True
        self._buf += chunk
        *records, self._buf = self._buf.split(b"\x1e")
        for rec in records:
            if rec.strip():
                self._add(rec, self._take_older())
        return True

    def _take_older(self) -> int:
        n = self._next
        self._next += 1
        return n

    def _add(self, rec: bytes, ordinal: int, *, front: bool = False) -> None:
        text = rec.decode("utf-8", "replace").strip()
        sha, _, rest = text.partition("\x1f")
        subject, _, body = rest.partition("\x1f")
        if sha in self.index:
            return
        self.index[sha] = ordinal
        self.sha_at[ordinal] = sha
        self.subject_at[ordinal] = subject.strip()
        if "revert" in body.lower():
            for run in {r.lower() for r in HEX_RUNS.findall(body) if 7 <= len(r) <= 40}:
                if run not in self.revert_prefix or ordinal < self.revert_prefix[run]:
                    self.revert_prefix[run] = ordinal
                if len(run) not in self.revert_lengths:
                    self.revert_lengths = sorted({*self.revert_lengths, len(run)})
        ords = self.by_subject.setdefault(subject.strip().casefold(), [])
        if front:
            ords.insert(0, ordinal)
        else:
            ords.append(ordinal)

    def extend(self, new_tip: str, records: list[bytes]) -> None:
        """The trunk moved from ``self.tip`` to ``new_tip`` by ``records`` (``old..new``,
        newest first, no merges): they become the newest commits."""
        for i, rec in enumerate(reversed(records)):  # oldest of the new ones first
            self._add(rec, self.newest - 1 - i, front=True)
        self.newest -= len(records)
        self.tip = new_tip

    def _finish(self) -> None:
        self._eof = True
        if self._proc is not None:
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            try:
                self._proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover
                self._proc.kill()
            self._proc = None

    def close(self) -> None:
        with self._reading:
            if self._proc is not None and not self._eof:
                self._proc.kill()
                self._proc.wait()  # SIGKILL: at once (a wait with a timeout polls in sleeps)
                self._finish()

    def read_all(self, stop: threading.Event | None = None) -> None:
        """The whole log; ``stop`` (set by another thread) ends the reading before its next
        chunk, and a later call reads on from there."""
        with self._reading:
            while (stop is None or not stop.is_set()) and self._read_more():
                pass

    def position(self, sha: str) -> int | None:
        with self._reading:
            while sha not in self.index:
                if not self._read_more():
                    return None
            return self.index[sha]

    @property
    def shas(self) -> dict[int, str]:
        return self.sha_at

    def first_revert(self, sha: str, stop: int) -> str:
        """Newest commit above ordinal ``stop`` whose body reverts ``sha`` (spec §4.1 step 5).

        A body reverts ``sha`` when it says "revert" and one of its hex runs
        (7–40 digits) is a prefix of ``sha``: look up each prefix of ``sha`` as long as
        such a run. The runs of a log come in a few lengths; a batch asks for every
        iteration (a prefix of each length from 7 to 40: 44 ms at 10,000, 3 ms by length)."""
        best = stop
        for length in self.revert_lengths:
            if length > len(sha):
                break
            i = self.revert_prefix.get(sha[:length])
            if i is not None and i < best:
                best = i
        return self.sha_at[best] if best < stop else ""

    def subject_match(self, summary: str) -> int | None:
        """Newest commit whose trimmed subject equals ``summary`` (Go EqualFold)."""
        key = summary.casefold()
        while True:
            for i in self.by_subject.get(key, ()):
                if _equal_fold(self.subject_at[i], summary):
                    return i
            if not self._read_more():
                return None


def range_facts(repo, old: str, new: str) -> tuple[set[str], set[str], set[str]]:
    """Commits in ``old..new`` of the ``GitRepo`` ``repo``: their SHAs, case-folded
    subjects, and the hex runs of those whose body says revert (what can change a
    record's ``landed``)."""
    proc = repo._run("log", f"{old}..{new}", "--format=%H%x1f%s%x1f%B%x1e")
    shas, subjects, runs = set(), set(), set()
    for rec in proc.stdout.decode("utf-8", "replace").split("\x1e"):
        rec = rec.strip()
        if not rec:
            continue
        sha, _, rest = rec.partition("\x1f")
        subject, _, body = rest.partition("\x1f")
        shas.add(sha)
        subjects.add(subject.strip().casefold())
        if "revert" in body.lower():
            runs |= {r.lower() for r in HEX_RUNS.findall(body) if 7 <= len(r) <= 40}
    return shas, subjects, runs
