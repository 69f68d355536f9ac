"""The tree a source reads is the tree configured (#56): each iteration-log directory
(and its repository) is pinned by device and inode the first time a pass finds it, and
checked on every pass after. A configured root that has turned into a symbolic link, or
into another directory (``mv iteration-log iteration-log.real; ln -s OUTSIDE
iteration-log`` while the service watches), is refused and reported: nothing is read
from it and no sidecar is written into it until the process starts again and pins what
is there then."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from ..config import IterationLogSource
from ..terminal import shown


@dataclass
class Roots:
    pins: dict[str, tuple[int, int, bool]] = field(default_factory=dict)  # path -> dev, ino, was a link

    def refused(self, src: IterationLogSource, *, missing: str | None = None) -> str | None:
        """Why ``src`` may not be read or written this pass, or None. A log directory that
        does not exist (yet, or any more) is refused only when ``missing`` says what is then
        not done; otherwise the pass says it is missing in its own words."""
        if missing is not None and not src.path.is_dir():
            return f"{src.path}: iteration-log directory is missing; {missing}"
        for root in (str(src.path), str(src.repo)):
            why = self._check(root)
            if why:
                return why
        return None

    def _check(self, root: str) -> str | None:
        try:
            link = stat.S_ISLNK(os.lstat(root).st_mode)
            st = os.stat(root)
        except OSError:
            return None
        now = (st.st_dev, st.st_ino, link)
        pinned = self.pins.setdefault(root, now)
        if pinned == now:
            return None
        what = ("is now a symbolic link" if link and not pinned[2] else
                "now leads to another directory" if link else "is now another directory")
        return (f"{shown(root)}: the configured directory {what} than the one this process started with;"
                " refused (nothing read from it, no sidecar written into it): restart to take it")
