"""Commit strings resolved to commits and their times, a batch per git process, and
cached for a repository (``GitRepo.resolve``): the scoring inputs of 10,000 iterations
name 10,000 commits, mostly abbreviated SHAs.

Apart from ``git.py`` (the repository, its trunk and what landed) because the cache has
rules of its own: what a forward move of the trunk keeps, and what a prefetch on another
thread resolved ahead of a pass.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

_HEXISH = re.compile(r"[0-9a-fA-F]{4,64}")
_FULL_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
FEW = 8  # commit strings that are all full SHAs resolve in one process, not two (``resolve``)
# what ``git show --name-only`` prints for each commit given (a merge's files as its dense
# combined diff gives them, as ``show`` does), with ``log --no-walk=unsorted --stdin``
NAME_ONLY = ("--no-ext-diff", "--no-textconv", "--name-only", "--diff-merges=dense-combined")


@dataclass(frozen=True)
class Resolution:
    sha: str = ""  # `raw.strip()^{commit}`, empty when it does not resolve
    commit_time: str | None = None  # ISO UTC of `raw` itself when it names a commit


class Commits:
    """A repository's resolved commit strings. ``run``: git with the repository's
    arguments (``GitRepo._run``)."""

    def __init__(self, run: Callable[..., object], files: Callable[[dict[str, tuple[str, ...]]], None]) -> None:
        """``files``: takes the files each commit changed, where a resolution learnt them."""
        self._run = run
        self._files = files
        self._resolved: dict[str, Resolution] = {}
        self._volatile: set[str] = set()  # resolved keys a forward move forgets (not a SHA's)
        self._resolving = threading.Lock()  # ``resolve`` runs on the caller's thread or a prefetch's
        self._prefetch: threading.Thread | None = None
        self._fresh_tip: str | None = None  # the trunk tip a prefetch resolved at (``forget``)

    def resolve(self, raws: list[str]) -> dict[str, Resolution]:
        """Resolve commit strings in one batch; results cached until ``forget`` (a commit
        never changes, so what a hex SHA resolved to outlives a forward move of the trunk;
        a name may move, so it does not)."""
        known = self._resolved
        got = [known.get(r) for r in raws]
        if None not in got:  # all resolved (``GitRepo.ahead``): not held up by its next part's
            return dict(zip(raws, got))  # (~60 ms of a backfill's first part, the workers idle)
        with self._resolving:
            return self._resolve(raws)

    def prefetch(self, raws: list[str], tip: Callable[[], str | None]) -> None:
        """``resolve(raws)`` on a thread, while the caller does work that leaves a core to
        git's processes (a full ingest reading the artifacts its records name, before the
        planner resolves every commit: ~0.3 s at 10,000). ``resolve`` waits for it, and
        ``forget(fresh_at=tip)`` keeps what it resolved at that very trunk tip (nothing
        older: the cache is emptied first). The caller ends it with ``join_prefetch``: it
        never outlives the pass that started it. ``tip``: the trunk's tip, None when the
        repository cannot be read (then nothing is resolved ahead). A failure resolves
        nothing: the planner asks git itself."""
        if self._prefetch is not None:
            return
        self.forget()  # what it leaves is all resolved at one tip, now

        def run() -> None:
            try:
                at = tip()
                if at is not None:
                    self.resolve(raws)
                    self._fresh_tip = at
            except Exception:  # noqa: BLE001 - only a head start; the pass resolves again
                pass

        self._prefetch = threading.Thread(target=run, name="agentledger-git-prefetch", daemon=True)
        self._prefetch.start()

    def join_prefetch(self) -> None:
        thread, self._prefetch = self._prefetch, None
        if thread is not None:
            thread.join()

    def _resolve(self, raws: list[str]) -> dict[str, Resolution]:
        todo = [r for r in dict.fromkeys(raws) if r not in self._resolved]
        if todo and len(todo) <= FEW and all(_FULL_SHA.fullmatch(r) for r in todo) and self._commits(todo):
            todo = []  # a few full SHAs of commits (the close-task hook's): one process said so, and when
        if todo:
            # One query per string: the string itself. It names a commit (the
            # usual case: a SHA, branch or lightweight tag), an annotated tag
            # (peel it in a second, small query), or nothing.
            direct = self._batch_check([r if r and r == r.strip() and "\n" not in r else "" for r in todo])
            peel: dict[str, str] = {}
            for raw, ans in zip(todo, direct):
                if ans is None or ans[1] != "commit":
                    s = raw.strip()
                    if s and "\n" not in s:
                        peel[raw] = f"{s}^{{commit}}"
            peeled = dict(zip(peel, self._batch_check(list(peel.values()))))
            commits: dict[str, str] = {}
            found: dict[str, Resolution] = {}
            for raw, ans in zip(todo, direct):
                direct_commit = ans[0] if ans is not None and ans[1] == "commit" else ""
                p = peeled.get(raw)
                sha = direct_commit or (p[0] if p is not None and p[1] == "commit" else "")
                commits[raw] = direct_commit
                found[raw] = Resolution(sha=sha)
                self._volatile.update(() if sha and _HEXISH.fullmatch(raw) else (raw,))
            times = self._commit_times([c for c in commits.values() if c], few=len(todo) <= FEW)
            for raw, c in commits.items():
                if c and c in times:
                    found[raw] = Resolution(sha=found[raw].sha, commit_time=times[c])
            self._resolved.update(found)  # each whole, time included: ``resolve`` reads without the lock
        return {r: self._resolved[r] for r in raws}

    def forget(self, *, keep_shas: bool = False, fresh_at: str | None = None) -> None:
        """Drop cached resolutions: names move and missing commits can appear. With
        ``keep_shas`` (the trunk only moved forward), keep what a hex SHA (full or
        abbreviated) resolved to, since an existing commit never changes. ``fresh_at``: the
        trunk tip the caller sees; what a prefetch resolved at that tip is kept (the
        prefetch emptied the cache first: nothing older is)."""
        with self._resolving:
            fresh, self._fresh_tip = self._fresh_tip, None
            if fresh is not None and fresh == fresh_at:
                return
            for raw in self._volatile if keep_shas else list(self._resolved):  # no pass over every SHA
                self._resolved.pop(raw, None)
            self._volatile.clear()

    def _commits(self, shas: list[str]) -> bool:
        """Resolve ``shas`` as the two queries below would, if each is a commit's full SHA:
        ``git log --no-walk`` prints each one's SHA and time, in the order given, or fails
        for a SHA that is missing or not a commit's (False: then nothing is resolved here).
        The same process lists the files each changed, the scoring's next question of them
        (the close-task hook's: one git process fewer)."""
        found = self._timed_with_files(shas)
        if found is None or [sha for sha, _, _ in found] != shas:
            return False  # (a tag's SHA prints its commit's)
        for sha, ts, _ in found:
            self._resolved[sha] = Resolution(sha=sha, commit_time=_iso(ts))
        self._files({sha: files for sha, _, files in found})
        return True

    def _timed_with_files(self, shas: list[str]) -> list[tuple[str, str, tuple[str, ...]]] | None:
        """(SHA, ``%ct``, files changed) of each commit from one ``git log --no-walk``,
        in the order given; None when git fails (a SHA that is not a commit's)."""
        proc = self._run("log", "--no-walk=unsorted", "--stdin", *NAME_ONLY, "--format=%x1e%H %ct",
                         input=("\n".join(shas) + "\n").encode())
        if proc.returncode != 0:
            return None
        found = []
        for head, files in name_only(proc.stdout):
            sha, _, ts = head.partition(" ")
            found.append((sha, ts, files))
        return found

    def _batch_check(self, queries: list[str]) -> list[tuple[str, str] | None]:
        real = [q for q in queries if q]
        results: list[tuple[str, str] | None] = [None] * len(queries)
        if not real:
            return results
        # --buffer: one write at the end, not one an object (~25 % of the call for 10,000)
        proc = self._run("cat-file", "--buffer", "--batch-check=%(objectname) %(objecttype)",
                         input=("\n".join(real) + "\n").encode("utf-8", "surrogateescape"))
        lines = proc.stdout.decode("utf-8", "replace").split("\n")
        it = iter(lines)
        for i, q in enumerate(queries):
            if not q:
                continue
            line = next(it, "")
            parts = line.rsplit(" ", 1)
            if len(parts) == 2 and parts[1] in ("commit", "tag", "tree", "blob") and \
                    re.fullmatch(r"[0-9a-f]{40,64}", parts[0]):
                results[i] = (parts[0], parts[1])
        return results

    def _commit_times(self, shas: list[str], *, few: bool = False) -> dict[str, str]:
        """Each commit's time (ISO UTC) from one ``git log --no-walk`` of their SHAs; a
        commit git gives no time for is left out. ``few``: a handful of commits (the
        close-task hook's), whose changed files the scoring asks for next: the same
        process lists them (one git process fewer; for a whole log, listing every
        commit's files costs more than the call it saves)."""
        shas = list(dict.fromkeys(shas))
        if not shas:
            return {}
        if few and (found := self._timed_with_files(shas)) is not None:
            self._files({sha: files for sha, _, files in found})
            return {sha: when for sha, ts, _ in found if (when := _iso(ts)) is not None}
        proc = self._run("log", "--no-walk=unsorted", "--stdin", "--format=%H %ct",
                         input=("\n".join(shas) + "\n").encode())
        times = {}
        for line in proc.stdout.decode().splitlines():
            sha, _, ts = line.partition(" ")
            when = _iso(ts)
            if when is not None:
                times[sha] = when
        return times


def _iso(ts: str) -> str | None:
    """A ``%ct`` as ISO UTC (None: git gave none)."""
    return datetime.fromtimestamp(int(ts), tz=timezone.utc).isoformat() if ts.lstrip("-").isdigit() else None


def name_only(out: bytes) -> list[tuple[str, tuple[str, ...]]]:
    """(the format's line, the files listed after it) of each commit in ``git log`` output
    whose format begins with ``%x1e`` and that lists files (``NAME_ONLY``)."""
    found = []
    for chunk in out.decode("utf-8", "replace").split("\x1e")[1:]:
        lines = chunk.split("\n")
        found.append((lines[0].strip(), tuple(ln.strip() for ln in lines[1:] if ln.strip())))
    return found
