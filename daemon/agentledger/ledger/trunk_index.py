"""The iterations' commit references, resolved, and indexed both ways, so that a forward
move of the trunk is checked against what it brought (its new commits, their subjects,
the commits they revert) instead of against every iteration of the log: at 100,000
iterations, a pass over all of them cost a close ~110 ms."""

from __future__ import annotations

import re
from typing import Any

# a commit reference that names a commit by its (abbreviated) SHA: what it resolves to never
# changes (GitRepo.forget keeps exactly these across a forward move of the trunk)
_SHA_REF = re.compile(r"[0-9a-fA-F]{4,64}")


class TrunkIndex:
    def __init__(self, rows: list[tuple[int, str, str | None]], res: dict[str, Any]) -> None:
        """``rows``: (iteration, commit reference, summary); ``res``: reference -> its
        resolution (``GitRepo.resolve``: ``sha`` empty when it names no commit)."""
        self.refs: dict[int, tuple[str, str | None]] = {}
        self.res: dict[str, Any] = dict(res)
        # each index holds one member as itself and more as a set: nearly every reference
        # and SHA is one iteration's, and 200,000 one-element sets cost ~40 MB at 100,000
        self.by_ref: dict[str, Any] = {}
        self.by_sha: dict[str, Any] = {}  # resolved: the commit's SHA -> iterations
        self.by_subject: dict[str, Any] = {}  # unresolved: summary, folded -> iterations
        # what a forward move may make mean something else: names (a branch, a tag), and
        # SHA-like references that resolve to no commit, by their lower-case text (a new
        # commit whose SHA begins with one of them is looked up by its prefixes)
        self.names: set[str] = set()
        self.abbrevs: dict[str, Any] = {}
        for it, c, summary in rows:
            self.set(it, c, summary)

    def moved_refs(self, shas: set[str]) -> list[str]:
        """The references to resolve again after a forward move that brought ``shas``."""
        out = set(self.names)
        for sha in shas:
            for n in range(4, min(len(sha), 64) + 1):
                out.update(_members(self.abbrevs, sha[:n].lower()))
        return sorted(out)

    def set(self, it: int, ref: str, summary: str | None) -> None:
        """Iteration ``it`` now names ``ref`` (its resolution, if new, comes with ``resolve``)."""
        self.drop(it)
        self.refs[it] = (ref, summary)
        _add(self.by_ref, ref, it)
        self._classify(ref)
        self._index(it, ref, summary)

    def drop(self, it: int) -> None:
        old = self.refs.pop(it, None)
        if old is None:
            return
        self._unindex(it, *old)
        _discard(self.by_ref, old[0], it)
        if old[0] not in self.by_ref:  # no iteration names it any more
            self.names.discard(old[0])
            _discard(self.abbrevs, old[0].lower(), old[0])

    def _classify(self, ref: str) -> None:
        if not _SHA_REF.fullmatch(ref or ""):
            self.names.add(ref)
        elif self._sha(ref):  # a commit's SHA: what it names never changes
            _discard(self.abbrevs, ref.lower(), ref)
        else:
            _add(self.abbrevs, ref.lower(), ref)

    def resolve(self, fresh: dict[str, Any]) -> set[int]:
        """Take new resolutions; the iterations whose reference now resolves otherwise."""
        changed: set[int] = set()
        for ref, r in fresh.items():
            if r == self.res.get(ref):
                continue
            its = _members(self.by_ref, ref)
            for it in its:
                self._unindex(it, ref, self.refs[it][1])
            self.res[ref] = r
            for it in its:
                self._index(it, ref, self.refs[it][1])
            if its:
                self._classify(ref)
            changed.update(its)
        return changed

    def on_trunk(self, shas: set[str], subjects: set[str], runs: set[str]) -> set[int]:
        """The iterations a forward move can change: their commit is one of the new ones,
        or a new commit reverts it (``runs``: hex runs of revert messages), or it does not
        resolve and a new commit has its summary as subject; and with a revert, every one
        whose commit does not resolve: the trunk commit its summary matched (which this index
        does not hold) may be the one reverted."""
        out: set[int] = set()
        for sha in shas:
            out.update(_members(self.by_sha, sha))
        if runs:  # a revert on the trunk: rare
            for sha in self.by_sha:
                if any(sha.startswith(r) for r in runs):
                    out.update(_members(self.by_sha, sha))
            for subject in self.by_subject:
                out.update(_members(self.by_subject, subject))
        for subject in subjects:
            out.update(_members(self.by_subject, subject))
        return out

    def _sha(self, ref: str) -> str:
        r = self.res.get(ref)
        return r.sha if r is not None and r.sha else ""

    def _index(self, it: int, ref: str, summary: str | None, change: Any = None) -> None:
        """File ``it`` under its commit's SHA, or its summary when that does not resolve
        (``change``: ``_add``, or ``_discard`` to take it out again)."""
        change = change or _add
        sha = self._sha(ref)
        if sha:
            change(self.by_sha, sha, it)
        elif summary:
            change(self.by_subject, summary.strip().casefold(), it)

    def _unindex(self, it: int, ref: str, summary: str | None) -> None:
        self._index(it, ref, summary, _discard)


def _add(index: dict, key: str, member: Any) -> None:
    held = index.get(key, _NONE)
    if held is _NONE:
        index[key] = member
    elif isinstance(held, set):
        held.add(member)
    elif held != member:
        index[key] = {held, member}


def _discard(index: dict, key: str, member: Any) -> None:
    held = index.get(key, _NONE)
    if isinstance(held, set):
        held.discard(member)
        if len(held) == 1:
            index[key] = next(iter(held))
    elif held == member:
        del index[key]


def _members(index: dict, key: str) -> tuple | set:
    held = index.get(key, _NONE)
    return () if held is _NONE else held if isinstance(held, set) else (held,)


_NONE = object()
