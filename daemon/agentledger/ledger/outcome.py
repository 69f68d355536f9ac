"""What one step of the ledger did, counted for the command or the daemon's log."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import AgentledgerError

BATCH = 1000  # events or sidecars per transaction in bulk work
Progress = Callable[[int, int], None]  # (done, total)


class SourceError(AgentledgerError):
    """A source that cannot be scored right now (e.g. its repo is not a git work tree)."""


@dataclass
class Outcome:
    events: int = 0
    quarantined: int = 0
    files_read: int = 0
    scored: int = 0
    unchanged: int = 0
    sidecars_written: int = 0
    sessions_written: int = 0
    detections: int = 0  # regressions and improvements noticed
    errors: list[str] = field(default_factory=list)  # carried, never logged here: the reader says them once
    # sidecars that could not be written (path -> why), newly: recorded as problems
    # (sidecar_problems), said once by the reader, and no reason to hold anything else
    # back (a backfill completes); known problems that failed again are only counted
    unwritten: dict[str, str] = field(default_factory=dict)
    still_unwritten: set[str] = field(default_factory=set)  # paths; those also in ``unwritten`` are said there

    def add(self, other: Outcome) -> Outcome:
        for k in ("events", "quarantined", "files_read", "scored", "unchanged",
                  "sidecars_written", "sessions_written", "detections"):
            setattr(self, k, getattr(self, k) + getattr(other, k))
        self.errors += other.errors
        self.unwritten.update(other.unwritten)
        self.still_unwritten |= other.still_unwritten
        return self
