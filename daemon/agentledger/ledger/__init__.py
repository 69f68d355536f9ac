"""The ledger's main job, one direction: source → events → projections → score → sidecar.

``Ledger`` (``facade``) is what the CLI and the daemon hold; each of its parts has
one job and a module of its own (docs/architecture.md has the map).
"""

from ..process import parallel
from .outcome import Outcome, Progress, SourceError

# the modules of the ledger's worker jobs: observing files, scoring, writing sidecars; the
# forkserver imports them (and, through this package, not the facade: see ``__getattr__``)
parallel.preload("agentledger.ledger.observe_job", "agentledger.ledger.score_job", "agentledger.ledger.sidecar_writes")

__all__ = ["Ledger", "Outcome", "Progress", "SourceError"]


def __getattr__(name: str):
    """``Ledger``, imported when first asked for: a worker's job module (``score_job``, …)
    is imported through this package, and with the facade would bring every part of the
    ledger into the forkserver and each worker."""
    if name == "Ledger":
        from .facade import Ledger
        return Ledger
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
