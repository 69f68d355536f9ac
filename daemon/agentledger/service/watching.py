"""The service's watches: made before the catch-up scan, each directory watched as deep as
its source reads it, and one wait on them all.

The catch-up scan must begin once the watches exist (a change after it began is then
heard) and the service is ready when it ends. ``watchfiles.watch`` makes its watcher at its
generator's first step and returns from that step only at the first change or time-out, so
a warm restart waited a tick (100 ms) for nothing before it could scan. And it watches every
path to one depth: recursive, as the plans' and artifacts' trees need, it made the kernel
watches by walking every entry of the iteration-log directory as well (23,743 at 10,000
iterations: 117 ms, against 0.4 ms for a watch of that directory alone). Here the watchers
are made up front with watchfiles' own Rust watcher (``RustNotify``, the one
``watchfiles.watch`` drives, under its defaults and environment variables): one for the
flat directories (iteration logs, transcripts: their sources read no subdirectory) and one,
recursive, for the trees. A wait blocks on the flat directories' watcher (a closed
iteration's record lands there) and then takes what the trees' watcher holds, without
waiting; a change in a tree alone is heard at the next tick.

A configured directory that does not exist yet (a repository whose agent has written no
plan or verification artifact so far) cannot be watched: its nearest existing ancestor is
watched instead, for its own entries, and once a wait sees that ancestor gain the next
component on the way, the watches say so (``moved``) and the service makes them again,
then catches up with a scan (what was written there before the new watch existed). A
directory that exists is watched for the same way, through its parent: its watch dies with
it when a tool removes it (or renames it away) and makes it again, and it is then watched
anew as well.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import watchfiles
from watchfiles._rust_notify import RustNotify
from watchfiles.main import _default_debug, _default_force_polling, _default_poll_delay_ms

from ..output.sidecars import is_temp_name

Changes = set[tuple[watchfiles.Change, str]]


class Filter(watchfiles.DefaultFilter):
    """watchfiles' defaults, minus our own temp files and score sidecars."""

    def __call__(self, change: watchfiles.Change, path: str) -> bool:
        name = os.path.basename(path)
        if is_temp_name(name) or name.endswith(".score.yaml"):
            return False
        return super().__call__(change, path)


