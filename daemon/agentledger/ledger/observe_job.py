"""The cold ingest's worker job: one file observed. A module of its own, beside
``score_job`` and ``sidecar_writes``, so that the forkserver imports what the workers run
(``parallel.preload``) and not the ledger's committing side."""

from __future__ import annotations

from ..sources.iterlogs import files as S
from ..store.iterations import projected


def observe_job(job: tuple) -> S.Observation | None:
    """One candidate observed, in a worker process for bulk work; what crosses back is what
    the committing process reads: its record events' payloads as their family projects
    them (``projected``: the records stay in the events' JSON text), and no candidate
    (``IterationLogs._observe`` puts it back)."""
    obs = S.observe(*job)
    if obs is not None:
        for ev in obs.events:
            projected(ev)
        obs.cand = None  # type: ignore[assignment]
    return obs
