"""The iterations' commit references, resolved, and indexed both ways, so that a forward
move of the trunk is checked against what it brought (its new commits, their subjects,
the commits they revert) instead of against every iteration of the log: at 100,000
iterations, a pass over all of them cost a close ~110 ms."""

from __future__ import annotations

from typing import Any


class TrunkIndex:
    def __init__(self, rows: list[tuple[int, str, str | None]], res: dict[str, Any]) -> None:
        """``rows``: (iteration, commit reference, summary); ``res``: reference -> its
        resolution (``GitRepo.resolve``: ``sha`` empty when it names no commit)."""
        self.refs: dict[int, tuple[str, str | None]] = {}
        self.res: dict[str, Any] = dict(res)
        self.by_ref: dict[str, set[int]] = {}
        self.by_sha: dict[str, set[int]] = {}  # resolved: the commit's SHA -> iterations
        self.by_subject: dict[str, set[int]] = {}  # unresolved: summary, folded -> iterations
        self.unproven: set[str] = set()  # references not yet seen to be a resolved commit's SHA
        for it, c, summary in rows:
            self.set(it, c, summary)

    def set(self, it: int, ref: str, summary: str | None) -> None:
        """Iteration ``it`` now names ``ref`` (its resolution, if new, comes with ``resolve``)."""
        self.drop(it)
        self.refs[it] = (ref, summary)
        self.by_ref.setdefault(ref, set()).add(it)
        self.unproven.add(ref)
        self._index(it, ref, summary)

    def drop(self, it: int) -> None:
        old = self.refs.pop(it, None)
        if old is None:
            return
        self._unindex(it, *old)
        _discard(self.by_ref, old[0], it)

    def resolve(self, fresh: dict[str, Any]) -> set[int]:
        """Take new resolutions; the iterations whose reference now resolves otherwise."""
        changed: set[int] = set()
        for ref, r in fresh.items():
            if r == self.res.get(ref):
                continue
            its = self.by_ref.get(ref, set())
            for it in its:
                self._unindex(it, ref, self.refs[it][1])
            self.res[ref] = r
            for it in its:
                self._index(it, ref, self.refs[it][1])
            changed |= its
        return changed

    def on_trunk(self, shas: set[str], subjects: set[str], runs: set[str]) -> set[int]:
        """The iterations a forward move can change: their commit is one of the new ones,
        or a new commit reverts it (``runs``: hex runs of revert messages), or it does not
        resolve and a new commit has its summary as subject."""
        out: set[int] = set()
        for sha in shas:
            out |= self.by_sha.get(sha, set())
        if runs:  # a revert on the trunk: rare
            for sha, its in self.by_sha.items():
                if any(sha.startswith(r) for r in runs):
                    out |= its
        for subject in subjects:
            out |= self.by_subject.get(subject, set())
        return out

    def _sha(self, ref: str) -> str:
        r = self.res.get(ref)
        return r.sha if r is not None and r.sha else ""

    def _index(self, it: int, ref: str, summary: str | None) -> None:
        sha = self._sha(ref)
        if sha:
            self.by_sha.setdefault(sha, set()).add(it)
        elif summary:
            self.by_subject.setdefault(summary.strip().casefold(), set()).add(it)

    def _unindex(self, it: int, ref: str, summary: str | None) -> None:
        sha = self._sha(ref)
        if sha:
            _discard(self.by_sha, sha, it)
        elif summary:
            _discard(self.by_subject, summary.strip().casefold(), it)


def _discard(index: dict[str, set[int]], key: str, it: int) -> None:
    its = index.get(key)
    if its is not None:
        its.discard(it)
        if not its:
            del index[key]