class Watches:
    """Watchers of ``flat`` (their entries only) and of ``trees`` (recursive), existing
    from the moment this is made, of those directories that exist then, of the parent of
    each of them and the nearest existing ancestor of each that does not (their entries
    only, for those directories' sake); ``close`` ends them."""

    def __init__(self, flat: list[Path], trees: list[Path], *, debounce_ms: int, step_ms: int = 20,
                 force_polling: bool | None = None) -> None:
        self.debounce_ms, self.step_ms = debounce_ms, step_ms
        self.filter = Filter()
        polling, delay, debug = _default_force_polling(force_polling), _default_poll_delay_ms(300), _default_debug(None)
        self._watchers: list[RustNotify] = []
        self.groups: list[tuple[list[Path], bool]] = []  # each watcher's directories and depth, in order
        self.watched = 0  # configured directories under watch
        self.missing: dict[Path, Path] = {}  # a configured directory not there -> the ancestor watched for it
        self.moved = False  # set by ``wait``: a configured directory appeared, came nearer, went or was replaced
        self._present: set[Path] = set()  # configured directories there, each watched for its entry
        self.replaced: dict[Path, None] = {}  # set by ``wait``: those whose entry changed (made again, removed, moved)
        self._ancestors: set[Path] = set()  # those watched for configured directories' entries
        self._alone: set[Path] = set()  # ... of which watched for that alone (their entries are not reported)
        ancestors = True
        for attempt in range(4):
            # only the directories that exist: the watcher refuses every path for one that does
            # not (not made yet, or removed meanwhile: a race with the user's tree, tried again)
            listed = list(dict.fromkeys([*flat, *trees]))
            present = {p for p in listed if p.is_dir()}  # (one stat a directory)
            here_trees = [p for p in trees if p in present]
            deep = set(here_trees)  # a directory in both is watched once, in depth
            here_flat = [p for p in flat if p in present and p not in deep]
            self.missing = {p: a for p in listed if p not in present
                            and (a := _nearest_existing(p.parent)) is not None} if ancestors else {}
            self._present = present if ancestors else set()
            watched_for = [*self.missing.values(), *(p.parent for p in listed if p in self._present and p.parent != p)]
            self._ancestors = set(watched_for)
            # an ancestor already watched for its entries (a flat directory, or inside a tree) needs no watch of its own
            guards = [a for a in dict.fromkeys(watched_for)
                      if a not in here_flat and not any(a == t or t in a.parents for t in here_trees)]
            self._alone = set(guards)
            # the watcher a wait blocks on comes first: the flat directories' (a closed record
            # lands there), else the trees'; ancestors of missing ones ride with the flat ones
            groups = [(here_flat + guards, False), (here_trees, True)] if here_flat else \
                [(here_trees, True), (guards, False)]
            self.groups = [(paths, recursive) for paths, recursive in groups if paths]
            try:
                for paths, recursive in self.groups or [([], False)]:  # (nothing to watch: one that times out)
                    self._watchers.append(RustNotify([str(p) for p in paths], debug, polling, delay, recursive, True))
                self.watched = len(here_flat) + len(here_trees)
                return
            except FileNotFoundError:
                self.close()
                if attempt == 3:
                    raise
            except Exception:
                self.close()
                if not (ancestors and guards):
                    raise
                ancestors = False  # an ancestor that cannot be watched: without them, as before
            except BaseException:
                self.close()
                raise

    def wait(self, timeout_ms: int, stop: threading.Event) -> Changes | None:
        """What the first watcher heard within ``timeout_ms`` (grouped by its debounce) and
        what the others hold by then, filtered: an empty set if nothing; None once ``stop``
        is set or a signal handler raised (the caller watches anew or stops)."""
        first, *others = self._watchers
        raw = first.watch(self.debounce_ms, self.step_ms, timeout_ms, stop)
        if raw == "timeout":
            raw = set()
        elif not isinstance(raw, set):
            return None
        for other in others:  # what it holds now: a step of 1 ms, no wait beyond it
            more = other.watch(self.debounce_ms, 1, 1, stop)
            if isinstance(more, set):
                raw |= more
            elif more != "timeout":
                return None
        if self._ancestors and raw:
            raw = self._past_ancestors(raw)
        return {(c, p) for c, p in ((watchfiles.Change(k), p) for k, p in raw) if self.filter(c, p)}

    def _past_ancestors(self, raw: set) -> set:
        """``raw`` less the entries of ancestors watched only for configured directories'
        sake, noting (``moved``) when a missing one, or an ancestor nearer to it, exists now
        (``mkdir -p`` makes several at once; each nearer one is watched in turn), or when one
        that was there had its entry changed: removed, renamed, or made again (its watch is
        gone with the directory it was on; a directory made again may even have its inode)."""
        paths = {p: Path(p) for _, p in raw}  # (one Path an entry: a burst names thousands)
        near = {*paths.values(), *(q.parent for q in paths.values())}  # an entry, or the ancestor itself going
        if near & self._ancestors:
            named = set(paths.values())
            went = [p for p in self._present if p in named]  # the directory's own entry, not one inside it
            self.replaced.update(dict.fromkeys(went))
            if went or self.appeared():
                self.moved = True
        alone = self._alone
        return {(k, p) for k, p in raw if paths[p].parent not in alone and paths[p] not in alone}

    def appeared(self) -> list[Path]:
        """The configured directories to watch anew: the missing ones that exist now, or
        whose nearest existing ancestor is not the one watched for them (a nearer one was
        made, or that one was removed), and those that were there and had their entry
        changed (``replaced``)."""
        return [*(p for p, a in self.missing.items() if _nearest_existing(p) != a),
                *self.replaced]

    def close(self) -> None:
        for w in self._watchers:
            w.close()
        self._watchers = []


def _nearest_existing(path: Path) -> Path | None:
    """The nearest ancestor of ``path`` that is a directory (``path`` itself when it is)."""
    for p in (path, *path.parents):
        if p.is_dir():
            return p
    return None
