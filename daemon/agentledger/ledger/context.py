"""What every part of the ledger shares: the configuration, the one connection and
its event log, the active rubric, what ingestion touched, and the git view of each repository.

One object, handed to each part at construction, instead of a class that holds
every job: the parts stay small and say in their signatures what they use.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..config import Config, IterationLogSource
from ..errors import Stopping
from ..scoring.rubric import Rubric
from ..sources.git import GitRepo
from ..sources.iterlogs.files import ReadLimits
from ..store.db import read_state
from ..store.log import EventLog
from ..store.touched import Touched
from .roots import Roots

if TYPE_CHECKING:
    from ..sources.iterlogs.listing import Listing

log = logging.getLogger("agentledger")


@dataclass
class Context:
    cfg: Config
    conn: sqlite3.Connection
    rubric: Rubric  # the rubric this ledger scores under (Rubrics.target decides it)
    limits: ReadLimits
    touched: Touched = field(default_factory=Touched)  # what ingestion changed since the last notification
    announce: Callable[[str], None] = log.info  # rubric changes: the CLI prints them on stderr
    repos: dict[str, GitRepo] = field(default_factory=dict)
    # a full scan's listing of each log directory (source id -> listing), for the two that
    # follow it, each taking it once: the sweep beside the sidecars takes the names of its
    # temp files (no listing of its own) ...
    listed_temps: dict[str, Listing] = field(default_factory=dict)
    # ... and the comparison of the sidecars with the ledger the stat key of each sidecar
    # (instead of a stat each)
    listed_sidecars: dict[str, Listing] = field(default_factory=dict)
    log: EventLog = field(init=False)  # the one way events are written
    # whether a stop was asked for: long passes look between batches (``check_stop``)
    stopping: Callable[[], bool] = lambda: False
    # each source's directories as this process first found them (``roots.py``)
    roots: Roots = field(default_factory=Roots)

    def check_stop(self) -> None:
        if self.stopping():
            raise Stopping

    def __post_init__(self) -> None:
        self.log = EventLog(self.conn)

    def repo(self, src: IterationLogSource) -> GitRepo:
        repo = self.repos.get(src.id)
        if repo is None:
            repo = self.repos[src.id] = GitRepo(str(src.repo), src.trunk)
        return repo

    def state(self, key: str) -> str | None:
        return read_state(self.conn, key)


