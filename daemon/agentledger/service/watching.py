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
    from the moment this is made, of those directories that exist then; ``close`` ends them."""

    def __init__(self, flat: list[Path], trees: list[Path], *, debounce_ms: int, step_ms: int = 20,
                 force_polling: bool | None = None) -> None:
        self.debounce_ms, self.step_ms = debounce_ms, step_ms
        self.filter = Filter()
        polling, delay, debug = _default_force_polling(force_polling), _default_poll_delay_ms(300), _default_debug(None)
        self._watchers: list[RustNotify] = []
        self.watched = 0  # directories under watch
        for attempt in range(3):
            # only the directories that exist: the watcher refuses every path for one that does
            # not (not made yet, or removed meanwhile: a race with the user's tree, tried again)
            flat, trees = [p for p in flat if p.is_dir()], [p for p in trees if p.is_dir()]
            deep = set(trees)  # a directory in both is watched once, in depth
            groups = [(paths, recursive) for paths, recursive in
                      (([p for p in flat if p not in deep], False), (trees, True)) if paths]
            try:
                for paths, recursive in groups or [([], False)]:  # (nothing to watch: one that times out)
                    self._watchers.append(RustNotify([str(p) for p in paths], debug, polling, delay, recursive, True))
                self.watched = sum(len(paths) for paths, _ in groups)
                return
            except FileNotFoundError:
                self.close()
                if attempt == 2:
                    raise
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
        return {(c, p) for c, p in ((watchfiles.Change(k), p) for k, p in raw) if self.filter(c, p)}

    def close(self) -> None:
        for w in self._watchers:
            w.close()
        self._watchers = []

